import { providerError, type PostTarget } from './http.js';

/** `{endpoint}/{path}` with exactly one slash between. */
export function joinUrl(endpoint: string, path: string): string {
  return `${endpoint.replace(/\/+$/, '')}/${path}`;
}

/** A response vector as float32 of exactly `dim` finite numbers, or a provider_error. */
export function checkVector(target: PostTarget, v: unknown, dim: number, where: string): Float32Array {
  if (!Array.isArray(v)) throw providerError(target, `${where} is not a list of numbers`);
  if (v.length !== dim) throw providerError(target, `${where} has length ${v.length}, expected the configured dim ${dim}`);
  const out = new Float32Array(dim);
  for (let i = 0; i < dim; i++) {
    const x = v[i];
    if (typeof x !== 'number' || !Number.isFinite(x)) throw providerError(target, `${where}[${i}] is not a finite number`);
    out[i] = x;
  }
  return out;
}
