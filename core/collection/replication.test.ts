import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import type { ReplicationEvent } from '../base/model.js';
import { encodeOp } from '../storage/codec.js';
import type { Wal } from '../storage/wal.js';
import { FaultyFileSystem } from '../testing/faulty-fs.js';
import { Database } from './database.js';
import { buildIndexInline } from './rebuild.js';
import { decodeRecord, encodeRecord, ReplicationKind, SNAPSHOT_CHUNK_BYTES_MAX } from './replication.js';

const dirs: string[] = [];
afterEach(() => { for (const d of dirs.splice(0)) rmSync(d, { recursive: true, force: true }); });

async function open(): Promise<Database> {
  const d = mkdtempSync(join(tmpdir(), 'svc-repl-'));
  dirs.push(d);
  return Database.open({ dataDir: d, masterKey: new Uint8Array(32).fill(7), buildIndex: buildIndexInline });
}

/** Reads events until `stop` says so, then aborts the stream. */
async function take(db: Database, body: object | undefined, stop: (e: ReplicationEvent[]) => boolean): Promise<ReplicationEvent[]> {
  const ac = new AbortController();
  const got: ReplicationEvent[] = [];
  for await (const e of db.replicate(body, ac.signal)) {
    got.push(e);
    if (stop(got)) ac.abort();
  }
  return got;
}

const kinds = (es: ReplicationEvent[]) => es.map((e) => decodeRecord(e.record).kind);
const isCommit = (e: ReplicationEvent) => decodeRecord(e.record).kind === 'commit';

/** The next commit of a stream, past the announcement of a collection (a seq-0 create before its first write). */
async function nextCommit(it: AsyncIterator<ReplicationEvent>): Promise<IteratorResult<ReplicationEvent>> {
  for (;;) {
    const r = await it.next();
    if (r.done === true || isCommit(r.value)) return r;
  }
}

describe('replication records', () => {
  it('round-trip, and unknown versions or kinds are refused', () => {
    const r = encodeRecord(ReplicationKind.commit, 'abc', new Uint8Array([2, 0, 0, 0, 0]));
    expect(decodeRecord(r)).toEqual({ kind: 'commit', keyId: 'abc', op: { t: 'delete', ids: [] } });
    expect(() => decodeRecord(Uint8Array.from([1, 4, 0, 0]))).toThrow(/version/);
    expect(() => decodeRecord(Uint8Array.from([2, 9, 0, 0]))).toThrow(/kind/);
    // Cut short, or shaped wrong for its kind: refused, never read as something else.
    const end = encodeRecord(ReplicationKind.snapshotEnd, 'db');
    expect(decodeRecord(end)).toEqual({ kind: 'snapshotEnd', keyId: 'db', op: null });
    for (let cut = 1; cut < end.length; cut++) expect(() => decodeRecord(end.subarray(0, end.length - cut)), `cut ${cut}`).toThrow();
    expect(() => decodeRecord(encodeRecord(ReplicationKind.snapshotEnd, 'db', r.subarray(7)))).toThrow(/no body/);
    expect(() => decodeRecord(encodeRecord(ReplicationKind.snapshotBegin, 'abc', Buffer.from('ab')))).toThrow(/db key/);
    expect(() => decodeRecord(encodeRecord(ReplicationKind.snapshotBegin, 'db'))).toThrow(/history/);
    expect(() => decodeRecord(encodeRecord(ReplicationKind.snapshotBegin, 'db', Buffer.from('not hex')))).toThrow(/hex/);
    expect(decodeRecord(encodeRecord(ReplicationKind.snapshotBegin, 'db', Buffer.from('0a1b')))).toEqual({ kind: 'snapshotBegin', keyId: 'db', op: null, history: '0a1b' });
    const seq = Buffer.alloc(8);
    seq.writeUInt32LE(7, 0);
    seq.writeUInt32LE(1, 4);
    expect(decodeRecord(encodeRecord(ReplicationKind.heartbeat, 'db', seq))).toEqual({ kind: 'heartbeat', keyId: 'db', op: null, leaderSeq: 2 ** 32 + 7 });
    expect(() => decodeRecord(encodeRecord(ReplicationKind.heartbeat, 'db'))).toThrow(/u64/);
    expect(() => decodeRecord(encodeRecord(ReplicationKind.heartbeat, 'db', Buffer.from([1])))).toThrow(/u64/);
    expect(() => decodeRecord(encodeRecord(ReplicationKind.commit, 'abc'))).toThrow(/without a body/);
    for (let cut = 1; cut < r.length; cut++) expect(() => decodeRecord(r.subarray(0, r.length - cut)), `commit cut ${cut}`).toThrow();
  });
});

describe('payload update records', () => {
  it('stream as commits of their collection; in a snapshot record or under the db key they are refused', async () => {
    const db = await open();
    await db.createCollection({ name: 'c', dim: 2, metric: 'l2', index: 'flat', filterable: [{ path: 'g', field_type: 'keyword' }] });
    await db.upsert('c', { points: [{ id: 'a', vector: [1, 2], payload: { g: 'x' } }, { id: 'b', vector: [3, 4], payload: { g: 'y' } }] });
    const base = db.replicationView().log.lastSeq;
    const live = take(db, { after_seq: base }, (es) => es.filter(isCommit).length === 2);
    await db.setPayload('c', { mode: 'replace', points: [{ id: 'a', payload: { g: 'y' } }] });
    await db.deletePoints('c', { filter: { eq: { field: 'g', value: 'y' } } });
    const commits = (await live).filter(isCommit).map((e) => decodeRecord(e.record).op);
    expect(commits[0]).toEqual({ t: 'set_payload', mode: 'replace', points: [{ id: 'a', payload: { g: 'y' } }] });
    expect(commits[1]).toMatchObject({ t: 'delete' });
    expect((commits[1] as { ids: string[] }).ids.sort()).toEqual(['a', 'b']);
    const body = encodeOp({ t: 'set_payload', mode: 'merge', points: [{ id: 'a', payload: { g: 'z' } }] });
    expect(decodeRecord(encodeRecord(ReplicationKind.commit, 'uid1', body)).op?.t).toBe('set_payload');
    expect(() => decodeRecord(encodeRecord(ReplicationKind.snapshot, 'uid1', body))).toThrow(/payload update/);
    expect(() => decodeRecord(encodeRecord(ReplicationKind.commit, 'db', body))).toThrow(/payload update/);
    await db.close();
  });
});

describe('Database.replicate', () => {
  it('snapshot (collections, then points in bounded chunks), then commits; aborting ends the stream', async () => {
    const db = await open();
    await db.createCollection({ name: 'c', dim: 256, metric: 'l2', index: 'flat' });
    const points = Array.from({ length: 2500 }, (_, i) => ({ id: `p${i}`, vector: Array.from({ length: 256 }, () => i) }));
    for (let i = 0; i < points.length; i += 1000) await db.upsert('c', { points: points.slice(i, i + 1000) });
    const snap = await take(db, undefined, (es) => kinds(es).includes('snapshotEnd'));
    expect(kinds(snap)[0]).toBe('snapshotBegin');
    expect(kinds(snap).at(-1)).toBe('snapshotEnd');
    const chunks = snap.filter((e) => decodeRecord(e.record).op?.t === 'upsert');
    expect(chunks.length).toBeGreaterThan(2);
    expect(Math.max(...chunks.map((e) => e.record.length))).toBeLessThanOrEqual(SNAPSHOT_CHUNK_BYTES_MAX + 64);
    const ids = new Set(chunks.flatMap((e) => (decodeRecord(e.record).op as { points: { id: string }[] }).points.map((p) => p.id)));
    expect(ids.size).toBe(2500);
    const base = snap.at(-1)!.seq;

    // Resume after the snapshot: only later commits, in order.
    const live = take(db, { after_seq: base, history: db.history }, (es) => es.filter(isCommit).length === 2);
    await db.delete('c', 'p1');
    await db.upsert('c', { points: [{ id: 'n', vector: Array.from({ length: 256 }, () => 1) }] });
    const all = (await live).filter((e) => decodeRecord(e.record).kind !== 'heartbeat');
    // The collection is announced before its first commit on every stream, a resumed one too: the
    // follower may never have got the announcement of an earlier stream.
    expect(decodeRecord(all[0].record)).toMatchObject({ kind: 'snapshot', keyId: 'db', op: { t: 'create_collection', name: 'c' } });
    const tail = all.filter(isCommit);
    expect(tail.map((e) => e.seq)).toEqual([base + 1, base + 2]);
    expect(tail.map((e) => decodeRecord(e.record).op?.t)).toEqual(['delete', 'upsert']);
    await db.close();
  });

  it('refuses a malformed after_seq; one it no longer has (or never had) gets a full snapshot', async () => {
    const db = await open();
    for (const bad of [{ after_seq: -1 }, { after_seq: 1.5 }, { after_seq: '3' }, { other: 1 }, { after_seq: 0, history: 7 }, { history: 'a'.repeat(65) }]) {
      await expect(take(db, bad, () => true)).rejects.toMatchObject({ code: 'invalid_argument' });
    }
    expect(kinds(await take(db, { after_seq: 1_000_000, history: db.history }, () => true))).toEqual(['snapshotBegin']);
    await db.close();
  });

  it('resumes only in its own history: another history, or none, gets a snapshot that names this one', async () => {
    const db = await open();
    await db.createCollection({ name: 'c', dim: 2, metric: 'l2', index: 'flat' });
    await db.upsert('c', { points: [{ id: 'a', vector: [1, 2] }] });
    const last = db.replicationView().log.lastSeq;
    expect(db.history).toMatch(/^[0-9a-f]{32}$/);
    const first = await take(db, { after_seq: last - 1, history: db.history }, (es) => es.some(isCommit));
    expect(kinds(first)).not.toContain('snapshotBegin');
    for (const body of [{ after_seq: last - 1 }, { after_seq: last - 1, history: '0'.repeat(32) }]) {
      const es = await take(db, body, () => true);
      expect(decodeRecord(es[0].record)).toMatchObject({ kind: 'snapshotBegin', history: db.history });
    }
    await db.close();
  });

  it('a snapshot of the directory starts a history of its own; a reopen keeps its history', async () => {
    const db = await open();
    await db.createCollection({ name: 'c', dim: 2, metric: 'l2', index: 'flat' });
    const history = db.history;
    const dir = dirs[dirs.length - 1];
    const { path } = await db.snapshot({ name: 'snap' });
    dirs.push(`${dir}-snapshots`);
    await db.close();
    const again = await Database.open({ dataDir: dir, masterKey: new Uint8Array(32).fill(7), buildIndex: buildIndexInline });
    expect(again.history).toBe(history);
    await again.close();
    const restored = await Database.open({ dataDir: path, masterKey: new Uint8Array(32).fill(7), buildIndex: buildIndexInline });
    expect(restored.history).toMatch(/^[0-9a-f]{32}$/);
    expect(restored.history).not.toBe(history);
    expect((await restored.listCollections()).collections.map((c) => c.name)).toEqual(['c']);
    await restored.close();
  });

  it('a caught-up stream sends heartbeats with the leader\'s last seq while nothing is written', async () => {
    const db = await open();
    await db.createCollection({ name: 'c', dim: 2, metric: 'l2', index: 'flat' });
    const last = db.replicationView().log.lastSeq;
    const started = performance.now();
    const es = await take(db, { after_seq: last, history: db.history }, (got) => got.filter((e) => decodeRecord(e.record).kind === 'heartbeat').length === 3);
    expect(es.map((e) => [decodeRecord(e.record).kind, e.seq, decodeRecord(e.record).leaderSeq])).toEqual([['heartbeat', last, last], ['heartbeat', last, last], ['heartbeat', last, last]]);
    // The first at once, then one per HEARTBEAT_MS (250 ms).
    expect(performance.now() - started).toBeGreaterThanOrEqual(400);
    await db.close();
  });
});

describe('Database.replicate tail and retention', () => {
  const vec = (i: number) => [i, i + 1, i + 2, i + 3];

  /** On the faulty file system: small WAL files, frequent checkpoints (each one truncates the WAL). */
  async function openSmall(replicationRetainBytes?: number): Promise<Database> {
    const fs = new FaultyFileSystem(41);
    fs.yieldEachOp = false;
    return Database.open({
      dataDir: '/data', masterKey: new Uint8Array(32).fill(9), buildIndex: buildIndexInline, fs,
      walFileBytesMax: 4096, checkpointPoints: 20, ...(replicationRetainBytes !== undefined ? { replicationRetainBytes } : {}),
    });
  }

  /** Waits (boundedly) for the background checkpoints to finish. */
  async function checkpointsDone(db: Database): Promise<void> {
    const running = (db as unknown as { checkpoints: Map<string, Promise<void>> }).checkpoints;
    for (let i = 0; i < 1000 && running.size > 0; i++) await Promise.all([...running.values()]);
  }

  async function writeMany(db: Database, batches: number): Promise<void> {
    for (let b = 0; b < batches; b++) {
      await db.upsert('c', { points: Array.from({ length: 10 }, (_, i) => ({ id: `p${b}-${i}`, vector: vec(i) })) });
      await checkpointsDone(db);
    }
  }

  it('a caught-up stream gets each commit as it is made durable, not on a timer', async () => {
    const db = await openSmall();
    await db.createCollection({ name: 'c', dim: 4, metric: 'l2', index: 'flat' });
    const ac = new AbortController();
    const it = db.replicate({ after_seq: db.replicationView().log.lastSeq, history: db.history }, ac.signal)[Symbol.asyncIterator]();
    const n = 20;
    const started = performance.now();
    for (let i = 0; i < n; i++) {
      const next = nextCommit(it);
      const seq = await db.upsert('c', { points: [{ id: `p${i}`, vector: vec(i) }] }).then(() => db.replicationView().log.lastSeq);
      expect((await next).value.seq).toBe(seq);
    }
    // A stream that polled every 50 ms would take at least n * 50 ms here (each commit comes just after a poll).
    expect(performance.now() - started).toBeLessThan(n * 25);
    ac.abort();
    expect((await it.next()).done).toBe(true);
    expect((db.replicationView().log as Wal).waiting).toBe(0);
    await db.close();
  });

  it('checkpoints keep the WAL an open stream has not sent yet, and drop it once the stream ends', async () => {
    const db = await openSmall();
    await db.createCollection({ name: 'c', dim: 4, metric: 'l2', index: 'flat' });
    const log = db.replicationView().log as Wal;
    const ac = new AbortController();
    const it = db.replicate(undefined, ac.signal)[Symbol.asyncIterator]();
    let base = 0;
    for (;;) {
      const e = (await it.next()).value as ReplicationEvent;
      if (decodeRecord(e.record).kind === 'snapshotEnd') {
        base = e.seq;
        break;
      }
    }
    // The follower reads nothing while 40 records are written and checkpointed.
    await writeMany(db, 40);
    expect(log.lastSeq).toBeGreaterThan(base + 30);
    expect(log.firstRetainedSeq).toBeLessThanOrEqual(base + 1);
    const got: number[] = [];
    while (got.length < log.lastSeq - base) {
      const e = (await it.next()).value as ReplicationEvent;
      if (decodeRecord(e.record).kind !== 'heartbeat') got.push(e.seq);
    }
    expect(got).toEqual(Array.from({ length: log.lastSeq - base }, (_, i) => base + 1 + i));
    ac.abort();
    expect((await it.next()).done).toBe(true);
    expect(log.holdCount).toBe(0);
    await writeMany(db, 3);
    expect(log.firstRetainedSeq).toBeGreaterThan(base + 1);
    await db.close();
  });

  it('past SVC_REPLICATION_RETAIN_BYTES the slow stream ends (retention_exceeded) and its resume gets a snapshot', async () => {
    const db = await openSmall(8192);
    await db.createCollection({ name: 'c', dim: 4, metric: 'l2', index: 'flat' });
    const log = db.replicationView().log as Wal;
    const base = log.lastSeq;
    const it = db.replicate({ after_seq: base, history: db.history }, new AbortController().signal)[Symbol.asyncIterator]();
    await writeMany(db, 1);
    expect(((await nextCommit(it)).value as ReplicationEvent).seq).toBe(base + 1);
    await writeMany(db, 60);
    expect(log.firstRetainedSeq).toBeGreaterThan(base + 2);
    await expect(it.next()).rejects.toMatchObject({ code: 'unavailable', detail: { reason: 'retention_exceeded' } });
    expect(log.holdCount).toBe(0);
    expect(kinds(await take(db, { after_seq: base + 1, history: db.history }, () => true))).toEqual(['snapshotBegin']);
    await db.close();
  });
});
