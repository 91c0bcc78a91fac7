import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { Bitset } from '../base/bitset.js';
import { flatSearch } from './flat.js';
import { VectorStore } from './vector-store.js';
import { FlatIndex } from './vector-index.js';

function naive(vs: number[][], q: number[], k: number, kind: 'l2' | 'ip', keep: (s: number) => boolean) {
  const f = Math.fround;
  const d = vs.map((v, s) => {
    let acc = 0;
    for (let i = 0; i < v.length; i++) acc += kind === 'l2' ? (f(v[i]) - f(q[i])) ** 2 : -f(v[i]) * f(q[i]);
    return { s, d: acc };
  });
  return d.filter((x) => keep(x.s)).sort((a, b) => a.d - b.d || a.s - b.s).slice(0, k);
}

describe('flatSearch', () => {
  it('returns the k nearest in ascending order, like a naive sort (with candidates and accept)', () => {
    const intVec = (dim: number) => fc.array(fc.integer({ min: -8, max: 8 }), { minLength: dim, maxLength: dim });
    fc.assert(
      fc.property(
        fc.integer({ min: 1, max: 19 }).chain((dim) =>
          fc.record({
            vs: fc.array(intVec(dim), { minLength: 1, maxLength: 60 }),
            q: intVec(dim),
            k: fc.integer({ min: 0, max: 70 }),
            kind: fc.constantFrom('l2' as const, 'ip' as const),
            mode: fc.constantFrom('all', 'candidates', 'iterable', 'bitset', 'accept'),
            extra: fc.integer({ min: 0, max: 70 }),
            mod: fc.integer({ min: 1, max: 4 }),
            kernel: fc.constantFrom('wasm' as const, 'js' as const),
          }),
        ),
        ({ vs, q, k, kind, mode, mod, kernel, extra }) => {
          const store = VectorStore.create({ dim: q.length, initialSlots: 8, kernel });
          for (const v of vs) store.add(v);
          const keep = (s: number) => mode === 'all' || s % mod === 0;
          const cands = vs.map((_, s) => s).filter((s) => s % mod === 0);
          // A bitset wider than the store, with bits set past its end: those slots do not exist.
          const bits = new Bitset(vs.length + extra);
          for (const s of cands) bits.set(s);
          for (let s = vs.length; s < vs.length + extra; s++) bits.set(s);
          const res = flatSearch(
            store,
            store.kernel,
            new Float32Array(q),
            k,
            kind,
            mode === 'candidates' ? Int32Array.from(cands) : mode === 'iterable' ? new Set(cands) : mode === 'bitset' ? bits : undefined,
            mode === 'accept' ? keep : undefined,
          );
          const want = naive(vs, q, k, kind, keep);
          // Integer data: every distance is exact, so even ties must match slot for slot.
          expect(Array.from(res.slots)).toEqual(want.map((x) => x.s));
          expect(Array.from(res.dists, (x) => x + 0)).toEqual(want.map((x) => x.d + 0));
        },
      ),
      { seed: 7, numRuns: 150 },
    );
  });

  it('scans past one kernel batch', () => {
    const store = VectorStore.create({ dim: 4 });
    for (let i = 0; i < 3000; i++) store.add([i, 0, 0, 0]);
    const res = flatSearch(store, store.kernel, new Float32Array([2500.2, 0, 0, 0]), 3, 'l2');
    expect(Array.from(res.slots)).toEqual([2500, 2501, 2499]);
    // A bitset of candidates spanning several batches: every third slot, nearest of those first.
    const every3 = new Bitset(3000);
    for (let s = 0; s < 3000; s += 3) every3.set(s);
    const res3 = flatSearch(store, store.kernel, new Float32Array([2500.2, 0, 0, 0]), 3, 'l2', every3);
    expect(Array.from(res3.slots)).toEqual([2499, 2502, 2496]);
  });
});

describe('FlatIndex', () => {
  it('searches only the slots inserted into it, dense or not', () => {
    const store = VectorStore.create({ dim: 2 });
    for (let i = 0; i < 10; i++) store.add([i, 0]);
    const dense = new FlatIndex(store, 'l2');
    for (let s = 0; s < 5; s++) dense.insert(s);
    expect(Array.from(dense.search(new Float32Array([9, 0]), 2, 0).slots)).toEqual([4, 3]);
    const sparse = new FlatIndex(store, 'l2');
    for (const s of [1, 7, 8]) sparse.insert(s);
    expect(Array.from(sparse.search(new Float32Array([9, 0]), 2, 0, (s) => s !== 8).slots)).toEqual([7, 1]);
    expect(sparse.size).toBe(3);
  });
});
