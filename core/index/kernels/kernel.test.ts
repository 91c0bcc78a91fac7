import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { execFileSync } from 'node:child_process';
import { VectorStore } from '../vector-store.js';
import { fallbackKernel, wasmKernel, wasmSupported } from './kernel.js';

// Float sums in a different order differ by rounding relative to the size of the terms, not of the
// result (an inner product can cancel to near zero), so the tolerance scales with |q|^2 + |v|^2.
const close = (a: number, b: number, scale: number): boolean => Math.abs(a - b) <= 1e-5 * (1 + scale);
const sq = (v: ArrayLike<number>): number => Array.from(v).reduce((s, x) => s + x * x, 0);

describe('distance kernels', () => {
  it('the WASM SIMD kernel is available and is what a store uses by default', () => {
    expect(wasmSupported()).toBe(true);
    const store = VectorStore.create({ dim: 3 });
    expect(store.kernel.isWasm).toBe(true);
    expect(VectorStore.create({ dim: 3, kernel: 'js' }).kernel.isWasm).toBe(false);
  });

  it('WASM and TypeScript kernels agree on single, batched and range distances', () => {
    fc.assert(
      fc.property(
        fc.integer({ min: 1, max: 70 }),
        fc.integer({ min: 1, max: 40 }),
        fc.array(fc.float({ min: -100, max: 100, noNaN: true }), { minLength: 70 * 41, maxLength: 70 * 41 }),
        (dim, n, pool) => {
          const store = VectorStore.create({ dim, initialSlots: 4 });
          for (let s = 0; s < n; s++) store.add(pool.slice(s * dim, (s + 1) * dim));
          const qv = pool.slice(n * dim, n * dim + dim);
          const q = store.loadQuery(qv);
          const scale = (s: number): number => sq(qv) + sq(store.view(s));
          const w = wasmKernel(store.memory);
          const j = fallbackKernel(store.memory);
          const { ids, out, idsI32, outF32 } = store.lane;
          for (let s = 0; s < n; s++) idsI32[s] = n - 1 - s;
          for (const kind of ['l2', 'ip'] as const) {
            for (let s = 0; s < n; s++) {
              const a = w.fns(kind).dist(q, store.offsetOf(s), store.paddedDim);
              const b = j.fns(kind).dist(q, store.offsetOf(s), store.paddedDim);
              if (!close(a, b, scale(s))) return false;
            }
            w.fns(kind).batch(q, store.vectorsBase, store.strideBytes, ids, n, out, store.paddedDim);
            const wb = Array.from(outF32.subarray(0, n));
            j.fns(kind).batch(q, store.vectorsBase, store.strideBytes, ids, n, out, store.paddedDim);
            const jb = Array.from(outF32.subarray(0, n));
            if (!wb.every((x, i) => close(x, jb[i], scale(n - 1 - i)))) return false;
            w.fns(kind).range(q, store.vectorsBase, store.strideBytes, 0, n, out, store.paddedDim);
            const wr = Array.from(outF32.subarray(0, n));
            if (!wr.every((x, i) => close(x, jb[n - 1 - i], scale(i)))) return false;
          }
          return true;
        },
      ),
      { seed: 42, numRuns: 60 },
    );
  });

  it('the WASM batched kernels give bit for bit what the single-distance kernels give', () => {
    // The batch functions inline the distance loop; a search mixes both (entry point, then batches).
    fc.assert(
      fc.property(
        fc.constantFrom(1, 4, 15, 16, 17, 100, 128, 784),
        fc.integer({ min: 1, max: 20 }),
        fc.integer({ min: 0, max: 1_000_000 }),
        (dim, n, seed) => {
          const store = VectorStore.create({ dim, initialSlots: n });
          let x = seed;
          const next = (): number => ((x = (x * 1103515245 + 12345) >>> 0) / 2 ** 32) * 2 - 1;
          for (let s = 0; s < n; s++) store.add(Array.from({ length: dim }, next));
          const q = store.loadQuery(Array.from({ length: dim }, next));
          const w = wasmKernel(store.memory);
          const { ids, out, idsI32, outF32 } = store.lane;
          for (let s = 0; s < n; s++) idsI32[s] = (s * 7) % n;
          for (const kind of ['l2', 'ip'] as const) {
            w.fns(kind).batch(q, store.vectorsBase, store.strideBytes, ids, n, out, store.paddedDim);
            for (let s = 0; s < n; s++) {
              if (!Object.is(outF32[s], w.fns(kind).dist(q, store.offsetOf(idsI32[s]), store.paddedDim))) return false;
            }
          }
          return true;
        },
      ),
      { seed: 7, numRuns: 80 },
    );
  });

  it('the "below" batches keep exactly the distances under the bound, packed in order, in both kernels', () => {
    fc.assert(
      fc.property(
        fc.constantFrom(3, 16, 100, 784),
        fc.integer({ min: 0, max: 24 }),
        fc.integer({ min: 0, max: 1_000_000 }),
        fc.double({ min: -1, max: 1, noNaN: true }),
        (dim, n, seed, quantile) => {
          const store = VectorStore.create({ dim, initialSlots: Math.max(1, n) });
          let x = seed;
          const next = (): number => ((x = (x * 1103515245 + 12345) >>> 0) / 2 ** 32) * 2 - 1;
          for (let s = 0; s < n; s++) store.add(Array.from({ length: dim }, next));
          const q = store.loadQuery(Array.from({ length: dim }, next));
          const { ids, out, idsI32, outF32 } = store.lane;
          for (const k of [wasmKernel(store.memory), fallbackKernel(store.memory)]) {
            for (const kind of ['l2', 'ip'] as const) {
              const order = Array.from({ length: n }, (_, i) => (i * 5) % Math.max(1, n));
              idsI32.set(order);
              k.fns(kind).batch(q, store.vectorsBase, store.strideBytes, ids, n, out, store.paddedDim);
              const all = order.map((id, i) => [id, outF32[i]] as const);
              const sorted = all.map(([, d]) => d).sort((a, b) => a - b);
              const bound = n === 0 ? quantile : sorted[Math.floor(((quantile + 1) / 2) * (n - 1))];
              const want = all.filter(([, d]) => d < bound);
              idsI32.set(order);
              const got = k.fns(kind).below(q, store.vectorsBase, store.strideBytes, ids, n, out, store.paddedDim, bound);
              if (got !== want.length) return false;
              for (let i = 0; i < got; i++) if (idsI32[i] !== want[i][0] || !Object.is(outF32[i], want[i][1])) return false;
              idsI32.set(order);
              if (k.fns(kind).below(q, store.vectorsBase, store.strideBytes, ids, n, out, store.paddedDim, Infinity) !== n) return false;
            }
          }
          return true;
        },
      ),
      { seed: 11, numRuns: 60 },
    );
  });

  it('computes squared L2 and negative inner product exactly on small integers', () => {
    const store = VectorStore.create({ dim: 5 });
    const a = store.add([1, 2, 3, 4, 5]);
    const b = store.add([0, 2, 0, 4, 7]);
    for (const k of [wasmKernel(store.memory), fallbackKernel(store.memory)]) {
      expect(k.fns('l2').dist(store.offsetOf(a), store.offsetOf(b), store.paddedDim)).toBe(1 + 9 + 4);
      expect(k.fns('ip').dist(store.offsetOf(a), store.offsetOf(b), store.paddedDim)).toBe(-(4 + 16 + 35));
    }
  });

  it('the generated module matches its .wat source', () => {
    expect(() => execFileSync('node', ['scripts/build-wasm.mjs', '--check'], { stdio: 'pipe' })).not.toThrow();
  });
});
