/**
 * How much CPU a server spent on a load run, read from /proc (Linux; null elsewhere): user + system
 * time of the whole process (every thread), of its main thread alone, and, for PostgreSQL's
 * postmaster, of the backends it has reaped (each pgbench connection is a backend process that ends
 * with the run). Divided by the requests, it is the CPU a request costs the server, whatever the load
 * generator beside it took: on a 2-core box that, more than QPS, says what more cores would give.
 */
import { execFileSync } from 'node:child_process';
import { readdirSync, readFileSync } from 'node:fs';

let ticks: number | null | undefined;
function clockTicks(): number | null {
  if (ticks === undefined) {
    try {
      ticks = Number(execFileSync('getconf', ['CLK_TCK'], { encoding: 'utf8' }).trim()) || null;
    } catch {
      ticks = null;
    }
  }
  return ticks;
}

/** The fields of a /proc stat line after the command name (which may hold spaces): index 0 is `state`. */
function statFields(path: string): string[] | null {
  try {
    const raw = readFileSync(path, 'utf8');
    return raw.slice(raw.lastIndexOf(')') + 2).split(' ');
  } catch {
    return null;
  }
}

export interface CpuSample { process: number; mainThread: number; children: number }

/** CPU seconds used so far by `pid`, by its main thread and by its reaped children; null off Linux. */
export function cpuSample(pid: number): CpuSample | null {
  const hz = clockTicks();
  const p = statFields(`/proc/${pid}/stat`);
  const t = statFields(`/proc/${pid}/task/${pid}/stat`);
  if (hz === null || p === null || t === null) return null;
  // utime, stime, cutime, cstime are fields 14-17 of stat(5): 11-14 here.
  const n = (f: string[], i: number) => Number(f[i]) / hz;
  return { process: n(p, 11) + n(p, 12), mainThread: n(t, 11) + n(t, 12), children: n(p, 13) + n(p, 14) };
}

export interface CpuCost {
  /** Cores the server kept busy on average over the run (its threads and, with children, its reaped processes). */
  server_cores: number | null;
  /** Server CPU per request, microseconds. */
  server_cpu_us_per_request: number | null;
  /** The main thread's share: for Node.js, the event loop's CPU per request (null for PostgreSQL). */
  main_thread_us_per_request: number | null;
}

const round1 = (x: number) => Math.round(x * 10) / 10;

/**
 * Runs `load` and charges the CPU `pid` spent meanwhile to its requests. `withChildren` counts reaped
 * child processes too (a postmaster's backends; read after `settleMs`, once the postmaster has reaped
 * the connections that just closed).
 */
export async function withCpuCost<T extends { qps: number }>(
  pid: number, load: () => Promise<T>, opts: { withChildren?: boolean; settleMs?: number } = {},
): Promise<T & CpuCost> {
  const before = cpuSample(pid);
  const t0 = performance.now();
  const r = await load();
  const wall = (performance.now() - t0) / 1000;
  if (opts.withChildren) await new Promise((res) => setTimeout(res, opts.settleMs ?? 300));
  const after = cpuSample(pid);
  if (before === null || after === null || r.qps <= 0 || wall <= 0) {
    return { ...r, server_cores: null, server_cpu_us_per_request: null, main_thread_us_per_request: null };
  }
  // Load generators warm up before they count: the whole run's CPU over its whole wall time is the
  // rate the counted seconds ran at too.
  const cores = (after.process - before.process + (opts.withChildren ? after.children - before.children : 0)) / wall;
  const main = (after.mainThread - before.mainThread) / wall;
  return {
    ...r,
    server_cores: Math.round(cores * 100) / 100,
    server_cpu_us_per_request: round1((cores / r.qps) * 1e6),
    main_thread_us_per_request: opts.withChildren ? null : round1((main / r.qps) * 1e6),
  };
}

/** CPU pressure of the whole machine (Linux PSI, `some avg10`): the share of time something waited for a core. */
export function cpuPressure(): number | null {
  try {
    const m = /some avg10=([\d.]+)/.exec(readFileSync('/proc/pressure/cpu', 'utf8'));
    return m === null ? null : Number(m[1]);
  } catch {
    return null;
  }
}

/** CPU seconds so far of each thread of `pid`, by thread name (`comm`: MainThread, svc-loop-0, ...), summed per name; null off Linux. */
/** threadCpu's key for the whole process (every thread, those that ended included). */
export const PROCESS = '<process>';

export function threadCpu(pid: number): Map<string, number> | null {
  const hz = clockTicks();
  if (hz === null) return null;
  let tids: string[];
  try {
    tids = readdirSync(`/proc/${pid}/task`);
  } catch {
    return null;
  }
  const out = new Map<string, number>();
  // The whole process, threads that ended included (a thread's own counters go with it).
  const p = statFields(`/proc/${pid}/stat`);
  if (p !== null) out.set(PROCESS, (Number(p[11]) + Number(p[12])) / hz);
  for (const tid of tids) {
    let comm: string;
    try {
      comm = readFileSync(`/proc/${pid}/task/${tid}/comm`, 'utf8').trim();
    } catch {
      continue; // the thread ended meanwhile
    }
    const f = statFields(`/proc/${pid}/task/${tid}/stat`);
    if (f === null) continue;
    out.set(comm, (out.get(comm) ?? 0) + (Number(f[11]) + Number(f[12])) / hz);
  }
  return out;
}
