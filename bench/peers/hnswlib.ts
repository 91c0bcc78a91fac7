/** hnswlib-node 3 (the C++ hnswlib through N-API, compiled here by node-gyp). */
import { mkdtempSync, rmSync, statSync } from 'node:fs';
import { createRequire } from 'node:module';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { BenchMetric, Dataset } from '../lib/data.js';
import { row } from '../lib/data.js';
import { EF_CONSTRUCTION, M, type BucketFilter, type Peer } from './types.js';

const require = createRequire(import.meta.url);

export async function hnswlib(metric: BenchMetric): Promise<Peer> {
  const { HierarchicalNSW } = require('hnswlib-node') as typeof import('hnswlib-node');
  let index: InstanceType<typeof HierarchicalNSW> | undefined;
  let buckets: Int32Array | undefined;
  return {
    name: 'hnswlib-node',
    note: `hnswlib-node ${require('hnswlib-node/package.json').version}, one thread (addPoint one at a time)`,
    async build(d: Dataset, b?: Int32Array) {
      buckets = b;
      // Cosine data arrives unit-normalised: inner product ranks the same and skips a re-normalisation.
      index = new HierarchicalNSW(metric === 'l2' ? 'l2' : 'ip', d.dim);
      index.initIndex(d.n, M, EF_CONSTRUCTION, 100);
      for (let i = 0; i < d.n; i++) index.addPoint(Array.from(row(d.base, d.dim, i)), i);
    },
    setEf(ef: number) { index!.setEf(ef); },
    search(q: Float32Array, k: number, filter?: BucketFilter) {
      const bk = buckets;
      const f = filter && bk ? (label: number) => bk[label] < filter.below : undefined;
      return index!.searchKnn(Array.from(q), k, f).neighbors;
    },
    indexBytes() {
      // hnswlib's file is its memory image: level-0 blocks (vector, links, label) and the upper links.
      const dir = mkdtempSync(join(tmpdir(), 'svc-bench-hnswlib-'));
      try {
        index!.writeIndexSync(join(dir, 'index'));
        return statSync(join(dir, 'index')).size;
      } finally {
        rmSync(dir, { recursive: true, force: true });
      }
    },
    async close() { index = undefined; },
  };
}
