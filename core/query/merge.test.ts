import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { compareIdsUtf8 } from '../base/id-order.js';
import type { Hit } from '../base/model.js';
import { mergeTopK, scoreOrder, type ScoreOrder } from './merge.js';

/** Ids from a small alphabet (duplicates across shards, ties) with the characters UTF-16 and UTF-8 order differently. */
const id = fc.string({ minLength: 1, maxLength: 4, unit: fc.constantFrom('a', 'b', 'Z', 'é', '\uffee', '😀', '𝒜') });
/** Few distinct scores, so ties are common. */
const score = fc.constantFrom(-1.5, 0, 0.25, 0.5, 0.5000001, 1, 3);
const hit = fc.record({ id, score }).map(({ id, score }): Hit => ({ id, rank: 0, score, payload: { from: id } }));
const order = fc.constantFrom<ScoreOrder>('higher_first', 'lower_first');

/** The definition: sort the union (ties by Buffer.compare of UTF-8, as database.ts tiesById does), keep each id's first, take k. */
function reference(lists: Hit[][], k: number, o: ScoreOrder): { id: string; score: number; rank: number }[] {
  const all = lists.flat().sort((a, b) => (a.score !== b.score
    ? (o === 'higher_first' ? b.score - a.score : a.score - b.score)
    : Buffer.compare(Buffer.from(a.id), Buffer.from(b.id))));
  const seen = new Set<string>();
  const out: { id: string; score: number; rank: number }[] = [];
  for (const h of all) {
    if (seen.has(h.id) || out.length === k) continue;
    seen.add(h.id);
    out.push({ id: h.id, score: h.score, rank: out.length });
  }
  return out;
}

const sortedLike = (o: ScoreOrder) => (l: Hit[]) => [...l].sort((a, b) => (a.score !== b.score
  ? (o === 'higher_first' ? b.score - a.score : a.score - b.score) : compareIdsUtf8(a.id, b.id)));

describe('mergeTopK', () => {
  it('equals sorting the union, deduplicated by id, then taking k: sorted shard lists', () => {
    fc.assert(fc.property(fc.array(fc.array(hit, { maxLength: 12 }), { maxLength: 6 }), fc.nat(30), order, (raw, k, o) => {
      const lists = raw.map(sortedLike(o));
      const got = mergeTopK(lists, k, o).map((h) => ({ id: h.id, score: h.score, rank: h.rank }));
      expect(got).toEqual(reference(lists, k, o));
    }), { numRuns: 2000 });
  });

  it('and for lists in any order (a shard that did not sort)', () => {
    fc.assert(fc.property(fc.array(fc.array(hit, { maxLength: 12 }), { maxLength: 6 }), fc.nat(30), order, (lists, k, o) => {
      const got = mergeTopK(lists, k, o).map((h) => ({ id: h.id, score: h.score, rank: h.rank }));
      expect(got).toEqual(reference(lists, k, o));
    }), { numRuns: 1000 });
  });

  it('keeps the best copy of an id seen on two shards, with its payload, and leaves the inputs alone', () => {
    const a: Hit[] = [{ id: 'p', rank: 0, score: 0.9, payload: { shard: 'a' } }, { id: 'q', rank: 1, score: 0.1, payload: { shard: 'a' } }];
    const b: Hit[] = [{ id: 'q', rank: 0, score: 0.8, payload: { shard: 'b' } }, { id: 'p', rank: 1, score: 0.7, payload: { shard: 'b' } }];
    expect(mergeTopK([a, b], 10, 'higher_first')).toEqual([
      { id: 'p', rank: 0, score: 0.9, payload: { shard: 'a' } },
      { id: 'q', rank: 1, score: 0.8, payload: { shard: 'b' } },
    ]);
    expect(a[1].rank).toBe(1);
  });

  it('orders l2 distances lower first and similarities higher first', () => {
    expect(scoreOrder('l2')).toBe('lower_first');
    expect(scoreOrder('cosine')).toBe('higher_first');
    expect(scoreOrder('dot')).toBe('higher_first');
    const lists: Hit[][] = [[{ id: 'x', rank: 0, score: 1 }], [{ id: 'y', rank: 0, score: 2 }]];
    expect(mergeTopK(lists, 1, scoreOrder('l2')).map((h) => h.id)).toEqual(['x']);
    expect(mergeTopK(lists, 1, scoreOrder('dot')).map((h) => h.id)).toEqual(['y']);
    expect(mergeTopK(lists, 0, 'higher_first')).toEqual([]);
  });
});
