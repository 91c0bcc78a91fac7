import { flatSearch, type SearchResult } from './flat.js';
import type { DistanceKind } from './kernels/kernel.js';
import type { VectorStore } from './vector-store.js';

/**
 * The one interface a collection holds its index by. Slots come from the collection's VectorStore;
 * `accept` excludes tombstones and applies filters inside the search; lower distance is better.
 */
export interface VectorIndex {
  readonly kind: DistanceKind;
  /** Slots indexed. */
  readonly size: number;
  insert(slot: number): void;
  search(query: Float32Array, k: number, ef: number, accept?: (slot: number) => boolean): SearchResult;
}

/** The exact index: every slot inserted so far is scanned (the `flat` index kind, and the oracle). */
export class FlatIndex implements VectorIndex {
  readonly kind: DistanceKind;
  private readonly store: VectorStore;
  private readonly slots: number[] = [];
  private dense = true;

  constructor(store: VectorStore, kind: DistanceKind) {
    this.store = store;
    this.kind = kind;
  }

  get size(): number {
    return this.slots.length;
  }

  insert(slot: number): void {
    // While slots arrive as 0, 1, 2, ... a contiguous range scan is used; otherwise the slot list.
    if (slot !== this.slots.length) this.dense = false;
    this.slots.push(slot);
  }

  search(query: Float32Array, k: number, _ef: number, accept?: (slot: number) => boolean): SearchResult {
    const n = this.slots.length;
    if (this.dense) {
      const inRange = (s: number): boolean => s < n && (!accept || accept(s));
      return flatSearch(this.store, this.store.kernel, query, k, this.kind, undefined, n === this.store.count ? accept : inRange);
    }
    return flatSearch(this.store, this.store.kernel, query, k, this.kind, this.slots, accept);
  }
}

export type { DistanceKind } from './kernels/kernel.js';
export type { SearchResult } from './flat.js';
