/**
 * Native load generators, so that on a 2-core box the client costs little CPU and the servers, not a
 * Node.js client, set the pace: h2load (nghttp2-client, C) for svc over HTTP/1.1 (REST) and HTTP/2
 * with prior knowledge (gRPC), and pgbench (PostgreSQL's own, C) for pgvector over its wire protocol.
 * Each connection keeps one request in flight (h2load -m 1; pgbench is synchronous per client), the
 * same body every request (h2load cannot vary it, so pgbench's script holds the same one query).
 */
import { execFile, execFileSync } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

export interface NativeLoadResult {
  clients: number;
  qps: number;
  /** h2load and pgbench report the mean, not percentiles. */
  mean_ms: number;
  requests: number;
  errors: number;
}

/** The path of a tool, or null when it is not installed. */
export function tool(name: string): string | null {
  try {
    return execFileSync('sh', ['-c', `command -v ${name}`], { encoding: 'utf8' }).trim() || null;
  } catch {
    return null;
  }
}

function runTool(cmd: string, args: string[], env?: NodeJS.ProcessEnv): Promise<string> {
  return new Promise((resolve, reject) => {
    execFile(cmd, args, { encoding: 'utf8', env: { ...process.env, ...env }, maxBuffer: 16 << 20 }, (err, stdout, stderr) => {
      if (err) reject(new Error(`${cmd} failed: ${err.message} ${stderr.slice(-500)}`));
      else resolve(stdout);
    });
  });
}

const DURATION_UNITS: Record<string, number> = { us: 1e-3, ms: 1, s: 1000 };
const msOf = (v: string, unit: string): number => Number(v) * DURATION_UNITS[unit];

/** h2load's summary: "finished in 5.00s, 7873.20 req/s, ...", the requests line and "time for request: min max mean ...". */
export function parseH2load(out: string, clients: number): NativeLoadResult {
  const rps = /finished in [\d.]+m?s, ([\d.]+) req\/s/.exec(out);
  const req = /requests: (\d+) total, \d+ started, \d+ done, (\d+) succeeded, (\d+) failed, (\d+) errored/.exec(out);
  const status = /status codes: \d+ 2xx, (\d+) 3xx, (\d+) 4xx, (\d+) 5xx/.exec(out);
  const time = /time for request:\s+([\d.]+)(us|ms|s)\s+([\d.]+)(us|ms|s)\s+([\d.]+)(us|ms|s)/.exec(out);
  if (!rps || !req || !time) throw new Error(`h2load output not understood: ${out.slice(-400)}`);
  // Responses with another status than 2xx, counted by class. (The 2xx count itself can differ from
  // "succeeded" by a few requests either way: h2load counts them on the two sides of the warm-up's
  // end.) A gRPC failure is an HTTP 200 too: the suite checks a call's status before it loads the server.
  const non2xx = status ? Number(status[1]) + Number(status[2]) + Number(status[3]) : 0;
  return {
    clients, qps: Math.round(Number(rps[1])), mean_ms: Math.round(msOf(time[5], time[6]) * 1000) / 1000,
    requests: Number(req[2]), errors: non2xx + Number(req[3]) + Number(req[4]),
  };
}

/** pgbench's "latency average = 1.234 ms", "tps = 6479.12 (without initial connection time)" and failures. */
export function parsePgbench(out: string, clients: number): NativeLoadResult {
  const tps = /tps = ([\d.]+) \(without initial connection time\)/.exec(out);
  const lat = /latency average = ([\d.]+) ms/.exec(out);
  const done = /number of transactions actually processed: (\d+)/.exec(out);
  const failed = /number of failed transactions: (\d+)/.exec(out);
  if (!tps || !lat || !done) throw new Error(`pgbench output not understood: ${out.slice(-400)}`);
  return { clients, qps: Math.round(Number(tps[1])), mean_ms: Number(lat[1]), requests: Number(done[1]), errors: failed ? Number(failed[1]) : 0 };
}

/** `seconds` of h2load at `clients` connections, each with one request in flight. */
export async function h2load(o: {
  url: string; body: Uint8Array; headers: Record<string, string>; clients: number; seconds: number; http1: boolean;
}): Promise<NativeLoadResult> {
  const bin = tool('h2load');
  if (bin === null) throw new Error('h2load is not installed (Debian: nghttp2-client)');
  const dir = mkdtempSync(join(tmpdir(), 'svc-h2load-'));
  try {
    const bodyFile = join(dir, 'body');
    writeFileSync(bodyFile, o.body);
    const args = [
      ...(o.http1 ? ['--h1'] : []), '-c', String(o.clients), '-m', '1', '-t', '1', '-D', String(o.seconds), '--warm-up-time', '1',
      '-d', bodyFile, ...Object.entries(o.headers).flatMap(([k, v]) => ['-H', `${k}: ${v}`]), o.url,
    ];
    return parseH2load(await runTool(bin, args), o.clients);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

/** `seconds` of pgbench running `sql` (prepared) at `clients` connections, on one thread. */
export async function pgbench(o: { port: number; sql: string; clients: number; seconds: number; options?: string }): Promise<NativeLoadResult> {
  const bin = tool('pgbench');
  if (bin === null) throw new Error('pgbench is not installed');
  const dir = mkdtempSync(join(tmpdir(), 'svc-pgbench-'));
  try {
    const script = join(dir, 'q.sql');
    writeFileSync(script, `${o.sql};\n`);
    const args = ['-h', '127.0.0.1', '-p', String(o.port), '-U', 'postgres', '-n', '-M', 'prepared', '-c', String(o.clients), '-j', '1', '-T', String(o.seconds), '-f', script, 'postgres'];
    return parsePgbench(await runTool(bin, args, o.options ? { PGOPTIONS: o.options } : undefined), o.clients);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}
