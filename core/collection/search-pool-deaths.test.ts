import { describe, expect, it, vi } from 'vitest';
import type { Clock } from '../base/clock.js';
import { systemClock } from '../base/clock.js';
import { resolveLimits } from '../base/limits.js';
import { Prng } from '../base/prng.js';
import type { SearchResult } from '../index/flat.js';
import { ScalarCodes } from '../index/scalar-codes.js';
import { VectorStore } from '../index/vector-store.js';
import { Collection } from './collection.js';
import { parseCollectionParams } from './params.js';
import { buildIndexInline } from './rebuild.js';
import { RESPAWN_WINDOW_MS, RESPAWNS_PER_WORKER, SearchPool } from './search-pool.js';

// A search worker that dies (issue 20): its lanes go back and a new worker takes its place, within a
// bound. Real worker threads, killed for real: terminated from here, or crashing in their own code.

const DIM = 16;
const K = 10;
const limits = resolveLimits({});

function clustered(prng: Prng, n: number): Float32Array[] {
  const centers = Array.from({ length: 20 }, () => Array.from({ length: DIM }, () => prng.gaussian() * 4));
  return Array.from({ length: n }, () => Float32Array.from(centers[prng.int(20)], (x) => x + prng.gaussian()));
}

/** A flat collection (every plan an exact scan), or with 'scalar' an HNSW graph over scalar codes. */
function makeCollection(uid: string, vectors: Float32Array[], quantization: 'none' | 'scalar' = 'none'): Collection {
  const index = quantization === 'scalar' ? 'hnsw' : 'flat';
  const spec = parseCollectionParams({ name: uid, dim: DIM, metric: 'l2', index, quantization }, limits);
  const col = new Collection({ uid, spec, limits, clock: systemClock, seed: 7, buildIndex: buildIndexInline });
  col.apply({ t: 'upsert', points: vectors.map((vector, i) => ({ id: `p${i}`, vector })) }, 1);
  return col;
}

/** A clock the test moves: the respawn window counts in it. */
function manualClock(): Clock & { advance(ms: number): void } {
  let t = 1_000;
  return { nowMs: () => t, monotonicMs: () => t, advance: (ms) => { t += ms; } };
}

/** The exact top K over every live slot, scanned here (the oracle a pooled exact plan must match). */
function exactScan(col: Collection, q: Float32Array): { slots: number[]; dists: number[] } {
  const all: [number, number][] = [];
  for (let s = 0; s < col.store.count; s++) {
    if (!col.isLive(s)) continue;
    const v = col.store.view(s);
    let d = 0;
    for (let x = 0; x < DIM; x++) d += (q[x] - v[x]) ** 2;
    all.push([s, d]);
  }
  all.sort((a, b) => a[1] - b[1] || a[0] - b[0]);
  const top = all.slice(0, K);
  return { slots: top.map(([s]) => s), dists: top.map(([, d]) => d) };
}

function expectExact(col: Collection, q: Float32Array, r: SearchResult): void {
  const want = exactScan(col, q);
  expect(Array.from(r.slots)).toEqual(want.slots);
  for (let i = 0; i < K; i++) expect(r.dists[i]).toBeCloseTo(want.dists[i], 2);
}

const asPlain = (r: SearchResult) => ({ slots: Array.from(r.slots), dists: Array.from(r.dists) });

/** Views opened here until the memory refuses one: every free engine lane taken (by this thread). */
function takeEveryLane(open: () => { close(): void }): { close(): void }[] {
  const views: { close(): void }[] = [];
  try {
    for (;;) views.push(open());
  } catch {
    // every lane taken
  }
  return views;
}

function freeLanesOf(open: () => { close(): void }): number {
  const views = takeEveryLane(open);
  for (const v of views) v.close();
  return views.length;
}

const freeLanes = (store: VectorStore): number => freeLanesOf(() => VectorStore.open(store.handle(), { kernel: 'js' }));
const freeCodeLanes = (codes: ScalarCodes): number => freeLanesOf(() => ScalarCodes.open(codes.handle(), { kernel: 'js' }));

describe('SearchPool: a worker that dies', () => {
  it('is replaced every time, 20 times (more than a store has engine lanes), its lanes given back: searches stay on workers, exact', async () => {
    const clock = manualClock();
    const told: string[] = [];
    const pool = new SearchPool({ workers: 2, clock, log: (_level, message) => told.push(message) });
    const prng = new Prng(31);
    // A flat index: every plan is an exact scan, checked against the scan here.
    const flat = makeCollection('flat', clustered(prng, 600));
    // A graph over scalar codes: each worker holds a lane in the codes too; checked against the in-thread search.
    const sq = makeCollection('sq8', clustered(prng, 2500), 'scalar');
    await sq.rebuild();
    const codes = sq.searchGraph!.scalarCodes!;
    const queries = clustered(prng, 4);
    const lanesBefore = [freeLanes(flat.store), freeLanes(sq.store), freeCodeLanes(codes)];
    const want = queries.map((q) => asPlain(sq.searchDense(q, K, 32)));
    // Eight searches at once: both collections, on both workers.
    const searchBoth = () => [
      ...queries.map((q) => pool.search(flat, q, () => flat.planDense(K, 32))),
      ...queries.map((q) => pool.search(sq, q, () => sq.planDense(K, 32))),
    ];
    const expectRight = (rs: SearchResult[]) => {
      queries.forEach((q, i) => expectExact(flat, q, rs[i]));
      queries.forEach((_, i) => expect(asPlain(rs[queries.length + i])).toEqual(want[i]));
    };
    try {
      expectRight(await Promise.all(searchBoth()));
      const DEATHS = 20;
      for (let i = 0; i < DEATHS; i++) {
        // Searches in flight on the worker killed, and searches arriving while it is replaced: all answered.
        const inFlight = searchBoth();
        const dead = pool.workersForTests()[i % 2].terminate();
        const during = searchBoth();
        await dead;
        expectRight(await Promise.all(inFlight));
        expectRight(await Promise.all(during));
        expect(pool.size).toBe(2);
        // Answered by the workers, the replacement among them, never here.
        const { fallbacks, dispatched } = pool.counters;
        expectRight(await Promise.all(searchBoth()));
        expect(pool.counters.fallbacks).toBe(fallbacks);
        expect(pool.counters.dispatched).toBe(dispatched + 2 * queries.length);
        // A quarter of the respawn window between deaths: the bound is never reached.
        clock.advance(RESPAWN_WINDOW_MS / 4);
      }
      expect(pool.counters).toMatchObject({ deaths: DEATHS, replaced: DEATHS });
      // The two live workers hold one lane each of every memory; the dead ones' lanes all came back.
      expect([freeLanes(flat.store), freeLanes(sq.store), freeCodeLanes(codes)]).toEqual(lanesBefore.map((n) => n - 2));
      expect(told.filter((m) => m === "a search worker's scratch lanes went back").length).toBe(DEATHS);
      expect(told.filter((m) => m === 'a search worker started in place of one that ended').length).toBe(DEATHS);
      await pool.close();
      expect([freeLanes(flat.store), freeLanes(sq.store), freeCodeLanes(codes)]).toEqual(lanesBefore);
    } finally {
      await pool.close();
      flat.drop();
      sq.drop();
    }
  }, 120_000);

  it('that crashes every time it starts work stops being replaced past the bound; searches are answered here, and the pool is whole again once the window moves on', async () => {
    const clock = manualClock();
    const told: string[] = [];
    const pool = new SearchPool({ workers: 2, clock, log: (_level, message) => told.push(message) });
    const prng = new Prng(32);
    const col = makeCollection('crash', clustered(prng, 600));
    const queries = clustered(prng, 30);
    // Every engine lane of the store held here: a worker's first open of it throws, uncaught, and the
    // worker dies in its own code, every time.
    const held = takeEveryLane(() => VectorStore.open(col.store.handle(), { kernel: 'js' }));
    const bound = RESPAWNS_PER_WORKER * 2;
    try {
      let i = 0;
      for (; pool.size > 0 && i < queries.length; i++) {
        const deaths = pool.counters.deaths;
        expectExact(col, queries[i], await pool.search(col, queries[i], () => col.planDense(K, 32)));
        // Its thread ends after the search was answered here.
        await vi.waitFor(() => expect(pool.counters.deaths).toBe(deaths + 1), { timeout: 10_000 });
      }
      // The two first workers and `bound` replacements died; no more were started.
      expect(i).toBe(2 + bound);
      expect(pool.counters).toMatchObject({ deaths: 2 + bound, replaced: bound, dispatched: 2 + bound });
      // Told once, not at every search that finds the bound still met.
      expect(told.filter((m) => m === 'search workers not replaced for now: too many ended lately').length).toBe(1);
      // With no worker left, searches run on the calling thread, still exact.
      const { fallbacks } = pool.counters;
      for (const q of queries.slice(i, i + 10)) expectExact(col, q, await pool.search(col, q, () => col.planDense(K, 32)));
      expect(pool.counters.fallbacks).toBe(fallbacks + 10);
      expect(pool.counters.deaths).toBe(2 + bound);
      expect(pool.size).toBe(0);
      // The cause gone and the window moved on: the next search fills both places, and workers answer.
      for (const v of held.splice(0)) v.close();
      clock.advance(RESPAWN_WINDOW_MS);
      const { dispatched } = pool.counters;
      for (const q of queries.slice(i + 10)) expectExact(col, q, await pool.search(col, q, () => col.planDense(K, 32)));
      expect(pool.size).toBe(2);
      expect(pool.counters).toMatchObject({ replaced: bound + 2, deaths: 2 + bound, fallbacks: fallbacks + 10 });
      expect(pool.counters.dispatched).toBe(dispatched + queries.length - i - 10);
    } finally {
      for (const v of held) v.close();
      await pool.close();
      col.drop();
    }
  }, 120_000);

  it('closing while a replacement starts stops it too, and answers the search it was given', async () => {
    const pool = new SearchPool({ workers: 1 });
    const prng = new Prng(33);
    const col = makeCollection('close', clustered(prng, 600));
    const lanesBefore = freeLanes(col.store);
    const [q] = clustered(prng, 1);
    try {
      expectExact(col, q, await pool.search(col, q, () => col.planDense(K, 32)));
      await pool.workersForTests()[0].terminate();
      const fresh = pool.workersForTests();
      expect(fresh.length).toBe(1);
      // Handed to the replacement, which is still starting; then the pool closes.
      const answer = pool.search(col, q, () => col.planDense(K, 32));
      await pool.close();
      expectExact(col, q, await answer);
      expect(pool.size).toBe(0);
      // The replacement's thread has ended (an ended thread's id reads -1) and its lane came back.
      expect(fresh[0].threadId).toBe(-1);
      expect(freeLanes(col.store)).toBe(lanesBefore);
      expect(pool.counters).toMatchObject({ deaths: 1, replaced: 1, fallbacks: 0 });
    } finally {
      await pool.close();
      col.drop();
    }
  }, 60_000);
});
