import { Bitset } from '../base/bitset.js';
import { invalidArgument } from '../base/errors.js';
import { drainAscending, MaxHeap } from './heap.js';
import type { DistanceKind, Kernel } from './kernels/kernel.js';
import { BATCH_MAX, type VectorStore } from './vector-store.js';

export interface SearchResult {
  /** Slots, nearest first. */
  slots: Int32Array;
  /** Their distances (lower is better: squared L2 or negative inner product). */
  dists: Float32Array;
}

/**
 * Exact k-nearest search: the oracle for every approximate index and the planner's pre-filter path.
 * With `candidates` only those slots are scored (a selective filter); a Bitset of candidates is walked
 * word by word straight into the kernel's id batch. `accept` drops slots (tombstones, a filter).
 * Ascending distance, ties broken by slot.
 */
export function flatSearch(
  store: VectorStore,
  kernel: Kernel,
  query: Float32Array,
  k: number,
  kind: DistanceKind,
  candidates?: Int32Array | Bitset | Iterable<number>,
  accept?: (slot: number) => boolean,
): SearchResult {
  if (!Number.isInteger(k) || k < 0) throw invalidArgument(`k must be a non-negative integer, got ${k}`);
  const heap = new MaxHeap(Math.max(1, Math.min(k, 4096)));
  if (k === 0) return drainAscending(heap);
  const { batch, range } = kernel.fns(kind);
  const q = store.loadQuery(query);
  const { ids, out, idsI32, outF32 } = store.lane;
  const base = store.vectorsBase;
  const stride = store.strideBytes;
  const n = store.paddedDim;
  const count = store.count;

  const offer = (cnt: number, slotAt: (i: number) => number): void => {
    for (let i = 0; i < cnt; i++) {
      const d = outF32[i];
      const s = slotAt(i);
      if (heap.size < k) heap.push(d, s);
      else if (d < heap.topD() || (d === heap.topD() && s < heap.topId())) heap.replaceTop(d, s);
    }
  };
  const fromIds = (i: number): number => idsI32[i];
  let fill = 0;
  const flush = (): void => {
    batch(q, base, stride, ids, fill, out, n);
    offer(fill, fromIds);
    fill = 0;
  };
  const take = (s: number): void => {
    if (s < 0 || s >= count || (accept && !accept(s))) return;
    idsI32[fill++] = s;
    if (fill === BATCH_MAX) flush();
  };

  if (candidates) {
    if (candidates instanceof Int32Array) for (let i = 0; i < candidates.length; i++) take(candidates[i]);
    else if (candidates instanceof Bitset && accept === undefined) {
      // Set bits below `count`, lowest first, without a generator or a per-slot callback.
      const words = candidates.words;
      const end = Math.min(count, candidates.capacity);
      const lastWord = Math.min(words.length, (end + 31) >>> 5);
      for (let w = 0; w < lastWord; w++) {
        let bits = words[w];
        if (bits === 0) continue;
        if ((w << 5) + 32 > end) bits &= (1 << (end & 31)) - 1; // the last word: only slots below end
        while (bits !== 0) {
          const t = bits & -bits;
          idsI32[fill++] = (w << 5) | (31 - Math.clz32(t));
          bits ^= t;
          if (fill === BATCH_MAX) flush();
        }
      }
    } else for (const s of candidates) take(s);
    if (fill > 0) flush();
  } else if (accept) {
    for (let s = 0; s < count; s++) take(s);
    if (fill > 0) flush();
  } else {
    for (let start = 0; start < count; start += BATCH_MAX) {
      const cnt = Math.min(BATCH_MAX, count - start);
      range(q, base, stride, start, cnt, out, n);
      offer(cnt, (i) => start + i);
    }
  }
  return drainAscending(heap);
}
