import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { compareIdsUtf8 } from './id-order.js';

describe('compareIdsUtf8', () => {
  it('is the order of the UTF-8 bytes', () => {
    fc.assert(fc.property(fc.string({ unit: 'grapheme' }), fc.string({ unit: 'grapheme' }), (a, b) => {
      expect(Math.sign(compareIdsUtf8(a, b))).toBe(Buffer.compare(Buffer.from(a), Buffer.from(b)));
    }), { numRuns: 5000 });
    expect(compareIdsUtf8('\uffee', '😀')).toBeLessThan(0);
    expect('\uffee' < '😀').toBe(false);
  });
});
