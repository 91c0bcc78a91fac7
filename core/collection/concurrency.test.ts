import { describe, expect, it } from 'vitest';
import { SvcError } from '../base/errors.js';
import { Hnsw } from '../index/hnsw/hnsw.js';
import { FaultyFileSystem } from '../testing/faulty-fs.js';
import type { IndexBuilder } from './collection.js';
import { Database, type DatabaseOptions } from './database.js';
import { buildIndexInline } from './rebuild.js';

/* Operations of the embedded API started without waiting for each other: what a user sees. */

const KEY = new Uint8Array(32).fill(5);

function openOn(fs: FaultyFileSystem, extra: Partial<DatabaseOptions> = {}): Promise<Database> {
  return Database.open({ dataDir: '/data', masterKey: KEY, fs, buildIndex: buildIndexInline, ...extra });
}

async function codeOf(p: Promise<unknown>): Promise<unknown> {
  try {
    return await p;
  } catch (e) {
    return e instanceof SvcError ? e.code : `not an SvcError: ${String(e)}`;
  }
}

/** A builder the test releases by hand, so that a rebuild is in flight while other things happen. */
function gatedBuilder(): { build: IndexBuilder; started: () => number; release: () => void } {
  let started = 0;
  let open: () => void = () => undefined;
  let gate = new Promise<void>((r) => (open = r));
  return {
    build: async (store, slots, opts) => {
      started++;
      await gate;
      return Hnsw.build(store, slots, opts);
    },
    started: () => started,
    release: () => {
      open();
      gate = new Promise<void>((r) => (open = r));
    },
  };
}

async function ticks(n: number): Promise<void> {
  for (let i = 0; i < n; i++) await new Promise<void>((r) => setImmediate(r));
}

describe('concurrent operations', () => {
  it('writes in flight to one collection apply in call order, before and after a reopen', async () => {
    const fs = new FaultyFileSystem(11);
    let db = await openOn(fs, { checkpointPoints: 3, segmentsMax: 2 });
    await db.createCollection({ name: 'c', dim: 2, metric: 'l2', index: 'hnsw' });
    const writes: Promise<unknown>[] = [];
    for (let i = 0; i < 40; i++) {
      const id = `p${i % 5}`;
      writes.push(i % 7 === 6
        ? db.bulkUpsert('c', { points: [{ id, vector: [i, -i], payload: { i } }, { id: `b${i}`, vector: [0, i] }] })
        : db.upsert('c', { points: [{ id, vector: [i, i], payload: { i } }] }));
    }
    await Promise.all(writes);
    const expected = async (d: Database): Promise<void> => {
      for (let j = 0; j < 5; j++) {
        const last = [...Array(40).keys()].filter((i) => i % 5 === j).pop()!;
        const p = await d.get('c', `p${j}`, { with_vector: true });
        expect(p).toEqual({ id: `p${j}`, payload: { i: last }, vector: last % 7 === 6 ? [last, -last] : [last, last] });
      }
      expect((await d.collectionInfo('c')).count).toBe(5 + 5);
    };
    await expected(db);
    await db.close();
    db = await openOn(fs, { checkpointPoints: 3, segmentsMax: 2 });
    await expected(db);
    await db.close();
  });

  it('a write in flight when its collection is dropped never shows up in a new collection of the same name', async () => {
    const fs = new FaultyFileSystem(12);
    let db = await openOn(fs);
    await db.createCollection({ name: 'c', dim: 2, metric: 'dot', index: 'flat' });
    const write = codeOf(db.upsert('c', { points: [{ id: 'ghost', vector: [1, 1] }] }));
    const drop = db.deleteCollection('c');
    expect(await codeOf(db.upsert('c', { points: [{ id: 'late', vector: [1, 1] }] }))).toBe('not_found');
    expect(await drop).toEqual({ existed: true });
    // It wrote nothing (its record came to the WAL after the drop took the collection): not acknowledged.
    expect(await write).toBe('not_found');
    await db.createCollection({ name: 'c', dim: 2, metric: 'dot', index: 'flat' });
    expect(await codeOf(db.get('c', 'ghost'))).toBe('not_found');
    await db.close();
    db = await openOn(fs);
    expect((await db.collectionInfo('c')).count).toBe(0);
    expect(await codeOf(db.get('c', 'ghost'))).toBe('not_found');
    await db.close();
  });

  it('a create right after a drop of the same name (not awaited) succeeds: the name is already gone', async () => {
    const fs = new FaultyFileSystem(13);
    const db = await openOn(fs);
    await db.createCollection({ name: 'c', dim: 2, metric: 'l2', index: 'flat' });
    await db.upsert('c', { points: [{ id: 'a', vector: [1, 2] }] });
    const drop = db.deleteCollection('c');
    const create = codeOf(db.createCollection({ name: 'c', dim: 3, metric: 'l2', index: 'flat' }));
    // The drop took the name at once (the list no longer shows it), so the create must not say it exists.
    expect(await drop).toEqual({ existed: true });
    expect(((await create) as { dim?: number }).dim).toBe(3);
    expect((await db.collectionInfo('c')).count).toBe(0);
    await db.close();
  });

  it('checkpoints racing writes to several collections lose nothing across a power loss', async () => {
    const fs = new FaultyFileSystem(14);
    let db = await openOn(fs, { checkpointPoints: 2, segmentsMax: 2 });
    for (const n of ['a', 'b']) await db.createCollection({ name: n, dim: 2, metric: 'l2', index: 'flat' });
    const writes: Promise<unknown>[] = [];
    for (let i = 0; i < 60; i++) {
      const n = i % 3 === 0 ? 'a' : 'b';
      writes.push(i % 5 === 4 ? db.delete(n, `p${(i - 4) % 7}`) : db.upsert(n, { points: [{ id: `p${i % 7}`, vector: [i, 1], payload: { i } }] }));
      if (i % 10 === 0) await ticks(3); // let checkpoints start between the bursts
    }
    await Promise.all(writes);
    const want = new Map<string, Map<string, unknown>>();
    for (const n of ['a', 'b']) {
      const all = await db.fetch(n, { limit: 100, with_vector: true });
      want.set(n, new Map(all.points.map((p) => [p.id, p])));
    }
    // Power loss while the last checkpoints may still run: only what was acknowledged is promised.
    fs.crashAfter(0, { writes: 'random', namespace: 'random' });
    await fs.stat('/').catch(() => undefined);
    await ticks(50);
    fs.restart();
    db = await openOn(fs, { checkpointPoints: 2, segmentsMax: 2 });
    for (const n of ['a', 'b']) {
      const all = await db.fetch(n, { limit: 100, with_vector: true });
      expect(new Map(all.points.map((p) => [p.id, p]))).toEqual(want.get(n));
    }
    await db.close();
  });

  it('close() with writes in flight: each write either fails or survives the reopen', async () => {
    const fs = new FaultyFileSystem(15);
    let db = await openOn(fs, { checkpointPoints: 2 });
    await db.createCollection({ name: 'c', dim: 2, metric: 'l2', index: 'hnsw' });
    const writes = Array.from({ length: 10 }, (_, i) => codeOf(db.upsert('c', { points: [{ id: `p${i}`, vector: [i, 0] }] })));
    const closing = db.close();
    const outcomes = await Promise.all(writes);
    await closing;
    expect(await codeOf(db.upsert('c', { points: [{ id: 'after', vector: [0, 0] }] }))).toBe('not_ready');
    db = await openOn(fs);
    for (const [i, o] of outcomes.entries()) {
      if (typeof o === 'object') expect((await db.get('c', `p${i}`)).id).toBe(`p${i}`);
      else expect(o).toBe('not_ready');
    }
    await db.close();
  });

  it('a rebuild racing a drop and a re-create leaves the new collection alone', async () => {
    const fs = new FaultyFileSystem(16);
    fs.yieldEachOp = false;
    const gate = gatedBuilder();
    const db = await openOn(fs, { buildIndex: gate.build });
    await db.createCollection({ name: 'c', dim: 2, metric: 'l2', index: 'hnsw' });
    await db.upsert('c', { points: [{ id: 'first', vector: [9, 9] }] });
    await db.search('c', { vector: [0, 0], k: 1, consistency: 'strong' }); // a graph exists: a bulk load makes it stale
    await db.bulkUpsert('c', { points: Array.from({ length: 50 }, (_, i) => ({ id: `p${i}`, vector: [i, i % 3] })) });
    await db.search('c', { vector: [0, 0], k: 1 }); // a read starts the rebuild of the bulk load
    expect(gate.started()).toBe(1);
    expect(await db.deleteCollection('c')).toEqual({ existed: true });
    await db.createCollection({ name: 'c', dim: 2, metric: 'l2', index: 'hnsw' });
    await db.upsert('c', { points: [{ id: 'new', vector: [5, 5] }] });
    gate.release();
    await ticks(5);
    gate.release();
    await ticks(5);
    const r = await db.search('c', { vector: [0, 0], k: 10, consistency: 'strong' });
    expect(r.hits.map((h) => h.id)).toEqual(['new']);
    expect((await db.collectionInfo('c')).count).toBe(1);
    gate.release();
    await db.close();
  });

  it('writes during a rebuild: after the swap no deleted or replaced point is found and every new one is', async () => {
    const fs = new FaultyFileSystem(17);
    fs.yieldEachOp = false;
    const gate = gatedBuilder();
    const db = await openOn(fs, { buildIndex: gate.build });
    await db.createCollection({ name: 'c', dim: 2, metric: 'l2', index: 'hnsw', index_params: { ef_search: 2 } });
    await db.upsert('c', { points: [{ id: 'first', vector: [900, 9] }] });
    await db.search('c', { vector: [0, 0], k: 1, consistency: 'strong' });
    await db.bulkUpsert('c', { points: Array.from({ length: 40 }, (_, i) => ({ id: `p${i}`, vector: [i, 0] })) });
    await db.search('c', { vector: [0, 0], k: 1 });
    expect(gate.started()).toBe(1);
    await db.delete('c', 'p0');
    await db.upsert('c', { points: [{ id: 'p1', vector: [100, 0] }, { id: 'n', vector: [0.5, 0] }] });
    for (let round = 0; round < 4; round++) {
      gate.release();
      await ticks(5);
      const hits = (await db.search('c', { vector: [0, 0], k: 3, ef_search: 1 })).hits.map((h) => [h.id, h.score]);
      expect(hits).toEqual([['n', 0.5], ['p2', 2], ['p3', 3]]);
    }
    const far = (await db.search('c', { vector: [100, 0], k: 1, ef_search: 1 })).hits.map((h) => [h.id, h.score]);
    expect(far).toEqual([['p1', 0]]);
    gate.release();
    await db.close();
  });
});

describe('an eventual read right after a bulk load', () => {
  /** A collection with a graph, then a bulk load of 30 points: more than the 20 it absorbs in place. */
  async function loaded(waitForBulkBuild?: boolean) {
    const fs = new FaultyFileSystem(18);
    fs.yieldEachOp = false;
    const gate = gatedBuilder();
    const db = await openOn(fs, { buildIndex: gate.build, absorbMax: 20, ...(waitForBulkBuild === undefined ? {} : { waitForBulkBuild }) });
    await db.createCollection({ name: 'c', dim: 2, metric: 'l2', index: 'hnsw' });
    await db.upsert('c', { points: [{ id: 'first', vector: [9, 9] }] });
    await db.search('c', { vector: [0, 0], k: 1, consistency: 'strong' });
    await db.bulkUpsert('c', { points: Array.from({ length: 30 }, (_, i) => ({ id: `p${i}`, vector: [i + 1, 0] })) });
    return { db, gate };
  }

  it('waits for the graph that holds the load in the embedded API (the default)', async () => {
    const { db, gate } = await loaded();
    let answered = false;
    const search = db.search('c', { vector: [0, 0], k: 2 }).then((r) => { answered = true; return r; });
    await ticks(10);
    expect(gate.started()).toBe(1);
    expect(answered).toBe(false);
    expect((await db.collectionInfo('c')).index_state).toBe('stale');
    gate.release();
    expect((await search).hits.map((h) => h.id)).toEqual(['p0', 'p1']);
    expect((await db.collectionInfo('c')).index_state).toBe('current');
    await db.close();
  });

  it('is answered at once, from the prior graph and an exact scan of the load, when the opener says not to wait (the server roles)', async () => {
    const { db, gate } = await loaded(false);
    const r = await db.search('c', { vector: [0, 0], k: 2 });
    expect(r.hits.map((h) => h.id)).toEqual(['p0', 'p1']);
    expect(gate.started()).toBe(1);
    expect((await db.collectionInfo('c')).index_state).toBe('stale');
    gate.release();
    await db.close();
  });

  it('does not wait when only a delete made the graph stale: it is searched with the point filtered out', async () => {
    const { db, gate } = await loaded();
    const built = db.search('c', { vector: [0, 0], k: 1, consistency: 'strong' });
    await ticks(5);
    gate.release();
    await built;
    expect((await db.collectionInfo('c')).index_state).toBe('current');
    await db.delete('c', 'p0');
    const r = await db.search('c', { vector: [0, 0], k: 2 });
    expect(r.hits.map((h) => h.id)).toEqual(['p1', 'p2']);
    expect((await db.collectionInfo('c')).index_state).toBe('stale');
    gate.release();
    await db.close();
  });
});
