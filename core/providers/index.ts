/**
 * Provider factories: a `[embedding.<collection>]` / `[rerank.<collection>]` table (key resolved by
 * roles/) to an Embedder or Reranker. Configuration errors are `invalid_argument`; call failures are
 * `provider_error`, and no message ever holds the key.
 */
import { invalidArgument } from '../base/errors.js';
import { FakeEmbedder, FakeReranker } from './fake.js';
import { HostedBEmbedder, HostedBReranker } from './hosted-b.js';
import { OpenAiCompatibleEmbedder } from './openai-compatible.js';
import {
  DEFAULT_ENDPOINTS,
  EMBEDDING_PROVIDERS,
  RERANK_PROVIDERS,
  type Embedder,
  type EmbeddingProviderKind,
  type ProviderConfig,
  type ProviderOptions,
  type Reranker,
  type RerankProviderKind,
} from './types.js';

export * from './types.js';
export { FakeEmbedder, FakeReranker } from './fake.js';
export { redact, retryAfterMs } from './http.js';

export function createEmbedder(cfg: ProviderConfig, opts: ProviderOptions): Embedder {
  const kind = cfg.provider as EmbeddingProviderKind;
  if (!EMBEDDING_PROVIDERS.includes(kind)) {
    throw invalidArgument(`unknown embedding provider "${cfg.provider}" (expected one of ${EMBEDDING_PROVIDERS.join(', ')})`);
  }
  const dim = cfg.dim;
  if (typeof dim !== 'number' || !Number.isInteger(dim) || dim < 1) {
    throw invalidArgument(`embedding provider ${kind}: dim must be a positive integer`);
  }
  checkOptions(opts);
  switch (kind) {
    case 'fake':
      return new FakeEmbedder(dim);
    case 'hosted_a':
      requireKey(cfg, 'embedding');
      return new OpenAiCompatibleEmbedder(kind, model(cfg), endpoint(cfg, DEFAULT_ENDPOINTS.hosted_a), dim, cfg.apiKey, opts);
    case 'local_compatible':
    case 'http':
      return new OpenAiCompatibleEmbedder(kind, model(cfg), endpoint(cfg), dim, cfg.apiKey, opts);
    case 'hosted_b':
      requireKey(cfg, 'embedding');
      return new HostedBEmbedder(model(cfg), endpoint(cfg, DEFAULT_ENDPOINTS.hosted_b), dim, cfg.apiKey, opts);
  }
}

export function createReranker(cfg: ProviderConfig, opts: ProviderOptions): Reranker {
  const kind = cfg.provider as RerankProviderKind;
  if (!RERANK_PROVIDERS.includes(kind)) {
    throw invalidArgument(`unknown rerank provider "${cfg.provider}" (expected one of ${RERANK_PROVIDERS.join(', ')})`);
  }
  checkOptions(opts);
  switch (kind) {
    case 'fake':
      return new FakeReranker();
    case 'hosted_b':
      requireKey(cfg, 'rerank');
      return new HostedBReranker(model(cfg), endpoint(cfg, DEFAULT_ENDPOINTS.hosted_b), cfg.apiKey, opts);
  }
}

function model(cfg: ProviderConfig): string {
  if (typeof cfg.model !== 'string' || cfg.model.length === 0) throw invalidArgument(`provider ${cfg.provider}: model is required`);
  return cfg.model;
}

function endpoint(cfg: ProviderConfig, fallback?: string): string {
  const e = cfg.endpoint ?? fallback;
  if (e === undefined || e === '') throw invalidArgument(`provider ${cfg.provider}: endpoint is required`);
  let url: URL;
  try {
    url = new URL(e);
  } catch {
    throw invalidArgument(`provider ${cfg.provider}: endpoint is not a URL`);
  }
  if (url.protocol !== 'http:' && url.protocol !== 'https:') throw invalidArgument(`provider ${cfg.provider}: endpoint must be http or https`);
  return e;
}

function requireKey(cfg: ProviderConfig, what: string): void {
  if (!cfg.apiKey) throw invalidArgument(`${what} provider ${cfg.provider} needs an api key (api_key_env)`);
}

function checkOptions(opts: ProviderOptions): void {
  if (!(opts.timeoutMs > 0)) throw invalidArgument('provider timeoutMs must be positive');
  if (!(opts.retries >= 0)) throw invalidArgument('provider retries must be zero or more');
}
