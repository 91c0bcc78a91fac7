import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { Hnsw } from './hnsw/hnsw.js';
import { fallbackKernel } from './kernels/kernel.js';
import { ScalarCodes } from './scalar-codes.js';
import { clusteredVectors, recallAtK } from './testing-data.js';
import { ENGINE_LANES, LANES_PER_MEMORY, VectorStore } from './vector-store.js';

const range = (n: number): Int32Array => Int32Array.from({ length: n }, (_, i) => i);

function storeOf(vs: ArrayLike<number>[], dim: number): VectorStore {
  const store = VectorStore.create({ dim, initialSlots: vs.length });
  for (const v of vs) store.add(v);
  return store;
}

/** Every kernel distance of `q` against slots 0..n-1 of `codes`. */
function kernelDists(codes: ScalarCodes, q: ArrayLike<number>, n: number, kernel = codes.kernel): number[] {
  const sp = codes.space;
  const qo = codes.loadQuery(q);
  const out: number[] = [];
  // A lane holds BATCH_MAX ids: score in chunks.
  for (let from = 0; from < n; from += 1024) {
    const cnt = Math.min(1024, n - from);
    for (let i = 0; i < cnt; i++) sp.idsI32[i] = from + i;
    expect(kernel.sq8(qo, sp.base, sp.stride, sp.ids, cnt, sp.out, sp.n, Infinity)).toBe(cnt);
    out.push(...sp.outF32.subarray(0, cnt));
  }
  return out;
}

const vec = (dim: number) => fc.array(fc.float({ min: -50, max: 50, noNaN: true }), { minLength: dim, maxLength: dim });

describe('ScalarCodes', () => {
  it('decodes every trained value to within half a step of its dimension, and saturates outside the range', () => {
    fc.assert(
      fc.property(fc.integer({ min: 1, max: 40 }).chain((dim) => fc.tuple(fc.constant(dim), fc.array(vec(dim), { minLength: 1, maxLength: 30 }), vec(dim))), ([dim, vs, outside]) => {
        const store = storeOf(vs, dim);
        const codes = ScalarCodes.train(store, range(vs.length), 'l2');
        codes.encodeRange(store, 0, vs.length);
        for (let d = 0; d < dim; d++) {
          const col = vs.map((v) => Math.fround(v[d]));
          const lo = Math.min(...col);
          const hi = Math.max(...col);
          const step = (hi - lo) / 255;
          for (let i = 0; i < vs.length; i++) {
            const x = codes.decode(i)[d];
            if (Math.abs(x - col[i]) > step / 2 + 1e-4 * (1 + Math.abs(col[i]))) return false;
          }
        }
        // A vector beyond the learned ranges decodes to the nearest end of each range.
        const slot = store.add(outside.map((x, d) => x * 3 + (d % 2 === 0 ? 200 : -200)));
        codes.encode(slot, store.view(slot));
        const back = codes.decode(slot);
        for (let d = 0; d < dim; d++) {
          const col = vs.map((v) => Math.fround(v[d]));
          const end = d % 2 === 0 ? Math.max(...col) : Math.min(...col);
          if (Math.abs(back[d] - end) > 1e-3 * (1 + Math.abs(end))) return false;
        }
        return true;
      }),
      { seed: 7, numRuns: 60 },
    );
  });

  it('the kernel orders slots as the exact distance to their decoded vectors, on WASM and the fallback alike', () => {
    fc.assert(
      fc.property(fc.integer({ min: 1, max: 70 }).chain((dim) => fc.tuple(fc.constant(dim), fc.array(vec(dim), { minLength: 2, maxLength: 25 }), vec(dim))), ([dim, vs, q]) => {
        for (const kind of ['l2', 'ip'] as const) {
          const store = storeOf(vs, dim);
          const codes = ScalarCodes.train(store, range(vs.length), kind);
          expect(codes.kernel.isWasm).toBe(true);
          codes.encodeRange(store, 0, vs.length);
          const wasm = kernelDists(codes, q, vs.length);
          const js = kernelDists(codes, q, vs.length, fallbackKernel(codes.memory));
          // Integer sums are exact and the two float operations are the same: bit for bit.
          if (!wasm.every((x, i) => x === js[i])) return false;
          // Up to a constant per query, the kernel's value is the distance to the decoded vector.
          const exact = vs.map((_, i) => {
            const x = codes.decode(i);
            let s = 0;
            for (let d = 0; d < dim; d++) s += kind === 'l2' ? (q[d] - x[d]) ** 2 : -q[d] * x[d];
            return s;
          });
          const scale = vs.reduce((m, _, i) => Math.max(m, Math.abs(exact[i])), 0) + q.reduce((m, x) => m + x * x, 0);
          for (let i = 1; i < vs.length; i++) {
            const dk = wasm[i] - wasm[0];
            const de = exact[i] - exact[0];
            if (Math.abs(dk - de) > 2e-3 * (1 + scale)) return false;
          }
        }
        return true;
      }),
      { seed: 9, numRuns: 60 },
    );
  });

  it('a worker view opened from the handle scores the same codes, and each view holds one scratch lane', () => {
    const vs = clusteredVectors(3, 200, 24);
    const store = storeOf(vs, 24);
    const codes = ScalarCodes.train(store, range(200), 'l2');
    codes.encodeRange(store, 0, 200);
    const other = ScalarCodes.open(codes.handle());
    expect(kernelDists(other, vs[5], 200)).toEqual(kernelDists(codes, vs[5], 200));
    const views: ScalarCodes[] = [];
    expect(() => {
      for (;;) views.push(ScalarCodes.open(codes.handle()));
    }).toThrow(/scratch lanes of the scalar codes/);
    expect(views.length).toBe(ENGINE_LANES - 2);
    // A request loop's views take the other lanes, never an engine thread's.
    const loops: ScalarCodes[] = [];
    expect(() => {
      for (;;) loops.push(ScalarCodes.open(codes.handle(), { lanes: 'loop' }));
    }).toThrow(/scalar codes for request loops/);
    expect(loops.length).toBe(LANES_PER_MEMORY - ENGINE_LANES);
    for (const v of loops) v.close();
    for (const v of views) v.close();
    other.close();
    expect(() => ScalarCodes.open(codes.handle()).close()).not.toThrow();
  });

  it('gives back the lanes a thread that ended held, and only those', () => {
    const vs = clusteredVectors(3, 100, 16);
    const store = storeOf(vs, 16);
    const codes = ScalarCodes.train(store, range(100), 'l2');
    codes.encodeRange(store, 0, 100);
    const open = (thread: number) => ScalarCodes.open(codes.handle(), { lanes: 'loop', thread });
    const loopLanes = LANES_PER_MEMORY - ENGINE_LANES;
    const dead = Array.from({ length: loopLanes - 1 }, () => open(7));
    const live = open(8);
    expect(() => open(9)).toThrow(/scalar codes for request loops/);
    expect(codes.releaseLanesOf(7)).toBe(loopLanes - 1);
    const again = dead.map(() => open(9));
    expect(() => open(9)).toThrow(/in use/);
    // The live thread's view still scores with its own lane, beside the new views.
    expect(kernelDists(live, vs[5], 100)).toEqual(kernelDists(codes, vs[5], 100));
    expect(kernelDists(again[0], vs[6], 100)).toEqual(kernelDists(codes, vs[6], 100));
    expect(codes.releaseLanesOf(8)).toBe(1);
    expect(codes.releaseLanesOf(9)).toBe(loopLanes - 1);
  });

  it('grows with the slots written: codes of late slots are read correctly', () => {
    const vs = clusteredVectors(4, 5000, 64);
    const store = storeOf(vs.slice(0, 10), 64);
    const codes = ScalarCodes.train(store, range(10), 'ip');
    const before = codes.capacity;
    for (let i = 10; i < 5000; i++) store.add(vs[i]);
    codes.encodeRange(store, 0, 5000);
    expect(codes.capacity).toBeGreaterThan(before);
    expect(codes.capacity).toBeGreaterThanOrEqual(5000);
    const d = kernelDists(codes, vs[4999], 5000);
    // The slot itself (a unit vector against itself) is among the nearest by the codes.
    const rank = d.filter((x) => x < d[4999]).length;
    expect(rank).toBeLessThan(5);
  });
});

describe.each(['l2', 'ip'] as const)('Hnsw over scalar codes (%s)', (kind) => {
  const n = 5000;
  const dim = 48;
  const vs = clusteredVectors(kind === 'l2' ? 21 : 22, n + 50, dim, { unit: kind === 'ip' });
  const store = storeOf(vs.slice(0, n), dim);
  const graph = Hnsw.build(store, range(n), { m: 12, efConstruction: 100, kind, seed: 5 });
  const codes = ScalarCodes.train(store, range(n), kind);
  codes.encodeRange(store, 0, n);
  const queries = vs.slice(n);

  it('keeps the recall of the float traversal, and answers with exact distances, nearest first', () => {
    const f32 = recallAtK(store, queries, 10, kind, (q) => graph.search(q, 10, 48).slots);
    graph.attachCodes(codes);
    try {
      const sq8 = recallAtK(store, queries, 10, kind, (q) => graph.search(q, 10, 48).slots);
      expect(sq8).toBeGreaterThanOrEqual(0.95);
      expect(sq8).toBeGreaterThanOrEqual(f32 - 0.02);
      const fns = store.kernel.fns(kind);
      for (const q of queries.slice(0, 10)) {
        const r = graph.search(q, 10, 48);
        const qo = store.loadQuery(q);
        for (let i = 0; i < r.slots.length; i++) {
          expect(r.dists[i]).toBe(fns.dist(qo, store.offsetOf(r.slots[i]), store.paddedDim));
          if (i > 0) expect(r.dists[i]).toBeGreaterThanOrEqual(r.dists[i - 1]);
        }
      }
    } finally {
      graph.attachCodes(null);
    }
  });

  it('keeps a filter inside the traversal: only accepted slots, k of them', () => {
    graph.attachCodes(codes);
    try {
      const accept = (s: number): boolean => s % 7 === 0;
      const r = recallAtK(store, queries, 10, kind, (q) => {
        const got = graph.search(q, 10, 96, accept);
        expect(got.slots.length).toBe(10);
        for (const s of got.slots) expect(accept(s)).toBe(true);
        return got.slots;
      }, accept);
      expect(r).toBeGreaterThanOrEqual(0.9);
    } finally {
      graph.attachCodes(null);
    }
  });

  it('re-scores more candidates than a kernel call takes (k and ef above 1,024)', () => {
    graph.attachCodes(codes);
    try {
      const q = queries[0];
      const r = graph.search(q, 1500, 1500);
      expect(r.slots.length).toBe(1500);
      expect(new Set(r.slots).size).toBe(1500);
      const fns = store.kernel.fns(kind);
      const qo = store.loadQuery(q);
      for (let i = 0; i < r.slots.length; i++) {
        expect(r.slots[i]).toBeGreaterThanOrEqual(0);
        expect(r.slots[i]).toBeLessThan(n);
        expect(r.dists[i]).toBe(fns.dist(qo, store.offsetOf(r.slots[i]), store.paddedDim));
        if (i > 0) expect(r.dists[i]).toBeGreaterThanOrEqual(r.dists[i - 1]);
      }
    } finally {
      graph.attachCodes(null);
    }
  });

  it('refuses codes of another dimension or metric', () => {
    const other = ScalarCodes.train(store, range(100), kind === 'l2' ? 'ip' : 'l2');
    expect(() => graph.attachCodes(other)).toThrow(/do not match/);
  });
});
