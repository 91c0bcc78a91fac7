import { describe, expect, it } from 'vitest';
import { SvcError } from '../base/errors.js';
import { decodeCommand, encodeCommand, type ShardCommand } from '../cluster/consensus/command.js';
import { owner } from '../cluster/routing/hrw.js';
import { decodeOp } from '../storage/codec.js';
import { FaultyFileSystem } from '../testing/faulty-fs.js';
import { Database } from './database.js';
import type { MoveBatchAnswer } from './move.js';
import { buildIndexInline } from './rebuild.js';

/**
 * A consensus group as a rebalance move's source and target (issue 18): the move's state and each
 * batch's commit are commands every member applies, so every member holds the same points, cursors
 * and `moved` answers; the batch, its gate and its lease are the leader's; a leader change ends the
 * lease, and a commit asked again (its answer lost, or on the new leader) is answered from the cursor.
 *
 * The group here is three databases behind an in-process log: a proposal on the leader is encoded,
 * decoded and applied on every member in log order, as roles/raft/member-host.ts does with a
 * ConsensusMember; on another member it is refused as ConsensusMember.propose refuses it.
 */

const KEY = new Uint8Array(32).fill(5);
const N = 300;
const TARGETS = [0, 1, 2];
const SELF = 0;
const leaving = (id: string) => owner(id, TARGETS) !== SELF;

class Group {
  readonly dbs: Database[] = [];
  leader = 0;
  index = 0;
  /** The next proposal is applied everywhere but its proposer hears `unavailable` (a lost answer). */
  loseNextAnswer = false;
  /** The next proposal is never committed (a leader that lost its quorum): `unavailable`, nothing applied. */
  dropNext = false;
  readonly log: ShardCommand[] = [];

  constructor(readonly fs: FaultyFileSystem) {}

  async start(): Promise<this> {
    for (let i = 0; i < 3; i++) this.dbs.push(await this.open(i));
    return this;
  }

  async open(i: number): Promise<Database> {
    const db = await Database.open({ dataDir: `/m${i}`, masterKey: KEY, fs: this.fs, buildIndex: buildIndexInline });
    await db.consensusApplied();
    db.useProposer({ propose: (cmd) => this.propose(i, cmd) });
    return db;
  }

  async propose(from: number, cmd: ShardCommand): Promise<unknown> {
    if (from !== this.leader) throw new SvcError('unavailable', `member ${from} is not the leader`, { reason: 'not_leader', leaderId: String(this.leader) });
    if (this.dropNext) {
      this.dropNext = false;
      throw new SvcError('unavailable', 'no quorum: not committed');
    }
    const wire = decodeCommand(encodeCommand(cmd));
    this.log.push(wire);
    const index = ++this.index;
    const results = await Promise.allSettled(this.dbs.map((db) => db.applyCommand(wire, index)));
    await Promise.all(this.dbs.map((db) => db.appliedThrough(index)));
    if (this.loseNextAnswer) {
      this.loseNextAnswer = false;
      throw new SvcError('unavailable', 'the answer was lost');
    }
    const mine = results[from];
    if (mine.status === 'rejected') throw mine.reason;
    return mine.value;
  }

  get lead(): Database {
    return this.dbs[this.leader];
  }
}

async function seeded(seed: number): Promise<Group> {
  const g = await new Group(new FaultyFileSystem(seed)).start();
  await g.lead.createCollection({ name: 'c', dim: 3, metric: 'l2' });
  await g.lead.upsert('c', { points: Array.from({ length: N }, (_, i) => ({ id: `p${String(i).padStart(4, '0')}`, vector: [i, 1, 2], payload: { i } })) });
  return g;
}

const batch = (db: Database, limit = 40, move = 'm1') => db.moveBatch({ move, self: SELF, targets: TARGETS, limit }) as Promise<MoveBatchAnswer>;
const commit = (db: Database, token: string, move = 'm1') => db.moveCommit({ move, token }) as Promise<{ moved: number }>;
const ids = async (db: Database) => (await db.fetch('c', { limit: 10_000 })).points.map((p) => p.id);
const idsOf = (b: MoveBatchAnswer): string[] => (b.done ? [] : b.records.flatMap((r) => {
  const op = decodeOp(Buffer.from(r, 'base64'));
  return op.t === 'upsert' ? op.points.map((p) => p.id) : [];
}));

async function imageOf(db: Database): Promise<AsyncIterable<Uint8Array>> {
  const parts: Uint8Array[] = [];
  for await (const p of db.consensusImage()) parts.push(Buffer.from(p));
  return (async function* () { yield* parts; })();
}

describe('a consensus group as the source of a rebalance move', () => {
  it('every member applies the move\'s start, each commit and its end: the same points, cursors and moved answers everywhere', async () => {
    const g = await seeded(1);
    const all = await ids(g.lead);
    const sent: string[] = [];
    for (let i = 0; i < 100; i++) {
      const b = await batch(g.lead);
      if (b.done) break;
      sent.push(...idsOf(b));
      expect(await commit(g.lead, b.token)).toEqual({ moved: b.count });
    }
    expect(sent).toEqual(all.filter(leaving));
    // The start, one commit per batch, the end: each a command in the log, each version 2.
    const moves = g.log.filter((c) => c.op.t === 'move_state' || (c.op.t === 'delete' && c.op.move !== undefined));
    expect(moves[0].op).toEqual({ t: 'move_state', move: 'm1', self: SELF, targets: TARGETS, finished: false });
    expect(moves.at(-1)!.op).toEqual({ t: 'move_state', move: 'm1', self: SELF, targets: TARGETS, finished: true });
    expect(moves.length).toBe(2 + Math.ceil(sent.length / 40));
    const gone = all.find(leaving)!;
    for (const db of g.dbs) {
      expect(await ids(db)).toEqual(all.filter((id) => !leaving(id)));
      // Every member answers moved for an id the move took (a router with an older map asks any member).
      await expect(db.get('c', gone)).rejects.toMatchObject({ code: 'moved' });
    }
    // The leader refuses the write before proposing it: nothing of it reaches the log.
    const before = g.log.length;
    await expect(g.lead.upsert('c', { points: [{ id: gone, vector: [0, 0, 0] }] })).rejects.toMatchObject({ code: 'moved' });
    expect(g.log.length).toBe(before);
    expect(await batch(g.lead)).toEqual({ done: true, move: 'm1' });

    // A member reopened (its data directory replayed) holds the same move state: moved still refused,
    // and a batch asked of it once it leads finds nothing left.
    await g.dbs[2].close();
    g.dbs[2] = await g.open(2);
    await expect(g.dbs[2].get('c', gone)).rejects.toMatchObject({ code: 'moved' });
    g.leader = 2;
    expect(await batch(g.lead)).toEqual({ done: true, move: 'm1' });
    for (const db of g.dbs) await db.close();
  });

  it('a leader change ends the lease: the new leader hands out the same points from the replicated cursor; the old token is not found there', async () => {
    const g = await seeded(2);
    const first = await batch(g.lead, 30);
    if (first.done) throw new Error('a batch was expected');
    await commit(g.lead, first.token);
    const second = await batch(g.lead, 30);
    if (second.done) throw new Error('a batch was expected');
    // The leader goes before the commit: its commit cannot be proposed, and nothing of it is applied.
    const old = g.lead;
    g.leader = 1;
    await expect(commit(old, second.token)).rejects.toMatchObject({ code: 'unavailable' });
    // The new leader's batch starts after the first batch's cursor (every member applied that commit):
    // the same points as the second batch.
    await expect(commit(g.lead, second.token)).rejects.toMatchObject({ code: 'not_found' });
    const again = await batch(g.lead, 30);
    if (again.done) throw new Error('a batch was expected');
    expect(idsOf(again)).toEqual(idsOf(second));
    expect(again.cursor).toBe(second.cursor);
    // The old leader's gate is open again: a write there goes to its proposer (refused: not the leader),
    // it does not wait for a lease that can no longer commit.
    old.endMoveLease();
    await expect(old.upsert('c', { points: [{ id: 'zz', vector: [1, 1, 1] }] })).rejects.toMatchObject({ detail: { reason: 'not_leader' } });
    await commit(g.lead, again.token);
    for (const db of g.dbs) expect(await ids(db)).toEqual(await ids(g.lead));
    for (const db of g.dbs) await db.close();
  });

  it('a leader change and a coordinator restart in one window: every member knows the batch it handed out, and names its ids deleted since', async () => {
    // Seeded: which of the batch's ids are deleted, which member leads next, and whether it restarted or
    // came back by an image first.
    for (let seed = 1; seed <= 8; seed++) {
      const g = await seeded(100 + seed);
      let r = seed * 7919;
      const pick = (n: number) => (r = (r * 48271) % 2147483647) % n;
      const first = await batch(g.lead, 10);
      await commit(g.lead, first.done ? '' : first.token);
      const b = await batch(g.lead, 10);
      if (b.done) throw new Error('a batch was expected');
      const sent = idsOf(b);
      // Both go now: the leader (its lease ends there) and the coordinator, which asked no commit and
      // forgets the batch. Nothing of the batch was committed, and its copy may be on its new owners.
      const old = g.lead;
      g.leader = 1 + pick(2);
      old.endMoveLease();
      const how = pick(3);
      if (how === 1) {
        await g.dbs[g.leader].close();
        g.dbs[g.leader] = await g.open(g.leader);
      } else if (how === 2) {
        await g.dbs[g.leader].close();
        const fresh = await Database.open({ dataDir: `/m${g.leader}-image`, masterKey: KEY, fs: g.fs, buildIndex: buildIndexInline });
        await fresh.consensusApplied();
        const at = g.leader;
        fresh.useProposer({ propose: (cmd) => g.propose(at, cmd) });
        await fresh.restoreConsensusImage(await imageOf(old), g.index);
        g.dbs[g.leader] = fresh;
      }
      // Writes go on at the new leader: some of the batch's ids are deleted, one is written again.
      const deleted = sent.filter(() => pick(3) === 0);
      if (deleted.length === 0) deleted.push(sent[pick(sent.length)]);
      await g.lead.deletePoints('c', { ids: deleted });
      // The restarted coordinator asks the new leader for a batch, knowing nothing of the old one.
      const next = await batch(g.lead, 10);
      if (next.done) throw new Error('a batch was expected');
      expect(next.deletes.sort(), `seed ${seed}`).toEqual([...deleted].sort());
      await commit(g.lead, next.token);
      // Named until a commit's cursor passed them; the move then goes to its end with nothing left named.
      for (let i = 0; i < 100; i++) {
        const c = await batch(g.lead, 40);
        if (c.done) break;
        for (const id of c.deletes) expect(id > next.cursor, `seed ${seed}: ${id} named again`).toBe(true);
        await commit(g.lead, c.token);
      }
      for (const db of g.dbs) expect(await ids(db)).toEqual(await ids(g.lead));
      for (const db of new Set([...g.dbs, old])) await db.close().catch(() => undefined);
    }
  });

  it('a commit asked again is answered from the cursor: done when its entry was applied, not found when it never was', async () => {
    const g = await seeded(3);
    const all = await ids(g.lead);
    const b = await batch(g.lead, 25);
    if (b.done) throw new Error('a batch was expected');
    // The commit is applied everywhere but its answer is lost: asked again (same token), it is done.
    g.loseNextAnswer = true;
    await expect(commit(g.lead, b.token)).rejects.toMatchObject({ code: 'unavailable' });
    expect(await commit(g.lead, b.token)).toEqual({ moved: 0 });
    // On another leader too (it applied the same commit).
    g.leader = 2;
    expect(await commit(g.lead, b.token)).toEqual({ moved: 0 });
    for (const db of g.dbs) expect(await ids(db)).toEqual(all.filter((id) => id > b.cursor || !leaving(id)));

    // A commit never committed (no quorum): not found when asked again, and the next batch sends the
    // same points again, with the gate closed meanwhile so no write slipped between.
    const c = await batch(g.lead, 25);
    if (c.done) throw new Error('a batch was expected');
    g.dropNext = true;
    await expect(commit(g.lead, c.token)).rejects.toMatchObject({ code: 'unavailable' });
    await expect(commit(g.lead, c.token)).rejects.toMatchObject({ code: 'not_found' });
    const d = await batch(g.lead, 25);
    if (d.done) throw new Error('a batch was expected');
    expect(idsOf(d)).toEqual(idsOf(c));
    expect(await commit(g.lead, d.token)).toEqual({ moved: d.count });
    // A token that names no batch at all is not found.
    await expect(commit(g.lead, 'nonsense')).rejects.toMatchObject({ code: 'not_found' });
    for (const db of g.dbs) await db.close();
  });
});

describe('a consensus group as the target of a rebalance move', () => {
  it('the points a move brings are proposed: every member holds them, and the collection is created on every member', async () => {
    const g = await new Group(new FaultyFileSystem(4)).start();
    const source = await Database.open({ dataDir: '/source', masterKey: KEY, fs: g.fs, buildIndex: buildIndexInline });
    await source.createCollection({ name: 'c', dim: 3, metric: 'l2' });
    await source.upsert('c', { points: Array.from({ length: 120 }, (_, i) => ({ id: `q${String(i).padStart(3, '0')}`, vector: [i, 0, 1] })) });
    // The group is shard 1 of [0, 1]: the source (shard 0) sends what 1 owns.
    const b = await source.moveBatch({ move: 'm9', self: 0, targets: [0, 1], limit: 1000 }) as MoveBatchAnswer;
    if (b.done) throw new Error('a batch was expected');
    const res = await g.lead.moveApply({ collection: b.collection, params: b.params, records: b.records, deletes: [] });
    expect(res).toEqual({ applied: b.count, deleted: 0 });
    // A follower member refuses to apply itself (the engine forwards it to the leader).
    await expect(g.dbs[1].moveApply({ collection: b.collection, params: b.params, records: b.records, deletes: [] })).rejects.toMatchObject({ detail: { reason: 'not_leader' } });
    await source.moveCommit({ move: 'm9', token: b.token });
    const want = idsOf(b).sort();
    for (const db of g.dbs) expect(await ids(db)).toEqual(want);
    // Deletes of an earlier batch's ids reach every member too.
    const del = await g.lead.moveApply({ collection: b.collection, params: b.params, records: [], deletes: [want[0], 'absent'] });
    expect(del).toEqual({ applied: 0, deleted: 1 });
    for (const db of g.dbs) expect(await ids(db)).toEqual(want.slice(1));
    for (const db of [...g.dbs, source]) await db.close();
  });
  it('an image says which command versions it holds, and one for a member that reads fewer stops rather than send them', async () => {
    const g = await seeded(21);
    const drain = async (max?: number): Promise<number> => {
      let n = 0;
      for await (const p of g.lead.consensusImage(max === undefined ? {} : { commandVersionMax: max })) n += p.length;
      return n;
    };
    expect(g.lead.consensusImageVersion()).toBe(1);
    const plain = await drain(1);
    const b = await batch(g.lead);
    expect(b.done).toBe(false);
    // A batch handed out: its ids are a move_out (version 3) in the image.
    expect(g.lead.consensusImageVersion()).toBe(3);
    await expect(drain(2)).rejects.toMatchObject({ code: 'unavailable', detail: { reason: 'version_skew' } });
    expect(await drain(3)).toBeGreaterThan(0);
    if (!b.done) await commit(g.lead, b.token);
    // Committed: only the move's state and cursor (version 2) remain.
    expect(g.lead.consensusImageVersion()).toBe(2);
    await expect(drain(1)).rejects.toMatchObject({ code: 'unavailable' });
    expect(await drain(2)).toBeLessThan(plain);
  });

  it('a member caught up by an image holds the move\'s state: it leads the move on from the cursor, and answers moved once it ended', async () => {
    const g = await seeded(3);
    const all = await ids(g.lead);
    const first = await batch(g.lead);
    await commit(g.lead, first.token);
    // Member 2 loses its disk mid-move and comes back by an image of the leader's database.
    await g.dbs[2].close();
    const fresh = await Database.open({ dataDir: '/m2-new', masterKey: KEY, fs: g.fs, buildIndex: buildIndexInline });
    await fresh.consensusApplied();
    fresh.useProposer({ propose: (cmd) => g.propose(2, cmd) });
    await fresh.restoreConsensusImage(await imageOf(g.lead), g.index);
    g.dbs[2] = fresh;
    // It leads: its first batch starts after the cursor the image carried, not from the beginning.
    g.leader = 2;
    const next = await batch(g.lead);
    expect(next.done).toBe(false);
    expect(idsOf(next)[0] > (first.done ? '' : first.cursor)).toBe(true);
    await commit(g.lead, next.token);
    for (let i = 0; i < 100; i++) {
      const b = await batch(g.lead);
      if (b.done) break;
      await commit(g.lead, b.token);
    }
    for (const db of g.dbs) expect(await ids(db)).toEqual(all.filter((id) => !leaving(id)));
    // Once the move ended, an image gives a new member its end: a moved id is refused there too.
    const later = await Database.open({ dataDir: '/m3', masterKey: KEY, fs: g.fs, buildIndex: buildIndexInline });
    await later.consensusApplied();
    await later.restoreConsensusImage(await imageOf(g.lead), g.index);
    await expect(later.get('c', all.find(leaving)!)).rejects.toMatchObject({ code: 'moved' });
    await later.close();
    for (const db of g.dbs) await db.close();
  });
});
