/**
 * One embedded scaling run in a process of its own (bench/suites/scaling.ts spawns it, so that /proc
 * charges this process's CPU, and its main thread's, to the searches alone): loads MNIST through
 * openDatabase with `searchWorkers: w` and `buildWorkers: bw`, times the graph build, then runs
 * `inflight` concurrent searches (every query in turn) for `secs` and prints one JSON line.
 * `node --import tsx bench/suites/scaling-child.ts '{"w":1,...}'`
 */
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { Session } from 'node:inspector/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { openDatabase } from '../../core/embedded.js';
import { mnist, recallAt, row } from '../lib/data.js';
import { cpuSample } from '../lib/proc-cpu.js';
import { b64 } from '../peers/svc.js';

export interface ChildArgs {
  w: number;
  /** Build workers (undefined: the engine's default). */
  bw?: number;
  nBase: number;
  nQ: number;
  ef: number;
  inflight: number;
  warmSecs: number;
  secs: number;
  /** Write a CPU profile of the calling thread over the measured phase to this file. */
  profile?: string;
}

export interface ChildResult {
  w: number;
  bw: number | null;
  n_base: number;
  build_s: number;
  recall_at_10: number;
  qps: number;
  queries: number;
  secs: number;
  errors: number;
  p50_ms: number;
  p99_ms: number;
  /** CPU of the whole process (every thread) per query, µs. */
  cpu_us_per_query: number | null;
  /** CPU of the calling (main) thread per query, µs: the hand-off, planning and answer building. */
  main_us_per_query: number | null;
  pool: Record<string, number> | null;
}

async function startProfile(): Promise<Session> {
  const s = new Session();
  s.connect();
  await s.post('Profiler.enable');
  await s.post('Profiler.start');
  return s;
}

async function stopProfile(s: Session): Promise<unknown> {
  const { profile } = await s.post('Profiler.stop');
  s.disconnect();
  return profile;
}

const r1 = (x: number) => Math.round(x * 10) / 10;

async function main(a: ChildArgs): Promise<ChildResult> {
  const d = mnist(a.nBase, a.nQ, 10);
  const dir = mkdtempSync(join(tmpdir(), 'svc-scaling-'));
  const db = await openDatabase({ dataDir: join(dir, 'data'), insecure: true, searchWorkers: a.w, buildWorkers: a.bw });
  try {
    await db.createCollection({ name: 'm', dim: d.dim, metric: 'l2', index_params: { m: 16, ef_construction: 200 } });
    const points = [];
    for (let j = 0; j < d.n; j++) points.push({ id: String(j), vector_b64: b64(row(d.base, d.dim, j)) });
    for (let i = 0; i < points.length; i += 10_000) await db.bulkUpsert('m', { points: points.slice(i, i + 10_000) });
    const tb = performance.now();
    await db.search('m', { vector: row(d.queries, d.dim, 0), k: 1, consistency: 'strong' });
    const buildS = (performance.now() - tb) / 1000;
    let recall = 0;
    for (let q = 0; q < d.nq; q++) {
      const { hits } = await db.search('m', { vector: row(d.queries, d.dim, q), k: 10, ef_search: a.ef, with_payload: false });
      recall += recallAt(d, q, hits.map((h) => Number(h.id)));
    }
    let next = 0;
    let errors = 0;
    const lat: number[] = [];
    const run = async (until: number, measure: boolean) => {
      const lane = async () => {
        while (performance.now() < until) {
          const q = next++ % d.nq;
          const s = performance.now();
          try {
            await db.search('m', { vector: row(d.queries, d.dim, q), k: 10, ef_search: a.ef, with_payload: false });
            if (measure) lat.push(performance.now() - s);
          } catch {
            errors++;
          }
        }
      };
      await Promise.all(Array.from({ length: a.inflight }, lane));
    };
    await run(performance.now() + a.warmSecs * 1000, false);
    const session = a.profile === undefined ? null : await startProfile();
    const c0 = cpuSample(process.pid);
    const t0 = performance.now();
    await run(t0 + a.secs * 1000, true);
    const secs = (performance.now() - t0) / 1000;
    const c1 = cpuSample(process.pid);
    if (session !== null) writeFileSync(a.profile!, JSON.stringify(await stopProfile(session)));
    lat.sort((x, y) => x - y);
    const n = lat.length;
    const per = (x: number) => r1((x / n) * 1e6);
    const stats = db.node.searchPoolStats();
    return {
      w: a.w, bw: a.bw ?? null, n_base: d.n, build_s: Math.round(buildS * 1000) / 1000, recall_at_10: Math.round((recall / d.nq) * 1000) / 1000,
      qps: Math.round(n / secs), queries: n, secs: Math.round(secs * 100) / 100, errors,
      p50_ms: Math.round(lat[Math.floor(n * 0.5)] * 1000) / 1000, p99_ms: Math.round(lat[Math.min(n - 1, Math.floor(n * 0.99))] * 1000) / 1000,
      cpu_us_per_query: c0 && c1 ? per(c1.process - c0.process) : null,
      main_us_per_query: c0 && c1 ? per(c1.mainThread - c0.mainThread) : null,
      pool: stats === null ? null : { ...stats },
    };
  } finally {
    await db.close();
    rmSync(dir, { recursive: true, force: true });
  }
}

if (process.argv[1] && import.meta.filename === process.argv[1]) {
  main(JSON.parse(process.argv[2]) as ChildArgs).then((r) => {
    process.stdout.write(`${JSON.stringify(r)}\n`);
    process.exit(0);
  }, (e) => {
    process.stderr.write(`${(e as Error).stack}\n`);
    process.exit(1);
  });
}
