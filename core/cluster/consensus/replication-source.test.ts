import { describe, expect, it } from 'vitest';
import { systemClock } from '../../base/clock.js';
import { SvcError } from '../../base/errors.js';
import type { ReplicationEvent } from '../../base/model.js';
import { Prng } from '../../base/prng.js';
import { Database } from '../../collection/database.js';
import { buildIndexInline } from '../../collection/rebuild.js';
import { decodeRecord } from '../../collection/replication.js';
import { FaultyFileSystem } from '../../testing/faulty-fs.js';
import { pointsOf } from '../../testing/points-of.js';
import { Follower, type ReplicationSource } from '../replication/follower.js';
import { encodeCommand, isDeterministicRefusal, type ShardCommand } from './command.js';
import { ConsensusReplicationLog, consensusStreamHistory } from './replication-source.js';

/**
 * A read replica of a consensus member (replication-source.ts): a member's database applies commands
 * from a log, as a member's loop does, and a follower replicates it through the member's replication
 * source while the log is compacted under it and its stream is cut. The replica ends with exactly the
 * member's collections and points, refused creates included (never applied there). CONSENSUS_REPLICA_SEEDS
 * runs more seeds.
 */

const MEMBER_KEY = new Uint8Array(32).fill(5);
const REPLICA_KEY = new Uint8Array(32).fill(6);
const SEEDS = Number(process.env.CONSENSUS_REPLICA_SEEDS ?? 4);
const FIRST_SEED = Number(process.env.CONSENSUS_REPLICA_SEED ?? 1);
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** A member's log and its apply, in memory: entries appended, applied in order, compacted on demand. */
class Member {
  readonly entries: { index: number; data: Uint8Array }[] = [];
  first = 1;
  last = 0;
  readonly source: ConsensusReplicationLog;

  constructor(readonly db: Database, holds: { entries: number; bytes: number }) {
    this.source = new ConsensusReplicationLog({
      entries: (lo, hi, max) => {
        if (lo < this.first) throw new Error(`entries from ${lo}: compacted through ${this.first - 1}`);
        return this.entries.slice(lo - this.first, Math.min(hi, lo + max) - this.first);
      },
      firstIndex: () => this.first,
      holdsCollection: (uid) => db.holdsCollection(uid),
    }, 0, { holdEntriesMax: holds.entries, holdBytesMax: holds.bytes });
    db.useConsensusLog(this.source, () => this.current);
  }

  /** Whether the member knows a leader (ReplicationView.current). */
  current = true;

  /** One Ready's committed entries (null: a leader's empty first entry of its term), applied together. */
  async commit(cmds: (ShardCommand | null)[]): Promise<unknown[]> {
    const applied = cmds.map((c) => {
      const index = ++this.last;
      this.entries.push({ index, data: c === null ? new Uint8Array(0) : encodeCommand(c) });
      return c === null ? Promise.resolve(0) : this.db.applyCommand(c, index).catch((e: unknown) => {
        if (isDeterministicRefusal(e)) return e;
        throw e;
      });
    });
    const out = await Promise.all(applied);
    this.db.appliedThrough(this.last);
    this.source.appliedThrough(this.last);
    return out;
  }

  /** A marker: the log dropped through `index` (as far as the source lets it). */
  compact(index: number): number {
    const to = this.source.compactTo(index);
    if (to >= this.first) {
      this.entries.splice(0, to + 1 - this.first);
      this.first = to + 1;
    }
    return to;
  }
}

const uidOf = (prng: Prng): string => Array.from({ length: 16 }, () => '0123456789abcdef'[prng.int(16)]).join('');
const create = (uid: string, name: string): ShardCommand => ({ uid: '', bulk: false, op: { t: 'create_collection', uid, name, params: { name, dim: 3, metric: 'l2', index: 'flat' } } });
const drop = (uid: string): ShardCommand => ({ uid: '', bulk: false, op: { t: 'drop_collection', uid } });
const point = (id: string, prng: Prng, payload: Record<string, unknown> | null = null) => ({ id, vector: new Float32Array([prng.next(), prng.next(), prng.next() + 0.1]), payload });

/** A new member's database on a simulated disk, its source holding at most `holdEntries` entries for a stream. */
async function openMember(seed: number, holdEntries: number): Promise<Member> {
  const fs = new FaultyFileSystem(seed);
  fs.yieldEachOp = false;
  const db = await Database.open({ dataDir: '/m', masterKey: MEMBER_KEY, fs, buildIndex: buildIndexInline });
  await db.consensusApplied();
  return new Member(db, { entries: holdEntries, bytes: 1 << 20 });
}

async function waitCaughtUp(f: Follower, member: Member, logs: string[], what: string): Promise<void> {
  const until = Date.now() + 20_000;
  while (f.stats().appliedSeq !== member.source.lastSeq || f.stats().state !== 'streaming') {
    if (Date.now() > until) throw new Error(`${what}: the replica is at ${f.stats().appliedSeq} (${f.stats().state}), the member at ${member.source.lastSeq}: ${logs.slice(-6).join(' | ')}`);
    await sleep(2);
  }
}

async function runSeed(seed: number): Promise<{ cuts: number; lost: number; refused: number; bootstraps: number }> {
  const prng = new Prng(seed);
  const fs = new FaultyFileSystem(seed);
  fs.yieldEachOp = false;
  const db = await Database.open({ dataDir: '/member', masterKey: MEMBER_KEY, fs, buildIndex: buildIndexInline });
  expect(await db.consensusApplied()).toBe(0);
  // Small holds: a replica cut for a while falls behind them and starts over from a snapshot.
  const member = new Member(db, { entries: 30, bytes: 1 << 20 });
  const replica = await Database.open({ dataDir: '/replica', masterKey: REPLICA_KEY, fs, buildIndex: buildIndexInline });
  let cuts = 0;
  let paused = false;
  const source: ReplicationSource = async function* (resume, signal) {
    let sent = 0;
    const cutAt = prng.int(3) === 0 ? 1 + prng.int(40) : Infinity;
    for await (const ev of db.replicate(resume === undefined ? {} : { after_seq: resume.seq, history: resume.history }, signal)) {
      while (paused) await sleep(1);
      if (++sent === cutAt) {
        cuts++;
        throw new Error('connection cut');
      }
      yield ev;
    }
  };
  const logs: string[] = [];
  const f = new Follower({
    source, target: replica, clock: systemClock, random: () => prng.next(), sleep: (ms) => sleep(Math.min(ms, 2)),
    log: (l, m, d) => { logs.push(`${m} ${JSON.stringify(d ?? {})}`); }, backoffMs: { base: 1, max: 2 },
  });
  let lost = 0;
  const live = new Map<string, string>();
  let refused = 0;
  let nextId = 0;
  f.start();
  try {
    for (let step = 0; step < 120; step++) {
      // A replica paused now and then while the log is compacted: it falls behind its hold, or not.
      if (prng.int(15) === 0) paused = true;
      const ready: (ShardCommand | null)[] = [];
      for (let n = 1 + prng.int(4); n > 0; n--) {
        const name = ['a', 'b', 'c'][prng.int(3)];
        const uid = live.get(name);
        const r = prng.int(12);
        if (r === 0) ready.push(null);
        else if (uid === undefined || r === 1) {
          // A create of a name taken is refused on every member alike: the replica must not apply it either.
          ready.push(create(uidOf(prng), name));
        } else if (r === 2) ready.push(drop(uid));
        else if (r <= 7) {
          const pts = Array.from({ length: 1 + prng.int(6) }, () => point(prng.int(3) === 0 && nextId > 0 ? `p${prng.int(nextId)}` : `p${nextId++}`, prng, prng.int(2) === 0 ? { step } : null));
          ready.push({ uid, bulk: false, op: { t: 'upsert', points: pts } });
        } else if (r === 8) {
          ready.push({ uid, bulk: false, op: { t: 'set_payload', mode: prng.int(2) === 0 ? 'merge' : 'replace', points: [{ id: `p${prng.int(Math.max(1, nextId))}`, payload: { step, k: prng.int(5) } }] } });
        } else {
          ready.push({ uid, bulk: false, op: { t: 'delete', ids: [`p${prng.int(Math.max(1, nextId))}`] } });
        }
      }
      const out = await member.commit(ready);
      // The test's own view of the names, as the member decided.
      for (let i = 0; i < ready.length; i++) {
        const c = ready[i];
        if (c === null || c.uid !== '') continue;
        if (out[i] instanceof SvcError) refused++;
        else if (c.op.t === 'create_collection' && db.holdsCollection(c.op.uid)) live.set(c.op.name, c.op.uid);
        else if (c.op.t === 'drop_collection') for (const [n, u] of live) if (u === c.op.uid) live.delete(n);
      }
      if (prng.int(6) === 0) {
        const before = member.source.holdCount;
        member.compact(member.last - prng.int(10));
        lost += before - member.source.holdCount;
      }
      if (paused && prng.int(4) === 0) paused = false;
      if (prng.int(4) === 0) await sleep(prng.int(3));
    }
    paused = false;
    await waitCaughtUp(f, member, logs, `seed ${seed}`);
    expect(await pointsOf(replica), `seed ${seed}`).toEqual(await pointsOf(db));
    return { cuts, lost, refused, bootstraps: f.stats().bootstraps };
  } finally {
    await f.stop();
    member.source.close();
    await replica.close();
    await db.close();
  }
}

describe('a read replica of a consensus member', () => {
  it(`converges to the member exactly while its log is compacted and its stream cut, over ${SEEDS} seeds`, async () => {
    const seen = { cuts: 0, lost: 0, refused: 0, bootstraps: 0 };
    for (let seed = FIRST_SEED; seed < FIRST_SEED + SEEDS; seed++) {
      const r = await runSeed(seed).catch((e: unknown) => {
        throw new Error(`seed ${seed} (CONSENSUS_REPLICA_SEED=${seed} CONSENSUS_REPLICA_SEEDS=1 to replay): ${e instanceof Error ? e.stack : String(e)}`);
      });
      for (const k of Object.keys(seen) as (keyof typeof seen)[]) seen[k] += r[k];
    }
    // The storm happened: streams were cut, holds lost to compaction, creates refused, snapshots resent.
    expect(seen.cuts).toBeGreaterThan(0);
    expect(seen.lost).toBeGreaterThan(0);
    expect(seen.refused).toBeGreaterThan(0);
    expect(seen.bootstraps).toBeGreaterThan(SEEDS);
  }, 120_000);

  it('sends a refused create as no record, a dropped collection\'s writes not at all, and names its own history', async () => {
    const member = await openMember(1, 100);
    const db = member.db;
    const prng = new Prng(2);
    const A = 'a'.repeat(16);
    const B = 'b'.repeat(16);
    const C = 'c'.repeat(16);
    // 1 create A 'x'; 2 a point; 3 create B 'x' (refused: the name is A's); 4 empty; 5 create C 'y'; 6 its point; 7 drop C.
    const out = await member.commit([create(A, 'x'), { uid: A, bulk: false, op: { t: 'upsert', points: [point('p', prng)] } }, create(B, 'x'), null, create(C, 'y'), { uid: C, bulk: false, op: { t: 'upsert', points: [point('q', prng)] } }, drop(C)]);
    expect(out[2]).toBeInstanceOf(SvcError);
    const it = db.replicate({})[Symbol.asyncIterator]();
    const recs: { seq: number; kind: string; keyId: string; op: string | undefined }[] = [];
    let history = '';
    for (;;) {
      const ev = (await it.next()).value as ReplicationEvent;
      const r = decodeRecord(ev.record);
      if (r.kind === 'snapshotBegin') history = r.history!;
      recs.push({ seq: ev.seq, kind: r.kind, keyId: r.keyId, op: r.op?.t });
      if (r.kind === 'heartbeat') break;
    }
    expect(history).toBe(consensusStreamHistory((db as unknown as { dir: { history: string } }).dir.history));
    expect(history).not.toBe((db as unknown as { dir: { history: string } }).dir.history);
    // The snapshot: A and its point, at base 7.
    expect(recs.map((r) => [r.kind, r.keyId, r.op])).toEqual([['snapshotBegin', 'db', undefined], ['snapshot', 'db', 'create_collection'], ['snapshot', A, 'upsert'], ['snapshotEnd', 'db', undefined], ['heartbeat', 'db', undefined]]);
    await it.return?.();
    // A resume from 0's position in this history: the tail of the log, refused and dropped creates left out.
    const tail = db.replicate({ after_seq: 0, history })[Symbol.asyncIterator]();
    const got: [number, string, string | undefined][] = [];
    for (;;) {
      const ev = (await tail.next()).value as ReplicationEvent;
      const r = decodeRecord(ev.record);
      // A heartbeat names what the stream has read through (what it skipped included).
      if (r.kind === 'heartbeat' && ev.seq >= 7) break;
      if (r.kind !== 'heartbeat') got.push([ev.seq, r.keyId, r.op?.t]);
    }
    await tail.return?.();
    // A's create and point; B's refused create: none; C's create: none (it is gone), so its point is not sent; its drop is.
    expect(got).toEqual([[1, 'db', 'create_collection'], [2, A, 'upsert'], [7, 'db', 'drop_collection']]);
    member.source.close();
    await db.close();
  });

  it('ends every stream when the source closes (a caught-up one would spin on waitFor)', async () => {
    const member = await openMember(5, 100);
    const db = member.db;
    await member.commit([create('a'.repeat(16), 'x')]);
    const it = db.replicate({})[Symbol.asyncIterator]();
    for (;;) if (decodeRecord(((await it.next()).value as ReplicationEvent).record).kind === 'heartbeat') break;
    const next = it.next();
    member.source.close();
    await expect(next).rejects.toMatchObject({ code: 'unavailable', detail: { reason: 'retention_exceeded' } });
    expect(member.source.holdCount).toBe(0);
    await db.close();
  });

  it('turns the event loop between batches of entries a stream skips (a dropped collection\'s writes)', async () => {
    const member = await openMember(6, 1e9);
    const db = member.db;
    const A = 'a'.repeat(16);
    await member.commit([create(A, 'x')]);
    for (let i = 0; i < 20; i++) await member.commit(Array.from({ length: 100 }, (_, j): ShardCommand => ({ uid: A, bulk: false, op: { t: 'delete', ids: [`p${i * 100 + j}`] } })));
    await member.commit([drop(A)]);
    const history = consensusStreamHistory((db as unknown as { dir: { history: string } }).dir.history);
    let turned = false;
    setImmediate(() => { turned = true; });
    // From 0: the create and 2,000 deletes are skipped (A is gone), the drop is the first record sent.
    const it = db.replicate({ after_seq: 0, history })[Symbol.asyncIterator]();
    for (;;) {
      const ev = (await it.next()).value as ReplicationEvent;
      if (decodeRecord(ev.record).kind === 'commit') {
        expect(ev.seq).toBe(member.last);
        break;
      }
    }
    // Only microtasks in between, before: the event loop had not turned when the drop came.
    expect(turned).toBe(true);
    await it.return?.();
    member.source.close();
    await db.close();
  });

  it('a replica that followed a single node, pointed at a member, takes the member\'s collections (create seqs of two histories)', async () => {
    const fs = new FaultyFileSystem(7);
    fs.yieldEachOp = false;
    const prng = new Prng(7);
    const single = await Database.open({ dataDir: '/s', masterKey: new Uint8Array(32).fill(4), fs, buildIndex: buildIndexInline });
    // The single node's 'x' is created at a WAL seq past 1.
    await single.createCollection({ name: 'pad', dim: 3 });
    for (let i = 0; i < 20; i++) await single.upsert('pad', { points: [{ id: `q${i}`, vector: [1, 2, i] }] });
    await single.deleteCollection('pad');
    await single.createCollection({ name: 'x', dim: 3 });
    await single.upsert('x', { points: [{ id: 'old', vector: [1, 2, 3] }] });
    const replica = await Database.open({ dataDir: '/r', masterKey: REPLICA_KEY, fs, buildIndex: buildIndexInline });
    const logs: string[] = [];
    const follow = (from: Database) => new Follower({
      source: (resume, signal) => from.replicate(resume === undefined ? {} : { after_seq: resume.seq, history: resume.history }, signal),
      target: replica, clock: systemClock, random: () => prng.next(), sleep: (ms) => sleep(Math.min(ms, 2)),
      log: (_l, m, d) => { logs.push(`${m} ${JSON.stringify(d ?? {})}`); }, backoffMs: { base: 1, max: 2 },
    });
    const f1 = follow(single);
    f1.start();
    while (f1.stats().state !== 'streaming') await sleep(2);
    await f1.stop();
    expect(await pointsOf(replica)).toEqual(await pointsOf(single));
    // The member's 'x' (another uid) is created at index 1.
    const member = await openMember(8, 100);
    await member.commit([create('b'.repeat(16), 'x'), { uid: 'b'.repeat(16), bulk: false, op: { t: 'upsert', points: [point('new', prng)] } }]);
    const f2 = follow(member.db);
    f2.start();
    await waitCaughtUp(f2, member, logs, 'the replica pointed at the member');
    expect(await pointsOf(replica)).toEqual(await pointsOf(member.db));
    // One bootstrap: before, the replica kept its own 'x' (created "later", at seq 23 against index 1),
    // refused every point of the member's, and bootstrapped again and again.
    expect(f2.stats().bootstraps).toBe(1);
    await f2.stop();
    member.source.close();
    await Promise.all([replica.close(), member.db.close(), single.close()]);
  });

  it('sends no heartbeats while the member knows no leader: its replica\'s lag grows, and is 0 again once it does', async () => {
    const member = await openMember(9, 100);
    const prng = new Prng(9);
    const A = 'a'.repeat(16);
    await member.commit([create(A, 'x'), { uid: A, bulk: false, op: { t: 'upsert', points: [point('p', prng)] } }]);
    const replica = await Database.open({ dataDir: '/r9', masterKey: REPLICA_KEY, fs: new FaultyFileSystem(10), buildIndex: buildIndexInline });
    const logs: string[] = [];
    const f = new Follower({
      source: (resume, signal) => member.db.replicate(resume === undefined ? {} : { after_seq: resume.seq, history: resume.history }, signal),
      target: replica, clock: systemClock, random: () => 0.5, sleep: (ms) => sleep(Math.min(ms, 2)), log: (_l, m) => { logs.push(m); }, backoffMs: { base: 1, max: 2 },
    });
    f.start();
    await waitCaughtUp(f, member, logs, 'the replica');
    await sleep(600);
    expect(f.stats().lagMs).toBe(0);
    // Cut off from its group: what it applied may be old, and it says nothing to vouch for it.
    member.current = false;
    await sleep(1600);
    expect(f.stats().lagMs).toBeGreaterThan(1000);
    expect(f.stats().state).toBe('streaming');
    member.current = true;
    const until = Date.now() + 5000;
    while (f.stats().lagMs !== 0 && Date.now() < until) await sleep(10);
    expect(f.stats().lagMs).toBe(0);
    await f.stop();
    member.source.close();
    await Promise.all([replica.close(), member.db.close()]);
  });

  it('holds the log for a stream within its bounds, and ends it (retention_exceeded) past them', async () => {
    const member = await openMember(3, 10);
    const db = member.db;
    const prng = new Prng(4);
    const A = 'a'.repeat(16);
    await member.commit([create(A, 'x')]);
    for (let i = 0; i < 5; i++) await member.commit([{ uid: A, bulk: false, op: { t: 'upsert', points: [point(`p${i}`, prng)] } }]);
    const history = consensusStreamHistory((db as unknown as { dir: { history: string } }).dir.history);
    // A stream from index 3 on, read through 4 and then left waiting.
    const it = db.replicate({ after_seq: 2, history })[Symbol.asyncIterator]();
    const kinds: [string, number][] = [];
    for (let i = 0; i < 3; i++) {
      const ev = (await it.next()).value as ReplicationEvent;
      kinds.push([decodeRecord(ev.record).kind, ev.seq]);
    }
    // Its first heartbeat, A announced (its create is before the resume), then the commit at 3.
    expect(kinds).toEqual([['heartbeat', 2], ['snapshot', 1], ['commit', 3]]);
    // A compaction through 6 stops below the hold's floor (3, not yet advanced past what was sent).
    expect(member.compact(6)).toBe(2);
    expect(member.source.holdCount).toBe(1);
    // 20 more entries: a compaction through 26 keeps at most 10 entries before it for the hold
    // (17 to 26), which needs them from 3: it is lost.
    for (let i = 0; i < 20; i++) await member.commit([null]);
    expect(member.compact(26)).toBe(16);
    expect(member.source.holdCount).toBe(0);
    await expect((async () => {
      for (;;) if ((await it.next()).done === true) return;
    })()).rejects.toMatchObject({ code: 'unavailable', detail: { reason: 'retention_exceeded' } });
    // Its resume is below the log now: a snapshot.
    const again = db.replicate({ after_seq: 3, history })[Symbol.asyncIterator]();
    expect(decodeRecord(((await again.next()).value as ReplicationEvent).record).kind).toBe('snapshotBegin');
    await again.return?.();
    member.source.close();
    await db.close();
  });
});
