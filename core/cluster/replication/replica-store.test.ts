import { existsSync, mkdtempSync, readdirSync, renameSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { systemClock } from '../../base/clock.js';
import { Database } from '../../collection/database.js';
import { buildIndexInline } from '../../collection/rebuild.js';
import { Follower, type ReplicationSource } from './follower.js';
import { ReplicaStore } from './replica-store.js';
import { NodeFileSystem, type FileSystem } from '../../storage/fs.js';

const LEADER_KEY = new Uint8Array(32).fill(5);
const FOLLOWER_KEY = new Uint8Array(32).fill(6);
const roots: string[] = [];
afterEach(() => {
  for (const d of roots.splice(0)) rmSync(d, { recursive: true, force: true });
});

function tempRoot(): string {
  const d = mkdtempSync(join(tmpdir(), 'svc-replica-store-'));
  roots.push(d);
  return d;
}

const vec = (i: number) => [Math.sin(i), Math.cos(i), i % 5];

function storeAt(dataDir: string, onChange?: () => void): Promise<ReplicaStore> {
  return ReplicaStore.open({
    dataDir, log: () => undefined, ...(onChange !== undefined ? { onChange } : {}),
    openDb: (path) => Database.open({ dataDir: path, masterKey: FOLLOWER_KEY, buildIndex: buildIndexInline }),
  });
}

/** The leader's Replicate stream as a follower's source, and the leader's commit seq now. */
function sourceOf(leader: Database): { source: ReplicationSource; leaderSeq(): Promise<number> } {
  return {
    source: (resume, signal) => leader.replicate(resume === undefined ? {} : { after_seq: resume.seq, history: resume.history }, signal),
    leaderSeq: async () => ((await leader.stats()).replication as { commit_seq: number }).commit_seq,
  };
}

/** Follows `leader` until the replica holds all it has, then stops: the source to follow it again. */
async function firstBootstrap(store: ReplicaStore, leader: Database): Promise<ReturnType<typeof sourceOf>> {
  const src = sourceOf(leader);
  const f = follow(store, src.source);
  await until('the first bootstrap', async () => f.stats().appliedSeq === (await src.leaderSeq()));
  await f.stop();
  return src;
}

function follow(store: ReplicaStore, source: ReplicationSource): Follower {
  const f = new Follower({
    source, target: store, clock: systemClock, random: () => 0.5, log: () => undefined,
    sleep: (ms) => new Promise((r) => setTimeout(r, Math.min(ms, 5))), backoffMs: { base: 1, max: 5 },
  });
  f.start();
  return f;
}

async function until(what: string, check: () => boolean | Promise<boolean>, ms = 20_000): Promise<void> {
  const end = Date.now() + ms;
  while (!(await check())) {
    if (Date.now() > end) throw new Error(`${what}: not within ${ms} ms`);
    await new Promise((r) => setTimeout(r, 5));
  }
}

/**
 * A leader that keeps no log for followers (retention 0) and rolls small WAL files: a follower that goes
 * away and comes back after a checkpoint finds its position gone and gets a snapshot.
 */
async function openLeader(root: string): Promise<Database> {
  const leader = await Database.open({
    dataDir: join(root, 'leader'), masterKey: LEADER_KEY, buildIndex: buildIndexInline,
    walFileBytesMax: 4096, checkpointPoints: 50, replicationRetainBytes: 0,
  });
  await leader.createCollection({ name: 'c', dim: 3, metric: 'l2', index: 'flat' });
  return leader;
}

async function ids(db: Database): Promise<string[]> {
  return (await db.fetch('c', { limit: 10_000 })).points.map((p) => p.id).sort();
}

describe('a read replica re-bootstraps into a side directory', () => {
  it('serves its last state while the new snapshot streams in, then swaps it in whole', async () => {
    const root = tempRoot();
    const leader = await openLeader(root);
    await leader.upsert('c', { points: Array.from({ length: 200 }, (_, i) => ({ id: `old${i}`, vector: vec(i) })) });
    const dataDir = join(root, 'replica');
    // What a request loop may read (roles/loops/read-gate.ts), as told at every change.
    const told: (Database | null)[] = [];
    const store: ReplicaStore = await storeAt(dataDir, () => told.push(store.readable));
    let slow = false;
    const source: ReplicationSource = async function* (resume, signal) {
      for await (const ev of leader.replicate(resume === undefined ? {} : { after_seq: resume.seq, history: resume.history }, signal)) {
        // The second snapshot comes slowly, so reads can be watched while it streams in.
        if (slow && ev.seq === 0) await new Promise((r) => setTimeout(r, 20));
        yield ev;
      }
    };
    let f = follow(store, source);
    const leaderSeq = async () => ((await leader.stats()).replication as { commit_seq: number }).commit_seq;
    await until('the first bootstrap', async () => f.stats().appliedSeq === (await leaderSeq()));
    const before = await ids(store.current);
    expect(before).toHaveLength(200);
    // A chained replica: a replica of this replica, through the swap to come.
    const chainedDb = await Database.open({ dataDir: join(root, 'chained'), masterKey: LEADER_KEY, buildIndex: buildIndexInline });
    const chained = new Follower({
      source: (resume, signal) => store.current.replicate(resume === undefined ? {} : { after_seq: resume.seq, history: resume.history }, signal),
      target: chainedDb, clock: systemClock, random: () => 0.5, log: () => undefined,
      sleep: (ms) => new Promise((r) => setTimeout(r, Math.min(ms, 5))), backoffMs: { base: 1, max: 5 },
    });
    chained.start();
    await until('the chained replica', async () => chained.stats().appliedSeq === store.current.replicationView().log.lastSeq);
    expect(await ids(chainedDb)).toEqual(before);
    const historyBefore = store.current.history;
    const oldDb = store.current;
    await f.stop();

    // Meanwhile the leader rewrites everything, checkpoints, and drops the log behind the replica.
    await leader.deleteCollection('c');
    await leader.createCollection({ name: 'c', dim: 3, metric: 'l2', index: 'flat' });
    const position = store.replicaSeq!.seq;
    for (let b = 0; b < 6 || leader.replicationView().log.firstRetainedSeq <= position + 1; b++) {
      expect(b, 'the leader drops its log behind the replica').toBeLessThan(100);
      await leader.upsert('c', { points: Array.from({ length: 100 }, (_, i) => ({ id: `new${(b * 100 + i) % 600}`, vector: vec(b * 100 + i) })) });
    }
    const expected = await ids(leader);
    slow = true;
    f = follow(store, source);
    const seen = new Set<string>();
    let reads = 0;
    while (f.stats().bootstraps < 1 || f.stats().appliedSeq !== (await leaderSeq())) {
      // Every read in the meantime answers, with the old state or the new one, never a part of either.
      const got = await store.read((db) => ids(db));
      seen.add(got.length === 200 && got.every((id, i) => id === before[i]) ? 'old' : JSON.stringify(got) === JSON.stringify(expected) ? 'new' : `partial ${got.length}`);
      reads++;
      await new Promise((r) => setTimeout(r, 2));
    }
    expect([...seen].filter((s) => s.startsWith('partial'))).toEqual([]);
    expect(seen.has('old')).toBe(true);
    expect(reads).toBeGreaterThan(3);
    expect(await ids(store.current)).toEqual(expected);
    expect(f.stats().bootstraps).toBe(1);
    // Nothing to read from the swap's start (before the old database closes) to its end, then the new one.
    const swapAt = told.indexOf(null);
    expect(swapAt).toBeGreaterThan(0);
    expect(told.slice(0, swapAt).every((db) => db === oldDb)).toBe(true);
    expect(told.length).toBe(swapAt + 2);
    expect(told[swapAt + 1]).toBe(store.current);
    expect(store.current).not.toBe(oldDb);
    // The swapped-in directory numbers its own log afresh: a new history, so the chained replica, whose
    // position counted in the old one, takes a snapshot instead of resuming into the wrong log.
    expect(store.current.history).not.toBe(historyBefore);
    await until('the chained replica re-bootstraps', async () => chained.stats().bootstraps >= 2
      && chained.stats().appliedSeq === store.current.replicationView().log.lastSeq);
    expect(await ids(chainedDb)).toEqual(expected);
    await chained.stop();
    await chainedDb.close();
    await f.stop();
    await store.close();
    expect(readdirSync(root).sort()).toEqual(['chained', 'leader', 'replica']);

    // A restart resumes from the swapped-in directory's position, with no new snapshot.
    const again = await storeAt(dataDir);
    expect(await ids(again.current)).toEqual(expected);
    const g = follow(again, source);
    await leader.upsert('c', { points: [{ id: 'later', vector: vec(1) }] });
    await until('the restarted replica follows', async () => g.stats().appliedSeq === (await leaderSeq()));
    expect(g.stats().bootstraps).toBe(0);
    await g.stop();
    await again.close();
    await leader.close();
  });

  it('builds the new graphs before the swap, and the swapped-in directory reads them back instead of building again', async () => {
    const root = tempRoot();
    const leader = await openLeader(root);
    await leader.deleteCollection('c');
    await leader.createCollection({ name: 'g', dim: 8, metric: 'l2' });
    const vec8 = (i: number) => Array.from({ length: 8 }, (_, d) => Math.sin(i * (d + 1)));
    const put = (from: number, n: number) => leader.upsert('g', { points: Array.from({ length: n }, (_, i) => ({ id: `g${from + i}`, vector: vec8(from + i) })) });
    for (let b = 0; b < 3; b++) await put(b * 500, 500);
    const logs: { message: string; detail?: Record<string, unknown> }[] = [];
    const dataDir = join(root, 'replica');
    const store = await ReplicaStore.open({
      dataDir, log: (message, detail) => logs.push({ message, detail }),
      openDb: (path) => Database.open({ dataDir: path, masterKey: FOLLOWER_KEY, buildIndex: buildIndexInline }),
    });
    const { source } = await firstBootstrap(store, leader);
    // The leader rewrites the collection and drops its log behind the replica.
    const position = store.replicaSeq!.seq;
    for (let b = 0; b < 4 || leader.replicationView().log.firstRetainedSeq <= position + 1; b++) {
      expect(b, 'the leader drops its log behind the replica').toBeLessThan(100);
      await put((b * 500) % 2000, 500);
    }
    const f = follow(store, source);
    await until('the re-bootstrap swaps in', () => logs.some((l) => l.message.startsWith('replica: graphs of the swapped-in directory ready')));
    expect(f.stats().bootstraps).toBe(1);
    const built = logs.findIndex((l) => l.message.startsWith('replica: built the re-bootstrapped directory\'s graphs before swapping it in'));
    const swapped = logs.findIndex((l) => l.message === 'replica: swapped in the re-bootstrapped directory');
    expect(built).toBeGreaterThanOrEqual(0);
    expect(swapped).toBeGreaterThan(built);
    expect(logs.find((l) => l.message.startsWith('replica: graphs of the swapped-in'))!.detail).toEqual({ loaded: ['g'], rebuilt: [] });
    // Searches on the swapped-in directory run on the graph read back from its file, not a rebuild.
    const g = store.current.indexStates().find((c) => c.name === 'g')!;
    expect(g).toMatchObject({ count: 2000, graphLoads: 1, rebuilds: 0, stale: false });
    const hits = await store.read((db) => db.search('g', { vector: vec8(1234), k: 1 }));
    expect(hits.hits[0].id).toBe('g1234');
    await f.stop();
    await store.close();
    await leader.close();
  });

  it('finishes a swap a crash stopped between its renames, and drops a side directory left unswapped', async () => {
    const root = tempRoot();
    const dataDir = join(root, 'replica');
    const make = async (path: string, id: string) => {
      const db = await Database.open({ dataDir: path, masterKey: FOLLOWER_KEY, buildIndex: buildIndexInline });
      await db.createCollection({ name: 'c', dim: 3, metric: 'l2', index: 'flat' });
      await db.upsert('c', { points: [{ id, vector: vec(1) }] });
      await db.close();
    };
    // Crashed after `dir -> dir.old`, before `dir.bootstrap -> dir`: the side directory is the new state.
    await make(`${dataDir}.old`, 'old');
    await make(`${dataDir}.bootstrap`, 'new');
    let s = await storeAt(dataDir);
    expect(await ids(s.current)).toEqual(['new']);
    await s.close();
    expect(readdirSync(root).sort()).toEqual(['replica']);
    // Crashed before the first rename: the directory is whole and served; the side one goes.
    await make(`${dataDir}.bootstrap`, 'partial');
    s = await storeAt(dataDir);
    expect(await ids(s.current)).toEqual(['new']);
    await s.close();
    expect(existsSync(`${dataDir}.bootstrap`)).toBe(false);
    // Only the previous directory left (the side one lost): it comes back rather than being deleted.
    renameSync(dataDir, `${dataDir}.old`);
    s = await storeAt(dataDir);
    expect(await ids(s.current)).toEqual(['new']);
    await s.close();
    expect(readdirSync(root).sort()).toEqual(['replica']);
  });

  it('where the directory cannot be renamed (a mount point), serves the old state and re-bootstraps in place', async () => {
    const root = tempRoot();
    const leader = await openLeader(root);
    await leader.upsert('c', { points: [{ id: 'first', vector: vec(1) }] });
    const dataDir = join(root, 'replica');
    const real = new NodeFileSystem();
    // rename(2) of a mount point fails with EBUSY: so does this one, for the data directory itself.
    const fs: FileSystem = Object.assign(Object.create(real) as FileSystem, {
      rename: async (from: string, to: string) => {
        if (from === dataDir) throw Object.assign(new Error(`EBUSY: resource busy or locked, rename '${from}'`), { code: 'EBUSY' });
        return real.rename(from, to);
      },
    });
    const store = await ReplicaStore.open({
      dataDir, fs, log: () => undefined,
      openDb: (path) => Database.open({ dataDir: path, masterKey: FOLLOWER_KEY, buildIndex: buildIndexInline }),
    });
    const { source, leaderSeq } = await firstBootstrap(store, leader);
    const position = store.replicaSeq!.seq;
    for (let b = 0; b < 3 || leader.replicationView().log.firstRetainedSeq <= position + 1; b++) {
      await leader.upsert('c', { points: Array.from({ length: 100 }, (_, i) => ({ id: `n${b}-${i}`, vector: vec(i) })) });
    }
    const f = follow(store, source);
    await until('the replica converges in place', async () => f.stats().appliedSeq === (await leaderSeq()) && f.stats().state === 'streaming');
    expect(await store.read((db) => ids(db))).toEqual(await ids(leader));
    expect(f.stats().bootstraps).toBeGreaterThanOrEqual(2);
    expect(readdirSync(root).sort()).toEqual(['leader', 'replica']);
    await f.stop();
    await store.close();
    await leader.close();
  });
});
