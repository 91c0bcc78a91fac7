/**
 * The OpenAI-compatible embeddings adapter (`hosted_a`, `local_compatible`, `http`):
 * `POST {endpoint}/embeddings` `{model, input: [...]}` -> `{data: [{index, embedding}]}`.
 * Inputs go in batches of `batchSize`, one batch after another; the reply's `index` places each vector.
 */
import { postJson, providerError, type PostTarget } from './http.js';
import type { Embedder, ProviderOptions } from './types.js';
import { checkVector, joinUrl } from './shape.js';

export class OpenAiCompatibleEmbedder implements Embedder {
  readonly dim: number;
  private readonly target: PostTarget;

  constructor(
    kind: string,
    private readonly model: string,
    endpoint: string,
    dim: number,
    apiKey: string | undefined,
    private readonly opts: ProviderOptions,
  ) {
    this.dim = dim;
    this.target = { label: `embedding provider ${kind}`, url: joinUrl(endpoint, 'embeddings'), apiKey };
  }

  async embed(texts: string[], _kind: 'document' | 'query'): Promise<Float32Array[]> {
    const out: Float32Array[] = [];
    const batch = Math.max(1, this.opts.batchSize ?? 96);
    for (let i = 0; i < texts.length; i += batch) {
      const part = texts.slice(i, i + batch);
      const res = await postJson(this.target, { model: this.model, input: part }, this.opts);
      out.push(...this.parse(res, part.length));
    }
    return out;
  }

  private parse(res: unknown, n: number): Float32Array[] {
    const data = (res as { data?: unknown })?.data;
    if (!Array.isArray(data)) throw providerError(this.target, 'response has no data list');
    if (data.length !== n) throw providerError(this.target, `response has ${data.length} embeddings for ${n} inputs`);
    const out: (Float32Array | undefined)[] = new Array(n);
    data.forEach((item, pos) => {
      const rec = item as { index?: unknown; embedding?: unknown };
      const index = rec?.index === undefined ? pos : rec.index;
      if (typeof index !== 'number' || !Number.isInteger(index) || index < 0 || index >= n || out[index] !== undefined) {
        throw providerError(this.target, `response has a bad or repeated index at data[${pos}]`);
      }
      out[index] = checkVector(this.target, rec?.embedding, this.dim, `data[${pos}].embedding`);
    });
    return out as Float32Array[];
  }
}
