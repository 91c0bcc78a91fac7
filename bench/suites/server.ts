/**
 * Server throughput and latency: svc over REST and over gRPC against pgvector over its own protocol, at
 * 1, 8 and 32 concurrent clients (closed loop), each at the smallest ef whose recall@10 reaches 0.95 on
 * the same data (MNIST-784; seeded random in tiny mode). Encryption and fsync are on for svc; pgvector
 * runs one backend per connection (a pool as big as the client count).
 *
 * The clients are as fair as the bench can make them on one 2-core box where they share the CPU with
 * the server: each level opens as many connections as it has clients (REST: an undici Pool of keep-alive
 * HTTP/1.1 connections; pgvector: a pg Pool; gRPC: one HTTP/2 connection per client up to 8, then
 * several calls multiplexed on each, as a deployment with several client processes would have). gRPC is
 * measured twice: with a lean client (node:http2 and the generated codec of proto/svc.proto: the wire
 * protocol and nothing else, the analogue of pg for PostgreSQL) and with @grpc/grpc-js's own client,
 * whose per-call work costs about as much CPU as the server's and so is reported on its own row.
 * Then both servers again under native load generators, which take little of the CPU where a Node.js
 * client takes most of a core: h2load for svc and pgbench for pgvector with one fixed query (its vectors
 * stay in cache), then wrk for svc and pgbench for pgvector with every query in turn (read from memory,
 * as a real load reads them; the recall the ef was picked for is over these same queries). Last, that
 * figure in paired rounds (both servers up, back-to-back runs in alternating order), whose median
 * ratio drifting background load moves less than any single pair of runs.
 *
 * svc is also measured with scalar quantization (engine `svc-sq8`: the same data in a second collection
 * with `quantization: 'scalar'`, at its own ef for recall 0.95, which the hits' exact re-scoring keeps
 * honest): every query in turn under wrk, and as a third arm of the paired rounds.
 */
import { connect, constants, type ClientHttp2Session } from 'node:http2';
import { connect as netConnect } from 'node:net';
import { availableParallelism } from 'node:os';
import * as grpcJs from '@grpc/grpc-js';
import pg from 'pg';
import { Pool, request } from 'undici';
import { mnist, random, recallAt, row, type Dataset } from '../lib/data.js';
import { BENCH_API_KEY, startSvc, type SvcServer } from '../lib/server-proc.js';
import { SearchRequest, SearchResponse, SvcService } from '../../proto/gen/svc.js';
import { autoSearchWorkers } from '../../roles/config.js';
import { frameGrpcMessage } from '../../roles/grpc/transport.js';
import { parsePrometheus } from '../../roles/tui/client.js';
import { closedLoop, round } from '../lib/stats.js';
import { h2load, pgbench, tool, wrk, type NativeLoadResult } from '../lib/native-load.js';
import { withCpuCost, type CpuCost } from '../lib/proc-cpu.js';
import { startNodeFloor } from '../lib/node-floor.js';
import { loadPgvector, nativePgvectorProblem, pgOps, pgSearchSql, startPostgres, vecLiteral, type PgCluster } from '../peers/pgvector.js';
import { b64 } from '../peers/svc.js';
import type { Mode } from '../run.js';

const EFS = [10, 12, 14, 16, 20, 24, 32, 48, 64, 96, 128, 256, 512];
const TARGET = 0.95;
/** HTTP/2 connections a gRPC load level opens: one per client up to this, then calls share them. */
const GRPC_CONNECTIONS_MAX = 8;

/** A search request whose query vector stays a Float32Array until the client encodes it. */
export type SearchCall = Omit<SearchRequest, 'vector'> & { vector: Float32Array };

export interface SearchClient {
  search(req: SearchCall): Promise<SearchResponse>;
  close(): Promise<void>;
}

const LITTLE_ENDIAN = new Uint8Array(Float32Array.of(1).buffer)[3] === 0x3f;

/**
 * SearchRequest bytes as a native client writes them: the packed `repeated float vector = 2` field is
 * the vector's little-endian bytes copied at once (what protobuf's C++, Go and Java codecs do), the
 * other fields by the generated codec; protobuf reads the concatenation as one message.
 */
export function encodeSearch(req: SearchCall): Uint8Array {
  if (!LITTLE_ENDIAN) return SearchRequest.encode({ ...req, vector: Array.from(req.vector) }).finish();
  const rest = SearchRequest.encode({ ...req, vector: [] }).finish();
  const n = req.vector.byteLength;
  const len: number[] = [];
  for (let v = n; ; v >>>= 7) { if (v < 0x80) { len.push(v); break; } len.push((v & 0x7f) | 0x80); }
  const out = Buffer.allocUnsafe(rest.length + 1 + len.length + n);
  out.set(rest, 0);
  out[rest.length] = (2 << 3) | 2;
  out.set(len, rest.length + 1);
  out.set(new Uint8Array(req.vector.buffer, req.vector.byteOffset, n), rest.length + 1 + len.length);
  return out;
}

/**
 * A minimal unary gRPC client over node:http2 (no grpc-js): the generated codec, the 5-byte message
 * prefix, `authorization` metadata, and the status from the trailers (or trailers-only headers).
 * `connections` HTTP/2 sessions, calls spread round-robin over them.
 */
export function leanGrpcSearch(address: string, apiKey: string, connections: number): SearchClient {
  const sessions: ClientHttp2Session[] = Array.from({ length: Math.max(1, connections) }, () => {
    // TCP_NODELAY, as grpc-js's client sets it: a call's frames are not held back waiting for an ACK.
    const [host, port] = [address.slice(0, address.lastIndexOf(':')), Number(address.slice(address.lastIndexOf(':') + 1))];
    const s = connect(`http://${address}`, { createConnection: () => netConnect({ host, port, noDelay: true }) });
    s.on('error', () => undefined); // a call on it fails on its own
    return s;
  });
  let next = 0;
  const headers = {
    [constants.HTTP2_HEADER_METHOD]: 'POST', [constants.HTTP2_HEADER_PATH]: SvcService.search.path,
    'content-type': 'application/grpc', te: 'trailers', authorization: `Bearer ${apiKey}`,
  };
  return {
    search: (req) => new Promise((resolve, reject) => {
      const frame = frameGrpcMessage(encodeSearch(req));
      const stream = sessions[next++ % sessions.length].request(headers);
      const chunks: Buffer[] = [];
      let status: string | undefined;
      let message = '';
      const onStatus = (h: Record<string, unknown>) => {
        if (h['grpc-status'] !== undefined) { status = String(h['grpc-status']); message = String(h['grpc-message'] ?? ''); }
      };
      stream.on('response', onStatus);
      stream.on('trailers', onStatus);
      stream.on('data', (c: Buffer) => chunks.push(c));
      stream.on('error', reject);
      stream.on('end', () => {
        if (status !== '0') { reject(new Error(`gRPC status ${status}: ${decodeURIComponent(message)}`)); return; }
        const body = chunks.length === 1 ? chunks[0] : Buffer.concat(chunks);
        if (body.length < 5 || body[0] !== 0) { reject(new Error('gRPC: no uncompressed response message')); return; }
        resolve(SearchResponse.decode(body.subarray(5, 5 + body.readUInt32BE(1))));
      });
      stream.end(frame);
    }),
    close: async () => {
      await Promise.all(sessions.map((s) => new Promise<void>((r) => s.close(() => r()))));
    },
  };
}

/**
 * Search through @grpc/grpc-js's generated client (proto/gen): `connections` channels, each with its own
 * subchannel (so its own HTTP/2 connection), calls spread round-robin over them.
 */
export function grpcJsSearch(address: string, apiKey: string, connections: number): SearchClient {
  const Ctor = grpcJs.makeGenericClientConstructor(SvcService, 'Svc');
  const channels = Array.from({ length: Math.max(1, connections) }, (_, i) => new Ctor(address, grpcJs.credentials.createInsecure(), {
    'grpc.use_local_subchannel_pool': 1, 'grpc.bench_channel': i, 'grpc.max_receive_message_length': 64 << 20,
  }) as unknown as { search(r: SearchRequest, m: grpcJs.Metadata, cb: (e: Error | null, out: SearchResponse) => void): void; close(): void });
  // grpc-js serializes with the generated codec, which takes the vector as number[].
  const meta = new grpcJs.Metadata();
  meta.set('authorization', `Bearer ${apiKey}`);
  let next = 0;
  return {
    search: (req) => new Promise((resolve, reject) => {
      channels[next++ % channels.length].search({ ...req, vector: Array.from(req.vector) }, meta, (e, out) => (e ? reject(e) : resolve(out)));
    }),
    close: async () => { for (const c of channels) c.close(); },
  };
}

/** POST a search as JSON over `pool` (keep-alive HTTP/1.1) and parse the answer, as a REST client does. */
async function restSearchOver(pool: Pool, path: string, body: unknown): Promise<{ hits: { id: string }[] }> {
  const r = await pool.request({
    method: 'POST', path,
    headers: { authorization: `Bearer ${BENCH_API_KEY}`, 'content-type': 'application/json' },
    body: JSON.stringify(body),
  });
  const out = await r.body.json() as { hits: { id: string }[] };
  if (r.statusCode !== 200) throw new Error(`POST ${path}: ${r.statusCode} ${JSON.stringify(out).slice(0, 300)}`);
  return out;
}

/** svc's count of dense searches its search workers answered, from /metrics. */
async function workerSearches(rest: string): Promise<number> {
  return parsePrometheus(await (await request(`${rest}/metrics`)).body.text()).get('svc_search_worker_searches_total') ?? 0;
}

async function pickEf(d: Dataset, search: (q: Float32Array, ef: number) => Promise<ArrayLike<number>>): Promise<{ ef: number; recall: number }> {
  let last = { ef: EFS[0], recall: 0 };
  for (const ef of EFS) {
    let r = 0;
    for (let q = 0; q < d.nq; q++) r += recallAt(d, q, await search(row(d.queries, d.dim, q), ef));
    last = { ef, recall: round(r / d.nq, 4) };
    if (last.recall >= TARGET) break;
  }
  return last;
}

export async function runServer(mode: Mode, peers: string[], log: (l: string) => void): Promise<Record<string, unknown>> {
  const d = mode === 'tiny' ? random(2000, 50, 32, 10) : mode === 'quick' ? mnist(5_000, 100, 10) : mnist(60_000, 1000, 10);
  const seconds = mode === 'full' ? 10 : mode === 'quick' ? 2 : 1;
  const levels = [1, 8, 32];
  const out: Record<string, unknown> = { dataset: d.name, queries: d.nq, k: d.k, seconds_per_level: seconds, target_recall: TARGET };
  const rows: Record<string, unknown>[] = [];
  /**
   * The same servers under native load generators (bench/lib/native-load.ts). `queries`: how many
   * different queries the load sends (1: the first, every request; d.nq: all of them in turn).
   */
  const nativeRows: (Record<string, unknown> & NativeLoadResult & CpuCost & { queries: number })[] = [];
  const ids = (hits: { id: string }[]) => Int32Array.from(hits, (h) => Number(h.id));

  const path = '/v1/collections/b/query';
  /** The same data in a collection with scalar quantization (the engine row `svc-sq8`). */
  const sq8Path = '/v1/collections/bs/query';
  const query = (q: Float32Array, ef: number) => ({ vector: Array.from(q), k: d.k, ef_search: ef, with_payload: false });
  /** The ef each server reaches recall 0.95 at (0 until measured). */
  let svcEf = 0;
  let svcRecall = 0;
  let sq8Ef = 0;
  let pgEf = 0;
  const load = async (srv: SvcServer, name = 'b', quantization: 'none' | 'scalar' = 'none') => {
    await srv.call('POST', '/v1/collections', { name, dim: d.dim, metric: d.metric, quantization, index_params: { m: 16, ef_construction: 200 } });
    // About 8 MB of base64 a request, well under SVC_MAX_REQUEST_BODY_BYTES (32 MiB) at any dim.
    const chunk = Math.max(1, Math.floor(6_000_000 / (d.dim * 4)));
    for (let i = 0; i < d.n; i += chunk) {
      const points = Array.from({ length: Math.min(chunk, d.n - i) }, (_, j) => ({ id: String(i + j), vector_b64: b64(row(d.base, d.dim, i + j)) }));
      await srv.call('POST', `/v1/collections/${name}/points:bulk`, { points });
    }
    await srv.call('POST', `/v1/collections/${name}/query`, { vector: Array.from(row(d.queries, d.dim, 0)), k: 1, consistency: 'strong' });
  };
  /** wrk against svc's REST search at `url` (default: collection b), every query in turn at `ef`. */
  const wrkAllQueries = (srv: SvcServer, ef: number, clients: number, url = path) => {
    const bodies = Array.from({ length: d.nq }, (_, i) => JSON.stringify(query(row(d.queries, d.dim, i), ef)));
    return withCpuCost(srv.pid, () => wrk({
      url: `${srv.rest}${url}`, bodies, clients, seconds, headers: { authorization: `Bearer ${BENCH_API_KEY}`, 'content-type': 'application/json' },
    }));
  };
  /** pgbench running rotatingPgvectorScript's `script` at `ef`. */
  const pgbenchAllQueries = (cluster: PgCluster, script: string, ef: number, clients: number) =>
    withCpuCost(cluster.pid, () => pgbench({ port: cluster.port, sql: script, clients, seconds, options: `-c hnsw.ef_search=${ef}` }), { withChildren: true });
  /**
   * The headline figure again, robust to this shared box's drifting load: svc and pgvector up side by
   * side, every query in turn at 8 clients, in alternating order for `rounds` rounds; each round's
   * ratio comes from two runs a few seconds apart, and the median of the rounds is reported.
   */
  const pairedRounds = async (rounds: number) => {
    const srv = await startSvc();
    let cluster: PgCluster | null = null;
    try {
      cluster = await startPostgres();
      const pgc = cluster;
      await load(srv);
      if (sq8Ef > 0) await load(srv, 'bs', 'scalar');
      const conn = { host: '127.0.0.1', port: pgc.port, user: 'postgres', database: 'postgres' };
      const c = new pg.Client(conn);
      c.on('error', () => undefined);
      await c.connect();
      await loadPgvector({ query: (t, v) => c.query(t, v), close: () => c.end() }, d, d.metric);
      await c.end();
      const script = await rotatingPgvectorScript(conn, d);
      type Run = NativeLoadResult & CpuCost;
      const arms: [string, () => Promise<Run>][] = [
        ['svc', () => wrkAllQueries(srv, svcEf, 8)],
        ['pgvector', () => pgbenchAllQueries(pgc, script, pgEf, 8)],
      ];
      if (sq8Ef > 0) arms.push(['svc-sq8', () => wrkAllQueries(srv, sq8Ef, 8, sq8Path)]);
      const pairs: { round: number; order: string[]; qps: Record<string, number>; cpu_us_per_request: Record<string, number | null>; errors: number; ratio: number; ratio_sq8: number | null }[] = [];
      for (let r = 0; r < rounds; r++) {
        // Each arm takes each place in the order in turn, so drifting load falls on each alike.
        const order = arms.map((_, i) => arms[(i + r) % arms.length]);
        const got: Record<string, Run> = {};
        for (const [name, run] of order) got[name] = await run();
        const qps = Object.fromEntries(Object.entries(got).map(([k, v]) => [k, v.qps]));
        const pg = qps.pgvector;
        pairs.push({
          round: r + 1, order: order.map(([n]) => n), qps,
          cpu_us_per_request: Object.fromEntries(Object.entries(got).map(([k, v]) => [k, v.server_cpu_us_per_request])),
          errors: Object.values(got).reduce((n, v) => n + v.errors, 0),
          ratio: round(qps.svc / pg, 2), ratio_sq8: qps['svc-sq8'] === undefined ? null : round(qps['svc-sq8'] / pg, 2),
        });
        const p = pairs[pairs.length - 1];
        log(`  server: paired round ${r + 1}, every query in turn x8: ${Object.entries(qps).map(([k, v]) => `${k} ${v} QPS`).join(', ')} (svc ${p.ratio}x${p.ratio_sq8 === null ? '' : `, svc-sq8 ${p.ratio_sq8}x`})`);
      }
      const spread = (xs: number[]) => {
        const v = [...xs].sort((x, y) => x - y);
        return { median: v[Math.floor((v.length - 1) / 2)], min: v[0], max: v[v.length - 1] };
      };
      const f = spread(pairs.map((p) => p.ratio));
      const q = sq8Ef > 0 ? spread(pairs.map((p) => p.ratio_sq8!)) : null;
      return {
        svc_ef: svcEf, svc_sq8_ef: sq8Ef || null, pgvector_ef: pgEf, rounds: pairs,
        median_ratio: f.median, min_ratio: f.min, max_ratio: f.max,
        median_ratio_sq8: q?.median ?? null, min_ratio_sq8: q?.min ?? null, max_ratio_sq8: q?.max ?? null,
      };
    } finally {
      await cluster?.stop();
      await srv.stop();
    }
  };
  if (peers.includes('svc')) {
    /** h2load against svc's REST and gRPC ports: one fixed query (the first), at every level. */
    const nativeSvc = async (srv: SvcServer, threads: string, ef: number, recall: number) => {
      const q0 = row(d.queries, d.dim, 0);
      const auth = { authorization: `Bearer ${BENCH_API_KEY}` };
      const framed = frameGrpcMessage(encodeSearch({ collection: 'b', vector: q0, k: d.k, ef_search: ef, with_payload: false, filter: undefined }));
      for (const clients of levels) {
        const rest = await withCpuCost(srv.pid, () => h2load({
          url: `${srv.rest}${path}`, body: Buffer.from(JSON.stringify(query(q0, ef))), http1: true, clients, seconds,
          headers: { ...auth, 'content-type': 'application/json' },
        }));
        nativeRows.push({ engine: 'svc', protocol: `REST (h2load --h1, ${clients} connections; searches on: ${threads})`, ef, recall, queries: 1, ...rest });
        const grpc = await withCpuCost(srv.pid, () => h2load({
          url: `http://${srv.grpcAddr}${SvcService.search.path}`, body: framed, http1: false, clients, seconds,
          headers: { ...auth, 'content-type': 'application/grpc', te: 'trailers' },
        }));
        nativeRows.push({ engine: 'svc', protocol: `gRPC (h2load, ${clients} HTTP/2 connections; searches on: ${threads})`, ef, recall, queries: 1, ...grpc });
        log(`  server: svc (searches on: ${threads}) native clients x${clients}: REST ${rest.qps} QPS (mean ${rest.mean_ms} ms), gRPC ${grpc.qps} QPS (mean ${grpc.mean_ms} ms)`);
      }
      if (tool('wrk') === null) {
        out.native_svc_rotating_skipped = 'wrk is not installed (Debian: wrk)';
        return;
      }
      for (const clients of levels) {
        const rest = await wrkAllQueries(srv, ef, clients);
        nativeRows.push({ engine: 'svc', protocol: `REST (wrk, ${clients} connections; searches on: ${threads})`, ef, recall, queries: d.nq, ...rest });
        log(`  server: svc (searches on: ${threads}) wrk x${clients}, ${d.nq} queries in turn: REST ${rest.qps} QPS (p50 ${rest.p50_ms} ms, p99 ${rest.p99_ms} ms)`);
      }
    };
    const workers = autoSearchWorkers(availableParallelism());
    const defaultSearchThreads = `event loop + ${workers} search worker${workers === 1 ? '' : 's'} (default)`;
    const srv = await startSvc();
    try {
      await load(srv);
      const setupPool = new Pool(srv.rest, { connections: 1 });
      const { ef, recall } = await pickEf(d, async (q, e) => ids((await restSearchOver(setupPool, path, query(q, e))).hits));
      await setupPool.close();
      log(`  server: svc ef ${ef} gives recall ${recall}`);
      svcEf = ef;
      svcRecall = recall;
      const qOf = (c: number, i: number) => row(d.queries, d.dim, (c * 7919 + i) % d.nq);
      for (const clients of levels) {
        const pool = new Pool(srv.rest, { connections: clients, pipelining: 1 });
        await restSearchOver(pool, path, query(qOf(0, 0), ef));
        const r = await closedLoop(clients, seconds, (c, i) => restSearchOver(pool, path, query(qOf(c, i), ef)));
        await pool.close();
        rows.push({ engine: 'svc', protocol: `REST (HTTP/1.1 JSON, ${clients} keep-alive connections)`, ef, recall, ...r });
        log(`  server: svc REST x${clients}: ${r.qps} QPS p50 ${r.p50_ms} p99 ${r.p99_ms} ms`);
      }
      const grpcClients: [string, (connections: number) => SearchClient][] = [
        ['node:http2 client', (n) => leanGrpcSearch(srv.grpcAddr, BENCH_API_KEY, n)],
        ['grpc-js client', (n) => grpcJsSearch(srv.grpcAddr, BENCH_API_KEY, n)],
      ];
      for (const [clientName, make] of grpcClients) {
        for (const clients of levels) {
          const connections = Math.min(clients, GRPC_CONNECTIONS_MAX);
          const client = make(connections);
          const req = (q: Float32Array): SearchCall => ({ collection: 'b', vector: q, k: d.k, ef_search: ef, with_payload: false, filter: undefined });
          const first = await client.search(req(qOf(0, 0)));
          if (first.hits.length !== d.k) throw new Error(`gRPC ${clientName}: ${first.hits.length} hits, expected ${d.k}`);
          const r = await closedLoop(clients, seconds, (c, i) => client.search(req(qOf(c, i))));
          await client.close();
          rows.push({ engine: 'svc', protocol: `gRPC (${clientName}, ${connections} HTTP/2 connections)`, ef, recall, ...r });
          log(`  server: svc gRPC (${clientName}) x${clients}: ${r.qps} QPS p50 ${r.p50_ms} p99 ${r.p99_ms} ms`);
        }
      }
      // The same data with scalar quantization: its own ef for recall 0.95, every query in turn.
      await load(srv, 'bs', 'scalar');
      const sq8Pool = new Pool(srv.rest, { connections: 1 });
      const sq8 = await pickEf(d, async (q, e) => ids((await restSearchOver(sq8Pool, sq8Path, query(q, e))).hits));
      await sq8Pool.close();
      log(`  server: svc-sq8 (scalar quantization) ef ${sq8.ef} gives recall ${sq8.recall}`);
      if (sq8.recall >= TARGET) sq8Ef = sq8.ef;
      if (tool('wrk') !== null) {
        for (const clients of levels) {
          const rest = await wrkAllQueries(srv, sq8.ef, clients, sq8Path);
          nativeRows.push({ engine: 'svc-sq8', protocol: `REST (wrk, ${clients} connections; scalar quantization; searches on: ${defaultSearchThreads})`, ef: sq8.ef, recall: sq8.recall, queries: d.nq, ...rest });
          log(`  server: svc-sq8 wrk x${clients}, ${d.nq} queries in turn: REST ${rest.qps} QPS (p50 ${rest.p50_ms} ms, p99 ${rest.p99_ms} ms)`);
        }
      }
      if (tool('h2load') === null) out.native_svc_skipped = 'h2load is not installed (Debian: nghttp2-client)';
      else {
        const before = await workerSearches(srv.rest);
        const rowsBefore = nativeRows.length;
        await nativeSvc(srv, defaultSearchThreads, ef, recall);
        // How much of that load the pool took: the worker's count over every request h2load made
        // (its warm-up second included, so a share near 1 is all of them).
        const sent = nativeRows.slice(rowsBefore).reduce((n, r) => n + r.requests, 0);
        out.search_worker_searches_native = { worker: (await workerSearches(srv.rest)) - before, measured_requests: sent };
      }
    } catch (e) {
      out.svc_error = (e as Error).message;
      log(`  server: svc failed: ${out.svc_error}`);
    } finally {
      await srv.stop();
    }
    if (tool('h2load') !== null && out.svc_error === undefined) {
      // The same server without search workers: what the pool adds under native clients.
      const srv2 = await startSvc({ SVC_SEARCH_WORKERS: '0' });
      try {
        await load(srv2);
        await nativeSvc(srv2, 'event loop only (SVC_SEARCH_WORKERS=0)', svcEf, svcRecall);
      } catch (e) {
        out.svc_workers_error = (e as Error).message;
        log(`  server: svc without search workers failed: ${out.svc_workers_error}`);
      } finally {
        await srv2.stop();
      }
      // What one Node.js event loop can answer at all: the same body, JSON-parsed, ten fixed hits back.
      const floor = await startNodeFloor();
      try {
        const body = Buffer.from(JSON.stringify({ vector: Array.from(row(d.queries, d.dim, 0)), k: d.k, ef_search: svcEf, with_payload: false }));
        for (const clients of levels) {
          const r = await withCpuCost(floor.pid, () => h2load({ url: `${floor.url}${path}`, body, http1: true, clients, seconds, headers: { 'content-type': 'application/json' } }));
          nativeRows.push({ engine: 'node:http floor', protocol: `bare node:http, one event loop: JSON.parse of the body, 10 fixed hits, no search (h2load --h1, ${clients} connections)`, ef: 0, recall: 0, queries: 1, ...r });
          log(`  server: bare node:http floor x${clients}: ${r.qps} QPS (mean ${r.mean_ms} ms)`);
        }
      } finally {
        await floor.stop();
      }
    }
  }

  if (peers.includes('pgvector')) {
    const problem = nativePgvectorProblem();
    if (problem !== null) {
      out.pgvector_skipped = `native pgvector cannot run here (${problem}); a WASM stand-in has no server protocol to load`;
    } else {
      const cluster = await startPostgres();
      try {
        const conn = { host: '127.0.0.1', port: cluster.port, user: 'postgres', database: 'postgres' };
        const c = new pg.Client(conn);
        c.on('error', () => undefined);
        await c.connect();
        await loadPgvector({ query: (t, v) => c.query(t, v), close: () => c.end() }, d, d.metric);
        const sql = pgSearchSql(d.metric, false);
        const { ef, recall } = await pickEf(d, async (q, e) => {
          await c.query(`SET hnsw.ef_search = ${e}`);
          return Int32Array.from((await c.query(sql, [vecLiteral(q), d.k])).rows, (x: { id: number }) => x.id);
        });
        await c.end();
        log(`  server: pgvector ef ${ef} gives recall ${recall}`);
        pgEf = ef;
        for (const clients of levels) {
          const pool = new pg.Pool({ ...conn, max: clients, options: `-c hnsw.ef_search=${ef}` });
          pool.on('error', () => undefined); // idle connections see the cluster's shutdown
          const r = await closedLoop(clients, seconds, (ci, i) => pool.query({ name: 'q', text: sql, values: [vecLiteral(row(d.queries, d.dim, (ci * 7919 + i) % d.nq)), d.k] }));
          await pool.end();
          rows.push({ engine: 'pgvector', protocol: `PostgreSQL wire (pg, prepared, ${clients} connections)`, ef, recall, ...r });
          log(`  server: pgvector x${clients}: ${r.qps} QPS p50 ${r.p50_ms} p99 ${r.p99_ms} ms`);
        }
        if (tool('pgbench') === null) out.native_pgvector_skipped = 'pgbench is not installed';
        else {
          // The same one query as h2load sends svc, as a literal in a prepared statement.
          const sql = `SELECT id FROM b ORDER BY embedding ${pgOps(d.metric).op} '${vecLiteral(row(d.queries, d.dim, 0))}' LIMIT ${d.k}`;
          for (const clients of levels) {
            const r = await withCpuCost(cluster.pid, () => pgbench({ port: cluster.port, sql, clients, seconds, options: `-c hnsw.ef_search=${ef}` }), { withChildren: true });
            nativeRows.push({ engine: 'pgvector', protocol: `PostgreSQL wire (pgbench, prepared, ${clients} connections)`, ef, recall, queries: 1, ...r });
            log(`  server: pgvector pgbench x${clients}: ${r.qps} QPS (mean ${r.mean_ms} ms)`);
          }
          // Every query in turn, as wrk sends svc: a random query id a request, its vector read from a
          // table by primary key inside the statement (pgbench has no way to pass a vector), so
          // PostgreSQL parses no vector text a request where svc parses JSON.
          const rotating = await rotatingPgvectorScript(conn, d);
          for (const clients of levels) {
            const r = await pgbenchAllQueries(cluster, rotating, ef, clients);
            nativeRows.push({ engine: 'pgvector', protocol: `PostgreSQL wire (pgbench, prepared, ${clients} connections; query vector by id from a table)`, ef, recall, queries: d.nq, ...r });
            log(`  server: pgvector pgbench x${clients}, ${d.nq} queries in turn: ${r.qps} QPS (mean ${r.mean_ms} ms)`);
          }
        }
      } finally {
        await cluster.stop();
      }
    }
  }
  if (peers.includes('svc') && peers.includes('pgvector') && svcEf > 0 && pgEf > 0 && out.svc_error === undefined) {
    if (tool('wrk') === null || tool('pgbench') === null) out.paired_skipped = 'wrk or pgbench is not installed';
    else out.paired_all_queries_x8 = await pairedRounds(mode === 'full' ? 5 : mode === 'quick' ? 3 : 1);
  }
  out.rows = rows;
  const qpsOf = (engine: string, proto: string, clients: number) =>
    (rows.find((r) => r.engine === engine && String(r.protocol).startsWith(proto) && r.clients === clients)?.qps as number | undefined);
  const ratios: Record<string, number | null> = {};
  for (const clients of levels) {
    const pgq = qpsOf('pgvector', 'PostgreSQL', clients);
    for (const [name, proto] of [['REST', 'REST'], ['gRPC', 'gRPC (node:http2'], ['gRPC_grpcjs_client', 'gRPC (grpc-js']]) {
      const s = qpsOf('svc', proto, clients);
      ratios[`svc_${name}_vs_pgvector_x${clients}`] = s && pgq ? round(s / pgq, 2) : null;
    }
  }
  out.ratios_at_recall_095 = ratios;
  out.native_rows = nativeRows;
  /** The first row (the default server's) of an engine, protocol and load. */
  const nativeRow = (engine: string, proto: string, clients: number, queries = 1) =>
    nativeRows.find((r) => r.engine === engine && String(r.protocol).startsWith(proto) && r.clients === clients && r.queries === queries);
  const nativeQps = (engine: string, proto: string, clients: number, queries = 1) => nativeRow(engine, proto, clients, queries)?.qps;
  const nativeRatios: Record<string, number | null> = {};
  for (const clients of levels) {
    const pgq = nativeQps('pgvector', 'PostgreSQL', clients);
    for (const name of ['REST', 'gRPC']) {
      const sq = nativeQps('svc', name, clients);
      nativeRatios[`svc_${name}_vs_pgvector_native_clients_x${clients}`] = sq && pgq ? round(sq / pgq, 2) : null;
    }
  }
  for (const clients of levels) {
    const pgq = nativeQps('pgvector', 'PostgreSQL', clients, d.nq);
    const sq = nativeQps('svc', 'REST', clients, d.nq);
    nativeRatios[`svc_REST_vs_pgvector_native_clients_all_queries_x${clients}`] = sq && pgq ? round(sq / pgq, 2) : null;
    const s8 = nativeQps('svc-sq8', 'REST', clients, d.nq);
    nativeRatios[`svc_sq8_REST_vs_pgvector_native_clients_all_queries_x${clients}`] = s8 && pgq ? round(s8 / pgq, 2) : null;
  }
  for (const clients of levels) {
    const pgq = nativeQps('pgvector', 'PostgreSQL', clients);
    const fq = nativeQps('node:http floor', 'bare', clients);
    nativeRatios[`node_http_floor_vs_pgvector_native_clients_x${clients}`] = fq && pgq ? round(fq / pgq, 2) : null;
  }
  out.ratios_native_clients_at_recall_095 = nativeRatios;
  // What a request costs each server in CPU at 8 clients (bench/lib/proc-cpu.ts): the load generator's
  // share of the two cores is out of it, so it says how the servers would compare with cores to spare.
  const cost = (engine: string, proto: string, queries = 1) => {
    const r = nativeRow(engine, proto, 8, queries);
    return r === undefined ? null : { server_us: r.server_cpu_us_per_request, main_thread_us: r.main_thread_us_per_request };
  };
  out.cpu_us_per_request_native_x8 = {
    svc_REST: cost('svc', 'REST'), svc_gRPC: cost('svc', 'gRPC'), node_http_floor: cost('node:http floor', 'bare'), pgvector: cost('pgvector', 'PostgreSQL'),
    svc_REST_all_queries: cost('svc', 'REST', d.nq), svc_sq8_REST_all_queries: cost('svc-sq8', 'REST', d.nq),
    pgvector_all_queries: cost('pgvector', 'PostgreSQL', d.nq),
  };
  return out;
}

/**
 * A pgbench script that runs every query in turn: the queries go into a table `bq` (id, vector), and
 * each transaction draws an id and searches with that row's vector. Refuses to return one whose plan
 * does not search the HNSW index (a sequential scan would make the comparison meaningless).
 */
async function rotatingPgvectorScript(conn: pg.ClientConfig, d: Dataset): Promise<string> {
  const c = new pg.Client(conn);
  c.on('error', () => undefined);
  await c.connect();
  try {
    await c.query('DROP TABLE IF EXISTS bq');
    await c.query(`CREATE TABLE bq (qid int PRIMARY KEY, v vector(${d.dim}))`);
    for (let i = 0; i < d.nq; i++) await c.query('INSERT INTO bq VALUES ($1, $2)', [i, vecLiteral(row(d.queries, d.dim, i))]);
    await c.query('ANALYZE bq');
    const select = `SELECT id FROM b ORDER BY embedding ${pgOps(d.metric).op} (SELECT v FROM bq WHERE qid = :q) LIMIT ${d.k}`;
    const plan = (await c.query(`EXPLAIN ${select.replace(':q', '0')}`)).rows.map((r: Record<string, string>) => r['QUERY PLAN']).join('\n');
    if (!/Index Scan using b_hnsw on b\b/.test(plan)) throw new Error(`pgvector: the rotating query does not use the HNSW index:\n${plan}`);
    return `\\set q random(0, ${d.nq - 1})\n${select};\n`;
  } finally {
    await c.end();
  }
}
