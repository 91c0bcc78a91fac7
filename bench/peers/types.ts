import type { BenchMetric, Dataset } from '../lib/data.js';

export const M = 16;
export const EF_CONSTRUCTION = 200;

/** A filter the filtered suite asks for: payload `bucket` (an integer in [0, 1000)) below `below`. */
export interface BucketFilter {
  below: number;
}

/** One engine under test. `search` may be synchronous (in-process natives) or return a promise. */
export interface Peer {
  readonly name: string;
  /** How the peer ran here, e.g. "native PostgreSQL 15 + pgvector 0.8.0" or "PGlite (WASM) stand-in". */
  readonly note: string;
  /** Builds the index over `d.base` (ids = row numbers) with M 16, efConstruction 200; `buckets` for filters. */
  build(d: Dataset, buckets?: Int32Array): Promise<void>;
  /** Sets the search-time ef for the following searches (may rebuild a search handle). */
  setEf(ef: number): Promise<void> | void;
  search(q: Float32Array, k: number, filter?: BucketFilter): ArrayLike<number> | Promise<ArrayLike<number>>;
  close(): Promise<void>;
  /**
   * Bytes the engine itself says its index holds (vectors and graph): its own accounting, its saved
   * index file, or its relation's size. Absent when it has none to give.
   */
  indexBytes?(): Promise<number> | number;
}

export type PeerFactory = (metric: BenchMetric) => Promise<Peer>;
