/**
 * The `fake` provider, for tests and demos only: no network, deterministic.
 *
 * Embedder: each analysed term (the tokenizer's stems) adds a pseudo-random Gaussian direction seeded
 * by its term id; the sum is normalised to a unit vector. The same text always gives the same vector,
 * and texts that share words share components, so they land closer (cosine grows with the overlap).
 * A text with no terms (empty, only stop words or emoji) gets the direction of its raw-string hash.
 *
 * Reranker: scores a document by the share of the query's distinct terms it contains (0 to 1).
 */
import { Prng } from '../base/prng.js';
import { termId, tokenize } from '../text/tokenizer.js';
import type { Embedder, Reranker } from './types.js';

export class FakeEmbedder implements Embedder {
  private readonly cache = new Map<number, Float32Array>();
  private static readonly CACHE_MAX = 10_000;

  constructor(readonly dim: number) {}

  async embed(texts: string[], _kind: 'document' | 'query'): Promise<Float32Array[]> {
    return texts.map((t) => this.embedOne(t));
  }

  embedOne(text: string): Float32Array {
    const v = new Float64Array(this.dim);
    const terms = tokenize(text);
    const seeds = terms.length > 0 ? terms.map(termId) : [termId(text) ^ 0x5bd1e995];
    for (const seed of seeds) {
      const dir = this.direction(seed);
      for (let i = 0; i < this.dim; i++) v[i] += dir[i];
    }
    let norm = 0;
    for (let i = 0; i < this.dim; i++) norm += v[i] * v[i];
    norm = Math.sqrt(norm) || 1;
    return Float32Array.from(v, (x) => x / norm);
  }

  private direction(seed: number): Float32Array {
    let d = this.cache.get(seed);
    if (d === undefined) {
      const rng = new Prng(seed);
      d = Float32Array.from({ length: this.dim }, () => rng.gaussian());
      if (this.cache.size >= FakeEmbedder.CACHE_MAX) this.cache.clear();
      this.cache.set(seed, d);
    }
    return d;
  }
}

export class FakeReranker implements Reranker {
  async rerank(query: string, documents: string[], topN: number): Promise<{ index: number; score: number }[]> {
    const q = new Set(tokenize(query));
    const scored = documents.map((doc, index) => {
      if (q.size === 0) return { index, score: 0 };
      const d = new Set(tokenize(doc));
      let hit = 0;
      for (const t of q) if (d.has(t)) hit++;
      return { index, score: hit / q.size };
    });
    scored.sort((a, b) => b.score - a.score || a.index - b.index);
    return scored.slice(0, Math.max(0, topN));
  }
}
