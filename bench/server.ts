/**
 * Server benchmark: queries/s and p50/p99 latency with 1, 8 and 32 concurrent clients on loopback, over
 * REST (undici Pool: one keep-alive connection per client) and gRPC (one HTTP/2 connection per client up
 * to 8; the lean node:http2 client and grpc-js's own, see bench/suites/server.ts), and the same queries
 * through the embedded API (the overhead of the transport and service layer).
 * Run: npm run bench:server -- [--quick]   (needs `npm run build`). Writes bench/results/server-<ts>.json.
 * The data is seeded uniform random vectors: this measures the server path, not recall.
 */
import { spawn } from 'node:child_process';
import { mkdirSync, mkdtempSync, writeFileSync } from 'node:fs';
import { cpus, tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { Agent, Pool, request } from 'undici';
import { freePort } from '../roles/testing/free-port.js';
import { grpcJsSearch, leanGrpcSearch, type SearchClient } from './suites/server.js';

const ROOT = resolve(import.meta.dirname, '..');
const quick = process.argv.includes('--quick');
const N = quick ? 2_000 : 20_000;
const DIM = quick ? 64 : 128;
const SECONDS = quick ? 2 : 5;
const K = 10;
const KEY = 'bench-key';
const MASTER = 'b2'.repeat(32);

let seed = 12345;
const rnd = () => { seed = (seed * 1103515245 + 12345) % 2 ** 31; return seed / 2 ** 31; };
const vec = () => Array.from({ length: DIM }, () => rnd() * 2 - 1);

function pct(sorted: number[], p: number): number {
  return sorted[Math.min(sorted.length - 1, Math.floor((p / 100) * sorted.length))];
}

async function load(clients: number, one: () => Promise<void>): Promise<{ clients: number; qps: number; p50_ms: number; p99_ms: number; requests: number }> {
  const lat: number[] = [];
  const end = performance.now() + SECONDS * 1000;
  const t0 = performance.now();
  await Promise.all(Array.from({ length: clients }, async () => {
    while (performance.now() < end) {
      const s = performance.now();
      await one();
      lat.push(performance.now() - s);
    }
  }));
  const elapsed = (performance.now() - t0) / 1000;
  lat.sort((a, b) => a - b);
  return { clients, qps: Math.round(lat.length / elapsed), p50_ms: +pct(lat, 50).toFixed(3), p99_ms: +pct(lat, 99).toFixed(3), requests: lat.length };
}

async function main(): Promise<void> {
  const dir = mkdtempSync(join(tmpdir(), 'svc-bench-'));
  const queries = Array.from({ length: 200 }, vec);
  const points = Array.from({ length: N }, (_, i) => ({ id: `p${i}`, vector: vec(), payload: { i } }));

  // Embedded baseline first (its own data dir), then the server.
  const { openDatabase } = await import(join(ROOT, 'dist', 'core', 'embedded.js'));
  const db = await openDatabase({ dataDir: join(dir, 'embedded'), encryptionKey: MASTER });
  await db.createCollection({ name: 'b', dim: DIM, metric: 'l2' });
  for (let i = 0; i < N; i += 1000) await db.upsert('b', { points: points.slice(i, i + 1000) });
  let qi = 0;
  await db.search('b', { vector: queries[0], k: K });
  const embedded = await load(1, async () => { await db.search('b', { vector: queries[qi++ % queries.length], k: K }); });
  await db.close();

  const port = await freePort();
  const grpcPort = await freePort();
  const child = spawn(process.execPath, [join(ROOT, 'dist', 'roles', 'cli', 'main.js'), 'serve'], {
    env: { PATH: process.env.PATH, RUST_LOG: 'warn', SVC_API_KEYS: KEY, SVC_ENCRYPTION_KEY: MASTER, SVC_DATA_DIR: join(dir, 'server'), SVC_REST_ADDR: `127.0.0.1:${port}`, SVC_GRPC_ADDR: `127.0.0.1:${grpcPort}` },
    stdio: ['ignore', 'ignore', 'inherit'],
  });
  const base = `http://127.0.0.1:${port}`;
  const agent = new Agent({ connections: 64, pipelining: 1 });
  const call = async (method: 'GET' | 'POST' | 'PUT', path: string, body?: unknown) => {
    const r = await request(`${base}${path}`, { method, dispatcher: agent, headers: { authorization: `Bearer ${KEY}`, 'content-type': 'application/json' }, body: body === undefined ? undefined : JSON.stringify(body) });
    const text = await r.body.text();
    if (r.statusCode >= 400) throw new Error(`${method} ${path}: ${r.statusCode} ${text}`);
    return text;
  };
  for (let i = 0; i < 100; i++) {
    try { if ((await request(`${base}/readyz`, { dispatcher: agent })).statusCode === 200) break; } catch { /* not up yet */ }
    await new Promise((r) => setTimeout(r, 100));
  }
  await call('POST', '/v1/collections', { name: 'b', dim: DIM, metric: 'l2' });
  for (let i = 0; i < N; i += 1000) await call('PUT', '/v1/collections/b/points', { points: points.slice(i, i + 1000) });
  await call('POST', '/v1/collections/b/query', { vector: queries[0], k: K, consistency: 'strong' });

  const rest = [];
  for (const clients of [1, 8, 32]) {
    const pool = new Pool(base, { connections: clients, pipelining: 1 });
    const one = async () => {
      const r = await pool.request({
        method: 'POST', path: '/v1/collections/b/query', body: JSON.stringify({ vector: queries[qi++ % queries.length], k: K }),
        headers: { authorization: `Bearer ${KEY}`, 'content-type': 'application/json' },
      });
      const out = await r.body.json();
      if (r.statusCode !== 200) throw new Error(`query: ${r.statusCode} ${JSON.stringify(out)}`);
    };
    await one();
    rest.push({ ...await load(clients, one), connections: clients });
    await pool.close();
  }

  const f32 = queries.map((q) => Float32Array.from(q));
  const grpcLevels: Record<string, unknown>[] = [];
  const grpcJsLevels: Record<string, unknown>[] = [];
  for (const [levels, make] of [[grpcLevels, leanGrpcSearch], [grpcJsLevels, grpcJsSearch]] as [Record<string, unknown>[], (a: string, k: string, n: number) => SearchClient][]) {
    for (const clients of [1, 8, 32]) {
      const connections = Math.min(clients, 8);
      const client = make(`127.0.0.1:${grpcPort}`, KEY, connections);
      const one = async () => { await client.search({ collection: 'b', vector: f32[qi++ % f32.length], k: K }); };
      await one();
      levels.push({ ...await load(clients, one), connections });
      await client.close();
    }
  }
  child.kill('SIGTERM');
  await agent.close();

  const result = {
    bench: 'server', quick, points: N, dim: DIM, k: K, seconds_per_level: SECONDS, node: process.version, cpus: cpus().length,
    embedded: { ...embedded, note: 'in-process db.search, one caller' },
    rest,
    grpc: grpcLevels,
    grpc_grpcjs_client: grpcJsLevels,
    overhead_ms_p50_single_client: +(rest[0].p50_ms - embedded.p50_ms).toFixed(3),
    grpc_overhead_ms_p50_single_client: +((grpcLevels[0].p50_ms as number) - embedded.p50_ms).toFixed(3),
    grpc_grpcjs_client_overhead_ms_p50_single_client: +((grpcJsLevels[0].p50_ms as number) - embedded.p50_ms).toFixed(3),
  };
  mkdirSync(join(ROOT, 'bench', 'results'), { recursive: true });
  const file = join(ROOT, 'bench', 'results', `server-${new Date().toISOString().replace(/[:.]/g, '-')}.json`);
  writeFileSync(file, `${JSON.stringify(result, null, 2)}\n`);
  process.stdout.write(`${JSON.stringify(result, null, 2)}\nwritten to ${file}\n`);
}

main().catch((e) => { process.stderr.write(`${(e as Error).stack}\n`); process.exit(1); });
