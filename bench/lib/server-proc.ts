/**
 * Starts `svc serve` from the source tree (tsx), so the suite measures the code as it is now rather than
 * a possibly stale dist/, with encryption on, on free loopback ports; REST through undici, gRPC through
 * @grpc/grpc-js with proto/svc.proto. Stopped by its pid. `nodeArgs` go to node itself (`--cpu-prof`,
 * which NODE_OPTIONS refuses).
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import * as grpc from '@grpc/grpc-js';
import * as protoLoader from '@grpc/proto-loader';
import { Agent, request } from 'undici';
import { freePort } from '../../roles/testing/free-port.js';
import { BENCH_MASTER_KEY } from '../peers/svc.js';
import { ROOT_DIR } from './on-demand.js';

export const BENCH_API_KEY = 'bench-admin-key';

/** With BENCH_PROF_DIR set, a server writes V8 CPU profiles there at exit (bench/README.md). */
const profile = (port: number): string[] => {
  const dir = process.env.BENCH_PROF_DIR;
  return dir === undefined || dir === '' ? [] : ['--cpu-prof', `--cpu-prof-dir=${join(dir, String(port))}`];
};

export interface SvcServer {
  /** The server process (bench/lib/proc-cpu.ts reads its CPU). */
  pid: number;
  rest: string;
  grpcAddr: string;
  call<T = unknown>(method: 'GET' | 'POST' | 'PUT' | 'DELETE', path: string, body?: unknown): Promise<T>;
  grpcSearch(req: Record<string, unknown>): Promise<{ hits: { id: string }[] }>;
  stop(): Promise<void>;
}

/**
 * `svc serve` on free ports; `env` adds variables (SVC_SEARCH_WORKERS, say). `readyMs`: how long /readyz
 * may take (a replica is ready once its bootstrap is in and its graph built; default two minutes).
 * `opts.cpus` (Linux `taskset -c` syntax, e.g. "1") pins the server to those cores, its threads included;
 * `opts.nodeArgs` go to node before the script (`--cpu-prof`, say).
 */
export async function startSvc(env: Record<string, string> = {}, readyMs = 120_000, opts: { cpus?: string; nodeArgs?: readonly string[]; node?: string } = {}): Promise<SvcServer> {
  // A data directory given in `env` is the caller's: used as it is and kept at stop (a restart reopens it).
  const own = env.SVC_DATA_DIR === undefined;
  const dir = own ? mkdtempSync(join(tmpdir(), 'svc-bench-server-')) : env.SVC_DATA_DIR;
  const restPort = await freePort();
  const grpcPort = await freePort();
  const { cpus, nodeArgs = [] } = opts;
  // `opts.node`: another Node.js binary (Node 24 from scripts/node24.sh, for several request loops).
  const node = opts.node ?? process.execPath;
  const args = [...profile(restPort), ...nodeArgs, '--import', 'tsx', join(ROOT_DIR, 'roles', 'cli', 'main.ts'), 'serve'];
  // taskset execs node in its place: the pid stays the server's.
  const child: ChildProcess = spawn(cpus === undefined ? node : 'taskset', cpus === undefined ? args : ['-c', cpus, node, ...args], {
    cwd: ROOT_DIR,
    env: {
      PATH: process.env.PATH, SVC_API_KEYS: BENCH_API_KEY, SVC_ENCRYPTION_KEY: BENCH_MASTER_KEY, SVC_DATA_DIR: join(dir, 'data'),
      SVC_REST_ADDR: `127.0.0.1:${restPort}`, SVC_GRPC_ADDR: `127.0.0.1:${grpcPort}`, RUST_LOG: 'warn', ...env,
    },
    stdio: ['ignore', 'ignore', 'pipe'],
  });
  let stderr = '';
  child.stderr?.on('data', (b: Buffer) => { stderr = (stderr + b.toString()).slice(-4000); });
  const rest = `http://127.0.0.1:${restPort}`;
  const agent = new Agent({ connections: 64, pipelining: 1 });
  const call = async <T>(method: 'GET' | 'POST' | 'PUT' | 'DELETE', path: string, body?: unknown): Promise<T> => {
    const r = await request(`${rest}${path}`, {
      method, dispatcher: agent,
      headers: { authorization: `Bearer ${BENCH_API_KEY}`, 'content-type': 'application/json' },
      body: body === undefined ? undefined : JSON.stringify(body),
    });
    const text = await r.body.text();
    if (r.statusCode >= 400) throw new Error(`${method} ${path}: ${r.statusCode} ${text.slice(0, 300)}`);
    return JSON.parse(text) as T;
  };
  let up = false;
  for (let i = 0; i < readyMs / 100 && !up; i++) {
    if (child.exitCode !== null) break;
    try { up = (await request(`${rest}/readyz`, { dispatcher: agent })).statusCode === 200; } catch { /* not yet */ }
    if (!up) await new Promise((r) => setTimeout(r, 100));
  }
  if (!up) {
    child.kill('SIGKILL');
    throw new Error(`svc serve did not become ready: ${stderr.trim().split('\n').slice(-3).join(' / ')}`);
  }
  const def = protoLoader.loadSync(join(ROOT_DIR, 'proto', 'svc.proto'), { keepCase: true, longs: Number, defaults: false, oneofs: true, includeDirs: [join(ROOT_DIR, 'proto')] });
  const pkg = grpc.loadPackageDefinition(def) as any;
  const client = new pkg.svc.v1.Svc(`127.0.0.1:${grpcPort}`, grpc.credentials.createInsecure(), {
    'grpc.max_receive_message_length': 64 << 20, 'grpc.max_send_message_length': 64 << 20,
  });
  const meta = new grpc.Metadata();
  meta.set('authorization', `Bearer ${BENCH_API_KEY}`);
  const grpcSearch = (req: Record<string, unknown>) => new Promise<{ hits: { id: string }[] }>((res, rej) => {
    client.Search(req, meta, (err: Error | null, out: { hits: { id: string }[] }) => (err ? rej(err) : res(out)));
  });
  let stopping: Promise<void> | null = null;
  return {
    pid: child.pid!, rest, grpcAddr: `127.0.0.1:${grpcPort}`, call, grpcSearch,
    // Once: a second stop (a run's cleanup after a failure) waits for the first.
    stop: () => (stopping ??= stopOnce()),
  };
  async function stopOnce(): Promise<void> {
    client.close();
    await agent.close();
    if (child.exitCode === null) {
      const gone = new Promise((r) => child.once('exit', r));
      child.kill('SIGTERM');
      // A profiled server writes its profiles on its way out, and a follower slowed by the profiler took
      // 6 to 9 s to close: killed at 10 s, its main thread's profile was lost.
      const profiling = (process.env.BENCH_PROF_DIR ?? '') !== '';
      await Promise.race([gone, new Promise((r) => setTimeout(r, profiling ? 120_000 : 10_000))]);
      if (child.exitCode === null) child.kill('SIGKILL');
    }
    if (own) rmSync(dir, { recursive: true, force: true });
  }
}
