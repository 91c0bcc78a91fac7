/**
 * LanceDB (embedded, prebuilt native package, installed on demand into bench/.cache/npm). Its JS API
 * exposes no M or efConstruction for HNSW: the index is IVF_HNSW_SQ with one partition (a plain HNSW
 * over scalar-quantised vectors) at Lance's own graph defaults; the sweep sets the query's ef. Filters run
 * as LanceDB's prefilter (its default) over a btree index on `bucket`.
 */
import { mkdtempSync, readdirSync, rmSync, statSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { BenchMetric, Dataset } from '../lib/data.js';
import { row } from '../lib/data.js';
import { importOnDemand } from '../lib/on-demand.js';
import type { BucketFilter, Peer } from './types.js';

// The package lives in bench/.cache/npm (installed on demand), outside the type checker's reach: the
// little of its API used here, typed by hand.
interface LanceQuery {
  ef(ef: number): LanceQuery;
  limit(k: number): LanceQuery;
  select(cols: string[]): LanceQuery;
  where(predicate: string): LanceQuery;
  toArray(): Promise<{ id: number }[]>;
}
interface LanceTable {
  add(rows: object[]): Promise<unknown>;
  createIndex(column: string, options: { config: unknown }): Promise<void>;
  vectorSearch(v: number[]): LanceQuery;
  close(): void;
}
interface LanceConnection {
  createTable(name: string, rows: object[], opts: { mode: 'overwrite' }): Promise<LanceTable>;
  close(): void;
}
interface Lance {
  connect(uri: string): Promise<LanceConnection>;
  Index: { hnswSq(o: object): unknown; btree(): unknown };
}

/** Bytes of every file under `dir` (a Lance dataset: its data files and its index). */
function treeBytes(dir: string): number {
  let n = 0;
  for (const e of readdirSync(dir, { withFileTypes: true, recursive: true })) {
    if (e.isFile()) n += statSync(join(e.parentPath ?? e.path, e.name)).size;
  }
  return n;
}

export async function lancedb(metric: BenchMetric): Promise<Peer> {
  const lance = await importOnDemand<Lance>('@lancedb/lancedb');
  const dir = mkdtempSync(join(tmpdir(), 'svc-bench-lance-'));
  const conn = await lance.connect(dir);
  let table: LanceTable | undefined;
  let ef = 64;
  return {
    name: 'lancedb',
    note: '@lancedb/lancedb 0.37.1: IVF_HNSW_SQ, 1 partition, Lance default m/ef_construction (not settable from JS); prefilter',
    async build(d: Dataset, buckets?: Int32Array) {
      const rows = (i0: number, i1: number) => Array.from({ length: i1 - i0 }, (_, j) => ({
        id: i0 + j, bucket: buckets?.[i0 + j] ?? 0, vector: Array.from(row(d.base, d.dim, i0 + j)),
      }));
      const chunk = 10_000;
      table = await conn.createTable('b', rows(0, Math.min(chunk, d.n)), { mode: 'overwrite' });
      for (let i = chunk; i < d.n; i += chunk) await table.add(rows(i, Math.min(d.n, i + chunk)));
      await table.createIndex('vector', {
        config: lance.Index.hnswSq({ distanceType: metric === 'l2' ? 'l2' : 'cosine', numPartitions: 1 }),
      });
      if (buckets) await table.createIndex('bucket', { config: lance.Index.btree() });
    },
    setEf(e: number) { ef = e; },
    async search(q: Float32Array, k: number, filter?: BucketFilter) {
      let query = table!.vectorSearch(Array.from(q)).ef(ef).limit(k).select(['id', '_distance']);
      if (filter) query = query.where(`bucket < ${filter.below}`);
      const r = await query.toArray();
      return Int32Array.from(r, (x) => x.id);
    },
    indexBytes: () => treeBytes(dir),
    async close() { table?.close(); conn.close(); rmSync(dir, { recursive: true, force: true }); },
  };
}
