// The router (issue 16), as real processes on this machine: the same data loaded into one node and into
// 1, 2 and 4 shards behind a router; the same closed-loop search client against each. Reports the
// router's throughput and p99 as ratios of the single node's, per shard count.
// Then a rebalance: 2 shards, a coordinator and a router; a third shard registers and its points move
// to it while the same search client runs: points/s and MB/s moved, and the p99 of searches during the
// move against the p99 before it.
// Run: npm run bench:router [-- --quick] [--n 20000] [--secs 10] [--clients 8]
// On one machine every shard, the router and the client share the cores: the scatter-gather figures
// are CPU-bound here, not network-bound; they say what the router costs, not what more machines give.
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { randomVectors } from './lib/data.js';
import { BENCH_API_KEY, startSvc, type SvcServer } from './lib/server-proc.js';
import { closedLoop } from './lib/stats.js';

const quick = process.argv.includes('--quick');
const arg = (name: string, fallback: number): number => {
  const i = process.argv.indexOf(`--${name}`);
  return i < 0 ? fallback : Number(process.argv[i + 1]);
};
const n = arg('n', quick ? 3_000 : 20_000);
const secs = arg('secs', quick ? 2 : 10);
const clients = arg('clients', 8);
const DIM = 128;
const QUERIES = 200;
const SHARD_COUNTS = quick ? [1, 2] : [1, 2, 4];

const base = randomVectors(n, DIM, 11);
const queries = randomVectors(QUERIES, DIM, 12);
const row = (m: Float32Array, i: number) => Array.from(m.subarray(i * DIM, (i + 1) * DIM));

async function load(entry: SvcServer, nodes: SvcServer[] = [entry]): Promise<void> {
  await entry.call('POST', '/v1/collections', { name: 'bench', dim: DIM, metric: 'l2' });
  for (let i = 0; i < n; i += 500) {
    const points = Array.from({ length: Math.min(500, n - i) }, (_, j) => ({ id: `p${i + j}`, vector: row(base, i + j) }));
    await entry.call('POST', '/v1/collections/bench/points:bulk', { points });
  }
  // Every graph built before the clock starts: asked of each node itself (a strong read waits for the
  // build, which can take longer than a router's per-call deadline).
  for (const node of nodes) await node.call('POST', '/v1/collections/bench/query', { vector: row(queries, 0), k: 10, consistency: 'strong' });
}

async function measure(entry: SvcServer) {
  return closedLoop(clients, secs, (c, i) => entry.call('POST', '/v1/collections/bench/query', {
    vector: row(queries, (c * 7919 + i) % QUERIES), k: 10, with_payload: false,
  }));
}

const single = await startSvc();
let reference;
try {
  await load(single);
  reference = await measure(single);
} finally {
  await single.stop();
}

const routed: Record<string, unknown>[] = [];
for (const count of SHARD_COUNTS) {
  const shards = await Promise.all(Array.from({ length: count }, () => startSvc()));
  let router: SvcServer | null = null;
  try {
    router = await startSvc({ SVC_CLUSTER_SHARDS: `[${shards.map((s) => s.rest).join(',')}]`, SVC_CLUSTER_SHARD_KEY: BENCH_API_KEY });
    await load(router, shards);
    const r = await measure(router);
    routed.push({
      shards: count, ...r,
      qps_ratio: Number((r.qps / reference.qps).toFixed(3)),
      p99_ratio: Number((r.p99_ms / reference.p99_ms).toFixed(3)),
    });
  } finally {
    await router?.stop();
    await Promise.all(shards.map((s) => s.stop()));
  }
}

const rebalance = await measureRebalance();
const out = { bench: 'router', n, dim: DIM, k: 10, clients, secs, single_node: reference, through_router: routed, rebalance };
console.log(JSON.stringify(out, null, 2));
const name = quick ? 'router-quick' : 'router';
writeFileSync(join(import.meta.dirname, 'results', `${name}.json`), `${JSON.stringify(out, null, 2)}\n`);
writeFileSync(join(import.meta.dirname, 'results', `${name}.svg`), bars(reference.qps, routed as { shards: number; qps: number }[]));

/** Queries per second: the single node, then the router over each shard count. */
function bars(single: number, through: { shards: number; qps: number }[]): string {
  const items = [{ label: 'single node', qps: single }, ...through.map((t) => ({ label: `router, ${t.shards} shard${t.shards > 1 ? 's' : ''}`, qps: t.qps }))];
  const [w, rowH, m] = [560, 28, 150];
  const max = Math.max(1, ...items.map((x) => x.qps));
  const rows = items.map((x, i) => {
    const y = 30 + i * rowH;
    const len = ((w - m - 60) * x.qps) / max;
    return `<text x="${m - 8}" y="${y + 14}" text-anchor="end">${x.label}</text>`
      + `<rect x="${m}" y="${y}" width="${len.toFixed(1)}" height="${rowH - 8}" fill="#3366cc"/>`
      + `<text x="${(m + len + 4).toFixed(1)}" y="${y + 14}">${x.qps}</text>`;
  }).join('');
  return `<svg xmlns="http://www.w3.org/2000/svg" width="${w}" height="${40 + items.length * rowH}" font-family="sans-serif" font-size="11">`
    + `<text x="8" y="18">search QPS, k=10, ${n} points of ${DIM} floats, ${clients} clients (one machine)</text>${rows}</svg>\n`;
}

/**
 * A scale-out from 2 to 3 shards under the search load: the move's speed (points and bytes the
 * coordinator counted moved, over the time from its first to its last batch, read off its metrics) and
 * the p99 of searches while it runs, beside the p99 of the same load just before.
 */
async function measureRebalance(): Promise<Record<string, unknown>> {
  const shards = await Promise.all([startSvc(), startSvc()]);
  const coordinator = await startSvc({
    SVC_COORDINATOR: 'true', SVC_CLUSTER_SHARDS: `[${shards.map((s) => s.rest).join(',')}]`, SVC_CLUSTER_SHARD_KEY: BENCH_API_KEY,
    SVC_CLUSTER_MAP_REFRESH_SECS: '0.2', SVC_AUTOSCALE_INTERVAL_SECS: '0.5',
  });
  let router: SvcServer | null = null;
  let joining: SvcServer | null = null;
  try {
    router = await startSvc({ SVC_COORDINATOR_URL: coordinator.rest, SVC_CLUSTER_SHARD_KEY: BENCH_API_KEY, SVC_CLUSTER_MAP_REFRESH_SECS: '0.2' });
    await load(router, shards);
    const before = await measure(router);
    joining = await startSvc();
    const metric = async (name: string): Promise<number> => {
      const text = await (await fetch(`${coordinator.rest}/metrics`)).text();
      return Number(new RegExp(`^${name} (\\S+)$`, 'm').exec(text)?.[1] ?? 0);
    };
    await coordinator.call('POST', '/cluster/shards', { url: joining.rest });
    const entry = router;
    let first = 0;
    let last = 0;
    let done = false;
    const watch = (async () => {
      while (!done) {
        const moved = await metric('svc_rebalance_moved_points_total');
        if (moved > 0 && first === 0) first = performance.now();
        const map = await coordinator.call<{ shards: { state: string }[] }>('GET', '/cluster/map');
        if (map.shards.every((s) => s.state === 'active')) {
          last = performance.now();
          done = true;
        }
        await new Promise((r) => setTimeout(r, 50));
      }
    })();
    const during: Awaited<ReturnType<typeof measure>>[] = [];
    while (!done) during.push(await closedLoop(clients, 1, (c, i) => entry.call('POST', '/v1/collections/bench/query', { vector: row(queries, (c * 7919 + i) % QUERIES), k: 10, with_payload: false })));
    await watch;
    const points = await metric('svc_rebalance_moved_points_total');
    const bytes = await metric('svc_rebalance_moved_bytes_total');
    const seconds = Math.max(0.001, (last - first) / 1000);
    const p99 = Math.max(...during.map((d) => d.p99_ms));
    return {
      from_shards: 2, to_shards: 3, moved_points: points, moved_mb: Number((bytes / 1e6).toFixed(2)), seconds: Number(seconds.toFixed(2)),
      points_per_s: Math.round(points / seconds), mb_per_s: Number((bytes / 1e6 / seconds).toFixed(2)),
      search_p99_ms_before: before.p99_ms, search_p99_ms_during: p99, p99_ratio: Number((p99 / before.p99_ms).toFixed(3)),
      search_errors_during: during.reduce((n2, d) => n2 + d.errors, 0),
    };
  } finally {
    await router?.stop();
    await coordinator.stop();
    await Promise.all([...shards, ...(joining === null ? [] : [joining])].map((s) => s.stop()));
  }
}
