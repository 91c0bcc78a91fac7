import { describe, expect, it } from 'vitest';
import fc from 'fast-check';
import { rrf } from './rrf.js';

/** The spec's formula, written out over plain arrays. */
function direct(lists: string[][], k0: number): Map<string, number> {
  const out = new Map<string, number>();
  for (const ids of lists) {
    const best = new Map<string, number>();
    ids.forEach((id, r) => {
      if (!best.has(id)) best.set(id, r);
    });
    for (const [id, r] of best) out.set(id, (out.get(id) ?? 0) + 1 / (k0 + r + 1));
  }
  return out;
}

describe('rrf', () => {
  it('fuses two lists as the spec computes', () => {
    const fused = rrf([{ ids: ['a', 'b', 'c'] }, { ids: ['c', 'a', 'd'] }], 60);
    expect(fused.map((f) => f.id)).toEqual(['a', 'c', 'b', 'd']);
    expect(fused[0].score).toBeCloseTo(1 / 61 + 1 / 62, 15);
    expect(fused[1].score).toBeCloseTo(1 / 63 + 1 / 61, 15);
    expect(fused[2].score).toBeCloseTo(1 / 62, 15);
    expect(fused[3].score).toBeCloseTo(1 / 63, 15);
  });

  it('uses k0 = 60 by default and accepts numeric ids and typed arrays', () => {
    const fused = rrf([{ ids: Int32Array.of(7, 3) }]);
    expect(fused).toEqual([{ id: 7, score: 1 / 61 }, { id: 3, score: 1 / 62 }]);
    expect(rrf([])).toEqual([]);
    expect(rrf([{ ids: [] }, { ids: [] }])).toEqual([]);
  });

  it('breaks ties by first appearance: earlier list, then better rank', () => {
    // x is rank 0 of list 1, y rank 0 of list 2: equal scores, x came first.
    expect(rrf([{ ids: ['x'] }, { ids: ['y'] }]).map((f) => f.id)).toEqual(['x', 'y']);
    expect(rrf([{ ids: ['y'] }, { ids: ['x'] }]).map((f) => f.id)).toEqual(['y', 'x']);
    // symmetric swap: both sum to 1/61 + 1/62
    expect(rrf([{ ids: ['p', 'q'] }, { ids: ['q', 'p'] }]).map((f) => f.id)).toEqual(['p', 'q']);
  });

  it('counts an id repeated within one list once, at its best rank', () => {
    expect(rrf([{ ids: ['a', 'a', 'b'] }], 0)).toEqual([{ id: 'a', score: 1 }, { id: 'b', score: 1 / 3 }]);
  });

  it('equals a direct computation on random lists (property)', () => {
    const list = fc.array(fc.constantFrom('a', 'b', 'c', 'd', 'e', 'f', 'g', 'h'), { maxLength: 8 });
    fc.assert(
      fc.property(fc.array(list, { maxLength: 4 }), fc.integer({ min: 0, max: 100 }), (lists, k0) => {
        const fused = rrf(lists.map((ids) => ({ ids })), k0);
        const want = direct(lists, k0);
        expect(fused.length).toBe(want.size);
        for (const f of fused) expect(f.score).toBeCloseTo(want.get(f.id) as number, 12);
        for (let i = 1; i < fused.length; i++) expect(fused[i].score).toBeLessThanOrEqual(fused[i - 1].score);
        // every fused score is bounded by the number of lists / (k0 + 1)
        for (const f of fused) expect(f.score).toBeLessThanOrEqual(lists.length / (k0 + 1) + 1e-12);
      }),
      { numRuns: 500 },
    );
  });
});
