import { assert } from '../base/assert.js';
import { compareIdsUtf8 } from '../base/id-order.js';
import type { Hit, Metric } from '../base/model.js';

/**
 * The global top-k of per-shard top-k lists (a router's scatter-gather): every shard answers its own
 * best k, and the best k of their union is the answer a single node holding all the points would give,
 * since each of the global top k is in its own shard's top k.
 *
 * - Order: by score, best first (`lower_first` for l2 distances, `higher_first` for every other score:
 *   cosine, dot, RRF, MaxSim, rerank); equal scores by id in UTF-8 byte order, as a single node orders
 *   them (CONTRACT.md section 1), so the answer never depends on the shard layout.
 * - An id on two shards (a point caught mid-move) appears once, with its best copy.
 * - Ranks are renumbered from zero; the hits' other fields (payload, vector) are kept as each shard sent them.
 *
 * Scores a shard fused itself (RRF over its own ranks) do not merge into the global fusion: hybrid and
 * text queries must fuse the merged dense and sparse lists, not merge fused ones.
 */
export type ScoreOrder = 'higher_first' | 'lower_first';

/** The order of a dense query's scores: l2 is a distance (lower is better), the others similarities. */
export function scoreOrder(metric: Metric): ScoreOrder {
  return metric === 'l2' ? 'lower_first' : 'higher_first';
}

export function hitComparator(order: ScoreOrder): (a: Hit, b: Hit) => number {
  return order === 'higher_first'
    ? (a, b) => (a.score !== b.score ? b.score - a.score : compareIdsUtf8(a.id, b.id))
    : (a, b) => (a.score !== b.score ? a.score - b.score : compareIdsUtf8(a.id, b.id));
}

export function mergeTopK(lists: readonly (readonly Hit[])[], k: number, order: ScoreOrder): Hit[] {
  assert(Number.isSafeInteger(k) && k >= 0, 'k is a non-negative integer');
  const cmp = hitComparator(order);
  for (const list of lists) for (const h of list) assert(!Number.isNaN(h.score), 'a hit has a score');
  // Shards answer best first; a list that is not (an older peer, a bug) is sorted here, so the answer
  // is the sort of the union either way.
  const sorted = lists.filter((l) => l.length > 0).map((l) => (isSorted(l, cmp) ? l : [...l].sort(cmp)));
  const heads = new Int32Array(sorted.length);
  const heap = new MinHeap((a: number, b: number) => cmp(sorted[a][heads[a]], sorted[b][heads[b]]) || a - b);
  for (let i = 0; i < sorted.length; i++) heap.push(i);
  const out: Hit[] = [];
  const seen = new Set<string>();
  while (out.length < k && heap.size > 0) {
    const i = heap.pop();
    const h = sorted[i][heads[i]];
    if (!seen.has(h.id)) {
      seen.add(h.id);
      out.push({ ...h, rank: out.length });
    }
    if (++heads[i] < sorted[i].length) heap.push(i);
  }
  return out;
}

function isSorted(list: readonly Hit[], cmp: (a: Hit, b: Hit) => number): boolean {
  for (let i = 1; i < list.length; i++) if (cmp(list[i - 1], list[i]) > 0) return false;
  return true;
}

/** A binary heap of list indexes; one entry per shard, so small. */
class MinHeap {
  private readonly items: number[] = [];
  constructor(private readonly less: (a: number, b: number) => number) {}

  get size(): number {
    return this.items.length;
  }

  push(x: number): void {
    const a = this.items;
    a.push(x);
    let i = a.length - 1;
    while (i > 0) {
      const p = (i - 1) >> 1;
      if (this.less(a[i], a[p]) >= 0) break;
      [a[i], a[p]] = [a[p], a[i]];
      i = p;
    }
  }

  pop(): number {
    const a = this.items;
    const top = a[0];
    const last = a.pop()!;
    if (a.length > 0) {
      a[0] = last;
      let i = 0;
      for (;;) {
        const l = 2 * i + 1, r = l + 1;
        let m = i;
        if (l < a.length && this.less(a[l], a[m]) < 0) m = l;
        if (r < a.length && this.less(a[r], a[m]) < 0) m = r;
        if (m === i) break;
        [a[i], a[m]] = [a[m], a[i]];
        i = m;
      }
    }
    return top;
  }
}
