import { describe, expect, it } from 'vitest';
import { Prng } from '../../base/prng.js';
import { MemoryStorage, type Entry, type HardState, type Message, type Snapshot } from '../raft/index.js';
import { ConsensusMember, type DurableRaftStorage } from './member.js';

/** MemoryStorage with RaftLog's save; `fail` makes the next save throw (a failed fsync). */
class MemStore extends MemoryStorage implements DurableRaftStorage {
  fail = false;
  async save(u: { snapshot?: Snapshot | null; entries?: readonly Entry[]; hardState?: HardState | null }): Promise<void> {
    await Promise.resolve();
    if (this.fail) throw new Error('fsync failed');
    if (u.snapshot) this.applySnapshot(u.snapshot);
    this.append(u.entries ?? []);
    if (u.hardState) this.setHardState(u.hardState);
  }
}

/** Three members on an in-memory network that can cut a member off; `sm` replaces the recording state machine. */
function group(sm?: (id: string, applied: string[]) => { apply(e: Entry): unknown; appliedThrough?(i: number): void }, refused?: (e: unknown) => boolean) {
  const ids = ['n1', 'n2', 'n3'];
  const cut = new Set<string>();
  const applied = new Map<string, string[]>(ids.map((id) => [id, []]));
  const stores = new Map(ids.map((id) => [id, new MemStore()]));
  const members = new Map<string, ConsensusMember>();
  for (const [k, id] of ids.entries()) {
    members.set(id, new ConsensusMember({
      id, members: ids, storage: stores.get(id)!, prng: new Prng(k + 1), electionTicks: 10, heartbeatTicks: 1,
      transport: { send: (msgs: readonly Message[]) => { for (const m of msgs) if (!cut.has(m.from) && !cut.has(m.to)) queueMicrotask(() => members.get(m.to)!.receive(m)); } },
      stateMachine: { ...(sm?.(id, applied.get(id)!) ?? { apply: (e: Entry) => { if (e.data.length > 0) applied.get(id)!.push(Buffer.from(e.data).toString()); } }), restore: () => undefined },
      ...(refused !== undefined ? { refused } : {}),
    }));
  }
  const settle = () => new Promise((r) => setTimeout(r, 1));
  const tickUntil = async (what: string, cond: () => boolean, only?: string[]) => {
    for (let i = 0; i < 500 && !cond(); i++) {
      for (const id of only ?? ids) members.get(id)!.tick();
      await settle();
    }
    if (!cond()) throw new Error(`never: ${what}`);
  };
  const leader = () => ids.find((id) => members.get(id)!.status().role === 'leader' && !cut.has(id));
  return { ids, cut, applied, stores, members, tickUntil, leader, settle };
}

describe('ConsensusMember (the Proposer seam)', () => {
  it('acknowledges a write only once applied, and refuses on a follower naming the leader', async () => {
    const g = group();
    await g.tickUntil('a leader', () => g.leader() !== undefined);
    const l = g.leader()!;
    const ack = g.members.get(l)!.propose(Buffer.from('w1'));
    await g.tickUntil('applied', () => g.applied.get(l)!.includes('w1'));
    await expect(ack).resolves.toMatchObject({ index: expect.any(Number) });
    const f = g.ids.find((id) => id !== l)!;
    await expect(g.members.get(f)!.propose(Buffer.from('x'))).rejects.toThrow(new RegExp(`leader: ${l}`));
  });

  it('rejects a write a new leader overwrote, and one whose deadline passed, never acknowledging either', async () => {
    const g = group();
    await g.tickUntil('a leader', () => g.leader() !== undefined);
    const old = g.leader()!;
    g.cut.add(old);
    const lost = g.members.get(old)!.propose(Buffer.from('lost')).catch((e: unknown) => e);
    const ctl = new AbortController();
    const late = g.members.get(old)!.propose(Buffer.from('late'), ctl.signal);
    ctl.abort();
    await expect(late).rejects.toThrow(/not acknowledged/);
    const rest = g.ids.filter((id) => id !== old);
    await g.tickUntil('a new leader', () => g.leader() !== undefined, rest);
    const now = g.leader()!;
    const won = g.members.get(now)!.propose(Buffer.from('won'));
    await g.tickUntil('won applied', () => g.applied.get(now)!.includes('won'), rest);
    await won;
    g.cut.clear();
    await g.tickUntil('the old leader catches up', () => g.applied.get(old)!.includes('won'));
    expect(String(await lost)).toMatch(/another entry took its place/);
    expect(g.applied.get(old)).not.toContain('lost');
    expect(g.members.get(old)!.waiting).toBe(0);
  });

  it('a strong read on the leader or a follower waits until that member applied every earlier write', async () => {
    const g = group();
    await g.tickUntil('a leader', () => g.leader() !== undefined);
    const l = g.leader()!;
    const acks = ['w1', 'w2', 'w3'].map((w) => g.members.get(l)!.propose(Buffer.from(w)));
    await g.tickUntil('acked', () => g.applied.get(l)!.length === 3);
    const last = (await Promise.all(acks)).at(-1)!.index;
    for (const id of g.ids) {
      const read = g.members.get(id)!.readBarrier(AbortSignal.timeout(5000));
      let index = -1;
      void read.then((i) => { index = i; });
      await g.tickUntil(`read on ${id}`, () => index >= 0);
      expect(index).toBeGreaterThanOrEqual(last);
      // Answered only once that member applied through it.
      expect(g.applied.get(id)).toEqual(['w1', 'w2', 'w3']);
    }
    // Cut off from the group, a member cannot confirm a read: its deadline ends it.
    const f = g.ids.find((id) => id !== l)!;
    g.cut.add(l);
    const ctl = new AbortController();
    const stuck = g.members.get(f)!.readBarrier(ctl.signal).catch((e: unknown) => e);
    await g.settle();
    ctl.abort();
    expect(String(await stuck)).toMatch(/did not confirm/);
  });

  it('stops when persisting fails: pending writes fail as not acknowledged, later ones are refused', async () => {
    const g = group();
    await g.tickUntil('a leader', () => g.leader() !== undefined);
    const l = g.leader()!;
    g.stores.get(l)!.fail = true;
    await expect(g.members.get(l)!.propose(Buffer.from('w'))).rejects.toThrow(/not acknowledged/);
    await expect(g.members.get(l)!.propose(Buffer.from('w2'))).rejects.toThrow(/fsync failed/);
  });

  it('answers each proposal with its entry\'s result; a deterministic refusal rejects that write alone', async () => {
    const through: number[] = [];
    const g = group((_, applied) => ({
      apply: async (e: Entry) => {
        if (e.data.length === 0) return undefined;
        const text = Buffer.from(e.data).toString();
        // Async like a WAL append; a refusal is the same on every member.
        await Promise.resolve();
        if (text.startsWith('bad')) throw new Error(`refused ${text}`);
        applied.push(text);
        return text.length;
      },
      appliedThrough: (i: number) => void through.push(i),
    }), (e) => e instanceof Error && e.message.startsWith('refused'));
    await g.tickUntil('a leader', () => g.leader() !== undefined);
    const m = g.members.get(g.leader()!)!;
    const acks = ['one', 'bad1', 'three'].map((w) => m.propose(Buffer.from(w)).then((a) => a.result, (e: unknown) => String(e)));
    const out: unknown[] = [];
    void Promise.all(acks).then((r) => out.push(...r));
    await g.tickUntil('answered', () => out.length === 3);
    expect(out).toEqual([3, 'Error: refused bad1', 5]);
    // The member goes on, and every member applied the same writes.
    const last = m.propose(Buffer.from('four'));
    await g.tickUntil('all applied', () => g.ids.every((id) => g.applied.get(id)!.join() === 'one,three,four'));
    expect((await last).result).toBe(4);
    expect(through.length).toBeGreaterThan(0);
    expect(m.leaderReady).toBe(true);
  });
});
