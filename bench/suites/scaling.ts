/**
 * `npm run bench -- --suites scaling` (issue 20): how the embedded API scales with threads. For each
 * search-worker count W (0, 1, 2, then doubling up to the cores) a fresh process (scaling-child.ts)
 * loads MNIST through openDatabase, runs 64 concurrent searches for a while and reports QPS, p50/p99,
 * and CPU per query from /proc: the whole process and its calling thread alone (the hand-off's cost,
 * which caps the pool when it fills one core). Then build time against build workers. Rounds alternate
 * the W order, so a machine shared with other work skews every W alike; compare within one run.
 * Then the server against its request loops (scaling-server.ts: SVC_HTTP_LOOPS on Node 24, wrk).
 * Writes bench/results/scaling.json, scaling.svg (QPS and calling-thread CPU per query against W) and
 * scaling-loops.svg (server QPS and CPU per request by thread against loops).
 */
import { spawn } from 'node:child_process';
import { mkdirSync, writeFileSync } from 'node:fs';
import { availableParallelism, cpus, loadavg } from 'node:os';
import { join } from 'node:path';
import * as vega from 'vega';
import * as vl from 'vega-lite';
import { BENCH_DIR } from '../lib/on-demand.js';
import type { ChildArgs, ChildResult } from './scaling-child.js';
import { runServerLoops, type LoopsMeasured, type LoopsResult } from './scaling-server.js';

export interface ScalingResult {
  machine: { node: string; cpus: number; cpu_model: string; load_avg_at_start: number[]; load_avg_at_end?: number[] };
  config: Omit<ChildArgs, 'w' | 'bw'> & { rounds: number; workers: number[]; build_workers: number[] };
  /** One entry per (round, W). */
  search: ChildResult[];
  /** Medians over rounds, per W. */
  search_median: { w: number; qps: number; main_us_per_query: number | null; cpu_us_per_query: number | null; p99_ms: number }[];
  /** Build time per build-worker count (searchWorkers 0). */
  build: { bw: number; build_s: number }[];
  /** `svc serve` against request loops (scaling-server.ts). */
  server_loops?: LoopsResult;
  note: string;
}

const SIZES = {
  tiny: { nBase: 3000, nQ: 100, secs: 2, rounds: 1, buildBase: 3000 },
  quick: { nBase: 5000, nQ: 200, secs: 5, rounds: 2, buildBase: 20_000 },
  full: { nBase: 60_000, nQ: 1000, secs: 10, rounds: 3, buildBase: 60_000 },
} as const;

function child(args: ChildArgs): Promise<ChildResult> {
  return new Promise((resolve, reject) => {
    const c = spawn(process.execPath, ['--import', 'tsx', join(BENCH_DIR, 'suites', 'scaling-child.ts'), JSON.stringify(args)], {
      cwd: join(BENCH_DIR, '..'), stdio: ['ignore', 'pipe', 'pipe'],
    });
    let out = '';
    let err = '';
    c.stdout.on('data', (b: Buffer) => { out += b.toString(); });
    c.stderr.on('data', (b: Buffer) => { err = (err + b.toString()).slice(-4000); });
    c.on('exit', (code) => {
      const last = out.trim().split('\n').at(-1) ?? '';
      try {
        resolve(JSON.parse(last) as ChildResult);
      } catch {
        reject(new Error(`scaling child W=${args.w} exited ${code}: ${err}`));
      }
    });
  });
}

const median = (xs: number[]): number => {
  const s = [...xs].sort((a, b) => a - b);
  if (s.length === 0) return NaN;
  const mid = s.length >>> 1;
  return s.length % 2 === 1 ? s[mid] : Math.round(((s[mid - 1] + s[mid]) / 2) * 10) / 10;
};

/** Worker counts 0, 1, 2, 4, ... up to the cores (at least 0, 1 and 2). */
export function workerCounts(cores: number): number[] {
  const out = [0, 1, 2];
  for (let w = 4; w <= cores; w *= 2) out.push(w);
  return out;
}

export async function runScaling(mode: 'tiny' | 'quick' | 'full', log: (l: string) => void): Promise<ScalingResult> {
  const z = SIZES[mode];
  const cores = availableParallelism();
  const workers = workerCounts(cores);
  const buildWorkers = [...new Set([1, 2, Math.min(4, cores), cores].filter((b) => b <= Math.max(2, cores)))].sort((a, b) => a - b);
  const base = { nBase: z.nBase, nQ: z.nQ, ef: 16, inflight: 64, warmSecs: 1, secs: z.secs };
  const r: ScalingResult = {
    machine: { node: process.version, cpus: cpus().length, cpu_model: cpus()[0]?.model ?? '?', load_avg_at_start: loadavg() },
    config: { ...base, rounds: z.rounds, workers, build_workers: buildWorkers },
    search: [], search_median: [], build: [],
    note: 'CPU per query is read from /proc (utime+stime of the process and of its main thread): on a shared machine it is steadier than QPS. Compare W within one run.',
  };
  for (let round = 0; round < z.rounds; round++) {
    // Alternate the order, so a change in the machine's load over the run does not favour one W.
    for (const w of round % 2 === 0 ? workers : [...workers].reverse()) {
      log(`scaling: round ${round + 1}, W=${w}`);
      r.search.push(await child({ ...base, w }));
    }
  }
  for (const w of workers) {
    const runs = r.search.filter((s) => s.w === w);
    const m = (f: (s: ChildResult) => number | null) => {
      const xs = runs.map(f).filter((x): x is number => x !== null);
      return xs.length === 0 ? null : median(xs);
    };
    r.search_median.push({ w, qps: m((s) => s.qps)!, main_us_per_query: m((s) => s.main_us_per_query), cpu_us_per_query: m((s) => s.cpu_us_per_query), p99_ms: m((s) => s.p99_ms)! });
  }
  for (const bw of buildWorkers) {
    log(`scaling: build with ${bw} build workers`);
    const b = await child({ ...base, nBase: z.buildBase, w: 0, bw, secs: 0, warmSecs: 0 });
    r.build.push({ bw, build_s: b.build_s });
  }
  r.server_loops = await runServerLoops(mode, log);
  r.machine.load_avg_at_end = loadavg();
  return r;
}

/** Small multiples, one line per measure (`what`) against `x`, each with its own y scale. */
async function facetedLines(title: string, x: { field: string; title: string }, values: { what: string; value: number | null }[]): Promise<string> {
  const spec: vl.TopLevelSpec = {
    $schema: 'https://vega.github.io/schema/vega-lite/v6.json',
    title,
    data: { values },
    facet: { field: 'what', type: 'nominal', title: null },
    columns: 3,
    resolve: { scale: { y: 'independent' } },
    spec: {
      width: 240,
      height: 190,
      mark: { type: 'line', point: true },
      encoding: {
        x: { field: x.field, type: 'quantitative', title: x.title },
        y: { field: 'value', type: 'quantitative', title: null },
      },
    },
  };
  const view = new vega.View(vega.parse(vl.compile(spec).spec), { renderer: 'none' });
  try {
    return await view.toSVG();
  } finally {
    view.finalize();
  }
}

export function scalingSvg(r: ScalingResult): Promise<string> {
  return facetedLines(`embedded search against search workers (${r.machine.cpus} CPUs, MNIST ${r.config.nBase}, ef 16, 64 in flight)`,
    { field: 'w', title: 'search workers' }, r.search_median.flatMap((m) => [
      { w: m.w, what: 'queries/s', value: m.qps },
      { w: m.w, what: 'calling thread µs/query', value: m.main_us_per_query },
      { w: m.w, what: 'process CPU µs/query', value: m.cpu_us_per_query },
    ]));
}

export function loopsSvg(r: LoopsMeasured): Promise<string> {
  return facetedLines(`svc serve against request loops (${r.node}, ${r.cores} CPUs, MNIST ${r.n_base}, ef ${r.ef}, wrk ${r.clients} connections)`,
    { field: 'loops', title: 'SVC_HTTP_LOOPS' }, r.median.flatMap((m) => [
      { loops: m.loops, what: `queries/s, ${m.kind}`, value: m.qps },
      { loops: m.loops, what: `p99 ms, ${m.kind}`, value: m.p99_ms },
      ...(['main', 'loops', 'other'] as const).map((t) => ({ loops: m.loops, what: `CPU µs/request: ${t}, ${m.kind}`, value: m.cpu_us_per_request?.[t] ?? null })),
    ]));
}

/** Writes scaling.json, scaling.svg and (when the server part ran) scaling-loops.svg into `dir`. */
export async function writeScaling(r: ScalingResult, dir: string): Promise<void> {
  mkdirSync(dir, { recursive: true });
  writeFileSync(join(dir, 'scaling.json'), `${JSON.stringify(r, null, 2)}\n`);
  writeFileSync(join(dir, 'scaling.svg'), await scalingSvg(r));
  if (r.server_loops !== undefined && 'median' in r.server_loops) writeFileSync(join(dir, 'scaling-loops.svg'), await loopsSvg(r.server_loops));
}
