import { describe, expect, it } from 'vitest';
import { systemClock } from '../base/clock.js';
import { resolveLimits } from '../base/limits.js';
import { Prng } from '../base/prng.js';
import type { Hnsw } from '../index/hnsw/hnsw.js';
import { ABSORB_BATCH_MAX, Collection, type GraphExtender } from './collection.js';
import { parseCollectionParams } from './params.js';
import { buildIndexInline, extendGraphInline, extendGraphInWorker } from './rebuild.js';

// A read replica's graphs take new points off the main thread (Collection's extendGraph: a copy of the
// graph extended in a build worker, then swapped in), so that its event loop applies the leader's
// records first. The graph must be the one main-thread inserts make, or a replica's searches would not
// answer as its leader's do (issue 15): the same slots, in the same order, at the same levels.

const limits = resolveLimits({});
const DIM = 16;

function collection(extendGraph?: GraphExtender): Collection {
  const spec = parseCollectionParams({ name: 'c', dim: DIM, metric: 'l2' }, limits);
  // No rebuild takes over a long tail here: every point goes through absorbs, the path under test.
  return new Collection({ uid: 'u', spec, limits, clock: systemClock, seed: 7, buildIndex: buildIndexInline, absorbMax: 1_000_000, ...(extendGraph !== undefined ? { extendGraph } : {}) });
}

/** `batches` upserts of `per` points each (ids from `from`), the same vectors for the same seed. */
function upsert(col: Collection, from: number, per: number, seq: number, prng: Prng): void {
  col.apply({ t: 'upsert', points: Array.from({ length: per }, (_, i) => ({ id: `p${from + i}`, vector: Float32Array.from({ length: DIM }, () => prng.gaussian()), payload: null })) }, seq);
}

function expectSameGraph(a: Hnsw, b: Hnsw, slots: number): void {
  expect(a.size).toBe(b.size);
  expect(a.entryPoint).toBe(b.entryPoint);
  expect(a.topLevel).toBe(b.topLevel);
  for (let s = 0; s < slots; s++) {
    expect(a.levelOf(s)).toBe(b.levelOf(s));
    for (let l = 0; l <= a.levelOf(s); l++) expect([...a.neighbors(s, l)]).toEqual([...b.neighbors(s, l)]);
  }
}

/** Applies the same writes to both, yielding between them as a stream does, then settles both. */
async function feed(cols: Collection[], writes: number, per: number): Promise<void> {
  const prngs = cols.map(() => new Prng(11));
  for (let w = 0; w < writes; w++) {
    cols.forEach((c, i) => upsert(c, w * per, per, w + 1, prngs[i]));
    // Some writes land while an off-thread batch runs, some between batches.
    if (w % 3 === 0) await new Promise((r) => setImmediate(r));
  }
  await Promise.all(cols.map((c) => c.settle()));
}

describe('off-thread absorb (a read replica)', () => {
  it('makes the graph inline inserts make (inline extender)', async () => {
    const inline = collection();
    const offThread = collection(extendGraphInline);
    await feed([inline, offThread], 30, 100);
    expect(inline.indexState).toBe('current');
    expect(offThread.indexState).toBe('current');
    expect(offThread.absorbedOffThread).toBeGreaterThan(0); // the path under test ran
    expect(inline.absorbedOffThread).toBe(0);
    expect(inline.rebuilds + offThread.rebuilds).toBe(0);
    expectSameGraph(inline.searchGraph!, offThread.searchGraph!, 3000);
  });

  it('makes the same graph in a build worker, in several batches, and goes on inline for a small tail after', async () => {
    const inline = collection();
    const offThread = collection(extendGraphInWorker);
    await feed([inline, offThread], 10, ABSORB_BATCH_MAX / 4 + 7);
    expect(offThread.absorbedOffThread).toBeGreaterThan(ABSORB_BATCH_MAX);
    // A few more points: inserted on the main thread (no worker round trip), the level stream continued.
    const prngs = [new Prng(12), new Prng(12)];
    [inline, offThread].forEach((c, i) => upsert(c, 100_000, 5, 99, prngs[i]));
    await Promise.all([inline.settle(), offThread.settle()]);
    const n = 10 * (ABSORB_BATCH_MAX / 4 + 7) + 5;
    expectSameGraph(inline.searchGraph!, offThread.searchGraph!, n);
  });

  it('searches see every point while a batch is off the thread, and the graph serving them stays unchanged', async () => {
    let release: () => void = () => undefined;
    let calls = 0;
    // An extender that holds the batch until released: the main thread searches meanwhile.
    const held: GraphExtender = async (...args) => {
      calls++;
      await new Promise<void>((r) => { release = r; });
      return extendGraphInline(...args);
    };
    const col = collection(held);
    const prng = new Prng(3);
    upsert(col, 0, 10, 1, prng); // inline: the graph's first nodes
    await new Promise((r) => setTimeout(r, 20));
    upsert(col, 10, 500, 2, prng);
    for (let i = 0; i < 50 && calls === 0; i++) await new Promise((r) => setTimeout(r, 5));
    expect(calls).toBe(1);
    const graph = col.searchGraph!;
    const size = graph.size;
    expect(col.indexState).not.toBe('current');
    const v = col.store.view(300).slice();
    const hit = col.searchDense(v, 1, 16);
    expect(col.idOf(hit.slots[0])).toBe('p300'); // from the exact scan of the tail
    release();
    await col.settle();
    expect(col.indexState).toBe('current');
    expect(graph.size).toBe(size); // the copy took the inserts
    expect(col.searchGraph).not.toBe(graph);
    expect(col.searchGraph!.size).toBe(510);
  });

  it('a failed batch leaves the collection stale, and a strong read rebuilds it', async () => {
    const errors: unknown[] = [];
    const failing: GraphExtender = async () => { throw new Error('worker died'); };
    const spec = parseCollectionParams({ name: 'c', dim: DIM, metric: 'l2' }, limits);
    const col = new Collection({ uid: 'u', spec, limits, clock: systemClock, seed: 7, buildIndex: buildIndexInline, extendGraph: failing, onIndexError: (e) => errors.push(e) });
    const prng = new Prng(4);
    upsert(col, 0, 10, 1, prng);
    await new Promise((r) => setTimeout(r, 20));
    upsert(col, 10, 200, 2, prng);
    await col.settle();
    expect(errors.length).toBe(1);
    expect(col.rebuilds).toBe(1);
    expect(col.indexState).toBe('current');
    expect(col.searchGraph!.size).toBe(210);
  });
});
