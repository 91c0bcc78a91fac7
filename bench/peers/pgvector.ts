/**
 * pgvector on PostgreSQL 15, native: bench/pgvector-setup.sh builds pgvector from Debian's source package;
 * here a cluster is made in a temporary directory (initdb as the postgres user when we are root), started
 * on a free loopback port and stopped by its postmaster pid. Where that cannot be done, PGlite with
 * pgvector compiled to WASM stands in, labelled as such in every result.
 */
import { execFileSync } from 'node:child_process';
import { chownSync, existsSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import pg from 'pg';
import type { BenchMetric, Dataset } from '../lib/data.js';
import { row } from '../lib/data.js';
import { BENCH_DIR, importOnDemand, requireOnDemand } from '../lib/on-demand.js';
import { freePort } from '../../roles/testing/free-port.js';
import { EF_CONSTRUCTION, M, type BucketFilter, type Peer } from './types.js';

const PG_BIN = '/usr/lib/postgresql/15/bin';
const CONTROL = '/usr/share/postgresql/15/extension/vector.control';

export interface PgCluster {
  port: number;
  pid: number;
  version: string;
  stop(): Promise<void>;
}

const asPostgres = (cmd: string, args: string[]): string[] =>
  process.getuid?.() === 0 ? ['runuser', ['-u', 'postgres', '--', cmd, ...args]].flat() as string[] : [cmd, ...args];

function run(argv: string[]): string {
  return execFileSync(argv[0], argv.slice(1), { encoding: 'utf8', stdio: ['ignore', 'pipe', 'pipe'] });
}

/** Why native pgvector cannot run here, or null when it can (building it first when we may). */
export function nativePgvectorProblem(): string | null {
  if (!existsSync(join(PG_BIN, 'initdb'))) return `PostgreSQL 15 server binaries are not installed (${PG_BIN})`;
  if (!existsSync(CONTROL)) {
    if (process.getuid?.() !== 0) return 'pgvector is not installed and installing it needs root';
    try { execFileSync('bash', [join(BENCH_DIR, 'pgvector-setup.sh')], { stdio: ['ignore', 'ignore', 'inherit'] }); } catch (e) {
      return `bench/pgvector-setup.sh failed: ${(e as Error).message.split('\n')[0]}`;
    }
  }
  return null;
}

export async function startPostgres(): Promise<PgCluster> {
  const dir = mkdtempSync(join(tmpdir(), 'svc-bench-pg-'));
  const data = join(dir, 'data');
  if (process.getuid?.() === 0) {
    const uid = Number(run(['id', '-u', 'postgres']).trim());
    const gid = Number(run(['id', '-g', 'postgres']).trim());
    chownSync(dir, uid, gid);
  }
  run(asPostgres(join(PG_BIN, 'initdb'), ['-D', data, '-A', 'trust', '-U', 'postgres', '--no-sync', '-E', 'UTF8']));
  const port = await freePort();
  // One query = one thread (no parallel workers), as every other engine here; memory enough to build in RAM.
  const opts = [
    `-p ${port}`, `-k ${dir}`, '-c listen_addresses=127.0.0.1', '-c shared_buffers=2GB', '-c maintenance_work_mem=4GB',
    '-c max_parallel_maintenance_workers=0', '-c max_parallel_workers_per_gather=0', '-c max_connections=100', '-c jit=off',
  ].join(' ');
  run(asPostgres(join(PG_BIN, 'pg_ctl'), ['-D', data, '-o', opts, '-l', join(dir, 'log'), '-w', 'start']));
  const pid = Number(readFileSync(join(data, 'postmaster.pid'), 'utf8').split('\n')[0]);
  const version = run([join(PG_BIN, 'postgres'), '--version']).trim();
  const kill = () => { try { process.kill(pid, 'SIGINT'); } catch { /* gone */ } };
  process.once('exit', kill);
  return {
    port, pid, version,
    async stop() {
      kill(); // SIGINT = fast shutdown of the postmaster we started, by its pid
      for (let i = 0; i < 100; i++) {
        try { process.kill(pid, 0); } catch { break; }
        await new Promise((r) => setTimeout(r, 100));
      }
      process.removeListener('exit', kill);
      rmSync(dir, { recursive: true, force: true });
    },
  };
}

interface Sql {
  query(text: string, values?: unknown[]): Promise<{ rows: any[] }>;
  close(): Promise<void>;
}

export const vecLiteral = (v: Float32Array): string => `[${Array.prototype.join.call(v, ',')}]`;

async function nativeSql(cluster: PgCluster): Promise<Sql> {
  const c = new pg.Client({ host: '127.0.0.1', port: cluster.port, user: 'postgres', database: 'postgres' });
  c.on('error', () => undefined); // the cluster's own shutdown at the end
  await c.connect();
  return { query: (t, v) => c.query(t, v), close: () => c.end() };
}

async function pgliteSql(): Promise<Sql> {
  const { PGlite } = await importOnDemand<any>('@electric-sql/pglite');
  const { vector } = await import(requireOnDemand('@electric-sql/pglite-pgvector')) as any;
  const db = await PGlite.create({ extensions: { vector } });
  return { query: (t, v) => db.query(t, v), close: () => db.close() };
}

export function pgOps(metric: BenchMetric): { ops: string; op: string } {
  return metric === 'l2' ? { ops: 'vector_l2_ops', op: '<->' } : { ops: 'vector_cosine_ops', op: '<=>' };
}

/** Loads the table and builds the HNSW index; returns the two times in seconds. */
export async function loadPgvector(sql: Sql, d: Dataset, metric: BenchMetric, buckets?: Int32Array): Promise<{ load_s: number; index_s: number }> {
  await sql.query('CREATE EXTENSION IF NOT EXISTS vector');
  await sql.query('DROP TABLE IF EXISTS b');
  await sql.query(`CREATE TABLE b (id int PRIMARY KEY, bucket int NOT NULL, embedding vector(${d.dim}) NOT NULL)`);
  const t0 = performance.now();
  const chunk = 500;
  for (let i = 0; i < d.n; i += chunk) {
    const end = Math.min(d.n, i + chunk);
    const values: unknown[] = [];
    const tuples: string[] = [];
    for (let j = i; j < end; j++) {
      tuples.push(`($${values.length + 1}, $${values.length + 2}, $${values.length + 3})`);
      values.push(j, buckets?.[j] ?? 0, vecLiteral(row(d.base, d.dim, j)));
    }
    await sql.query(`INSERT INTO b VALUES ${tuples.join(',')}`, values);
  }
  const t1 = performance.now();
  await sql.query(`CREATE INDEX b_hnsw ON b USING hnsw (embedding ${pgOps(metric).ops}) WITH (m = ${M}, ef_construction = ${EF_CONSTRUCTION})`);
  const t2 = performance.now();
  if (buckets) await sql.query('CREATE INDEX b_bucket ON b (bucket)');
  await sql.query('ANALYZE b');
  return { load_s: (t1 - t0) / 1000, index_s: (t2 - t1) / 1000 };
}

export function pgSearchSql(metric: BenchMetric, filtered: boolean): string {
  const { op } = pgOps(metric);
  if (!filtered) return `SELECT id FROM b ORDER BY embedding ${op} $1 LIMIT $2`;
  // relaxed_order may return slightly out of order: re-sort the materialised result (pgvector's README).
  return `WITH r AS MATERIALIZED (SELECT id, embedding ${op} $1 AS d FROM b WHERE bucket < $3 ORDER BY d LIMIT $2) SELECT id FROM r ORDER BY d`;
}

export async function pgvector(metric: BenchMetric): Promise<Peer> {
  const problem = nativePgvectorProblem();
  let cluster: PgCluster | undefined;
  let sql: Sql;
  let note: string;
  if (problem === null) {
    cluster = await startPostgres();
    sql = await nativeSql(cluster);
    const v = (await sql.query("SELECT extversion FROM pg_extension WHERE extname = 'vector'").catch(() => ({ rows: [] }))).rows;
    note = `native ${cluster.version}, pgvector ${v[0]?.extversion ?? '(from Debian source)'}, pg client, one connection`;
  } else {
    sql = await pgliteSql();
    note = `STAND-IN: PGlite (WASM) + pgvector, because native could not run: ${problem}`;
  }
  const peer: Peer & { detail?: Record<string, number>; cluster?: PgCluster } = {
    name: problem === null ? 'pgvector' : 'pgvector (PGlite stand-in)',
    note,
    cluster,
    async build(d: Dataset, buckets?: Int32Array) {
      peer.detail = await loadPgvector(sql, d, metric, buckets);
      if (cluster) {
        const v = (await sql.query("SELECT extversion FROM pg_extension WHERE extname = 'vector'")).rows;
        (peer as { note: string }).note = note.replace('(from Debian source)', v[0]?.extversion ?? '?');
      }
      await sql.query("SET hnsw.iterative_scan = 'relaxed_order'").catch(() => undefined);
    },
    async setEf(ef: number) { await sql.query(`SET hnsw.ef_search = ${Math.floor(ef)}`); },
    async search(q: Float32Array, k: number, filter?: BucketFilter) {
      const values: unknown[] = [vecLiteral(q), k];
      if (filter) values.push(filter.below);
      const r = await sql.query(pgSearchSql(metric, filter !== undefined), values);
      return Int32Array.from(r.rows, (x: { id: number }) => x.id);
    },
    async indexBytes() {
      // pgvector's HNSW index keeps a copy of each vector in its tuples beside the neighbour lists.
      const r = await sql.query("SELECT pg_relation_size('b_hnsw') AS n");
      return Number((r.rows[0] as { n: string | number }).n);
    },
    async close() {
      await sql.close();
      await cluster?.stop();
    },
  };
  return peer;
}
