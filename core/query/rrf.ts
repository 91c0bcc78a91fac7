/**
 * Reciprocal Rank Fusion (spec, "Hybrid"): a document at zero-based rank r of a list contributes
 * 1 / (k0 + r + 1); contributions are summed across lists.
 *
 * Decisions the spec leaves open:
 * - An id repeated inside one list counts once, at its best (first) rank.
 * - Ties in the fused score are broken by first appearance: the earlier list wins, then the better rank
 *   in that list. Callers pass the dense list first, so ties favour the dense ranking. This depends
 *   only on the inputs, never on hashing or id types.
 * - Sums run in list order, so the same inputs always give bit-identical scores.
 */
import { assert } from '../base/assert.js';

export interface RankedList {
  ids: ArrayLike<number | string>;
}

export interface Fused<Id extends number | string = number | string> {
  id: Id;
  score: number;
}

export const DEFAULT_RRF_K0 = 60;

export function rrf<Id extends number | string>(lists: readonly { ids: ArrayLike<Id> }[], k0: number = DEFAULT_RRF_K0): Fused<Id>[] {
  assert(Number.isFinite(k0) && k0 >= 0, 'rrf k0 is a finite non-negative number');
  const acc = new Map<Id, { score: number; order: number }>();
  let order = 0;
  for (const list of lists) {
    const seen = new Set<Id>();
    for (let r = 0; r < list.ids.length; r++) {
      const id = list.ids[r];
      if (seen.has(id)) continue;
      seen.add(id);
      const c = 1 / (k0 + r + 1);
      const e = acc.get(id);
      if (e === undefined) acc.set(id, { score: c, order: order++ });
      else e.score += c;
    }
  }
  return [...acc]
    .sort((a, b) => b[1].score - a[1].score || a[1].order - b[1].order)
    .map(([id, e]) => ({ id, score: e.score }));
}
