/**
 * Filtered search at 0.1%, 1%, 10% and 50% selectivity: every point gets a seeded `bucket` in [0, 1000)
 * and the filter is `bucket < 1000 * selectivity`. Recall counts a hit when it passes the filter and is
 * within the k-th exact filtered distance; `full_k` is the share of queries that got min(k, matching) hits.
 */
import { Prng } from '../../core/base/prng.js';
import { distance, exactKnn, row, type Dataset } from '../lib/data.js';
import { round } from '../lib/stats.js';
import type { Peer, PeerFactory } from '../peers/types.js';

export const SELECTIVITIES = [0.001, 0.01, 0.1, 0.5] as const;

export interface FilteredRow {
  selectivity: number;
  matching: number;
  recall: number;
  mean_hits: number;
  full_k: number;
  violations: number;
  qps: number;
}

export interface FilteredResult {
  dataset: string;
  n: number;
  queries: number;
  k: number;
  ef: number;
  peers: { name: string; note: string; rows: FilteredRow[]; error?: string }[];
}

export function seededBuckets(n: number): Int32Array {
  const prng = new Prng(4242);
  return Int32Array.from({ length: n }, () => prng.int(1000));
}

interface Truth { kth: Float32Array; want: Int32Array; matching: number }

function filteredTruth(d: Dataset, buckets: Int32Array, below: number): Truth {
  const ids: number[] = [];
  for (let i = 0; i < d.n; i++) if (buckets[i] < below) ids.push(i);
  const sub = new Float32Array(ids.length * d.dim);
  ids.forEach((id, j) => sub.set(row(d.base, d.dim, id), j * d.dim));
  const want = Math.min(d.k, ids.length);
  const kth = new Float32Array(d.nq).fill(Infinity);
  if (want > 0) {
    const t = exactKnn(sub, d.queries, d.dim, d.metric, want);
    for (let q = 0; q < d.nq; q++) kth[q] = distance(d.metric, row(d.queries, d.dim, q), row(sub, d.dim, t[q * want + want - 1]));
  }
  return { kth, want: Int32Array.of(want), matching: ids.length };
}

export async function runFiltered(d: Dataset, factories: [string, PeerFactory][], ef: number, log: (l: string) => void): Promise<FilteredResult> {
  const buckets = seededBuckets(d.n);
  const truths = SELECTIVITIES.map((s) => filteredTruth(d, buckets, Math.round(s * 1000)));
  const out: FilteredResult = { dataset: d.name, n: d.n, queries: d.nq, k: d.k, ef, peers: [] };
  for (const [name, make] of factories) {
    let peer: Peer | undefined;
    const res: FilteredResult['peers'][number] = { name, note: '', rows: [] };
    try {
      peer = await make(d.metric);
      res.name = peer.name;
      await peer.build(d, buckets);
      res.note = peer.note;
      await peer.setEf(ef);
      for (const [si, s] of SELECTIVITIES.entries()) {
        const below = Math.round(s * 1000);
        const t = truths[si];
        const want = t.want[0];
        let recall = 0, hits = 0, full = 0, violations = 0;
        const t0 = performance.now();
        const results: ArrayLike<number>[] = [];
        for (let q = 0; q < d.nq; q++) {
          let r = peer.search(row(d.queries, d.dim, q), d.k, { below });
          if (r instanceof Promise) r = await r;
          results.push(r);
        }
        const ms = performance.now() - t0;
        results.forEach((r, q) => {
          const qv = row(d.queries, d.dim, q);
          const eps = 1e-3 * Math.max(1e-6, Math.abs(t.kth[q]));
          let good = 0;
          const seen = new Set<number>();
          for (let j = 0; j < Math.min(d.k, r.length); j++) {
            const id = r[j];
            if (seen.has(id)) continue;
            seen.add(id);
            if (buckets[id] >= below) { violations++; continue; }
            if (distance(d.metric, qv, row(d.base, d.dim, id)) <= t.kth[q] + eps) good++;
          }
          recall += want === 0 ? 1 : Math.min(good, want) / want;
          hits += r.length;
          if (r.length >= want) full++;
        });
        res.rows.push({
          selectivity: s, matching: t.matching, recall: round(recall / d.nq, 4), mean_hits: round(hits / d.nq, 2),
          full_k: round(full / d.nq, 3), violations, qps: Math.round((d.nq * 1000) / ms),
        });
      }
      log(`  filtered ${d.name}: ${res.name}: ${res.rows.map((r) => `${r.selectivity * 100}% recall ${r.recall} hits ${r.mean_hits} ${r.qps} QPS`).join(' | ')}`);
    } catch (e) {
      res.error = (e as Error).message;
      log(`  filtered ${d.name}: ${name} could not run: ${res.error}`);
    } finally {
      await peer?.close().catch(() => undefined);
    }
    out.peers.push(res);
  }
  return out;
}
