import { compareIdsUtf8 } from '../base/id-order.js';
import type { SearchResult } from '../index/flat.js';

/**
 * Hits of equal distance in id order (CONTRACT.md section 1: by UTF-8 bytes), so an answer never depends
 * on slot numbers, which differ between a leader and its replicas, or after a rebuild. Distances come
 * sorted; only runs of equal ones are touched, and the common case (none) allocates nothing. Only the
 * first `limit` matter to the caller: a run that starts at or after it is left as it is. Each slot's id
 * is asked for once (a request loop decodes it from shared memory).
 */
export function tiesById(idOf: (slot: number) => string, r: SearchResult, limit = r.dists.length): Int32Array {
  let out: Int32Array | null = null;
  const end = r.dists.length;
  for (let i = 0; i < Math.min(limit, end);) {
    let j = i + 1;
    while (j < end && r.dists[j] === r.dists[i]) j++;
    if (j - i > 1) {
      out ??= Int32Array.from(r.slots);
      const run = Array.from(out.subarray(i, j), (slot) => ({ slot, id: idOf(slot) })).sort((a, b) => compareIdsUtf8(a.id, b.id));
      for (let x = 0; x < run.length; x++) out[i + x] = run[x].slot;
    }
    i = j;
  }
  return out ?? r.slots;
}

/** Whether the cut after `k` of `n` asked for may fall inside a run of equal values (more may tie beyond). */
export function tieAtCut(values: ArrayLike<number>, k: number, n: number): boolean {
  return k > 0 && values.length >= n && values[n - 1] === values[k - 1];
}

/** Asks for twice as many until the run of values equal to the k-th ends inside what was found. */
export async function widenTies(
  r: SearchResult, k: number, n: number, most: number, run: (n: number) => SearchResult | Promise<SearchResult>,
): Promise<SearchResult> {
  while (tieAtCut(r.dists, k, n) && n <= most) {
    n *= 2;
    r = await run(n);
  }
  return r;
}

/** widenTies for a search that is never a promise (a request loop's own, core/collection/shared-reads.ts). */
export function widenTiesNow(r: SearchResult, k: number, n: number, most: number, run: (n: number) => SearchResult): SearchResult {
  while (tieAtCut(r.dists, k, n) && n <= most) {
    n *= 2;
    r = run(n);
  }
  return r;
}

/** A multi-vector ranking's equal scores in id order, cut to k. */
export function multiTiesById(r: { ids: string[]; scores: number[] }, k: number): { ids: string[]; scores: number[] } {
  const order = r.ids.map((_, i) => i).sort((a, b) => r.scores[b] - r.scores[a] || compareIdsUtf8(r.ids[a], r.ids[b])).slice(0, k);
  return { ids: order.map((i) => r.ids[i]), scores: order.map((i) => r.scores[i]) };
}
