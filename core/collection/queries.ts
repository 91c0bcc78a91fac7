import { invalidArgument, limitExceeded } from '../base/errors.js';
import { checkLimit, type Limits } from '../base/limits.js';
import type { Consistency } from '../base/model.js';
import { distinctCount, queryTermIds } from '../text/tokenizer.js';

/** Parsing of query bodies shared by every read operation: one place, so every transport gets the same rules. */

export function checkObject(body: unknown, what: string, known: readonly string[]): Record<string, unknown> {
  if (typeof body !== 'object' || body === null || Array.isArray(body)) throw invalidArgument(`${what} must be a JSON object`);
  const o = body as Record<string, unknown>;
  for (const key of Object.keys(o)) {
    if (!known.includes(key)) throw invalidArgument(`${what} has an unknown field '${key}' (known: ${known.join(', ')})`);
  }
  return o;
}

export function parseK(v: unknown, limits: Limits, fallback = 10): number {
  if (v === undefined || v === null) return fallback;
  if (typeof v !== 'number' || !Number.isInteger(v) || v < 1) throw invalidArgument('k must be a positive integer');
  checkLimit(limits, 'maxK', v, 'k');
  return v;
}

/** How deep a shard's rankings go (a router's fusion depth): a k by another name, under the same limit. */
export function parseDepth(v: unknown, limits: Limits): number {
  if (v === undefined || v === null) return fusionDepth(10, limits);
  if (typeof v !== 'number' || !Number.isInteger(v) || v < 1) throw invalidArgument('depth must be a positive integer');
  checkLimit(limits, 'maxK', v, 'depth');
  return v;
}

export function parseEf(v: unknown, limits: Limits, fallback: number): number {
  if (v === undefined || v === null) return Math.min(fallback, limits.maxEfSearch);
  if (typeof v !== 'number' || !Number.isInteger(v) || v < 1) throw invalidArgument('ef_search must be a positive integer');
  checkLimit(limits, 'maxEfSearch', v, 'ef_search');
  return v;
}

export function parseBool(v: unknown, what: string, fallback: boolean): boolean {
  if (v === undefined || v === null) return fallback;
  if (typeof v !== 'boolean') throw invalidArgument(`${what} must be true or false`);
  return v;
}

export function parseConsistency(v: unknown): Consistency {
  if (v === undefined || v === null) return 'eventual';
  if (v !== 'eventual' && v !== 'strong') throw invalidArgument("consistency must be 'eventual' or 'strong'");
  return v;
}

export function parseFetchLimit(v: unknown, limits: Limits): number {
  if (v === undefined || v === null) return Math.min(100, limits.maxFetchLimit);
  if (typeof v !== 'number' || !Number.isInteger(v) || v < 1) throw invalidArgument('limit must be a positive integer');
  checkLimit(limits, 'maxFetchLimit', v, 'limit');
  return v;
}

export function parseRrfK0(v: unknown): number {
  if (v === undefined || v === null) return 60;
  if (typeof v !== 'number' || !Number.isFinite(v) || v < 0 || v > 1e6) throw invalidArgument('rrf_k0 must be a number from 0 to 1000000');
  return v;
}

/** A fetch cursor is the last id of the previous page, base64url-encoded (opaque to callers). */
export function encodeCursor(id: string): string {
  return Buffer.from(id, 'utf8').toString('base64url');
}

export function decodeCursor(v: unknown): string | null {
  if (v === undefined || v === null || v === '') return null;
  if (typeof v !== 'string' || !/^[A-Za-z0-9_-]{1,1400}$/.test(v)) throw invalidArgument('cursor is not one this server issued');
  const id = Buffer.from(v, 'base64url').toString('utf8');
  if (id.length < 1 || id.length > 256 || encodeCursor(id) !== v) throw invalidArgument('cursor is not one this server issued');
  return id;
}

/** How deep each ranking goes before fusion: deeper than k so that RRF can lift a document both lists like. */
export function fusionDepth(k: number, limits: Limits): number {
  return Math.min(limits.maxK, Math.max(k, 100));
}

/** A text query's rerank pool: given, or 4k (at least 50); never smaller than k, so a rerank can fill k hits. */
export function parseRerankPool(v: unknown, k: number, limits: Limits): number {
  if (v === undefined || v === null) return Math.min(limits.maxK, Math.max(4 * k, 50));
  if (typeof v !== 'number' || !Number.isInteger(v) || v < 1) throw invalidArgument('rerank_pool must be a positive integer');
  checkLimit(limits, 'maxK', v, 'rerank_pool');
  return Math.max(k, v);
}

/**
 * A query text's term ids, at most `maxSparseTerms` distinct ones: what BM25 scores on a shard, and
 * what an engine checks before it pays for an embedding of the same text.
 */
export function parseQueryTerms(text: unknown, limits: Limits): Uint32Array {
  if (typeof text !== 'string') throw invalidArgument('query text must be a string');
  const terms = queryTermIds(text);
  const n = distinctCount(terms);
  if (n > limits.maxSparseTerms) throw limitExceeded('SVC_MAX_SPARSE_TERMS', limits.maxSparseTerms, n, 'query term count');
  return terms;
}
