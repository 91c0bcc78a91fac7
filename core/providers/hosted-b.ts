/**
 * The embed-and-rerank API shape (`hosted_b`):
 * `POST {endpoint}/embed` `{model, texts, input_type, embedding_types: ["float"]}` -> `{embeddings: {float: [[...]]}}`,
 * with input_type `search_document` or `search_query`;
 * `POST {endpoint}/rerank` `{model, query, documents, top_n}` -> `{results: [{index, relevance_score}]}`.
 */
import { postJson, providerError, type PostTarget } from './http.js';
import type { Embedder, ProviderOptions, Reranker } from './types.js';
import { checkVector, joinUrl } from './shape.js';

export class HostedBEmbedder implements Embedder {
  readonly dim: number;
  private readonly target: PostTarget;

  constructor(
    private readonly model: string,
    endpoint: string,
    dim: number,
    apiKey: string | undefined,
    private readonly opts: ProviderOptions,
  ) {
    this.dim = dim;
    this.target = { label: 'embedding provider hosted_b', url: joinUrl(endpoint, 'embed'), apiKey };
  }

  async embed(texts: string[], kind: 'document' | 'query'): Promise<Float32Array[]> {
    const out: Float32Array[] = [];
    const batch = Math.max(1, this.opts.batchSize ?? 96);
    const inputType = kind === 'query' ? 'search_query' : 'search_document';
    for (let i = 0; i < texts.length; i += batch) {
      const part = texts.slice(i, i + batch);
      const body = { model: this.model, texts: part, input_type: inputType, embedding_types: ['float'] };
      const res = await postJson(this.target, body, this.opts);
      const vecs = (res as { embeddings?: { float?: unknown } })?.embeddings?.float;
      if (!Array.isArray(vecs)) throw providerError(this.target, 'response has no embeddings.float list');
      if (vecs.length !== part.length) throw providerError(this.target, `response has ${vecs.length} embeddings for ${part.length} inputs`);
      vecs.forEach((v, j) => out.push(checkVector(this.target, v, this.dim, `embeddings.float[${j}]`)));
    }
    return out;
  }
}

export class HostedBReranker implements Reranker {
  private readonly target: PostTarget;

  constructor(
    private readonly model: string,
    endpoint: string,
    apiKey: string | undefined,
    private readonly opts: ProviderOptions,
  ) {
    this.target = { label: 'rerank provider hosted_b', url: joinUrl(endpoint, 'rerank'), apiKey };
  }

  /** One round trip: the whole candidate pool goes in one request (the caller bounds its size). */
  async rerank(query: string, documents: string[], topN: number): Promise<{ index: number; score: number }[]> {
    if (documents.length === 0 || topN <= 0) return [];
    const n = Math.min(topN, documents.length);
    const res = await postJson(this.target, { model: this.model, query, documents, top_n: n }, this.opts);
    const results = (res as { results?: unknown })?.results;
    if (!Array.isArray(results)) throw providerError(this.target, 'response has no results list');
    const seen = new Set<number>();
    const out = results.map((r, pos) => {
      const { index, relevance_score: score } = (r ?? {}) as { index?: unknown; relevance_score?: unknown };
      if (typeof index !== 'number' || !Number.isInteger(index) || index < 0 || index >= documents.length || seen.has(index)) {
        throw providerError(this.target, `results[${pos}] has a bad or repeated index`);
      }
      if (typeof score !== 'number' || !Number.isFinite(score)) throw providerError(this.target, `results[${pos}] has no finite relevance_score`);
      seen.add(index);
      return { index, score };
    });
    // Best first whatever order the provider used; equal scores keep the candidates' order.
    out.sort((a, b) => b.score - a.score || a.index - b.index);
    return out.slice(0, n);
  }
}
