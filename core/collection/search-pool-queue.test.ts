import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { systemClock } from '../base/clock.js';
import { resolveLimits } from '../base/limits.js';
import { Prng } from '../base/prng.js';
import type { SearchResult } from '../index/flat.js';
import { compileFilter } from '../query/filter.js';
import { Collection } from './collection.js';
import { Database } from './database.js';
import { parseCollectionParams } from './params.js';
import { buildIndexInline } from './rebuild.js';
import { SearchPool } from './search-pool.js';

// The pool's bounded queue (issue 20): a full pool makes searches wait in order, never run them on the
// calling thread; past the second bound it answers rate_limited; close cancels the waiting ones.

const DIM = 16;
const limits = resolveLimits({});

function clustered(prng: Prng, n: number): Float32Array[] {
  const centers = Array.from({ length: 20 }, () => Array.from({ length: DIM }, () => prng.gaussian() * 4));
  return Array.from({ length: n }, () => Float32Array.from(centers[prng.int(20)], (x) => x + prng.gaussian()));
}

let seq = 0;
async function makeCollection(uid: string, prng: Prng, n: number): Promise<Collection> {
  const spec = parseCollectionParams({ name: uid, dim: DIM, metric: 'l2', filterable: [{ path: 'r', field_type: 'numeric' }] }, limits);
  const col = new Collection({ uid, spec, limits, clock: systemClock, seed: 7, buildIndex: buildIndexInline });
  col.apply({ t: 'upsert', points: clustered(prng, n).map((vector, i) => ({ id: `p${i}`, vector, payload: { r: i % 1000 } })) }, ++seq);
  await col.rebuild();
  return col;
}

const asPlain = (r: SearchResult) => ({ slots: Array.from(r.slots), dists: Array.from(r.dists) });
const filterBelow = (col: Collection, r: number | undefined) => (r === undefined ? undefined : compileFilter({ lt: { field: 'r', value: r } }, col.spec.filterable));

/** Searches `pool` with a plan that records whether it was made (the plan is made only when a worker takes it). */
function search(pool: SearchPool, col: Collection, q: Float32Array, r?: number, planned?: number[], i = 0): Promise<SearchResult> {
  return pool.search(col, q, () => {
    planned?.push(i);
    return col.planDense(10, 32, filterBelow(col, r));
  });
}

describe('SearchPool queue', () => {
  let col: Collection;
  const prng = new Prng(31);
  beforeAll(async () => {
    col = await makeCollection('queue', prng, 3000);
  });
  afterAll(() => col.drop());

  it('gives the in-thread answers whatever the workers and the queue pressure (seeded)', async () => {
    for (const [workers, inFlightPerWorker] of [[1, 1], [1, 8], [2, 1], [2, 3]]) {
      const pool = new SearchPool({ workers, inFlightPerWorker, waitingMax: 1000 });
      try {
        const seedPrng = new Prng(100 + workers * 10 + inFlightPerWorker);
        const queries = clustered(seedPrng, 60);
        const filters = queries.map(() => (seedPrng.int(3) === 0 ? undefined : 1 + seedPrng.int(600)));
        const planned: number[] = [];
        const all = await Promise.all(queries.map((q, i) => search(pool, col, q, filters[i], planned, i)));
        for (let i = 0; i < queries.length; i++) {
          expect(asPlain(all[i])).toEqual(asPlain(col.searchDense(queries[i], 10, 32, filterBelow(col, filters[i]))));
        }
        // Every search went to a worker, in arrival order; none ran here.
        expect(planned).toEqual(queries.map((_, i) => i));
        expect(pool.counters.dispatched).toBe(queries.length);
        expect(pool.counters.waited).toBe(queries.length - workers * inFlightPerWorker);
        expect(pool.counters.overflow + pool.counters.fallbacks + pool.counters.rejected).toBe(0);
      } finally {
        await pool.close();
      }
    }
  });

  it('a full pool never runs a search on the calling thread: it waits, and is planned only when a worker is free', async () => {
    const pool = new SearchPool({ workers: 1, inFlightPerWorker: 2, waitingMax: 10 });
    try {
      const q = clustered(prng, 5);
      const planned: number[] = [];
      const pending = q.map((v, i) => search(pool, col, v, undefined, planned, i));
      // Two were planned and sent at once; three wait, unplanned, in this thread's turn.
      expect(planned).toEqual([0, 1]);
      expect(pool.inFlight).toBe(2);
      expect(pool.waitingCount).toBe(3);
      const all = await Promise.all(pending);
      expect(planned).toEqual([0, 1, 2, 3, 4]);
      for (let i = 0; i < q.length; i++) expect(asPlain(all[i])).toEqual(asPlain(col.searchDense(q[i], 10, 32)));
      expect(pool.counters).toMatchObject({ dispatched: 5, waited: 3, overflow: 0, fallbacks: 0, rejected: 0 });
    } finally {
      await pool.close();
    }
  });

  it('answers rate_limited only past the second bound', async () => {
    const inFlight = 2;
    const waitingMax = 5;
    const pool = new SearchPool({ workers: 1, inFlightPerWorker: inFlight, waitingMax });
    try {
      const q = clustered(prng, 1)[0];
      const settled = await Promise.allSettled(Array.from({ length: inFlight + waitingMax + 3 }, () => search(pool, col, q)));
      const rejected = settled.filter((s) => s.status === 'rejected');
      expect(settled.slice(0, inFlight + waitingMax).every((s) => s.status === 'fulfilled')).toBe(true);
      expect(rejected).toHaveLength(3);
      for (const r of rejected) {
        expect((r as PromiseRejectedResult).reason).toMatchObject({ code: 'rate_limited', detail: { retryAfterSeconds: 1 } });
      }
      expect(pool.counters.rejected).toBe(3);
      // Once the queue has drained, searches are accepted again.
      expect(asPlain(await search(pool, col, q))).toEqual(asPlain(col.searchDense(q, 10, 32)));
    } finally {
      await pool.close();
    }
  });

  it('close() lets searches in flight finish and cancels the waiting ones with not_ready', async () => {
    const pool = new SearchPool({ workers: 1, inFlightPerWorker: 1, waitingMax: 10 });
    const q = clustered(prng, 4);
    const planned: number[] = [];
    const settled = Promise.allSettled(q.map((v, i) => search(pool, col, v, undefined, planned, i)));
    await pool.close();
    const s = await settled;
    expect(s[0]).toMatchObject({ status: 'fulfilled' });
    for (const r of s.slice(1)) {
      expect(r.status).toBe('rejected');
      expect((r as PromiseRejectedResult).reason).toMatchObject({ code: 'not_ready', message: expect.stringMatching(/closing/) });
    }
    // The cancelled ones were never planned, so nothing ran for them anywhere.
    expect(planned).toEqual([0]);
    await expect(search(pool, col, q[0])).rejects.toMatchObject({ code: 'not_ready' });
  });
});

describe('SearchPool forget', () => {
  it('refuses the dropped collection\'s waiting searches with not_found and keeps the others in order', async () => {
    const prng = new Prng(51);
    const a = await makeCollection('fa', prng, 2100);
    const b = await makeCollection('fb', prng, 2100);
    const pool = new SearchPool({ workers: 1, inFlightPerWorker: 1, waitingMax: 10 });
    try {
      const q = clustered(prng, 5);
      const planned: number[] = [];
      const cols = [a, b, a, b, a];
      const settled = Promise.allSettled(q.map((v, i) => search(pool, cols[i], v, undefined, planned, i)));
      pool.forget('fa');
      const s = await settled;
      expect(s.map((r) => r.status)).toEqual(['fulfilled', 'fulfilled', 'rejected', 'fulfilled', 'rejected']);
      expect((s[2] as PromiseRejectedResult).reason).toMatchObject({ code: 'not_found' });
      expect(planned).toEqual([0, 1, 3]);
    } finally {
      await pool.close();
      a.drop();
      b.drop();
    }
  });
});

describe('Database with search workers under load', () => {
  const dirs: string[] = [];
  afterAll(() => {
    for (const d of dirs) rmSync(d, { recursive: true, force: true });
  });

  it('gives the same hits with 0, 1 and 2 workers for 250 searches at once (within the default bounds)', async () => {
    const open = (searchWorkers: number) => {
      const d = mkdtempSync(join(tmpdir(), 'svc-poolq-'));
      dirs.push(d);
      return Database.open({ dataDir: join(d, 'data'), masterKey: new Uint8Array(32).fill(5), buildIndex: buildIndexInline, searchWorkers, searchPoolMinPoints: 100, searchPoolIdleMs: Infinity });
    };
    const dbs = await Promise.all([open(0), open(1), open(2)]);
    const p = new Prng(41);
    const points = clustered(p, 2500).map((v, i) => ({ id: `p${i}`, vector: Array.from(v), payload: { r: i % 1000 } }));
    for (const db of dbs) {
      await db.createCollection({ name: 'c', dim: DIM, metric: 'l2', filterable: [{ path: 'r', field_type: 'numeric' }] });
      await db.bulkUpsert('c', { points });
      await db.whenIndexed();
    }
    const bodies = clustered(p, 250).map((q, i) => ({
      vector: Array.from(q), k: 10, consistency: 'eventual' as const, with_payload: false,
      ...(i % 3 === 0 ? { filter: { lt: { field: 'r', value: 1 + p.int(500) } } } : {}),
    }));
    const answers = await Promise.all(dbs.map((db) => Promise.all(bodies.map((b) => db.search('c', b)))));
    expect(answers[1]).toEqual(answers[0]);
    expect(answers[2]).toEqual(answers[0]);
    for (const db of dbs.slice(1)) {
      const stats = db.searchPoolStats()!;
      expect(stats.dispatched).toBeGreaterThanOrEqual(250);
      expect(stats.waited).toBeGreaterThan(0);
      expect(stats.overflow + stats.fallbacks + stats.rejected!).toBe(0);
    }
    await Promise.all(dbs.map((db) => db.close()));
  });
});
