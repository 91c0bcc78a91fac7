import { availableParallelism } from 'node:os';
import { Hnsw, type HnswOptions } from '../index/hnsw/hnsw.js';
import { buildInWorker, buildParallel, prewarmBuildWorker } from '../index/hnsw/build-worker.js';
import type { VectorStore } from '../index/vector-store.js';
import type { IndexBuilder } from './collection.js';

/**
 * Below this many slots a graph is built by one worker. Two workers are faster from about 4,000 slots
 * (measured here, 2 cores, M 16, efConstruction 200; one worker / two: GloVe-100 5,000 790 / 446 ms,
 * 10,000 1,444 / 982 ms; MNIST-784 5,000 1,809 / 1,125 ms), but on a small graph concurrent inserts
 * cost recall: GloVe-100 10,000, recall@10 at ef 128 over six seeds, 0.1 to 1.2 points below the
 * sequential graph (a whole point in one build in three), which costs more query time at a given
 * recall than the build saves. At 20,000 the loss is 0.04 to 0.1 points, at 40,000 within the noise,
 * and at 340,000 none (0.9415 / 0.9412).
 */
const PARALLEL_BUILD_MIN_SLOTS = 16_000;
const BUILD_WORKERS_MAX = 4;

/**
 * The default: graphs are built off the event loop in worker threads over the shared vector memory,
 * in parallel on larger collections (one worker per core, at most BUILD_WORKERS_MAX).
 */
export const buildIndexInWorker: IndexBuilder = (store: VectorStore, slots: Int32Array, opts: HnswOptions, signal?: AbortSignal) => {
  const workers = Math.min(BUILD_WORKERS_MAX, availableParallelism());
  if (workers >= 2 && slots.length >= PARALLEL_BUILD_MIN_SLOTS) return buildParallel(store, slots, opts, workers, signal);
  return buildInWorker(store, slots, opts, signal);
};

/** Starts a build worker ahead of the first build (build-worker.ts keeps it for a while). */
export function prewarmIndexBuilds(): void {
  prewarmBuildWorker();
}

/** Inline builds, for tests that drive the freshness state machine step by step. */
export const buildIndexInline: IndexBuilder = async (store, slots, opts) => Hnsw.build(store, slots, opts);
