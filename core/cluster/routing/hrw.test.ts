import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { owner, ranking } from './hrw.js';

/** Distinct shard ids, as the coordinator issues them (small, with gaps where shards were removed). */
const shardSet = (min: number, max: number) => fc.uniqueArray(fc.integer({ min: 0, max: 200 }), { minLength: min, maxLength: max });
/** Many different point ids from one seed: words, numbers as strings, non-ASCII. */
function ids(seed: number, count: number): string[] {
  const kinds = [(i: number) => String(i), (i: number) => `doc-${seed}-${i}`, (i: number) => `é${i}🙂${seed}`, (i: number) => `${(seed * 7919 + i).toString(36)}`];
  return Array.from({ length: count }, (_, i) => kinds[i % kinds.length](i));
}
/** Six standard deviations of a binomial count: a fair hash leaves it about once in 500 million checks. */
const tolerance = (n: number, p: number): number => 6 * Math.sqrt(n * p * (1 - p)) + 1;

describe('rendezvous hashing', () => {
  it('spreads points evenly: each of n shards gets about 1/n', () => {
    fc.assert(fc.property(shardSet(2, 12), fc.nat(1000), (shards, seed) => {
      const N = 8000;
      const counts = new Map<number, number>(shards.map((s) => [s, 0]));
      for (const id of ids(seed, N)) {
        const o = owner(id, shards);
        counts.set(o, counts.get(o)! + 1);
      }
      for (const [s, c] of counts) {
        expect(Math.abs(c - N / shards.length), `shard ${s} of ${shards.length}: ${c}`).toBeLessThanOrEqual(tolerance(N, 1 / shards.length));
      }
    }), { numRuns: 20 });
  });

  it('adding shard n+1 moves only the points it wins, about 1/(n+1) of them', () => {
    fc.assert(fc.property(shardSet(1, 10), fc.integer({ min: 201, max: 400 }), fc.nat(1000), (shards, added, seed) => {
      const N = 6000;
      let moved = 0;
      for (const id of ids(seed, N)) {
        const before = owner(id, shards);
        const after = owner(id, [...shards, added]);
        if (after !== before) {
          expect(after).toBe(added);
          moved++;
        }
      }
      const p = 1 / (shards.length + 1);
      expect(Math.abs(moved - N * p)).toBeLessThanOrEqual(tolerance(N, p));
    }), { numRuns: 20 });
  });

  it('removing a shard moves only its points, each to its next owner in the ranking', () => {
    fc.assert(fc.property(shardSet(2, 10), fc.nat(), fc.nat(1000), (shards, pick, seed) => {
      const removed = shards[pick % shards.length];
      const rest = shards.filter((s) => s !== removed);
      for (const id of ids(seed, 2000)) {
        const r = ranking(id, shards);
        const after = owner(id, rest);
        expect(after).toBe(r[0] === removed ? r[1] : r[0]);
      }
    }), { numRuns: 20 });
  });

  it('depends only on the set of shard ids: deterministic and independent of their order', () => {
    fc.assert(fc.property(shardSet(1, 16), fc.string({ minLength: 1, maxLength: 64, unit: 'grapheme' }), fc.nat(), (shards, id, seed) => {
      const shuffled = [...shards].sort((a, b) => ((a * 2654435761 + seed) >>> 0) - ((b * 2654435761 + seed) >>> 0));
      const r = ranking(id, shards);
      expect(ranking(id, shuffled)).toEqual(r);
      expect(ranking(id, [...shards, ...shards])).toEqual(r);
      expect(owner(id, shuffled)).toBe(r[0]);
      expect(owner(id, shards)).toBe(r[0]);
      expect([...r].sort((a, b) => a - b)).toEqual([...shards].sort((a, b) => a - b));
    }), { numRuns: 500 });
  });

  it('pins a few owners: a change of hash, seed or encoding would move data between shards', () => {
    const shards = [0, 1, 2, 3];
    const got = ['1', '42', 'doc-7', 'ünïcode', 'a'.repeat(256)].map((id) => owner(id, shards));
    expect(got).toMatchInlineSnapshot(`
      [
        3,
        0,
        0,
        2,
        2,
      ]
    `);
  });

  it('owns with a single shard; refuses no shard and a shard id that is not a non-negative integer', () => {
    expect(owner('x'.repeat(256), [5])).toBe(5);
    expect(ranking('x', [])).toEqual([]);
    expect(() => owner('a', [])).toThrow(/at least one shard/);
    expect(() => owner('a', [-1])).toThrow(/non-negative integer/);
  });
});
