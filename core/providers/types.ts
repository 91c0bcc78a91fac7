import type { Clock } from '../base/clock.js';

/** Turns texts into vectors of a fixed dimension. Every failure is SvcError('provider_error'). */
export interface Embedder {
  readonly dim: number;
  embed(texts: string[], kind: 'document' | 'query'): Promise<Float32Array[]>;
}

/** Reorders documents for a query; results best-first, at most topN, `index` into `documents`. */
export interface Reranker {
  rerank(query: string, documents: string[], topN: number): Promise<{ index: number; score: number }[]>;
}

export type EmbeddingProviderKind = 'hosted_a' | 'local_compatible' | 'http' | 'hosted_b' | 'fake';
export type RerankProviderKind = 'hosted_b' | 'fake';

export const EMBEDDING_PROVIDERS: readonly EmbeddingProviderKind[] = ['hosted_a', 'local_compatible', 'http', 'hosted_b', 'fake'];
export const RERANK_PROVIDERS: readonly RerankProviderKind[] = ['hosted_b', 'fake'];

/** One `[embedding.<collection>]` or `[rerank.<collection>]` table, with the key already resolved. */
export interface ProviderConfig<K extends string = string> {
  provider: K;
  model: string;
  endpoint?: string;
  /** Embedding dimension; unused by rerankers. */
  dim?: number;
  /** The secret itself (resolved from api_key_env by roles/); never logged, never in an error. */
  apiKey?: string;
}

export interface ProviderOptions {
  /** Per HTTP attempt, from connect to the last byte of the body. */
  timeoutMs: number;
  /** Extra attempts after the first, on 429, 5xx, timeouts and connection errors. */
  retries: number;
  /** First backoff; doubles each retry. Default 200 ms. */
  backoffBaseMs?: number;
  /** Cap on one backoff and on an honoured `retry-after`. Default 10 000 ms. */
  backoffMaxMs?: number;
  /** Inputs per request. Default 96 (the hosted embed API's limit). */
  batchSize?: number;
  /** Cap on a response body. Default 64 MiB. */
  maxResponseBytes?: number;
  /** For `retry-after` given as an HTTP date. Default: the system clock. */
  clock?: Clock;
  /** Waits between attempts; tests may shorten it. Default: a timer. */
  sleep?: (ms: number) => Promise<void>;
}

/** The vendors' public addresses; config defaults only, a proxy or local stand-in may replace them. */
export const DEFAULT_ENDPOINTS = {
  hosted_a: 'https://api.openai.com/v1',
  hosted_b: 'https://api.cohere.com/v2',
} as const;
