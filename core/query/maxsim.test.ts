import { describe, expect, it } from 'vitest';
import { Prng } from '../base/prng.js';
import { maxSim, maxSimTokens } from './maxsim.js';

function naive(query: number[][], doc: number[][]): number {
  let total = 0;
  for (const q of query) {
    let best = -Infinity;
    for (const d of doc) {
      let s = 0;
      for (let i = 0; i < q.length; i++) s += q[i] * d[i];
      best = Math.max(best, s);
    }
    total += best;
  }
  return total;
}

const randomTokens = (rng: Prng, n: number, dim: number): number[][] =>
  Array.from({ length: n }, () => Array.from({ length: dim }, () => Math.fround(rng.gaussian())));

describe('maxSim', () => {
  it('sums, over query tokens, the best dot product with any document token', () => {
    const q = [[1, 0], [0, 1]];
    const d = [[0.5, 0.5], [2, -1], [-1, 3]];
    // q0 best: 2 (token 1); q1 best: 3 (token 2)
    expect(maxSimTokens(q, d)).toBe(5);
  });

  it('equals a naive loop on seeded random token sets', () => {
    const rng = new Prng(42);
    for (let trial = 0; trial < 50; trial++) {
      const dim = 1 + rng.int(64);
      const q = randomTokens(rng, 1 + rng.int(8), dim);
      const d = randomTokens(rng, 1 + rng.int(20), dim);
      const flatQ = Float32Array.from(q.flat());
      const flatD = Float32Array.from(d.flat());
      expect(maxSim(flatQ, q.length, flatD, d.length, dim)).toBeCloseTo(naive(q, d), 4);
      expect(maxSimTokens(q, d)).toBeCloseTo(naive(q, d), 4);
    }
  });

  it('scores an empty query 0 and an empty document last', () => {
    expect(maxSim(new Float32Array(0), 0, Float32Array.of(1, 2), 1, 2)).toBe(0);
    expect(maxSim(Float32Array.of(1, 2), 1, new Float32Array(0), 0, 2)).toBe(-Infinity);
  });

  it('is not symmetric: the query side is summed', () => {
    const a = [[1, 0], [0, 1]];
    const b = [[1, 1]];
    expect(maxSimTokens(a, b)).toBe(2);
    expect(maxSimTokens(b, a)).toBe(1);
  });
});
