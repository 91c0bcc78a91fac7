import { describe, expect, it } from 'vitest';
import { SvcError } from '../base/errors.js';
import { owner } from '../cluster/routing/hrw.js';
import { decodeOp, encodeOp, type DbOp, type Op } from '../storage/codec.js';
import { DataDir } from '../storage/data-dir.js';
import { loadManifest } from '../storage/manifest.js';
import { XChaChaSealer } from '../crypto/sealer.js';
import { deriveKey } from '../crypto/keys.js';
import { FaultyFileSystem } from '../testing/faulty-fs.js';
import { Database } from './database.js';
import type { MoveBatchAnswer } from './move.js';
import { decodeRecord } from './replication.js';
import { buildIndexInline } from './rebuild.js';

/**
 * A node's side of a rebalance move (docs/cluster.md, Rebalancing): batches in id order after a cursor
 * held in the WAL, commits that delete a batch and advance the cursor in one record, `moved` for writes
 * of ids already gone, and a cursor that survives a crash, a checkpoint and a reopen.
 */

const KEY = new Uint8Array(32).fill(3);
const N = 300;
const SELF = 0;
const TARGETS = [0, 1, 2];

/** Each open is a process with its own view of the disk: a crash ends what the one before still had under way. */
function openOn(fs: FaultyFileSystem, dataDir = '/data', extra: Partial<Parameters<typeof Database.open>[0]> = {}): Promise<Database> {
  return Database.open({ dataDir, masterKey: KEY, fs: fs.processView(), buildIndex: buildIndexInline, ...extra });
}

async function seeded(fs: FaultyFileSystem, extra: Partial<Parameters<typeof Database.open>[0]> = {}): Promise<Database> {
  const db = await openOn(fs, '/data', extra);
  await db.createCollection({ name: 'c', dim: 3, metric: 'l2', filterable: [{ path: 'g', field_type: 'keyword' }] });
  await db.upsert('c', {
    points: Array.from({ length: N }, (_, i) => ({ id: `p${String(i).padStart(4, '0')}`, vector: [i, 1, 2], payload: { g: i % 2 === 0 ? 'a' : 'b', __svc_text__: `word${i} fox` } })),
  });
  return db;
}

const batch = (db: Database, limit = 40, move = 'm1') => db.moveBatch({ move, self: SELF, targets: TARGETS, limit }) as Promise<MoveBatchAnswer>;
const commit = (db: Database, token: string, move = 'm1') => db.move('commit', { move, token }) as Promise<{ moved: number }>;
const leaving = (id: string) => owner(id, TARGETS) !== SELF;
const ids = async (db: Database) => (await db.fetch('c', { limit: 10_000 })).points.map((p) => p.id);

/** A batch of five handed out under a 100 ms lease, its ids, once that lease has ended uncommitted. */
async function leaseEnded(db: Database): Promise<string[]> {
  const b = await db.move('batch', { move: 'm1', self: SELF, targets: TARGETS, limit: 5, lease_ms: 100 }) as MoveBatchAnswer;
  if (b.done) throw new Error('a batch was expected');
  const op = decodeOp(Buffer.from(b.records[0], 'base64'));
  await new Promise((r) => setTimeout(r, 150));
  return op.t === 'upsert' ? op.points.map((p) => p.id) : [];
}

describe('a node as the source of a rebalance move', () => {
  it('hands out its points in id order, bounded, and keeps only those it owns once done', async () => {
    const fs = new FaultyFileSystem(1);
    const db = await seeded(fs);
    const all = await ids(db);
    const sent: string[] = [];
    for (let i = 0; i < 100; i++) {
      const b = await batch(db);
      if (b.done) break;
      expect(b.count).toBeLessThanOrEqual(40);
      for (const r of b.records) {
        const op = decodeOp(Buffer.from(r, 'base64'));
        expect(op.t).toBe('upsert');
        if (op.t === 'upsert') {
          for (const p of op.points) {
            sent.push(p.id);
            // Vectors, payloads and text travel whole.
            const i = Number(p.id.slice(1));
            expect(Array.from(p.vector)).toEqual([i, 1, 2]);
            expect(p.payload).toEqual({ g: i % 2 === 0 ? 'a' : 'b', __svc_text__: `word${i} fox` });
          }
        }
      }
      expect(await commit(db, b.token)).toEqual({ moved: b.count });
    }
    expect(sent).toEqual(all.filter(leaving));
    expect(await ids(db)).toEqual(all.filter((id) => !leaving(id)));
    expect(await batch(db)).toEqual({ done: true, move: 'm1' });
    await db.close();
  });

  it('answers moved for a write of an id already gone, and takes writes of ids it keeps or has not moved yet', async () => {
    const fs = new FaultyFileSystem(2);
    const db = await seeded(fs);
    const all = await ids(db);
    const b = await batch(db, 20);
    if (b.done) throw new Error('a batch was expected');
    await commit(db, b.token);
    const gone = all.find((id) => id <= b.cursor && leaving(id))!;
    const kept = all.find((id) => id <= b.cursor && !leaving(id))!;
    const later = all.find((id) => id > b.cursor && leaving(id))!;
    const err = await db.upsert('c', { points: [{ id: gone, vector: [0, 0, 0] }, { id: kept, vector: [0, 0, 0] }] }).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(SvcError);
    expect((err as SvcError).code).toBe('moved');
    expect((err as SvcError).detail.moved).toEqual({ move: 'm1', ids: [gone], targets: TARGETS });
    for (const write of [
      () => db.delete('c', gone),
      () => db.deletePoints('c', { ids: [gone] }),
      () => db.setPayload('c', { points: [{ id: gone, payload: { x: 1 } }] }),
    ]) await expect(write()).rejects.toMatchObject({ code: 'moved' });
    // Nothing of the refused write landed.
    expect((await db.get('c', kept, { with_vector: true })).vector).not.toEqual([0, 0, 0]);
    await db.upsert('c', { points: [{ id: kept, vector: [9, 9, 9] }, { id: later, vector: [8, 8, 8] }] });
    expect((await db.get('c', later, { with_vector: true })).vector).toEqual([8, 8, 8]);
    await db.close();
  });

  it('holds writes while a batch is out, and lets them through at its commit (redirected if the batch took them)', async () => {
    const fs = new FaultyFileSystem(3);
    const db = await seeded(fs);
    const b = await batch(db, 10);
    if (b.done) throw new Error('a batch was expected');
    const inBatch = decodeOp(Buffer.from(b.records[0], 'base64'));
    const id = inBatch.t === 'upsert' ? inBatch.points[0].id : '';
    let settled = false;
    const write = db.upsert('c', { points: [{ id, vector: [5, 5, 5] }] }).finally(() => { settled = true; });
    await new Promise((r) => setTimeout(r, 30));
    expect(settled).toBe(false);
    // Reads go on.
    expect((await db.get('c', id)).id).toBe(id);
    await commit(db, b.token);
    await expect(write).rejects.toMatchObject({ code: 'moved' });
    await db.close();
  });

  it('keeps its cursor across a crash, a checkpoint and a reopen; a batch sent again is the same points', async () => {
    const fs = new FaultyFileSystem(4);
    fs.yieldEachOp = false;
    let db = await seeded(fs, { checkpointPoints: 50 });
    const all = await ids(db);
    const first = await batch(db, 30);
    if (first.done) throw new Error('a batch was expected');
    await commit(db, first.token);
    // Asked again without a commit (a coordinator that restarted): the same points again.
    const second = await batch(db, 30);
    const again = await batch(db, 30);
    if (second.done || again.done) throw new Error('a batch was expected');
    expect(again.records).toEqual(second.records);
    expect(again.cursor).toBe(second.cursor);
    await commit(db, again.token);
    const cursor = again.cursor;
    // Enough writes for a checkpoint (and its WAL truncation) to run past the commit records.
    await db.upsert('c', { points: Array.from({ length: 60 }, (_, i) => ({ id: `z${i}`, vector: [1, 1, 1] })) });
    await new Promise((r) => setTimeout(r, 50));
    fs.crash();
    fs.restart();
    db = await openOn(fs, '/data', { checkpointPoints: 50 });
    const gone = all.find((id) => id <= cursor && leaving(id))!;
    await expect(db.upsert('c', { points: [{ id: gone, vector: [0, 0, 0] }] })).rejects.toMatchObject({ code: 'moved' });
    const next = await batch(db, 30);
    if (next.done) throw new Error('a batch was expected');
    expect(next.cursor > cursor).toBe(true);
    await db.close();
    db = await openOn(fs);
    await expect(db.upsert('c', { points: [{ id: gone, vector: [0, 0, 0] }] })).rejects.toMatchObject({ code: 'moved' });
    await db.close();
  });

  it('a lease that ends uncommitted lets writes through, and the next batch names the ids deleted meanwhile', async () => {
    const fs = new FaultyFileSystem(5);
    const db = await seeded(fs);
    const b = await db.move('batch', { move: 'm1', self: SELF, targets: TARGETS, limit: 5, lease_ms: 100 }) as MoveBatchAnswer;
    if (b.done) throw new Error('a batch was expected');
    const op = decodeOp(Buffer.from(b.records[0], 'base64'));
    const id = op.t === 'upsert' ? op.points[0].id : '';
    await db.delete('c', id);
    await expect(commit(db, b.token)).rejects.toMatchObject({ code: 'not_found' });
    const next = await batch(db, 5);
    if (next.done) throw new Error('a batch was expected');
    expect(next.deletes).toEqual([id]);
    await db.close();
  });

  it('a batch after a lease that ended may stop short of its ids: those after its cursor are still named once deleted', async () => {
    // The coordinator that saw the lease end may have restarted since: the source's list is all there is.
    const fs = new FaultyFileSystem(9);
    const db = await seeded(fs);
    const sent = await leaseEnded(db);
    // Written once the lease ended: a new id among the batch's, which the next batch carries too.
    const wedged = Array.from({ length: 100 }, (_, i) => `${sent[0]}-${i}`).find(leaving)!;
    await db.upsert('c', { points: [{ id: wedged, vector: [1, 1, 1] }] });
    const next = await batch(db, 5);
    if (next.done) throw new Error('a batch was expected');
    const last = sent[sent.length - 1];
    expect(next.cursor < last).toBe(true);
    await commit(db, next.token);
    // Deleted on the source after that commit; its copy from the first batch may be on its new owner.
    await db.delete('c', last);
    const after = await batch(db, 5);
    if (after.done) throw new Error('a batch was expected');
    expect(after.deletes).toEqual([last]);
    await commit(db, after.token);
    const later = await batch(db, 5);
    if (later.done) throw new Error('a batch was expected');
    expect(later.deletes).toEqual([]);
    await db.close();
  });

  it('ids of an ended lease deleted at the end of the collection are named once, and the move finishes', async () => {
    const fs = new FaultyFileSystem(10);
    const db = await seeded(fs);
    const sent = await leaseEnded(db);
    await db.upsert('c', { points: [{ id: Array.from({ length: 100 }, (_, i) => `${sent[0]}-${i}`).find(leaving)!, vector: [1, 1, 1] }] });
    const next = await batch(db, 5);
    if (next.done) throw new Error('a batch was expected');
    await commit(db, next.token);
    // The batch's last id and everything after it go: nothing is left after the cursor but that name.
    const last = sent[sent.length - 1];
    await db.deletePoints('c', { ids: (await ids(db)).filter((id) => id >= last) });
    const end = await batch(db, 5);
    if (end.done) throw new Error('a batch was expected');
    expect([end.count, end.deletes]).toEqual([0, [last]]);
    await commit(db, end.token);
    expect(await batch(db, 5)).toEqual({ done: true, move: 'm1' });
    await db.close();
  });

  it('the ids of a batch handed out survive a crash: after a restart of the node and of the coordinator, the next batch names those deleted since', async () => {
    // Seeded: where the crash falls (before or after a checkpoint took the move into the manifest) and
    // which of the batch's ids are deleted after it.
    for (let seed = 1; seed <= 6; seed++) {
      const fs = new FaultyFileSystem(200 + seed);
      fs.yieldEachOp = false;
      let r = seed * 7919;
      const pick = (n: number) => (r = (r * 48271) % 2147483647) % n;
      let db = await seeded(fs, { checkpointPoints: 50 });
      const first = await batch(db, 10);
      if (first.done) throw new Error('a batch was expected');
      await commit(db, first.token);
      const b = await db.move('batch', { move: 'm1', self: SELF, targets: TARGETS, limit: 10, lease_ms: 60_000 }) as MoveBatchAnswer;
      if (b.done) throw new Error('a batch was expected');
      const op = decodeOp(Buffer.from(b.records[0], 'base64'));
      const sent = op.t === 'upsert' ? op.points.map((p) => p.id) : [];
      if (pick(2) === 1) {
        // Writes after the batch's ids (the gate held them: the lease ends first) and a checkpoint.
        db.endMoveLease();
        await db.upsert('c', { points: Array.from({ length: 60 }, (_, i) => ({ id: `z${i}`, vector: [1, 1, 1] })) });
        await new Promise((res) => setTimeout(res, 50));
      }
      fs.crash();
      fs.restart();
      db = await openOn(fs, '/data', { checkpointPoints: 50 });
      const deleted = sent.filter(() => pick(3) === 0);
      if (deleted.length === 0) deleted.push(sent[pick(sent.length)]);
      await db.deletePoints('c', { ids: deleted });
      const next = await batch(db, 10);
      if (next.done) throw new Error('a batch was expected');
      expect(next.deletes.sort(), `seed ${seed}`).toEqual([...deleted].sort());
      await commit(db, next.token);
      await db.close();
      // A commit's cursor passed them: a reopened node names none of them again.
      db = await openOn(fs);
      const after = await batch(db, 10);
      if (after.done) throw new Error('a batch was expected');
      expect(after.deletes.filter((id) => id <= next.cursor)).toEqual([]);
      await db.close();
    }
  });

  it('writes a batch on its new owner whole, the collection created from the source\'s parameters', async () => {
    const fs = new FaultyFileSystem(6);
    const src = await seeded(fs);
    const dst = await openOn(fs, '/dst');
    const b = await batch(src, 50);
    if (b.done) throw new Error('a batch was expected');
    expect(await dst.move('apply', { collection: b.collection, params: b.params, records: b.records, deletes: [] })).toEqual({ applied: b.count, deleted: 0 });
    const op = decodeOp(Buffer.from(b.records[0], 'base64'));
    const p = op.t === 'upsert' ? op.points[0] : null;
    expect(await dst.get('c', p!.id, { with_vector: true })).toEqual({ id: p!.id, vector: Array.from(p!.vector), payload: p!.payload });
    expect((await dst.count('c', { filter: { eq: { field: 'g', value: 'a' } } })).count).toBeGreaterThan(0);
    await expect(dst.move('apply', { collection: 'c', params: b.params, records: [Buffer.from(encodeOp({ t: 'delete', ids: ['x'] })).toString('base64')] }))
      .rejects.toMatchObject({ code: 'invalid_argument' });
    await src.close();
    await dst.close();
  });

  it('encodes its records: a move state and a delete that carries its cursor round-trip; a plain delete stays plain', () => {
    const state = { t: 'move_state' as const, move: 'm-1', self: 3, targets: [0, 1, 3, 7], finished: true };
    expect(decodeOp(encodeOp(state))).toEqual(state);
    const mark = { t: 'delete' as const, ids: ['a', 'b'], move: { move: 'm-1', cursor: 'b' } };
    expect(decodeOp(encodeOp(mark))).toEqual(mark);
    expect(decodeOp(encodeOp({ t: 'delete', ids: ['a'] }))).toEqual({ t: 'delete', ids: ['a'] });
  });

  it('replicates a commit to read replicas as the delete of the batch, and its move state not at all', async () => {
    const fs = new FaultyFileSystem(8);
    const db = await seeded(fs);
    const before = (await db.stats()).replication!.commit_seq!;
    const b = await batch(db, 10);
    if (b.done) throw new Error('a batch was expected');
    const sent = b.records.flatMap((r) => { const op = decodeOp(Buffer.from(r, 'base64')); return op.t === 'upsert' ? op.points.map((p) => p.id) : []; });
    await commit(db, b.token);
    const ac = new AbortController();
    const timer = setTimeout(() => ac.abort(), 5000);
    const ops: { t: string; ids?: string[] }[] = [];
    for await (const e of db.replicate({ after_seq: before, history: db.history }, ac.signal)) {
      const r = decodeRecord(e.record);
      if (r.op !== null) ops.push(r.op as { t: string; ids?: string[] });
      if (r.op?.t === 'delete') ac.abort();
    }
    clearTimeout(timer);
    // The collection is announced first (a stream does that before a collection's first write it sends).
    expect(ops.map((o) => o.t)).toEqual(['create_collection', 'delete']);
    expect(ops[1].ids).toEqual(sent);
    await db.close();
  });

  it('refuses a malformed step', async () => {
    const fs = new FaultyFileSystem(7);
    const db = await openOn(fs);
    await expect(db.move('batch', { move: 'bad id!', self: 0, targets: [0] })).rejects.toMatchObject({ code: 'invalid_argument' });
    await expect(db.move('batch', { move: 'm', self: 0, targets: [] })).rejects.toMatchObject({ code: 'invalid_argument' });
    await expect(db.move('other', {})).rejects.toMatchObject({ code: 'invalid_argument' });
    await db.close();
  });

  it('a clean close once the move ended leaves no move record in any retained WAL file (a build before move_out, or before moves, can open it)', async () => {
    const fs = new FaultyFileSystem(31);
    const db = await seeded(fs);
    // A second collection written before the move and not since (its one point stays here): its
    // checkpoint is older than every record of the move.
    const stays = Array.from({ length: 50 }, (_, i) => `x${i}`).find((id) => !leaving(id))!;
    await db.createCollection({ name: 'idle', dim: 2, metric: 'l2' });
    await db.upsert('idle', { points: [{ id: stays, vector: [1, 1] }] });
    const all = await ids(db);
    for (let i = 0; i < 100; i++) {
      const b = await batch(db);
      if (b.done) break;
      await commit(db, b.token);
    }
    await db.close();

    const m = await loadManifest(fs, '/data/manifest', new XChaChaSealer(deriveKey(KEY, 'manifest')));
    const d = await DataDir.open(fs, '/data', { masterKey: KEY, log: () => undefined });
    const dbKinds: string[] = [];
    const kinds: string[] = [];
    let first = 0;
    let last = 0;
    try {
      first = d.log.firstRetainedSeq;
      last = d.log.lastSeq;
      // What every build's open decodes (finishInterrupted): each 'db' record from the first retained seq,
      // whatever the replay range. One kind it does not know refuses its open.
      for await (const r of d.log.readFrom(first, { want: (keyId) => keyId === 'db' })) dbKinds.push((decodeOp(r.body!) as Op | DbOp).t);
      // And nothing at all is left: a move's commit (a delete carrying its cursor) is gone with the rest.
      for await (const r of d.log.readFrom(first)) {
        const op = decodeOp(r.body!) as Op | DbOp;
        kinds.push(op.t === 'delete' && op.move !== undefined ? 'move_commit' : op.t);
      }
    } finally {
      await d.close();
    }
    expect(dbKinds.filter((k) => k === 'move_out' || k === 'move_state')).toEqual([]);
    expect(kinds).toEqual([]);
    // The WAL is one file holding no record, starting at the seq after the last one written.
    expect(first).toBe(last + 1);
    expect(fs.listFiles().filter((f) => f.startsWith('/data/wal/'))).toEqual([`/data/wal/${String(first).padStart(20, '0')}.wal`]);
    expect(m.collections.map((c) => c.checkpoint_seq)).toEqual([last, last]);
    // The move's state is whole in the manifest: reopened, the data and the moved answers are as they were.
    expect(m.move).toMatchObject({ move: 'm1', finished: true });
    const again = await openOn(fs);
    expect(await ids(again)).toEqual(all.filter((id) => !leaving(id)));
    await expect(again.get('c', all.find(leaving)!)).rejects.toMatchObject({ code: 'moved' });
    expect((await again.fetch('idle', { limit: 10 })).points.map((p) => p.id)).toEqual([stays]);
    expect(await batch(again)).toEqual({ done: true, move: 'm1' });
    await again.close();
  });
});
