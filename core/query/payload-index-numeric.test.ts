import { describe, expect, it } from 'vitest';
import { Prng } from '../base/prng.js';
import { NumericIndex, type NumericRange } from './payload-index-numeric.js';

/** A plain list of (value, slot) pairs: the oracle. */
function naive(pairs: Map<string, [number, number]>, r: NumericRange): number[] {
  const out: number[] = [];
  for (const [v, s] of pairs.values()) {
    if ((r.loInclusive ? v >= r.lo : v > r.lo) && (r.hiInclusive ? v <= r.hi : v < r.hi)) out.push(s);
  }
  return out.sort((a, b) => a - b);
}

describe('NumericIndex', () => {
  for (const seed of [1, 2, 3]) {
    it(`answers ranges like a plain list through many inserts, removals and merges (seed ${seed})`, () => {
      const rng = new Prng(seed);
      const index = new NumericIndex();
      const pairs = new Map<string, [number, number]>();
      const value = () => (rng.next() < 0.5 ? rng.int(50) - 25 : (rng.next() - 0.5) * 1e6) || (rng.next() < 0.5 ? -0 : 0);
      for (let step = 0; step < 6000; step++) {
        const keys = [...pairs.keys()];
        if (keys.length > 0 && rng.next() < 0.4) {
          const key = keys[rng.int(keys.length)];
          const [v, s] = pairs.get(key)!;
          index.remove(v, s);
          pairs.delete(key);
        } else {
          const v = value();
          const s = rng.int(3000);
          const key = `${v === 0 ? 0 : v}/${s}`;
          if (pairs.has(key)) continue;
          index.add(v, s);
          pairs.set(key, [v, s]);
        }
        if (step % 97 === 0) {
          expect(index.size).toBe(pairs.size);
          for (let q = 0; q < 5; q++) {
            const a = value();
            const b = rng.next() < 0.2 ? a : value();
            const r = { lo: Math.min(a, b), hi: Math.max(a, b), loInclusive: rng.next() < 0.5, hiInclusive: rng.next() < 0.5 };
            const got: number[] = [];
            index.forEach(r, (s) => got.push(s));
            const want = naive(pairs, r);
            expect(got.sort((x, y) => x - y)).toEqual(want);
            expect(index.count(r)).toBe(want.length);
          }
        }
      }
    });
  }

  it('folds -0 into 0 and treats open bounds strictly', () => {
    const index = new NumericIndex(1);
    index.add(-0, 1);
    index.add(0, 2);
    index.add(1, 3);
    index.add(1, 4);
    expect(index.count({ lo: 0, hi: 0, loInclusive: true, hiInclusive: true })).toBe(2);
    expect(index.count({ lo: -0, hi: 1, loInclusive: false, hiInclusive: false })).toBe(0);
    index.remove(0, 1); // added as -0
    expect(index.count({ lo: -Infinity, hi: 0, loInclusive: true, hiInclusive: true })).toBe(1);
    expect(() => index.remove(0, 1)).toThrow(/assertion failed.*numeric index/);
  });
});
