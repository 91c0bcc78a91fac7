/**
 * The server half of `npm run bench -- --suites scaling` (issue 20): `svc serve` with 1, 2, 4, ... request
 * loops (SVC_HTTP_LOOPS, up to the cores) on Node.js 24 (scripts/node24.sh: several loops need a
 * runtime that shares a port), MNIST over REST, every query in turn from wrk (C, a process of its own),
 * 32 connections, plain searches and then searches each with a keyword filter matching a tenth of the
 * points (10 distinct filters, as tenants or categories repeat), then the same filtered searches while
 * this process rewrites 10 points' tags every 20 ms (500 point updates/s, a collection being ingested
 * into: the loops patch their match bits from the writes), then hybrid searches (the query's vector and two
 * words of text: dense and BM25 rankings fused, over a seeded text of eight words per point), then pages of
 * points (`points:fetch`, 20 in id order after a seeded cursor, every other one with a tag filter, payloads
 * included). Per loop count and kind: QPS, p50/p99, and the server's CPU per request split by thread: the
 * main thread (the engine, the search pool's hand-offs), the request loops together, and the rest
 * (search workers, GC helpers, libuv). Rounds alternate the order of the loop counts; compare within a
 * run. On a 2-core machine the client, the loops, the engine thread and a search worker share two
 * cores: there the CPU per request says more than QPS about what more cores give.
 */
import { execFileSync } from 'node:child_process';
import { availableParallelism } from 'node:os';
import { join } from 'node:path';
import { encodeCursor } from '../../core/collection/queries.js';
import { mnist, row } from '../lib/data.js';
import { ROOT_DIR } from '../lib/on-demand.js';
import { tool, wrk } from '../lib/native-load.js';
import { PROCESS, threadCpu } from '../lib/proc-cpu.js';
import { BENCH_API_KEY, startSvc } from '../lib/server-proc.js';

/**
 * Plain searches, or each with a keyword filter matching a tenth of the points (10 distinct filters),
 * or those while points are written (`filtered-writes`), or hybrid searches (vector and text), or pages
 * of points (`fetch`), or those while points are written (`fetch-writes`).
 */
export type LoopsKind = 'plain' | 'filtered' | 'filtered-writes' | 'hybrid' | 'fetch' | 'fetch-writes';
export const LOOPS_KINDS: readonly LoopsKind[] = ['plain', 'filtered', 'filtered-writes', 'hybrid', 'fetch', 'fetch-writes'];
/** A `fetch` page's points. */
const PAGE = 20;
/** The texts' vocabulary: word i is drawn with weight 1 / (i + 1) (a Zipf law, as words in text are). */
const VOCABULARY = 2000;
const DOC_WORDS = 8;
const QUERY_WORDS = 2;

/** Seeded words of the vocabulary, Zipf-distributed. */
function words(seed: number, n: number): string {
  let s = seed >>> 0 || 1;
  const rnd = () => ((s = (s * 1103515245 + 12345) >>> 0) / 2 ** 32);
  // Inverse of the Zipf CDF, approximately: rank = V^u - 1.
  return Array.from({ length: n }, () => `w${Math.min(VOCABULARY - 1, Math.floor(VOCABULARY ** rnd()) - 1)}`).join(' ');
}
/** The writer of `filtered-writes`: this many points' tags rewritten every WRITE_EVERY_MS. */
const WRITE_POINTS = 10;
const WRITE_EVERY_MS = 20;
/** Distinct tags: each filter matches 1 / TAGS of the points. */
const TAGS = 10;

export interface LoopsRun {
  loops: number;
  kind: LoopsKind;
  round: number;
  qps: number;
  p50_ms: number;
  p99_ms: number;
  errors: number;
  /** Server CPU per request, µs: every thread, the main thread, the request loops together, the rest. */
  cpu_us_per_request: { total: number; main: number; loops: number; other: number } | null;
}

export interface LoopsMeasured { node: string; cores: number; clients: number; n_base: number; ef: number; runs: LoopsRun[]; median: Omit<LoopsRun, 'round'>[] }

export type LoopsResult = LoopsMeasured | { skipped: string };

const SIZES = {
  tiny: { nBase: 2000, nQ: 100, secs: 2, rounds: 1 },
  quick: { nBase: 5000, nQ: 200, secs: 5, rounds: 2 },
  full: { nBase: 60_000, nQ: 1000, secs: 10, rounds: 3 },
} as const;

const CLIENTS = 32;
const EF = 16;

/** 1, 2, 4, ... up to the cores (at least 1 and 2). */
export function loopCounts(cores: number): number[] {
  const out = [1, 2];
  for (let l = 4; l <= cores; l *= 2) out.push(l);
  return out;
}

function node24(): string | null {
  try {
    return execFileSync('bash', [join(ROOT_DIR, 'scripts', 'node24.sh')], { encoding: 'utf8', stdio: ['ignore', 'pipe', 'ignore'] }).trim() || null;
  } catch {
    return null;
  }
}

const median = (xs: number[]): number => {
  const s = [...xs].sort((a, b) => a - b);
  const mid = s.length >>> 1;
  return s.length % 2 === 1 ? s[mid] : (s[mid - 1] + s[mid]) / 2;
};
const r1 = (x: number) => Math.round(x * 10) / 10;

async function one(node: string, loops: number, round: number, z: (typeof SIZES)[keyof typeof SIZES], d: ReturnType<typeof mnist>): Promise<LoopsRun[]> {
  const srv = await startSvc({ SVC_HTTP_LOOPS: String(loops) }, 120_000, { node });
  try {
    await srv.call('POST', '/v1/collections', {
      name: 'm', dim: d.dim, metric: d.metric, index_params: { ef_search: EF }, filterable: [{ path: 'tag', field_type: 'keyword' }],
    });
    for (let i = 0; i < d.n; i += 500) {
      const points = [];
      for (let j = i; j < Math.min(d.n, i + 500); j++) {
        points.push({ id: `p${j}`, vector: Array.from(row(d.base, d.dim, j)), payload: { tag: `g${j % TAGS}`, __svc_text__: words(j + 1, DOC_WORDS) } });
      }
      await srv.call('PUT', '/v1/collections/m/points', { points });
    }
    // A strong read waits for the index to hold every point: the load then measures searches, not a build.
    await srv.call('POST', '/v1/collections/m/query', { vector: Array.from(row(d.queries, d.dim, 0)), k: 10, consistency: 'strong' });
    const out: LoopsRun[] = [];
    for (const kind of LOOPS_KINDS) {
      const filtered = kind === 'filtered' || kind === 'filtered-writes';
      const paging = kind === 'fetch' || kind === 'fetch-writes';
      const bodies = paging ? pages(d.n, d.nq) : Array.from({ length: d.nq }, (_, q) => JSON.stringify({
        vector: Array.from(row(d.queries, d.dim, q)), k: 10, with_payload: false, ...(filtered ? { filter: { eq: { field: 'tag', value: `g${q % TAGS}` } } } : {}),
        ...(kind === 'hybrid' ? { query_text: words(1_000_003 + q, QUERY_WORDS) } : {}),
      }));
      const writer = kind === 'filtered-writes' || kind === 'fetch-writes' ? startWriter(srv, d) : null;
      try {
        out.push(await measure(srv, loops, kind, round, z, bodies, kind === 'hybrid' ? 'query/hybrid' : paging ? 'points:fetch' : 'query'));
      } finally {
        await writer?.stop();
      }
    }
    return out;
  } finally {
    await srv.stop();
  }
}

/** `n` bodies of `points:fetch`: PAGE points after a seeded point's id, every other one with a tag filter. */
function pages(points: number, n: number): string[] {
  return Array.from({ length: n }, (_, q) => JSON.stringify({
    limit: PAGE, cursor: encodeCursor(`p${(q * 7919) % points}`), ...(q % 2 === 1 ? { filter: { eq: { field: 'tag', value: `g${(q >>> 1) % TAGS}` } } } : {}),
  }));
}

/** Rewrites WRITE_POINTS points (same vectors, tags drawn anew, seeded) every WRITE_EVERY_MS until stopped. */
function startWriter(srv: Awaited<ReturnType<typeof startSvc>>, d: ReturnType<typeof mnist>): { stop(): Promise<void> } {
  let running = true;
  let seed = 7;
  const next = () => ((seed = (seed * 1103515245 + 12345) >>> 0) % d.n);
  const loop = (async () => {
    while (running) {
      const t = performance.now();
      const points = Array.from({ length: WRITE_POINTS }, () => {
        const j = next();
        return { id: `p${j}`, vector: Array.from(row(d.base, d.dim, j)), payload: { tag: `g${next() % TAGS}`, __svc_text__: words(j + 1, DOC_WORDS) } };
      });
      await srv.call('PUT', '/v1/collections/m/points', { points });
      await new Promise((r) => setTimeout(r, Math.max(0, WRITE_EVERY_MS - (performance.now() - t))));
    }
  })();
  return { async stop() { running = false; await loop; } };
}

/** wrk over `bodies` against a loaded server, and its CPU per request by thread. */
async function measure(
  srv: Awaited<ReturnType<typeof startSvc>>, loops: number, kind: LoopsKind, round: number, z: (typeof SIZES)[keyof typeof SIZES], bodies: string[], route: string,
): Promise<LoopsRun> {
  const before = threadCpu(srv.pid);
  const t0 = performance.now();
  const w = await wrk({
    url: `${srv.rest}/v1/collections/m/${route}`, bodies, clients: CLIENTS, seconds: z.secs,
    headers: { authorization: `Bearer ${BENCH_API_KEY}`, 'content-type': 'application/json' },
  });
  const wall = (performance.now() - t0) / 1000;
  const after = threadCpu(srv.pid);
  let cpu: LoopsRun['cpu_us_per_request'] = null;
  if (before !== null && after !== null && w.qps > 0) {
    // wrk warms up for a second before it counts: the whole wall time's CPU at the counted rate.
    const perReq = (names: (n: string) => boolean) => {
      let s = 0;
      for (const [n, v] of after) if (names(n)) s += v - (before.get(n) ?? 0);
      return r1((s / wall / w.qps) * 1e6);
    };
    const isLoop = (n: string) => n.startsWith('svc-loop');
    // Total from the process's own counters: a thread that ends in the window (a build worker done
    // with the load's graph) takes its counters with it, so a sum over threads can even go negative.
    const total = perReq((n) => n === PROCESS);
    const main = perReq((n) => n === 'MainThread');
    const loopsCpu = perReq(isLoop);
    cpu = { total, main, loops: loopsCpu, other: r1(total - main - loopsCpu) };
  }
  return { loops, kind, round, qps: w.qps, p50_ms: w.p50_ms, p99_ms: w.p99_ms, errors: w.errors, cpu_us_per_request: cpu };
}

export async function runServerLoops(mode: keyof typeof SIZES, log: (l: string) => void): Promise<LoopsResult> {
  if (tool('wrk') === null) return { skipped: 'wrk is not installed (Debian: wrk)' };
  const node = node24();
  if (node === null) return { skipped: 'Node.js 24 could not be installed from npm (scripts/node24.sh): several loops need it' };
  const version = execFileSync(node, ['--version'], { encoding: 'utf8' }).trim();
  const z = SIZES[mode];
  const cores = availableParallelism();
  const counts = loopCounts(cores);
  const d = mnist(z.nBase, z.nQ, 10);
  const runs: LoopsRun[] = [];
  for (let round = 0; round < z.rounds; round++) {
    for (const loops of round % 2 === 0 ? counts : [...counts].reverse()) {
      log(`scaling: server, round ${round + 1}, ${loops} request loop(s) on ${version}`);
      runs.push(...await one(node, loops, round, z, d));
    }
  }
  const med = LOOPS_KINDS.flatMap((kind) => counts.map((loops) => {
    const xs = runs.filter((r) => r.loops === loops && r.kind === kind);
    const cpus = xs.map((x) => x.cpu_us_per_request).filter((c): c is NonNullable<typeof c> => c !== null);
    const m = (f: (c: NonNullable<LoopsRun['cpu_us_per_request']>) => number) => r1(median(cpus.map(f)));
    return {
      loops, kind, qps: Math.round(median(xs.map((x) => x.qps))), p50_ms: median(xs.map((x) => x.p50_ms)), p99_ms: median(xs.map((x) => x.p99_ms)),
      errors: xs.reduce((s, x) => s + x.errors, 0),
      cpu_us_per_request: cpus.length === 0 ? null : { total: m((c) => c.total), main: m((c) => c.main), loops: m((c) => c.loops), other: m((c) => c.other) },
    };
  }));
  return { node: version, cores, clients: CLIENTS, n_base: z.nBase, ef: EF, runs, median: med };
}
