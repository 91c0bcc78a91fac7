import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { majority, quorumValue, voteResult } from './quorum.js';

/**
 * etcd's quick test, ours: the sort-based quorum code against deliberately simple definitions that
 * can be read off the Raft paper. Ids outside the membership must never count.
 */

/** The largest v such that at least a majority of members have reached v (try every candidate). */
function simpleQuorumValue(members: string[], values: Map<string, number>): number {
  const candidates = [0, ...members.map((m) => values.get(m) ?? 0)];
  let best = 0;
  for (const v of candidates) {
    const reached = members.filter((m) => (values.get(m) ?? 0) >= v).length;
    if (reached * 2 > members.length) best = Math.max(best, v);
  }
  return best;
}

/** Won if more than half granted; lost if even every missing vote could not make more than half. */
function simpleVoteResult(members: string[], votes: Map<string, boolean>): string {
  const granted = members.filter((m) => votes.get(m) === true).length;
  const missing = members.filter((m) => !votes.has(m)).length;
  if (granted * 2 > members.length) return 'won';
  if ((granted + missing) * 2 > members.length) return 'pending';
  return 'lost';
}

const ID = fc.constantFrom('a', 'b', 'c', 'd', 'e', 'f', 'g', 'h', 'i');
const MEMBERS = fc.uniqueArray(ID, { minLength: 1, maxLength: 9 });

describe('quorum', () => {
  it('majority(n) is the smallest count above half', () => {
    for (let n = 1; n <= 9; n++) {
      expect(majority(n) * 2).toBeGreaterThan(n);
      expect((majority(n) - 1) * 2).toBeLessThanOrEqual(n);
    }
  });

  it('quorumValue agrees with the simple definition (commit index, read confirmation)', () => {
    fc.assert(
      fc.property(MEMBERS, fc.array(fc.tuple(ID, fc.nat(20)), { maxLength: 12 }), (members, pairs) => {
        const values = new Map(pairs);
        expect(quorumValue(members, (id) => values.get(id))).toBe(simpleQuorumValue(members, values));
      }),
      { numRuns: 5000 },
    );
  });

  it('voteResult agrees with the simple definition', () => {
    fc.assert(
      fc.property(MEMBERS, fc.array(fc.tuple(ID, fc.boolean()), { maxLength: 12 }), (members, pairs) => {
        const votes = new Map(pairs);
        expect(voteResult(members, votes)).toBe(simpleVoteResult(members, votes));
      }),
      { numRuns: 5000 },
    );
  });
});
