/**
 * Server throughput and latency: svc over REST and over gRPC against pgvector over its own protocol, at
 * 1, 8 and 32 concurrent clients (closed loop), each at the smallest ef whose recall@10 reaches 0.95 on
 * the same data (MNIST-784; seeded random in tiny mode). Encryption and fsync are on for svc; pgvector
 * runs one backend per connection (a pool as big as the client count).
 */
import pg from 'pg';
import { mnist, random, recallAt, row, type Dataset } from '../lib/data.js';
import { startSvc } from '../lib/server-proc.js';
import { closedLoop, round } from '../lib/stats.js';
import { loadPgvector, nativePgvectorProblem, pgSearchSql, startPostgres, vecLiteral } from '../peers/pgvector.js';
import { b64 } from '../peers/svc.js';
import type { Mode } from '../run.js';

const EFS = [10, 16, 24, 32, 48, 64, 96, 128, 256, 512];
const TARGET = 0.95;

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
  const ids = (hits: { id: string }[]) => Int32Array.from(hits, (h) => Number(h.id));

  if (peers.includes('svc')) {
    const srv = await startSvc();
    try {
      await srv.call('POST', '/v1/collections', { name: 'b', dim: d.dim, metric: d.metric, index_params: { m: 16, ef_construction: 200 } });
      for (let i = 0; i < d.n; i += 10_000) {
        const points = Array.from({ length: Math.min(10_000, d.n - i) }, (_, j) => ({ id: String(i + j), vector_b64: b64(row(d.base, d.dim, i + j)) }));
        await srv.call('POST', '/v1/collections/b/points:bulk', { points });
      }
      await srv.call('POST', '/v1/collections/b/query', { vector: Array.from(row(d.queries, d.dim, 0)), k: 1, consistency: 'strong' });
      const restSearch = async (q: Float32Array, ef: number) =>
        ids((await srv.call<{ hits: { id: string }[] }>('POST', '/v1/collections/b/query', { vector: Array.from(q), k: d.k, ef_search: ef, with_payload: false })).hits);
      const { ef, recall } = await pickEf(d, restSearch);
      log(`  server: svc ef ${ef} gives recall ${recall}`);
      for (const clients of levels) {
        const r = await closedLoop(clients, seconds, (c, i) => restSearch(row(d.queries, d.dim, (c * 7919 + i) % d.nq), ef));
        rows.push({ engine: 'svc', protocol: 'REST (HTTP/1.1 JSON)', ef, recall, ...r });
        log(`  server: svc REST x${clients}: ${r.qps} QPS p50 ${r.p50_ms} p99 ${r.p99_ms} ms`);
      }
      for (const clients of levels) {
        const r = await closedLoop(clients, seconds, (c, i) => srv.grpcSearch({
          collection: 'b', vector: Array.from(row(d.queries, d.dim, (c * 7919 + i) % d.nq)), k: d.k, ef_search: ef, with_payload: false,
        }));
        rows.push({ engine: 'svc', protocol: 'gRPC', ef, recall, ...r });
        log(`  server: svc gRPC x${clients}: ${r.qps} QPS p50 ${r.p50_ms} p99 ${r.p99_ms} ms`);
      }
    } catch (e) {
      out.svc_error = (e as Error).message;
      log(`  server: svc failed: ${out.svc_error}`);
    } finally {
      await srv.stop();
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
        for (const clients of levels) {
          const pool = new pg.Pool({ ...conn, max: clients, options: `-c hnsw.ef_search=${ef}` });
          pool.on('error', () => undefined); // idle connections see the cluster's shutdown
          const r = await closedLoop(clients, seconds, (ci, i) => pool.query({ name: 'q', text: sql, values: [vecLiteral(row(d.queries, d.dim, (ci * 7919 + i) % d.nq)), d.k] }));
          await pool.end();
          rows.push({ engine: 'pgvector', protocol: 'PostgreSQL wire (pg, prepared)', ef, recall, ...r });
          log(`  server: pgvector x${clients}: ${r.qps} QPS p50 ${r.p50_ms} p99 ${r.p99_ms} ms`);
        }
      } finally {
        await cluster.stop();
      }
    }
  }
  out.rows = rows;
  const qpsOf = (engine: string, proto: string, clients: number) =>
    (rows.find((r) => r.engine === engine && String(r.protocol).startsWith(proto) && r.clients === clients)?.qps as number | undefined);
  const ratios: Record<string, number | null> = {};
  for (const clients of levels) {
    const pgq = qpsOf('pgvector', 'PostgreSQL', clients);
    for (const proto of ['REST', 'gRPC']) {
      const s = qpsOf('svc', proto, clients);
      ratios[`svc_${proto}_vs_pgvector_x${clients}`] = s && pgq ? round(s / pgq, 2) : null;
    }
  }
  out.ratios_at_recall_095 = ratios;
  return out;
}
