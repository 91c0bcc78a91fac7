import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { systemClock } from '../base/clock.js';
import { resolveLimits } from '../base/limits.js';
import { Prng } from '../base/prng.js';
import type { SearchResult } from '../index/flat.js';
import { ScalarCodes } from '../index/scalar-codes.js';
import { ENGINE_LANES, VectorStore } from '../index/vector-store.js';
import { compileFilter } from '../query/filter.js';
import { Collection, type IndexBuilder } from './collection.js';
import { Database } from './database.js';
import { NodeEngine } from '../engine/node.js';
import { parseCollectionParams } from './params.js';
import { buildIndexInline, buildIndexInWorker } from './rebuild.js';
import { SearchPool } from './search-pool.js';

const DIM = 16;
const limits = resolveLimits({});

function clustered(prng: Prng, n: number, clusters = 20): Float32Array[] {
  const centers = Array.from({ length: clusters }, () => Array.from({ length: DIM }, () => prng.gaussian() * 4));
  return Array.from({ length: n }, () => Float32Array.from(centers[prng.int(clusters)], (x) => x + prng.gaussian()));
}

function makeCollection(uid: string, buildIndex: IndexBuilder, absorbMax?: number, quantization: 'none' | 'scalar' = 'none'): Collection {
  const spec = parseCollectionParams({ name: uid, dim: DIM, metric: 'l2', quantization, filterable: [{ path: 'r', field_type: 'numeric' }] }, limits);
  return new Collection({ uid, spec, limits, clock: systemClock, seed: 7, buildIndex, absorbMax });
}

let seq = 0;
function upsert(col: Collection, from: number, vectors: Float32Array[]): void {
  col.apply({ t: 'upsert', points: vectors.map((vector, i) => ({ id: `p${from + i}`, vector, payload: { r: (from + i) % 1000 } })) }, ++seq);
}

function filterBelow(col: Collection, r: number) {
  return compileFilter({ lt: { field: 'r', value: r } }, col.spec.filterable);
}

async function viaPool(pool: SearchPool, col: Collection, q: Float32Array, k: number, ef: number, r?: number): Promise<SearchResult> {
  return pool.search(col, q, () => col.planDense(k, ef, r === undefined ? undefined : filterBelow(col, r)));
}

const asPlain = (r: SearchResult) => ({ slots: Array.from(r.slots), dists: Array.from(r.dists) });

/** Lanes left on a shared memory: opens views until it refuses, then releases them. */
function freeLanesOf(open: () => { close(): void }): number {
  const views: { close(): void }[] = [];
  try {
    for (;;) views.push(open());
  } catch {
    // every lane taken
  }
  for (const v of views) v.close();
  return views.length;
}

const freeLanes = (store: VectorStore): number => freeLanesOf(() => VectorStore.open(store.handle(), { kernel: 'js' }));
/** Lanes left on scalar codes (each worker view holds one). */
const freeCodeLanes = (codes: ScalarCodes): number => freeLanesOf(() => ScalarCodes.open(codes.handle(), { kernel: 'js' }));

describe('SearchPool', () => {
  let pool: SearchPool;
  beforeAll(() => {
    pool = new SearchPool({ workers: 2 });
  });
  afterAll(async () => {
    await pool.close();
  });

  it('gives the in-thread hits and scores, unfiltered and filtered at 0.1% to 50%, and after deletes', async () => {
    const prng = new Prng(11);
    const col = makeCollection('same', buildIndexInline);
    upsert(col, 0, clustered(prng, 3000));
    await col.rebuild();
    const queries = clustered(prng, 25);
    for (const q of queries) {
      expect(asPlain(await viaPool(pool, col, q, 10, 32))).toEqual(asPlain(col.searchDense(q, 10, 32)));
      for (const r of [1, 10, 100, 500]) {
        const f = filterBelow(col, r);
        const here = col.searchDense(q, 10, 32, f);
        const there = await viaPool(pool, col, q, 10, 32, r);
        expect(asPlain(there)).toEqual(asPlain(here));
        expect(there.slots.length).toBe(Math.min(10, col.matching(f).count));
      }
    }
    // Deletes and replacements leave the graph stale: the plan's accept set keeps tombstones out.
    const ids = Array.from({ length: 300 }, (_, i) => `p${i * 7}`);
    col.apply({ t: 'delete', ids }, ++seq);
    upsert(col, 1, clustered(prng, 40));
    expect(col.indexState).toBe('stale');
    for (const q of queries) {
      const here = col.searchDense(q, 10, 64);
      const there = await viaPool(pool, col, q, 10, 64);
      expect(asPlain(there)).toEqual(asPlain(here));
      for (const s of there.slots) expect(col.isLive(s)).toBe(true);
      expect(asPlain(await viaPool(pool, col, q, 10, 64, 100))).toEqual(asPlain(col.searchDense(q, 10, 64, filterBelow(col, 100))));
    }
    expect(pool.counters.dispatched).toBeGreaterThan(0);
    col.drop();
    pool.forget('same');
  });

  it('with scalar quantization, workers traverse the same codes and follow a rebuild to the new ones', async () => {
    const prng = new Prng(14);
    const col = makeCollection('sq8', buildIndexInWorker, undefined, 'scalar');
    upsert(col, 0, clustered(prng, 3000));
    await col.rebuild();
    const first = col.searchGraph!.scalarCodes;
    expect(first).not.toBeNull();
    const queries = clustered(prng, 20);
    const same = async () => {
      for (const q of queries) {
        expect(asPlain(await viaPool(pool, col, q, 10, 32))).toEqual(asPlain(col.searchDense(q, 10, 32)));
        expect(asPlain(await viaPool(pool, col, q, 10, 32, 50))).toEqual(asPlain(col.searchDense(q, 10, 32, filterBelow(col, 50))));
      }
    };
    await same();
    // Points far outside the learned ranges, then a rebuild: the ranges are learned again.
    upsert(col, 3000, clustered(prng, 500).map((v) => v.map((x) => x * 4)));
    col.apply({ t: 'delete', ids: ['p1', 'p2'] }, ++seq);
    await col.rebuild();
    const second = col.searchGraph!.scalarCodes;
    expect(second).not.toBeNull();
    expect(second).not.toBe(first);
    await same();
    // Each worker holds a view (one scratch lane) of the codes in use and has released the old ones.
    expect(freeCodeLanes(second!)).toBe(ENGINE_LANES - 1 - 2);
    expect(freeCodeLanes(first!)).toBe(ENGINE_LANES - 1);
    col.drop();
    pool.forget('sq8');
    // Two searches at once reach both workers (the least loaded is picked), after the forget.
    const other = makeCollection('other', buildIndexInline);
    upsert(other, 0, clustered(prng, 50));
    await Promise.all([viaPool(pool, other, queries[0], 1, 8), viaPool(pool, other, queries[1], 1, 8)]);
    expect(freeCodeLanes(second!)).toBe(ENGINE_LANES - 1);
    other.drop();
    pool.forget('other');
  });

  it('answers from the prior graph during a rebuild and from the new one after the swap', async () => {
    const prng = new Prng(12);
    const col = makeCollection('rebuild', buildIndexInWorker);
    upsert(col, 0, clustered(prng, 2500));
    await col.rebuild();
    const queries = clustered(prng, 10);
    upsert(col, 2500, clustered(prng, 500));
    col.apply({ t: 'delete', ids: ['p1', 'p2', 'p3'] }, ++seq);
    const rebuilding = col.rebuild();
    const during = await Promise.all(queries.map((q) => viaPool(pool, col, q, 10, 32)));
    const expectDuring = queries.map((q) => col.searchDense(q, 10, 32));
    await rebuilding;
    // While the rebuild ran (if it had not finished), answers came from the old graph plus the exact tail.
    for (let i = 0; i < queries.length; i++) {
      expect(during[i].slots.length).toBe(10);
      for (const s of during[i].slots) expect(col.isLive(s)).toBe(true);
      if (col.rebuilds === 1) expect(asPlain(during[i])).toEqual(asPlain(expectDuring[i]));
    }
    expect(col.indexState).toBe('current');
    for (const q of queries) expect(asPlain(await viaPool(pool, col, q, 10, 32))).toEqual(asPlain(col.searchDense(q, 10, 32)));
    col.drop();
    pool.forget('rebuild');
  });

  it('during concurrent inserts into the shared graph, returns only accepted slots with exact distances', async () => {
    const prng = new Prng(13);
    const col = makeCollection('concurrent', buildIndexInline, 100_000);
    upsert(col, 0, clustered(prng, 2000));
    await col.rebuild();
    const queries = clustered(prng, 40);
    let next = 2000;
    let total = 0;
    let overlap = 0;
    for (let round = 0; round < 6; round++) {
      // Main-thread absorb slices insert into the graph the workers are reading.
      upsert(col, next, clustered(prng, 400));
      next += 400;
      col.apply({ t: 'delete', ids: [`p${round * 13}`, `p${next - 5}`] }, ++seq);
      const plans = queries.map((q) => {
        const plan = col.planDense(10, 32)!;
        return { q, plan, accepted: new Set(plan.bits), here: col.searchDense(q, 10, 32) };
      });
      const results = await Promise.all(plans.map(({ q, plan }) => pool.search(col, q, () => plan)));
      for (let i = 0; i < plans.length; i++) {
        const { q, plan, accepted, here } = plans[i];
        const r = results[i];
        expect(r.slots.length).toBe(plan.want);
        expect(new Set(r.slots).size).toBe(r.slots.length);
        for (let j = 0; j < r.slots.length; j++) {
          const s = r.slots[j];
          expect(accepted.has(s)).toBe(true);
          expect(s).toBeLessThan(plan.count);
          const v = col.store.view(s);
          let d = 0;
          for (let x = 0; x < DIM; x++) d += (q[x] - v[x]) ** 2;
          expect(r.dists[j]).toBeCloseTo(d, 2);
          if (j > 0) expect(r.dists[j]).toBeGreaterThanOrEqual(r.dists[j - 1]);
        }
        const hereSet = new Set(here.slots);
        total += here.slots.length;
        for (const s of r.slots) if (hereSet.has(s)) overlap++;
      }
    }
    // A stale or partial neighbour list may cost a little recall, never a wrong hit.
    expect(overlap / total).toBeGreaterThan(0.9);
    await col.settle();
    for (const q of queries) expect(asPlain(await viaPool(pool, col, q, 10, 32))).toEqual(asPlain(col.searchDense(q, 10, 32)));
    col.drop();
    pool.forget('concurrent');
  });

  it('leaks no scratch lane across many rebuilds, releases them on forget and at close, then refuses searches', async () => {
    const prng = new Prng(14);
    const col = makeCollection('lanes', buildIndexInline);
    upsert(col, 0, clustered(prng, 2100));
    const q = clustered(prng, 1)[0];
    const lanesBefore = freeLanes(col.store);
    for (let i = 0; i < 17; i++) {
      upsert(col, i * 5, clustered(prng, 5));
      await col.rebuild();
      expect(asPlain(await viaPool(pool, col, q, 10, 32))).toEqual(asPlain(col.searchDense(q, 10, 32)));
    }
    // Each of the 2 workers holds one view of this collection's store.
    expect(freeLanes(col.store)).toBe(lanesBefore - 2);
    pool.forget('lanes');
    const other = makeCollectionWith(prng);
    await Promise.all([viaPool(pool, other, q, 10, 32), viaPool(pool, other, q, 10, 32)]); // a round trip through both workers
    other.drop();
    pool.forget(other.uid);
    expect(freeLanes(col.store)).toBe(lanesBefore);

    // Shutdown: the workers released their lanes and are gone; later searches are refused, not run here.
    const tiny = new SearchPool({ workers: 1 });
    expect(asPlain(await viaPool(tiny, col, q, 10, 32))).toEqual(asPlain(col.searchDense(q, 10, 32)));
    await tiny.close();
    expect(freeLanes(col.store)).toBe(lanesBefore);
    expect(tiny.size).toBe(0);
    await expect(viaPool(tiny, col, q, 10, 32)).rejects.toMatchObject({ code: 'not_ready' });
    col.drop();
  });
});

function makeCollectionWith(prng: Prng): Collection {
  const col = makeCollection(`other-${prng.int(1e9)}`, buildIndexInline);
  upsert(col, 0, clustered(prng, 50));
  return col;
}

describe('Database with search workers', () => {
  const dirs: string[] = [];
  afterAll(() => {
    for (const d of dirs) rmSync(d, { recursive: true, force: true });
  });
  const KEY = new Uint8Array(32).fill(3);

  it('answers searches like the in-thread database, and close stops the workers', async () => {
    const open = (searchWorkers: number) => {
      const d = mkdtempSync(join(tmpdir(), 'svc-pool-'));
      dirs.push(d);
      return Database.open({ dataDir: join(d, 'data'), masterKey: KEY, buildIndex: buildIndexInline, searchWorkers, searchPoolMinPoints: 100, searchPoolIdleMs: Infinity });
    };
    const [plain, pooled] = await Promise.all([open(0), open(2)]);
    const prng = new Prng(21);
    const vectors = clustered(prng, 2500);
    const points = vectors.map((v, i) => ({ id: `p${i}`, vector: Array.from(v), payload: { r: i % 1000, __svc_text__: `word${i % 7} common` } }));
    for (const db of [plain, pooled]) {
      await db.createCollection({ name: 'c', dim: DIM, metric: 'l2', filterable: [{ path: 'r', field_type: 'numeric' }] });
      await db.bulkUpsert('c', { points });
      await db.whenIndexed();
      await db.delete('c', 'p5');
    }
    for (const q of clustered(prng, 15)) {
      for (const filter of [undefined, { lt: { field: 'r', value: 2 } }, { lt: { field: 'r', value: 100 } }, { gte: { field: 'r', value: 500 } }]) {
        const body = { vector: Array.from(q), k: 10, filter, consistency: 'eventual' as const };
        expect(await pooled.search('c', body)).toEqual(await plain.search('c', body));
      }
    }
    expect(plain.searchPoolStats()).toBeNull();
    expect(pooled.searchPoolStats()!.dispatched).toBeGreaterThanOrEqual(60);
    // Hybrid queries send their dense ranking to the pool too, and fuse the same answer.
    const before = pooled.searchPoolStats()!.dispatched;
    for (const q of clustered(prng, 5)) {
      for (const filter of [undefined, { lt: { field: 'r', value: 100 } }]) {
        const body = { vector: Array.from(q), query_text: 'word3', k: 10, filter, consistency: 'eventual' as const };
        expect(await new NodeEngine(pooled).hybridSearch('c', body)).toEqual(await new NodeEngine(plain).hybridSearch('c', body));
      }
    }
    expect(pooled.searchPoolStats()!.dispatched - before).toBe(10);
    await Promise.all([plain.close(), pooled.close()]);
    expect(pooled.searchPoolStats()!.workers).toBe(0);
  });
});
