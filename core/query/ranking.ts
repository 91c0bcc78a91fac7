import { invalidArgument } from '../base/errors.js';
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

/**
 * Statistics as a caller sent them (a router's `text_stats`), checked: counts are non-negative safe
 * integers, `df` has at most `termsMax` entries keyed by a term id (a 32-bit unsigned integer in
 * decimal), none above `docs`. Wrong statistics would only skew scores, but never silently.
 */
export function checkTextStats(v: unknown, termsMax: number): TextStats {
  const count = (x: unknown, what: string): number => {
    if (typeof x !== 'number' || !Number.isSafeInteger(x) || x < 0) throw invalidArgument(`text_stats.${what} must be a non-negative integer`);
    return x;
  };
  if (typeof v !== 'object' || v === null || Array.isArray(v)) throw invalidArgument('text_stats must be an object {docs, total_length, df}');
  const o = v as Record<string, unknown>;
  for (const k of Object.keys(o)) if (!['docs', 'total_length', 'df'].includes(k)) throw invalidArgument(`text_stats has an unknown field '${k}'`);
  const docs = count(o.docs, 'docs');
  // A sum of document lengths: a document from __svc_sparse__ is as long as its weights add up to.
  const totalLength = o.total_length;
  if (typeof totalLength !== 'number' || !Number.isFinite(totalLength) || totalLength < 0) {
    throw invalidArgument('text_stats.total_length must be a non-negative number');
  }
  if (typeof o.df !== 'object' || o.df === null || Array.isArray(o.df)) throw invalidArgument('text_stats.df must be an object of term id to document count');
  const entries = Object.entries(o.df);
  if (entries.length > termsMax) throw invalidArgument(`text_stats.df has ${entries.length} terms, more than a query has (${termsMax})`);
  const df: Record<string, number> = {};
  for (const [t, n] of entries) {
    if (!/^(0|[1-9]\d{0,9})$/.test(t) || Number(t) > 0xffffffff) throw invalidArgument(`text_stats.df key '${t.slice(0, 20)}' is not a term id`);
    if (count(n, `df.${t}`) > docs) throw invalidArgument(`text_stats.df.${t} is more than text_stats.docs`);
    df[t] = n as number;
  }
  return { docs, total_length: totalLength, df };
}

/**
 * A shard's part of a hybrid or text query (what a router asks of its shards, never a client): a hybrid
 * body's query fields without `k` and `rrf_k0`, the depth of each ranking, and optionally the whole
 * collection's BM25 statistics to score `query_text` against.
 */
export type RankingsBody = Record<string, unknown> & { depth?: unknown; text_stats?: TextStats | null };

/** BM25 statistics of a query text's terms: `{text}`. */
export interface TextStatsBody { text?: unknown; consistency?: unknown }

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
