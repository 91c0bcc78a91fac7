import type { Bitset } from '../base/bitset.js';
import { flatSearch, type SearchResult } from '../index/flat.js';
import type { Hnsw } from '../index/hnsw/hnsw.js';
import type { DistanceKind } from '../index/kernels/kernel.js';
import type { VectorStore } from '../index/vector-store.js';

/**
 * What the main thread decided for one dense search (Collection.planDense): the planner's choice and
 * the state it saw. The same `runDensePlan` executes it in-thread or in a search worker (search-pool.ts),
 * so both paths give the same hits and scores over the same graph.
 */
export interface DensePlan {
  /** 'exact': scan the accepted slots; 'graph': traverse the graph below `indexedUpTo`, scan the tail. */
  mode: 'exact' | 'graph';
  /** The accept set: live slots (or the filter's matches among them) when the plan was made. */
  bits: Bitset;
  /**
   * Every slot below `count` is in `bits` (no filter, no tombstone): the graph needs no per-node test
   * but its bound, and a search worker is not sent the bitset.
   */
  acceptAll: boolean;
  k: number;
  /** The beam for a graph plan (already widened by the planner for a filter). */
  ef: number;
  /** min(k, accepted slots): fewer hits from the graph fall back to exact. */
  want: number;
  /** The graph covers exactly the slots below this; the tail [indexedUpTo, count) is scanned exactly. */
  indexedUpTo: number;
  /** Store count when the plan was made (later appends are not part of this read). */
  count: number;
  /**
   * false: no exact scan of the accepted slots may run, neither the plan's own nor a short graph
   * answer's fallback (runDensePlan throws ExactScanRefused). A request loop sets it when the accepted
   * slots are more than it scans (shared-reads.ts LOOP_SCAN_MAX); absent, every scan runs.
   */
  exactAllowed?: boolean;
}

/** A plan with `exactAllowed: false` needed an exact scan of its accepted slots. */
export class ExactScanRefused extends Error {
  constructor() {
    super('an exact scan this plan does not allow');
  }
}

const EMPTY: SearchResult = { slots: new Int32Array(0), dists: new Float32Array(0) };

/** Accepted slots in [from, to), ascending. */
function bitsIn(bits: Bitset, from: number, to: number): Int32Array {
  const end = Math.min(to, bits.capacity);
  const out: number[] = [];
  const words = bits.words;
  for (let s = from; s < end; s++) if ((words[s >>> 5] & (1 << (s & 31))) !== 0) out.push(s);
  return Int32Array.from(out);
}

/**
 * Runs a plan. A graph node at or above `indexedUpTo` (inserted by the writer after the plan was made,
 * visible to a worker reading the shared arrays) is never returned from the graph: the tail scan
 * covers it, so no slot is counted twice. A traversal that comes back short falls back to exact.
 */
export function runDensePlan(store: VectorStore, kind: DistanceKind, graph: Hnsw | null, query: Float32Array, plan: DensePlan): SearchResult {
  const { bits, k, indexedUpTo } = plan;
  const words = bits.words;
  const cap = bits.capacity;
  const accept = (s: number): boolean => s < cap && (words[s >>> 5] & (1 << (s & 31))) !== 0;
  // The accept set is the candidate set: the scan walks its words directly (no per-slot callback).
  const exact = (): SearchResult => {
    if (plan.exactAllowed === false) throw new ExactScanRefused();
    return plan.acceptAll
      ? flatSearch(store, store.kernel, query, k, kind, undefined, (s) => s < plan.count)
      : flatSearch(store, store.kernel, query, k, kind, bits);
  };
  if (plan.mode === 'exact' || graph === null) return exact();
  const fromGraph = graph.search(query, k, plan.ef, plan.acceptAll ? (s) => s < indexedUpTo : (s) => s < indexedUpTo && accept(s));
  const tailSlots = plan.acceptAll ? Int32Array.from({ length: Math.max(0, plan.count - indexedUpTo) }, (_, i) => indexedUpTo + i) : bitsIn(bits, indexedUpTo, plan.count);
  const fromTail = tailSlots.length === 0 ? EMPTY : flatSearch(store, store.kernel, query, k, kind, tailSlots);
  const merged = mergeResults(fromGraph, fromTail, k);
  return merged.slots.length < plan.want ? exact() : merged;
}

export function mergeResults(a: SearchResult, b: SearchResult, k: number): SearchResult {
  if (b.slots.length === 0) return a;
  if (a.slots.length === 0) return b;
  const n = Math.min(k, a.slots.length + b.slots.length);
  const slots = new Int32Array(n);
  const dists = new Float32Array(n);
  let i = 0;
  let j = 0;
  for (let o = 0; o < n; o++) {
    const takeA = j >= b.slots.length || (i < a.slots.length && (a.dists[i] < b.dists[j] || (a.dists[i] === b.dists[j] && a.slots[i] < b.slots[j])));
    if (takeA) {
      slots[o] = a.slots[i];
      dists[o] = a.dists[i++];
    } else {
      slots[o] = b.slots[j];
      dists[o] = b.dists[j++];
    }
  }
  return { slots, dists };
}
