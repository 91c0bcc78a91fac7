/**
 * MaxSim late interaction (spec, "Multi-vector"): for each query token take the best dot product with
 * any document token, and sum over query tokens. Token vectors are rows of a flat Float32Array
 * (`count * dim` floats), the layout the vector store keeps.
 *
 * An empty query scores 0. An empty document has no best match: it scores -Infinity (ranks last),
 * never 0, which could outrank documents whose similarities are negative.
 */
import { assert } from '../base/assert.js';

export function maxSim(query: Float32Array, queryCount: number, doc: Float32Array, docCount: number, dim: number): number {
  assert(query.length >= queryCount * dim && doc.length >= docCount * dim, 'token matrices hold count * dim floats');
  if (queryCount === 0) return 0;
  if (docCount === 0) return -Infinity;
  let total = 0;
  for (let q = 0; q < queryCount; q++) {
    const qo = q * dim;
    let best = -Infinity;
    for (let d = 0; d < docCount; d++) {
      const d0 = d * dim;
      let s = 0;
      for (let i = 0; i < dim; i++) s += query[qo + i] * doc[d0 + i];
      if (s > best) best = s;
    }
    total += best;
  }
  return total;
}

/** The same score over token lists (arrays of vectors of one length), for callers that hold those. */
export function maxSimTokens(query: ArrayLike<number>[], doc: ArrayLike<number>[]): number {
  const dim = query[0]?.length ?? doc[0]?.length ?? 0;
  const flat = (rows: ArrayLike<number>[]): Float32Array => {
    const out = new Float32Array(rows.length * dim);
    rows.forEach((r, i) => {
      assert(r.length === dim, 'every token vector has the same length');
      out.set(r, i * dim);
    });
    return out;
  };
  return maxSim(flat(query), query.length, flat(doc), doc.length, dim);
}
