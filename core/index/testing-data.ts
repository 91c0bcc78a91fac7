import { Prng } from '../base/prng.js';
import { flatSearch } from './flat.js';
import type { DistanceKind } from './kernels/kernel.js';
import { normalize, type VectorStore } from './vector-store.js';

/**
 * Seeded gaussian clusters, for index tests and benchmarks: `clusters` centres drawn N(0, 1) per
 * dimension, points scattered around them with `spread`. With `unit` every vector is normalised (the
 * cosine / inner-product case).
 */
export function clusteredVectors(
  seed: number,
  count: number,
  dim: number,
  opts: { clusters?: number; spread?: number; unit?: boolean } = {},
): Float32Array[] {
  const prng = new Prng(seed);
  const nc = opts.clusters ?? 24;
  const spread = opts.spread ?? 0.35;
  const centres = Array.from({ length: nc }, () => Float32Array.from({ length: dim }, () => prng.gaussian()));
  return Array.from({ length: count }, () => {
    const c = centres[prng.int(nc)];
    const v = Float32Array.from(c, (x) => x + spread * prng.gaussian());
    return opts.unit ? normalize(v) : v;
  });
}

/** Mean fraction of the exact top-k (flat search with the same accept) that `found` recovered. */
export function recallAtK(
  store: VectorStore,
  queries: Float32Array[],
  k: number,
  kind: DistanceKind,
  found: (q: Float32Array) => Int32Array,
  accept?: (slot: number) => boolean,
): number {
  let hit = 0;
  let total = 0;
  for (const q of queries) {
    const truth = flatSearch(store, store.kernel, q, k, kind, undefined, accept).slots;
    const got = new Set(found(q));
    for (const s of truth) if (got.has(s)) hit++;
    total += truth.length;
  }
  return total === 0 ? 1 : hit / total;
}
