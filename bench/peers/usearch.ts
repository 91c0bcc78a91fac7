/**
 * USearch (prebuilt binary inside the npm package). Its expansion_search is fixed per Index object, so
 * the built graph is saved once and loaded into one Index per ef (loading is not timed).
 */
import { mkdtempSync, readFileSync, rmSync, statSync } from 'node:fs';
import { createRequire } from 'node:module';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import type { BenchMetric, Dataset } from '../lib/data.js';
import { EF_CONSTRUCTION, M, type Peer } from './types.js';

const require = createRequire(import.meta.url);

function version(): string {
  // The package's exports map hides package.json: find it beside the resolved entry point.
  let dir = dirname(require.resolve('usearch'));
  for (let i = 0; i < 6; i++, dir = dirname(dir)) {
    try {
      const pkg = JSON.parse(readFileSync(join(dir, 'package.json'), 'utf8')) as { name?: string; version?: string };
      if (pkg.name === 'usearch') return pkg.version ?? '?';
    } catch { /* keep walking up */ }
  }
  return '?';
}

export async function usearch(metric: BenchMetric): Promise<Peer> {
  const u = require('usearch') as typeof import('usearch');
  const dir = mkdtempSync(join(tmpdir(), 'svc-bench-usearch-'));
  const file = join(dir, 'index.usearch');
  let dim = 0;
  let index: InstanceType<typeof u.Index> | undefined;
  const make = (ef: number) => new u.Index({
    dimensions: dim, metric: metric === 'l2' ? u.MetricKind.L2sq : u.MetricKind.IP, quantization: u.ScalarKind.F32,
    connectivity: M, expansion_add: EF_CONSTRUCTION, expansion_search: ef, multi: false,
  });
  return {
    name: 'usearch',
    note: `usearch ${version()} (prebuilt), one thread`,
    async build(d: Dataset) {
      dim = d.dim;
      index = make(64);
      const chunk = 1000;
      for (let i = 0; i < d.n; i += chunk) {
        const end = Math.min(d.n, i + chunk);
        const keys = new BigUint64Array(end - i);
        for (let j = i; j < end; j++) keys[j - i] = BigInt(j);
        index.add(keys, d.base.subarray(i * d.dim, end * d.dim), 1);
      }
      index.save(file);
    },
    setEf(ef: number) {
      index = make(ef);
      index.load(file);
    },
    search(q: Float32Array, k: number) {
      const r = index!.search(q, k, 1);
      const out = new Int32Array(r.keys.length);
      for (let i = 0; i < out.length; i++) out[i] = Number(r.keys[i]);
      return out;
    },
    indexBytes: () => statSync(file).size,
    async close() { index = undefined; rmSync(dir, { recursive: true, force: true }); },
  };
}
