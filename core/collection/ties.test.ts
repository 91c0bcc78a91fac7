import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { compareIdsUtf8 } from '../base/id-order.js';
import { tiesById } from './ties.js';

describe('tiesById', () => {
  it('orders each run of equal distances by id, asks each id once, and leaves runs past the limit alone', () => {
    fc.assert(fc.property(fc.array(fc.integer({ min: 0, max: 4 }), { maxLength: 40 }), fc.integer({ min: 0, max: 45 }), (raw, limit) => {
      const dists = Float32Array.from([...raw].sort((a, b) => a - b));
      const slots = Int32Array.from(dists, (_, i) => dists.length - 1 - i);
      const idOf = (s: number) => `id${(s * 7919) % 101}-${s}`;
      let asked = 0;
      const out = tiesById((s) => { asked++; return idOf(s); }, { slots, dists }, limit);
      // The reference: every run sorted by id (slots keep their distances).
      const want = Array.from(slots).map((s, i) => ({ s, d: dists[i] })).sort((a, b) => a.d - b.d || compareIdsUtf8(idOf(a.s), idOf(b.s))).map((x) => x.s);
      const n = Math.min(limit, dists.length);
      // Everything before the limit is in its place; a run that straddles it is sorted whole.
      expect(Array.from(out.subarray(0, n))).toEqual(want.slice(0, n));
      expect([...out].sort((a, b) => a - b)).toEqual([...slots].sort((a, b) => a - b));
      expect(asked).toBeLessThanOrEqual(dists.length);
    }), { numRuns: 300 });
  });
});
