/**
 * Native load generators, so that on a 2-core box the client costs little CPU and the servers, not a
 * Node.js client, set the pace: h2load (nghttp2-client, C) for svc over HTTP/1.1 (REST) and HTTP/2
 * with prior knowledge (gRPC), and pgbench (PostgreSQL's own, C) for pgvector over its wire protocol.
 * Each connection keeps one request in flight (h2load -m 1; wrk and pgbench are synchronous per
 * connection). h2load sends the same body every request (it cannot vary it; pgbench's script then holds
 * the same one query). wrk (C, with a LuaJIT script) sends every query in turn, and pgbench's script
 * then draws a query id at random and reads its vector from a table: with one query, the vectors a
 * search visits stay in cache; with many, they are read from memory as a real load reads them.
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

/**
 * The line the Lua script below prints when wrk is done (wrk's own summary has no machine-readable
 * form): requests, the run's microseconds, each kind of failure, and latency in microseconds.
 */
export function parseWrk(out: string, clients: number): NativeLoadResult & { p50_ms: number; p99_ms: number } {
  const line = /^WRKJSON (\{.*\})$/m.exec(out);
  if (!line) throw new Error(`wrk output not understood: ${out.slice(-400)}`);
  const j = JSON.parse(line[1]) as Record<string, number>;
  const need = ['requests', 'duration_us', 'non2xx', 'connect', 'read', 'write', 'timeout', 'mean_us', 'p50_us', 'p99_us'];
  const missing = need.filter((k) => typeof j[k] !== 'number' || !Number.isFinite(j[k]));
  if (missing.length > 0 || j.duration_us <= 0) throw new Error(`wrk output not understood (${missing.join(', ') || 'duration'}): ${line[1]}`);
  const ms = (us: number) => Math.round(us) / 1000;
  return {
    clients, qps: Math.round(j.requests / (j.duration_us / 1e6)), mean_ms: ms(j.mean_us), requests: j.requests - j.non2xx,
    errors: j.non2xx + j.connect + j.read + j.write + j.timeout, p50_ms: ms(j.p50_us), p99_ms: ms(j.p99_us),
  };
}

/**
 * wrk's script: every request is the next of the bodies (one JSON document a line in $BODIES), over all
 * connections of the run's one thread, from a place LuaJIT's unseeded math.random picks (the same
 * place every run); requests are formatted once, up front.
 */
function wrkScript(headers: Record<string, string>): string {
  const lua = (x: string) => JSON.stringify(x); // ASCII header names and values: a JSON string is a Lua string
  return `local bodies = {}
for line in io.lines(os.getenv("BODIES")) do if #line > 0 then bodies[#bodies + 1] = line end end
local headers = { ${Object.entries(headers).map(([k, v]) => `[${lua(k)}] = ${lua(v)}`).join(', ')} }
local reqs = {}
local n = 0
function init(args)
  for i, b in ipairs(bodies) do reqs[i] = wrk.format("POST", nil, headers, b) end
  n = math.random(#reqs)
end
function request()
  n = n % #reqs + 1
  return reqs[n]
end
function done(summary, latency, requests)
  local e = summary.errors
  io.write(string.format('WRKJSON {"requests":%d,"duration_us":%d,"non2xx":%d,"connect":%d,"read":%d,"write":%d,"timeout":%d,"mean_us":%.1f,"p50_us":%d,"p99_us":%d}\\n',
    summary.requests, summary.duration, e.status, e.connect, e.read, e.write, e.timeout, latency.mean, latency:percentile(50), latency:percentile(99)))
end
`;
}

/** One second of warm-up, then `seconds` of wrk at `clients` connections on one thread, POSTing `bodies` in turn. */
export async function wrk(o: {
  url: string; bodies: string[]; headers: Record<string, string>; clients: number; seconds: number;
}): Promise<NativeLoadResult & { p50_ms: number; p99_ms: number }> {
  const bin = tool('wrk');
  if (bin === null) throw new Error('wrk is not installed (Debian: wrk)');
  if (o.bodies.length === 0 || o.bodies.some((b) => b.length === 0 || b.includes('\n'))) throw new Error('wrk: bodies must be non-empty single lines');
  const dir = mkdtempSync(join(tmpdir(), 'svc-wrk-'));
  try {
    const bodies = join(dir, 'bodies.ndjson');
    writeFileSync(bodies, o.bodies.join('\n') + '\n');
    const script = join(dir, 'load.lua');
    writeFileSync(script, wrkScript(o.headers));
    const run = (seconds: number) => runTool(bin, ['-t', '1', '-c', String(o.clients), '-d', `${seconds}s`, '-s', script, o.url], { BODIES: bodies });
    await run(1);
    return parseWrk(await run(o.seconds), o.clients);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
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

/**
 * `seconds` of pgbench running `sql` (prepared) at `clients` connections, on one thread. `sql` is one
 * statement, or a whole script (meta-commands such as `\set` included) when it has more than one line.
 */
export async function pgbench(o: { port: number; sql: string; clients: number; seconds: number; options?: string }): Promise<NativeLoadResult> {
  const bin = tool('pgbench');
  if (bin === null) throw new Error('pgbench is not installed');
  const dir = mkdtempSync(join(tmpdir(), 'svc-pgbench-'));
  try {
    const script = join(dir, 'q.sql');
    writeFileSync(script, o.sql.includes('\n') ? o.sql : `${o.sql};\n`);
    const args = ['-h', '127.0.0.1', '-p', String(o.port), '-U', 'postgres', '-n', '-M', 'prepared', '-c', String(o.clients), '-j', '1', '-T', String(o.seconds), '-f', script, 'postgres'];
    return parsePgbench(await runTool(bin, args, o.options ? { PGOPTIONS: o.options } : undefined), o.clients);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}
