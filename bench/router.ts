// The router (issue 16), as real processes on this machine: the same data loaded into one node and into
// 1, 2 and 4 shards behind a router; the same closed-loop search client against each. Reports the
// router's throughput and p99 as ratios of the single node's, per shard count, and what each request
// cost in CPU in each process (the router, its shards, the single node, this client).
// Then a rebalance: 2 shards, a coordinator and a router; a third shard registers and its points move
// to it while the same search client runs: points/s and MB/s moved, and the p99 of searches during the
// move against the p99 before it.
// Run: npm run bench:router [-- --quick] [--n 20000] [--secs 10] [--clients 8] [--rounds 2]
//        [--shard-workers N] [--cpu-prof DIR]; --replot FILE draws FILE's SVG again
//
// On one machine every shard, the router and the client share the cores: the scatter-gather figures
// are CPU-bound here, not network-bound; they say what the router costs, not what more machines give.
// The machine may be shared too, so the single node is measured right before and after the router in
// each round (it stays up, idle, meanwhile) and each ratio is taken against those runs, not against one
// measurement made minutes earlier under another load. CPU per request (from /proc, every thread of a
// process) moves much less with neighbours than QPS does: it is the figure to trust on a busy machine;
// cpu_pressure_some_avg10 (Linux PSI) says how busy it was. shard_calls (the router's view of each call)
// beside shard_side_query_mean_ms (the shards' own view) shows time lost between them: on the wire, or
// waiting for a core.
import { readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { randomVectors } from './lib/data.js';
import { cpuPressure, cpuSample } from './lib/proc-cpu.js';
import { BENCH_API_KEY, startSvc, type SvcServer } from './lib/server-proc.js';
import { closedLoop, round } from './lib/stats.js';

const quick = process.argv.includes('--quick');
const arg = (name: string, fallback: string): string => {
  const i = process.argv.indexOf(`--${name}`);
  return i < 0 ? fallback : process.argv[i + 1];
};
const n = Number(arg('n', quick ? '3000' : '20000'));
const secs = Number(arg('secs', quick ? '2' : '5'));
const clients = Number(arg('clients', '8'));
const rounds = Number(arg('rounds', quick ? '1' : '2'));
const shardWorkers = arg('shard-workers', '');
const cpuProf = arg('cpu-prof', '');
const DIM = 128;
const QUERIES = 200;
const DATA_SEED = 11;
const QUERY_SEED = 12;
const SHARD_COUNTS = quick ? [1, 2] : [1, 2, 4];

const base = randomVectors(n, DIM, DATA_SEED);
const queries = randomVectors(QUERIES, DIM, QUERY_SEED);
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

interface Run { qps: number; p50_ms: number; p99_ms: number; requests: number; errors: number; wall_s: number; cpu_us: Record<string, number> }

/** One closed-loop run against `entry`, with the CPU each of `procs` (and this client) spent per request. */
async function measure(entry: SvcServer, procs: Record<string, SvcServer[]>): Promise<Run> {
  const before = Object.fromEntries(Object.entries(procs).map(([k, ps]) => [k, ps.map((p) => cpuSample(p.pid))]));
  const me = process.cpuUsage();
  const t0 = performance.now();
  const r = await closedLoop(clients, secs, (c, i) => entry.call('POST', '/v1/collections/bench/query', {
    vector: row(queries, (c * 7919 + i) % QUERIES), k: 10, with_payload: false,
  }));
  const wall = (performance.now() - t0) / 1000;
  const used = process.cpuUsage(me);
  const perRequest = (s: number) => Math.round((s * 1e6) / Math.max(1, r.requests));
  const cpu: Record<string, number> = { client: perRequest((used.user + used.system) / 1e6) };
  for (const [k, ps] of Object.entries(procs)) {
    let s = 0;
    let main = 0;
    ps.forEach((p, i) => {
      const a = cpuSample(p.pid);
      const b = before[k][i];
      if (a !== null && b !== null) {
        s += a.process - b.process;
        main += a.mainThread - b.mainThread;
      }
    });
    cpu[k] = perRequest(s);
    cpu[`${k}_main_thread`] = perRequest(main);
  }
  return { qps: r.qps, p50_ms: r.p50_ms, p99_ms: r.p99_ms, requests: r.requests, errors: r.errors, wall_s: round(wall), cpu_us: cpu };
}

/** Requests, QPS, the worst p50/p99 and the CPU per request of several runs, weighted by requests. */
function pool(runs: Run[]) {
  const requests = runs.reduce((s, r) => s + r.requests, 0);
  const wall = runs.reduce((s, r) => s + r.wall_s, 0);
  const cpu: Record<string, number> = {};
  for (const k of Object.keys(runs[0].cpu_us)) cpu[k] = Math.round(runs.reduce((s, r) => s + r.cpu_us[k] * r.requests, 0) / Math.max(1, requests));
  return {
    qps: Math.round(requests / wall), p50_ms: Math.max(...runs.map((r) => r.p50_ms)), p99_ms: Math.max(...runs.map((r) => r.p99_ms)),
    requests, errors: runs.reduce((s, r) => s + r.errors, 0), cpu_us_per_request: cpu,
    cpu_us_per_request_total: Object.entries(cpu).filter(([k]) => !k.endsWith('_main_thread')).reduce((s, [, v]) => s + v, 0),
  };
}

/** The router's own view of its calls: mean duration and count per shard, from its /metrics. */
async function shardCalls(router: SvcServer): Promise<Record<string, { calls: number; mean_ms: number }>> {
  const text = await (await fetch(`${router.rest}/metrics`)).text();
  const sums = new Map<string, number>();
  const counts = new Map<string, number>();
  for (const m of text.matchAll(/^svc_router_shard_call_duration_seconds_(sum|count)\{shard="(\d+)"\} (\S+)$/gm)) {
    (m[1] === 'sum' ? sums : counts).set(m[2], Number(m[3]));
  }
  return Object.fromEntries([...counts].map(([s, c]) => [s, { calls: c, mean_ms: round(((sums.get(s) ?? 0) * 1000) / Math.max(1, c)) }]));
}

/** How long the shards themselves say their query route took: mean and count over every shard, from their /metrics. */
async function shardSide(shards: SvcServer[]): Promise<{ calls: number; sum_s: number }> {
  let calls = 0;
  let sum = 0;
  for (const sh of shards) {
    const text = await (await fetch(`${sh.rest}/metrics`)).text();
    for (const m of text.matchAll(/^svc_http_request_duration_seconds_(sum|count)\{method="POST",route="\/v1\/collections\/\{name\}\/query"\} (\S+)$/gm)) {
      if (m[1] === 'sum') sum += Number(m[2]);
      else calls += Number(m[2]);
    }
  }
  return { calls, sum_s: sum };
}


// --replot FILE: only draw FILE's SVG again (beside it), from its figures.
const replot = arg('replot', '');
if (replot !== '') {
  writeFileSync(replot.replace(/\.json$/, '.svg'), bars(JSON.parse(readFileSync(replot, 'utf8'))));
  process.exit(0);
}

const workersEnv: Record<string, string> = shardWorkers === '' ? {} : { SVC_SEARCH_WORKERS: shardWorkers };
const single = await startSvc(workersEnv);
const routed: Record<string, unknown>[] = [];
const singleRuns: Run[] = [];
try {
  await load(single);
  for (const count of SHARD_COUNTS) {
    const shards = await Promise.all(Array.from({ length: count }, () => startSvc(workersEnv)));
    let router: SvcServer | null = null;
    try {
      router = await startSvc({ SVC_CLUSTER_SHARDS: `[${shards.map((s) => s.rest).join(',')}]`, SVC_CLUSTER_SHARD_KEY: BENCH_API_KEY },
        120_000, { nodeArgs: cpuProf === '' ? [] : ['--cpu-prof', `--cpu-prof-dir=${cpuProf}`, `--cpu-prof-name=router-${count}-shards.cpuprofile`] });
      await load(router, shards);
      const before = await shardCalls(router);
      const mine: Run[] = [];
      const theirs: Run[] = [];
      const pressure: number[] = [];
      let seen = { calls: 0, sum_s: 0 };
      for (let i = 0; i < rounds; i++) {
        mine.push(await measure(single, { node: [single] }));
        const s0 = await shardSide(shards);
        theirs.push(await measure(router, { router: [router], shards }));
        const s1 = await shardSide(shards);
        seen = { calls: seen.calls + s1.calls - s0.calls, sum_s: seen.sum_s + s1.sum_s - s0.sum_s };
        const p = cpuPressure();
        if (p !== null) pressure.push(p);
      }
      mine.push(await measure(single, { node: [single] }));
      singleRuns.push(...mine);
      const after = await shardCalls(router);
      const s = pool(mine);
      const r = pool(theirs);
      routed.push({
        shards: count, ...r,
        single_node_alongside: s,
        qps_ratio: round(r.qps / s.qps), p99_ratio: round(r.p99_ms / s.p99_ms),
        cpu_ratio: round(s.cpu_us_per_request_total / r.cpu_us_per_request_total),
        cpu_pressure_some_avg10: pressure,
        shard_side_query_mean_ms: round((seen.sum_s * 1000) / Math.max(1, seen.calls)),
        shard_calls: Object.fromEntries(Object.entries(after).map(([id, a]) => {
          const b = before[id] ?? { calls: 0, mean_ms: 0 };
          const calls = a.calls - b.calls;
          return [id, { calls, mean_ms: round((a.calls * a.mean_ms - b.calls * b.mean_ms) / Math.max(1, calls)) }];
        })),
      });
    } finally {
      await router?.stop();
      await Promise.all(shards.map((sh) => sh.stop()));
    }
  }
} finally {
  await single.stop();
}

const out = {
  bench: 'router', n, dim: DIM, k: 10, clients, secs, rounds, data_seed: DATA_SEED, query_seed: QUERY_SEED,
  shard_search_workers: shardWorkers === '' ? 'auto' : Number(shardWorkers),
  note: 'qps_ratio and p99_ratio: against the single node measured before and after each router run; '
    + 'cpu_ratio: the single node\'s CPU per request (server + client) over the routed one\'s (router + shards + client)',
  single_node: pool(singleRuns), through_router: routed, rebalance: await measureRebalance(),
};
console.log(JSON.stringify(out, null, 2));
const name = quick ? 'router-quick' : 'router';
writeFileSync(join(import.meta.dirname, 'results', `${name}.json`), `${JSON.stringify(out, null, 2)}\n`);
writeFileSync(join(import.meta.dirname, 'results', `${name}.svg`), bars(out as unknown as Parameters<typeof bars>[0]));

/** Per shard count, the router's QPS and CPU per request as ratios of the single node's measured alongside (1 = as fast). */
function bars(o: { n: number; clients: number; through_router: { shards: number; qps: number; qps_ratio: number; cpu_ratio: number }[] }): string {
  const [w, m, barH, gap] = [640, 150, 14, 10];
  const scale = (w - m - 150) / 1;
  const rows = o.through_router.map((t, i) => {
    const y = 44 + i * (2 * barH + gap);
    const bar = (dy: number, v: number, fill: string, what: string) => `<rect x="${m}" y="${y + dy}" width="${(scale * Math.min(1, v)).toFixed(1)}" height="${barH - 2}" fill="${fill}"/>`
      + `<text x="${(m + scale * Math.min(1, v) + 4).toFixed(1)}" y="${y + dy + 10}">${what} x${v}</text>`;
    return `<text x="${m - 8}" y="${y + barH + 4}" text-anchor="end">router, ${t.shards} shard${t.shards > 1 ? 's' : ''} (${t.qps} QPS)</text>`
      + bar(0, t.qps_ratio, '#3366cc', 'QPS') + bar(barH, t.cpu_ratio, '#dc9a28', 'CPU per request (inverse)');
  }).join('');
  const height = 60 + o.through_router.length * (2 * barH + gap);
  return `<svg xmlns="http://www.w3.org/2000/svg" width="${w}" height="${height}" font-family="sans-serif" font-size="11">`
    + `<text x="8" y="18">router / single node (1 = as fast), search k=10, ${o.n} points of ${DIM} floats, ${o.clients} clients, one 2-core machine</text>`
    + `<text x="8" y="32">each ratio against the single node measured right before and after, under the same load</text>`
    + `<line x1="${m + scale}" y1="36" x2="${m + scale}" y2="${height - 8}" stroke="#999"/>${rows}</svg>\n`;
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
    const before = await measure(router, {});
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
    const during: Awaited<ReturnType<typeof closedLoop>>[] = [];
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
