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

/** `st` as a member's durable storage; `save` replaces its write (a slow disk, a write held back). */
function durable(st: MemStore, save: DurableRaftStorage['save'] = (u) => st.save(u)): DurableRaftStorage {
  return {
    hardState: () => st.hardState(), entries: (lo, hi, max) => st.entries(lo, hi, max), term: (i) => st.term(i),
    firstIndex: () => st.firstIndex(), lastIndex: () => st.lastIndex(), snapshot: () => st.snapshot(), save,
    createSnapshot: (i, d) => Promise.resolve(st.createSnapshot(i, d)), compact: (i) => Promise.resolve(st.compact(i)),
  };
}

/** Ticks the members named in `ids` until `cond` holds (at most 500 rounds, `waitMs` apart), or throws naming `what`. */
async function tickMembers(members: ReadonlyMap<string, ConsensusMember>, ids: readonly string[], what: string, cond: () => boolean, waitMs: number): Promise<void> {
  for (let i = 0; i < 500 && !cond(); i++) {
    for (const id of ids) members.get(id)!.tick();
    await new Promise((r) => setTimeout(r, waitMs));
  }
  if (!cond()) throw new Error(`never: ${what}`);
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
    // Answered when it stopped leading, before the entry that took its place arrived.
    expect(await lost).toMatchObject({ code: 'unavailable', detail: { reason: 'leader_changed', leaderId: now } });
    expect(g.applied.get(old)).not.toContain('lost');
    expect(g.members.get(old)!.waiting).toBe(0);
  });

  it('answers a write whose index a later term of the same leader reused, instead of leaving it waiting', async () => {
    const g = group();
    await g.tickUntil('a leader', () => g.leader() !== undefined);
    const first = g.leader()!;
    const others = g.ids.filter((id) => id !== first);
    // Cut off while its writes wait: they never commit.
    g.cut.add(first);
    const old = Array.from({ length: 10 }, (_, i) => g.members.get(first)!.propose(Buffer.from(`old${i}`), { timeoutMs: 60_000 }).then(() => 'acked', (e: unknown) => String(e)));
    await g.tickUntil('another leader', () => g.leader() !== undefined, others);
    g.cut.clear();
    await g.tickUntil('the first leader follows', () => g.members.get(first)!.status().role === 'follower');
    // It leads again (the others are cut off in turn), and its next write takes an index its old writes had.
    for (let i = 0; i < 20 && g.leader() !== first; i++) {
      const l = g.leader();
      if (l !== undefined) g.cut.add(l);
      await g.tickUntil('a leader', () => g.leader() !== undefined, g.ids.filter((id) => !g.cut.has(id)));
      g.cut.clear();
    }
    expect(g.leader()).toBe(first);
    const m = g.members.get(first)!;
    await g.tickUntil('its term committed', () => m.leaderReady);
    // As many new writes as old ones: every old index is reused or applied past.
    const next = Array.from({ length: 12 }, (_, i) => m.propose(Buffer.from(`new${i}`), { timeoutMs: 60_000 }));
    await g.tickUntil('the new writes applied', () => g.applied.get(first)!.includes('new11'));
    await Promise.all(next);
    const outcomes = await Promise.race([
      Promise.all(old),
      new Promise<never>((_, reject) => setTimeout(() => reject(new Error('an old write was never answered')), 2000)),
    ]);
    // Answered when it stopped leading (leader_changed), or, had it led again within one Ready, when
    // another entry took its index: never left waiting, never acknowledged.
    for (const o of outcomes) expect(o).toMatch(/stopped leading|another entry took its place/);
    expect(m.waiting).toBe(0);
  });

  it('still acknowledges a write a quorum committed before its leader stepped down, whose apply on the leader was slow', async () => {
    let holdOn: string | null = null;
    let release!: () => void;
    const held = new Promise<void>((r) => { release = r; });
    const g = group((id, applied) => ({
      apply: (e: Entry) => {
        if (e.data.length === 0) return undefined;
        const s = Buffer.from(e.data).toString();
        // The leader's apply of w is slow: the followers apply it (it is committed) before the leader does.
        if (id === holdOn && s === 'w') return held.then(() => { applied.push(s); });
        applied.push(s);
        return undefined;
      },
    }));
    await g.tickUntil('a leader', () => g.leader() !== undefined);
    const l = g.leader()!;
    holdOn = l;
    const outcome = g.members.get(l)!.propose(Buffer.from('w')).then(() => 'acked', (e: unknown) => e);
    const rest = g.ids.filter((id) => id !== l);
    await g.tickUntil('the followers apply w', () => rest.every((id) => g.applied.get(id)!.includes('w')));
    g.cut.add(l);
    await g.tickUntil('it stops leading', () => g.members.get(l)!.status().role !== 'leader', [l]);
    await g.settle();
    release();
    await g.tickUntil('the old leader applied w', () => g.applied.get(l)!.includes('w'), [l]);
    expect(await outcome).toBe('acked');
  });

  it('answers a cut-off leader\'s waiting writes as soon as it stops leading (CheckQuorum), not at their deadline', async () => {
    const g = group();
    await g.tickUntil('a leader', () => g.leader() !== undefined);
    const old = g.leader()!;
    g.cut.add(old);
    const m = g.members.get(old)!;
    const started = performance.now();
    const waiting = Array.from({ length: 3 }, (_, i) => m.propose(Buffer.from(`w${i}`), { timeoutMs: 60_000 }).then(() => 'acked', (e: unknown) => e));
    // Ticked alone: it finds no quorum within an election timeout and steps down.
    await g.tickUntil('it stops leading', () => m.status().role !== 'leader', [old]);
    await g.settle();
    const outcomes = await Promise.race([
      Promise.all(waiting),
      new Promise<never>((_, reject) => setTimeout(() => reject(new Error('still waiting after it stopped leading')), 1000)),
    ]);
    for (const o of outcomes) expect(o).toMatchObject({ code: 'unavailable', detail: { reason: 'leader_changed' } });
    expect(performance.now() - started).toBeLessThan(30_000);
    expect(m.waiting).toBe(0);
    // Its writes were never applied anywhere; the others elect a leader and go on.
    const rest = g.ids.filter((id) => id !== old);
    await g.tickUntil('a new leader', () => g.leader() !== undefined && g.leader() !== old, rest);
    for (const id of g.ids) expect(g.applied.get(id)).not.toContain('w0');
  });

  it('stops waiting for a write whose time is up, at the first tick after it', async () => {
    const g = group();
    await g.tickUntil('a leader', () => g.leader() !== undefined);
    const old = g.leader()!;
    g.cut.add(old);
    let settled: unknown = null;
    const t0 = performance.now();
    const late = g.members.get(old)!.propose(Buffer.from('late'), { timeoutMs: 30 }).catch((e: unknown) => { settled = e; });
    // No tick: no expiry, however long it waits.
    await new Promise((r) => setTimeout(r, 60));
    expect(settled).toBeNull();
    g.members.get(old)!.tick();
    await late;
    expect(String(settled)).toMatch(/not acknowledged: no quorum acknowledged the write in time/);
    expect(performance.now() - t0).toBeGreaterThanOrEqual(30);
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

  it('tells the state machine it applied through the entry before one whose apply failed (not a refusal), never past it', async () => {
    const through = new Map<string, number[]>();
    const g = group((id, applied) => ({
      apply: (e: Entry) => {
        const text = Buffer.from(e.data).toString();
        if (text === 'bad') throw new Error('the disk failed');
        if (e.data.length > 0) applied.push(text);
        return undefined;
      },
      appliedThrough: (i: number) => { through.set(id, [...(through.get(id) ?? []), i]); },
    }));
    await g.tickUntil('a leader', () => g.leader() !== undefined);
    const l = g.leader()!;
    const m = g.members.get(l)!;
    const ok = m.propose(Buffer.from('w1'));
    const bad = m.propose(Buffer.from('bad')).catch((e: unknown) => e);
    await g.tickUntil('w1 applied', () => g.applied.get(l)!.includes('w1'));
    await ok;
    expect(String(await bad)).toMatch(/disk failed|not acknowledged/);
    const badIndex = m.status().commit;
    for (const id of g.ids) expect(Math.max(...(through.get(id) ?? [0])), id).toBeLessThan(badIndex);
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

describe('ConsensusMember restores a snapshot beside its Ready loop', () => {
  it('while one member restores, the group elects a new leader and acknowledges writes; the restore then catches up', async () => {
    const ids = ['n1', 'n2', 'n3'];
    const cut = new Set<string>();
    // Each member's state: entry index -> write (applying an entry twice is harmless, a lost one shows).
    const state = new Map(ids.map((id) => [id, new Map<number, string>()]));
    let gate: (() => void) | null = null;
    let hold = false;
    const members = new Map<string, ConsensusMember>();
    // Each member's `restoring` as told at each change (what a request loop's own searches follow).
    const told = new Map(ids.map((id) => [id, [] as boolean[]]));
    for (const [k, id] of ids.entries()) {
      const st = new MemStore();
      const storage = durable(st);
      members.set(id, new ConsensusMember({
        id, members: ids, storage, prng: new Prng(k + 7), electionTicks: 10, heartbeatTicks: 1,
        transport: { send: (msgs: readonly Message[]) => { for (const m of msgs) if (!cut.has(m.from) && !cut.has(m.to)) queueMicrotask(() => members.get(m.to)!.receive(m)); } },
        compaction: { everyEntries: 4, retainEntries: 1, image: () => Buffer.from(JSON.stringify([...state.get(id)!])) },
        onRestoring: () => told.get(id)!.push(members.get(id)!.restoring),
        stateMachine: {
          apply: (e: Entry) => { if (e.data.length > 0) state.get(id)!.set(e.index, Buffer.from(e.data).toString()); },
          restore: async (s: Snapshot) => {
            // A big image takes a while to restore: here, until the test lets it end.
            if (hold) await new Promise<void>((r) => { gate = r; });
            state.set(id, new Map(JSON.parse(Buffer.from(s.data).toString()) as [number, string][]));
          },
        },
      }));
    }
    const settle = () => new Promise((r) => setTimeout(r, 1));
    const tickUntil = async (what: string, cond: () => boolean, only = ids) => {
      for (let i = 0; i < 500 && !cond(); i++) {
        for (const id of only) members.get(id)!.tick();
        await settle();
      }
      if (!cond()) throw new Error(`never: ${what}`);
    };
    const leaderOf = (among: string[]) => among.find((id) => members.get(id)!.status().role === 'leader');
    const write = async (on: string, text: string, only: string[]) => {
      let done = false;
      const ack = members.get(on)!.propose(Buffer.from(text)).finally(() => { done = true; });
      await tickUntil(`${text} acknowledged`, () => done, only);
      return ack;
    };
    await tickUntil('a leader', () => leaderOf(ids) !== undefined);
    const first = leaderOf(ids)!;
    const [slow, other] = ids.filter((id) => id !== first);
    // `slow` misses enough writes that the leader's log no longer holds them: it is sent a snapshot.
    cut.add(slow);
    for (let i = 0; i < 12; i++) await write(first, `w${i}`, [first, other]);
    hold = true;
    cut.delete(slow);
    await tickUntil('the snapshot reaches the slow member', () => members.get(slow)!.restoring);
    // The leader dies while the slow member restores: the other member needs its vote, and gets it.
    cut.add(first);
    await tickUntil('a new leader', () => leaderOf([slow, other]) !== undefined, [slow, other]);
    const now = leaderOf([slow, other])!;
    // A write commits with the restoring member's durable log in the quorum; it is applied once restored.
    await expect(write(now, 'after', [slow, other])).resolves.toMatchObject({ index: expect.any(Number) });
    expect(members.get(slow)!.restoring).toBe(true);
    gate!();
    await tickUntil('restored and applied', () => !members.get(slow)!.restoring && [...state.get(slow)!.values()].includes('after'), [slow, other]);
    const writes = (id: string) => [...state.get(id)!].sort((a, b) => a[0] - b[0]).map(([, t]) => t);
    expect(writes(slow)).toEqual([...Array.from({ length: 12 }, (_, i) => `w${i}`), 'after']);
    expect(writes(slow)).toEqual(writes(other));
    // Told when its restore began and when it ended; the others never restored.
    expect(told.get(slow)).toEqual([true, false]);
    expect(told.get(other)).toEqual([]);
  });
});

describe('ConsensusMember sends a leader\'s appends while it persists them', () => {
  it('a leader\'s appends leave before its own write ends; a follower\'s answers only after its write', async () => {
    const ids = ['n1', 'n2', 'n3'];
    const stores = new Map(ids.map((id) => [id, new MemStore()]));
    /** Each message sent, and the highest index it names against what its sender's disk held then. */
    const sent: { from: string; type: string; names: number; durable: number }[] = [];
    const members = new Map<string, ConsensusMember>();
    for (const [k, id] of ids.entries()) {
      const st = stores.get(id)!;
      const storage = durable(st, async (u) => {
        // A disk write: a few event-loop turns, during which messages may be sent.
        await new Promise((r) => setTimeout(r, 2));
        await st.save(u);
      });
      members.set(id, new ConsensusMember({
        id, members: ids, storage, prng: new Prng(k + 3), electionTicks: 10, heartbeatTicks: 1,
        transport: {
          send: (msgs: readonly Message[]) => {
            for (const m of msgs) {
              const names = m.type === 'app' ? (m.entries.at(-1)?.index ?? 0) : m.type === 'appResp' && !m.reject ? m.index : 0;
              sent.push({ from: m.from, type: m.type, names, durable: stores.get(m.from)!.lastIndex() });
              queueMicrotask(() => members.get(m.to)!.receive(m));
            }
          },
        },
        stateMachine: { apply: () => undefined, restore: () => undefined },
      }));
    }
    const tickUntil = (what: string, cond: () => boolean) => tickMembers(members, ids, what, cond, 3);
    await tickUntil('a leader', () => ids.some((id) => members.get(id)!.status().role === 'leader'));
    const leader = ids.find((id) => members.get(id)!.status().role === 'leader')!;
    // Once the leader streams to both followers (not probing them), a proposal's appends go at once.
    await tickUntil('replicating', () => members.get(leader)!.status().progress.every((p) => p.state === 'replicate' && p.match > 0));
    sent.length = 0;
    let acked = 0;
    for (let i = 0; i < 5; i++) void members.get(leader)!.propose(Buffer.from(`w${i}`)).then(() => { acked++; });
    await tickUntil('acknowledged', () => acked === 5);
    const appends = sent.filter((m) => m.from === leader && m.type === 'app');
    expect(appends.some((m) => m.names > m.durable)).toBe(true);
    // A follower's acknowledgement promises what it holds: never an index its disk does not have yet.
    const answers = sent.filter((m) => m.from !== leader && m.type === 'appResp' && m.names > 0);
    expect(answers.length).toBeGreaterThan(0);
    expect(answers.filter((m) => m.names > m.durable)).toEqual([]);
  });
});

describe('ConsensusMember: a Ready that only moves the commit index', () => {
  /**
   * Three members whose logs write in call order (as RaftLog does) and each write of a commit index
   * alone (sync: false) first does what `unsynced` says.
   */
  async function groupWith(unsynced: (id: string) => Promise<void>) {
    const ids = ['n1', 'n2', 'n3'];
    const logged: string[] = [];
    const applied = new Map<string, number[]>(ids.map((id) => [id, []]));
    const stores = new Map<string, MemStore>();
    const members = new Map<string, ConsensusMember>();
    for (const [k, id] of ids.entries()) {
      const st = new MemStore();
      stores.set(id, st);
      let chain: Promise<unknown> = Promise.resolve();
      const storage = durable(st, (u) => {
        const run = chain.then(async () => {
          if (u.sync === false) await unsynced(id);
          await st.save(u);
        });
        chain = run.catch(() => undefined);
        return run;
      });
      members.set(id, new ConsensusMember({
        id, members: ids, storage, prng: new Prng(k + 5), electionTicks: 10, heartbeatTicks: 1, log: (m) => logged.push(`${id}: ${m}`),
        transport: { send: (msgs: readonly Message[]) => { for (const m of msgs) queueMicrotask(() => members.get(m.to)!.receive(m)); } },
        stateMachine: { apply: (e: Entry) => { if (e.data.length > 0) applied.get(id)!.push(e.index); }, restore: () => undefined },
      }));
    }
    const tickUntil = async (what: string, cond: () => boolean) => {
      for (let i = 0; i < 500 && !cond(); i++) {
        for (const m of members.values()) m.tick();
        await new Promise((r) => setTimeout(r, 1));
      }
      if (!cond()) throw new Error(`never: ${what}`);
    };
    await tickUntil('a leader', () => ids.some((id) => members.get(id)!.status().role === 'leader'));
    const leaderId = ids.find((id) => members.get(id)!.status().role === 'leader')!;
    return { members, leaderId, leader: members.get(leaderId)!, stores, applied, logged, tickUntil };
  }

  it('applies and acknowledges the write it commits without waiting for that write, which still lands in order', async () => {
    let hold = false;
    let held: { id: string; release: () => void } | null = null;
    const g = await groupWith((id) => {
      if (!hold || held !== null) return Promise.resolve();
      // The first commit-only write after the proposal is held back; every later write queues behind it.
      return new Promise<void>((release) => { held = { id, release }; });
    });
    await g.tickUntil('the leader committed its term', () => g.members.get(g.leaderId)!.leaderReady);
    hold = true;
    const ack = await Promise.race([
      g.leader.propose(Buffer.from('w1')),
      new Promise<never>((_, reject) => setTimeout(() => reject(new Error('not acknowledged while a commit-index write was held')), 3000)),
    ]);
    // Acknowledged (so applied on the leader) while some member's write of the commit index is held.
    expect(held).not.toBeNull();
    const h = held!;
    expect(g.applied.get(g.leaderId)).toContain(ack.index);
    if (h.id === g.leaderId) expect(g.stores.get(h.id)!.hardState().commit).toBeLessThan(ack.index);
    h.release();
    await g.tickUntil('every member applied the write', () => [...g.applied.values()].every((a) => a.includes(ack.index)));
    await g.tickUntil('every commit index written', () => [...g.stores.values()].every((st) => st.hardState().commit >= ack.index));
    expect(g.logged).toEqual([]);
    for (const m of g.members.values()) await m.close();
  });

  it('close() waits for such a write still in flight', async () => {
    const releases: (() => void)[] = [];
    let hold = false;
    const g = await groupWith(() => (hold ? new Promise<void>((r) => releases.push(r)) : Promise.resolve()));
    await g.tickUntil('the leader committed its term', () => g.members.get(g.leaderId)!.leaderReady);
    hold = true;
    await g.leader.propose(Buffer.from('w1'));
    await g.tickUntil('a commit-only write in flight', () => releases.length > 0);
    let closed = false;
    const closing = g.leader.close().then(() => { closed = true; });
    await new Promise((r) => setTimeout(r, 20));
    expect(closed).toBe(false);
    hold = false;
    for (const r of releases.splice(0)) r();
    // Writes queued behind the released ones may be held too: release until closed.
    for (let i = 0; i < 50 && !closed; i++) {
      for (const r of releases.splice(0)) r();
      await new Promise((r) => setTimeout(r, 5));
    }
    await closing;
    for (const m of g.members.values()) await m.close();
  });

  it('stops the member when that write fails, as when an awaited one fails', async () => {
    let fail = false;
    const g = await groupWith(() => (fail ? Promise.reject(new Error('write failed')) : Promise.resolve()));
    await g.tickUntil('the leader committed its term', () => g.members.get(g.leaderId)!.leaderReady);
    fail = true;
    await g.leader.propose(Buffer.from('w1')).catch(() => undefined);
    await g.tickUntil('a member stopped', () => g.logged.length > 0);
    expect(g.logged[0]).toMatch(/consensus member stopped: persisting or applying failed/);
    for (const m of g.members.values()) await m.close();
  });
});

describe('ConsensusMember: a snapshot restore cut short (by a failure, by close())', () => {
  it('a restore that fails stops the member and leaves it restoring: its partial state is never read', async () => {
    const store = new MemStore();
    store.applySnapshot({ meta: { index: 5, term: 1 }, data: Buffer.from('image') });
    const logged: string[] = [];
    const member = new ConsensusMember({
      id: 'n1', members: ['n1'], storage: store, prng: new Prng(3), electionTicks: 10, heartbeatTicks: 1, log: (m) => logged.push(m),
      applied: 0,
      transport: { send: () => undefined },
      stateMachine: { apply: () => undefined, restore: async () => { throw new Error('the image file is unreadable'); } },
    });
    for (let i = 0; i < 50 && logged.length === 0; i++) await new Promise((r) => setTimeout(r, 1));
    expect(logged).toEqual(['consensus member stopped: persisting or applying failed']);
    expect(member.restoring).toBe(true);
    expect(member.appliedIndex).toBe(0);
    await member.close();
  });

  it('cuts the restore short instead of waiting for it; the next start restores the same snapshot again', async () => {
    const store = new MemStore();
    store.applySnapshot({ meta: { index: 5, term: 1 }, data: Buffer.from('image') });
    const restores: { index: number; signal?: AbortSignal }[] = [];
    let finish = false;
    const logged: string[] = [];
    const start = (): ConsensusMember => new ConsensusMember({
      id: 'n1', members: ['n1'], storage: store, prng: new Prng(3), electionTicks: 10, heartbeatTicks: 1, log: (m) => logged.push(m),
      // The state machine's position: a restore cut short never reached the snapshot's index.
      applied: 0,
      transport: { send: () => undefined },
      stateMachine: {
        apply: () => undefined,
        restore: async (s: Snapshot, signal?: AbortSignal) => {
          restores.push({ index: s.meta.index, signal });
          if (finish) return;
          // A large image: it would take as long as it takes, but stops when the member closes.
          await new Promise<void>((_, reject) => signal?.addEventListener('abort', () => reject(new Error('cut short')), { once: true }));
        },
      },
    });
    const member = start();
    await new Promise((r) => setTimeout(r, 5));
    expect(member.restoring).toBe(true);
    expect(restores).toHaveLength(1);
    const t0 = performance.now();
    await member.close();
    expect(performance.now() - t0).toBeLessThan(1000);
    expect(restores[0].signal?.aborted).toBe(true);
    // Not applied, and nothing failed (a close is no fault).
    expect(member.appliedIndex).toBe(0);
    expect(logged).toEqual([]);
    // Its state machine holds part of the image: still `restoring`, so that nothing reads it.
    expect(member.restoring).toBe(true);
    // The log still names the snapshot: the next start restores it, and this time it ends.
    finish = true;
    const again = start();
    for (let i = 0; i < 50 && again.appliedIndex < 5; i++) await new Promise((r) => setTimeout(r, 1));
    expect(restores.map((r) => r.index)).toEqual([5, 5]);
    expect(again.appliedIndex).toBe(5);
    await again.close();
  });
});

describe('ConsensusMember: a marker waits for the state machine\'s sync beside the loop', () => {
  it('writes go on being acknowledged while the sync runs; the marker is recorded only after it ends, at the index it began at; a failed one records none and stops nothing', async () => {
    const ids = ['n1', 'n2', 'n3'];
    const cut = new Set<string>();
    const stores = new Map(ids.map((id) => [id, new MemStore()]));
    const members = new Map<string, ConsensusMember>();
    /** Each member's syncs: the applied index when each began, and how to end it. */
    const syncs = new Map(ids.map((id) => [id, [] as { at: number; end: (ok: boolean) => void }[]]));
    for (const [k, id] of ids.entries()) {
      const st = stores.get(id)!;
      const storage = durable(st);
      const member: ConsensusMember = new ConsensusMember({
        id, members: ids, storage, prng: new Prng(k + 11), electionTicks: 10, heartbeatTicks: 1,
        transport: { send: (msgs: readonly Message[]) => { for (const m of msgs) if (!cut.has(m.from) && !cut.has(m.to)) queueMicrotask(() => members.get(m.to)!.receive(m)); } },
        compaction: { everyEntries: 5, retainEntries: 1 },
        stateMachine: {
          apply: () => undefined,
          restore: () => undefined,
          syncApplied: () => new Promise<void>((resolve, reject) => {
            syncs.get(id)!.push({ at: member.appliedIndex, end: (ok) => (ok ? resolve() : reject(new Error('disk full'))) });
          }),
        },
      });
      members.set(id, member);
    }
    const tickUntil = (what: string, cond: () => boolean) => tickMembers(members, ids, what, cond, 1);
    await tickUntil('a leader', () => ids.some((id) => members.get(id)!.status().role === 'leader'));
    const leader = ids.find((id) => members.get(id)!.status().role === 'leader')!;
    const write = async (i: number) => {
      let done = false;
      const ack = members.get(leader)!.propose(Buffer.from(`w${i}`)).finally(() => { done = true; });
      await tickUntil(`w${i} acknowledged`, () => done);
      return ack;
    };
    for (let i = 0; i < 6; i++) await write(i);
    await tickUntil('a sync began', () => syncs.get(leader)!.length === 1);
    const first = syncs.get(leader)![0];
    // Held: more writes are acknowledged, no marker is recorded, and no second sync begins.
    for (let i = 6; i < 20; i++) await expect(write(i)).resolves.toMatchObject({ index: expect.any(Number) });
    expect(stores.get(leader)!.snapshot().meta.index).toBe(0);
    expect(syncs.get(leader)!.length).toBe(1);
    first.end(true);
    await tickUntil('the marker at the index the sync began at', () => stores.get(leader)!.snapshot().meta.index === first.at);
    expect(first.at).toBeGreaterThanOrEqual(5);
    // The next sync fails: no marker, the member goes on, and a later one is tried and recorded.
    await tickUntil('a second sync began', () => syncs.get(leader)!.length === 2);
    syncs.get(leader)![1].end(false);
    for (let i = 20; i < 24; i++) await write(i);
    expect(stores.get(leader)!.snapshot().meta.index).toBe(first.at);
    expect(members.get(leader)!.status().role).toBe('leader');
    await tickUntil('a third sync began', () => syncs.get(leader)!.length === 3);
    const third = syncs.get(leader)![2];
    third.end(true);
    await tickUntil('its marker', () => stores.get(leader)!.snapshot().meta.index === third.at);
    for (const id of ids) for (const s of syncs.get(id)!) s.end(true);
    for (const m of members.values()) await m.close();
  });
});

describe('ConsensusMember: after a start, replaying what it had committed before', () => {
  it('is replaying until it has applied again through the index it is given, and says so when that ends', async () => {
    const st = new MemStore();
    st.append([1, 2, 3, 4, 5].map((index) => ({ index, term: 1, data: Buffer.from(`e${index}`) })));
    st.setHardState({ term: 1, vote: 'n1', commit: 5 });
    const applied: string[] = [];
    let told = 0;
    let m: ConsensusMember | null = null;
    let replayingWhenTold: boolean | null = null;
    m = new ConsensusMember({
      id: 'n1', members: ['n1', 'n2', 'n3'], storage: st, prng: new Prng(5), electionTicks: 10, heartbeatTicks: 1,
      transport: { send: () => undefined },
      applied: 2,
      replayThrough: 5,
      onRestoring: () => { told++; replayingWhenTold = m!.replaying; },
      stateMachine: { apply: (e: Entry) => { applied.push(Buffer.from(e.data).toString()); }, restore: () => undefined },
    });
    expect(m.replaying).toBe(true);
    // No leader is needed: the entries its log holds as committed are applied at once.
    for (let i = 0; i < 20 && m.replaying; i++) {
      m.tick();
      await new Promise((r) => setTimeout(r, 1));
    }
    expect(m.replaying).toBe(false);
    expect(applied).toEqual(['e3', 'e4', 'e5']);
    expect(told).toBe(1);
    expect(replayingWhenTold).toBe(false);
    await m.close();
  });
});
