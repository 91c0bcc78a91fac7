import type { Hit } from '../base/model.js';
import type { Bm25Corpus } from '../text/sparse-index.js';
import { rrf } from './rrf.js';

/**
 * The rankings a hybrid or text query fuses, as a shard gives them: each list best first, equal scores
 * in id order (UTF-8 bytes, CONTRACT.md section 1), so that the lists of several shards merge into the
 * list one node holding everything would give, and fusing them gives that node's answer.
 */

/** One entry of a ranking: a hit before fusion gives it its rank. */
export type Ranked = Omit<Hit, 'rank'>;

/** A shard's rankings for one query; a list is absent when the query did not ask for it. */
export interface Rankings {
  dense?: Ranked[];
  sparse?: Ranked[];
  text?: Ranked[];
}

/**
 * BM25 statistics of a query's terms over some documents (the wire shape: `df` keyed by term id). Summed
 * over shards they are the collection's, and every shard then scores as one index of everything would.
 */
export interface TextStats {
  docs: number;
  total_length: number;
  df: Record<string, number>;
}

/** The sum of several shards' statistics. */
export function sumTextStats(parts: readonly TextStats[]): TextStats {
  const out: TextStats = { docs: 0, total_length: 0, df: {} };
  for (const p of parts) {
    out.docs += p.docs;
    out.total_length += p.total_length;
    for (const [t, n] of Object.entries(p.df)) out.df[t] = (out.df[t] ?? 0) + n;
  }
  return out;
}

/** The corpus a BM25 ranking scores against, from summed statistics. */
export function corpusOf(stats: TextStats): Bm25Corpus {
  return { n: stats.docs, totalLength: stats.total_length, df: (term) => stats.df[String(term >>> 0)] ?? 0 };
}

/** Reciprocal rank fusion of whole rankings into the top `k` hits, each with its fused score. */
export function fuseRankings(lists: readonly Ranked[][], k: number, k0: number): Hit[] {
  const byId = new Map<string, Ranked>();
  for (const list of lists) for (const r of list) if (!byId.has(r.id)) byId.set(r.id, r);
  return rrf(lists.map((l) => ({ ids: l.map((r) => r.id) })), k0).slice(0, k).map((f, rank) => {
    const { id, score: _, ...rest } = byId.get(f.id)!;
    return { id, rank, score: f.score, ...rest };
  });
}
