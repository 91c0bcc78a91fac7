/**
 * Orama 3 (plain TypeScript): no ANN index, vector search is a brute-force scan with cosine similarity
 * only. Run on small subsets; ef does not apply (its "sweep" is one point). On L2 data it ranks by cosine,
 * which is what it can do: its recall there says so.
 */
import { create, insertMultiple, search } from '@orama/orama';
import type { BenchMetric, Dataset } from '../lib/data.js';
import { row } from '../lib/data.js';
import type { Peer } from './types.js';

export async function orama(_metric: BenchMetric): Promise<Peer> {
  let db: any;
  return {
    name: 'orama',
    note: '@orama/orama 3.1: brute force, cosine only (no ANN index)',
    async build(d: Dataset) {
      db = create({ schema: { n: 'number', embedding: `vector[${d.dim}]` } as any });
      const docs = Array.from({ length: d.n }, (_, i) => ({ id: String(i), n: i, embedding: Array.from(row(d.base, d.dim, i)) }));
      await insertMultiple(db, docs, 5000);
    },
    setEf() { /* brute force */ },
    async search(q: Float32Array, k: number) {
      const r = await search(db, { mode: 'vector', vector: { value: Array.from(q), property: 'embedding' }, similarity: -1, limit: k, includeVectors: false } as any);
      return Int32Array.from((r as any).hits, (h: { id: string }) => Number(h.id));
    },
    async close() { db = undefined; },
  };
}
