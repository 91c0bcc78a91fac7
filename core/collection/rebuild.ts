import { Hnsw, type HnswOptions } from '../index/hnsw/hnsw.js';
import { buildInWorker } from '../index/hnsw/build-worker.js';
import type { VectorStore } from '../index/vector-store.js';
import type { IndexBuilder } from './collection.js';

/** The default: graphs are built in a worker thread over the shared vector memory, off the event loop. */
export const buildIndexInWorker: IndexBuilder = (store: VectorStore, slots: Int32Array, opts: HnswOptions) =>
  buildInWorker(store, slots, opts);

/** Inline builds, for tests that drive the freshness state machine step by step. */
export const buildIndexInline: IndexBuilder = async (store, slots, opts) => Hnsw.build(store, slots, opts);
