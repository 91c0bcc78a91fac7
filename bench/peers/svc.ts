/**
 * svc itself, two ways: `svc` through the embedded API a user calls (openDatabase, encrypted data
 * directory, WAL with fsync, the graph built by the engine's own rebuild), and `svc-core`, the HNSW
 * engine alone over a VectorStore (what the index engineer tunes; no validation, ids or payloads).
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { openDatabase } from '../../core/embedded.js';
import { Hnsw } from '../../core/index/hnsw/hnsw.js';
import { VectorStore } from '../../core/index/vector-store.js';
import type { BenchMetric, Dataset } from '../lib/data.js';
import { row } from '../lib/data.js';
import { EF_CONSTRUCTION, M, type BucketFilter, type Peer } from './types.js';

export const BENCH_MASTER_KEY = 'b3'.repeat(32);
type Db = Awaited<ReturnType<typeof openDatabase>>;

export const b64 = (v: Float32Array): string => Buffer.from(v.buffer, v.byteOffset, v.byteLength).toString('base64');

/**
 * `quantization: 'scalar'` is the peer `svc-sq8`: the same path, the graph traversing int8 codes and
 * re-scoring its candidates against the float vectors (core/index/scalar-codes.ts).
 */
export async function svcEmbedded(metric: BenchMetric, quantization: 'none' | 'scalar' = 'none'): Promise<Peer> {
  const dir = mkdtempSync(join(tmpdir(), 'svc-bench-'));
  const db: Db = await openDatabase({ dataDir: join(dir, 'data'), encryptionKey: BENCH_MASTER_KEY });
  let ef = 64;
  const peer: Peer & { detail?: Record<string, number> } = {
    name: quantization === 'scalar' ? 'svc-sq8' : 'svc',
    note: `embedded API (openDatabase), encrypted, WAL fsync on, graph built by the engine${
      quantization === 'scalar' ? '; scalar quantization (int8 traversal, exact re-score)' : ''}`,
    async build(d: Dataset, buckets?: Int32Array) {
      await db.createCollection({
        name: 'b', dim: d.dim, metric, quantization, index_params: { m: M, ef_construction: EF_CONSTRUCTION, ef_search: 64 },
        filterable: [{ path: 'bucket', field_type: 'numeric' }],
      });
      const chunk = 10_000;
      const t0 = performance.now();
      for (let i = 0; i < d.n; i += chunk) {
        const points = [];
        for (let j = i; j < Math.min(d.n, i + chunk); j++) {
          points.push({ id: String(j), vector_b64: b64(row(d.base, d.dim, j)), payload: { bucket: buckets?.[j] ?? 0 } });
        }
        await db.bulkUpsert('b', { points });
      }
      // 'strong' waits until the graph holds every write: the build is done when this returns.
      const t1 = performance.now();
      await db.search('b', { vector: Array.from(row(d.base, d.dim, 0)), k: 1, consistency: 'strong' });
      peer.detail = { ingest_s: (t1 - t0) / 1000, index_s: (performance.now() - t1) / 1000 };
    },
    setEf(e: number) { ef = e; },
    async search(q: Float32Array, k: number, filter?: BucketFilter) {
      // The embedded API takes a Float32Array as it is (copying 784 floats into an Array per query cost
      // as much as a quarter of a small search).
      const { hits } = await db.search('b', {
        vector: q, k, ef_search: ef, with_payload: false,
        ...(filter ? { filter: { lt: { field: 'bucket', value: filter.below } } } : {}),
      });
      const out = new Int32Array(hits.length);
      for (let i = 0; i < hits.length; i++) out[i] = Number(hits[i].id);
      return out;
    },
    async indexBytes() {
      const c = (await db.stats()).per_collection.find((p) => p.name === 'b');
      return c === undefined ? 0 : c.vector_bytes + c.graph_bytes;
    },
    async close() {
      await db.close();
      rmSync(dir, { recursive: true, force: true });
    },
  };
  return peer;
}

export async function svcCore(metric: BenchMetric): Promise<Peer> {
  let index: Hnsw | undefined;
  let store: VectorStore | undefined;
  let ef = 64;
  let buckets: Int32Array | undefined;
  return {
    name: 'svc-core',
    note: 'core/index HNSW alone over a VectorStore (WASM SIMD kernel), one thread',
    async build(d: Dataset, b?: Int32Array) {
      buckets = b;
      store = VectorStore.create({ dim: d.dim, initialSlots: d.n });
      for (let i = 0; i < d.n; i++) store.add(row(d.base, d.dim, i));
      const slots = Int32Array.from({ length: d.n }, (_, i) => i);
      index = Hnsw.build(store, slots, { m: M, efConstruction: EF_CONSTRUCTION, kind: metric === 'l2' ? 'l2' : 'ip', seed: 100 });
    },
    setEf(e: number) { ef = e; },
    search(q: Float32Array, k: number, filter?: BucketFilter) {
      const bk = buckets;
      const accept = filter && bk ? (s: number) => bk[s] < filter.below : undefined;
      return index!.search(q, k, Math.max(ef, k), accept).slots;
    },
    indexBytes: () => store!.count * store!.strideBytes + index!.memoryBytes(),
    async close() { index = undefined; },
  };
}
