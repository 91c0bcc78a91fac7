import { availableParallelism } from 'node:os';
import { SvcError } from '../base/errors.js';
import { Hnsw, type HnswOptions } from '../index/hnsw/hnsw.js';
import { buildInWorker, buildParallel, extendCopyInWorker, extendInWorker, prewarmBuildWorker } from '../index/hnsw/build-worker.js';
import { ENGINE_LANES, type VectorStore } from '../index/vector-store.js';
import type { GraphExtender, IndexBuilder } from './collection.js';

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
/**
 * Most build workers beside `searchWorkers` search workers: every thread that reads a store holds one of
 * the ENGINE_LANES of its scratch lanes (the main thread, each search worker, each build worker).
 */
export function buildWorkersMax(searchWorkers: number): number {
  return Math.max(1, ENGINE_LANES - 1 - searchWorkers);
}

/**
 * Build workers by default: every core but those the search pool holds, and at least two where there
 * are two cores, within the store's lanes (buildWorkersMax). A build and the search workers together
 * ask for no more threads than there are cores, so a build never starves the pool; a 60k MNIST graph
 * on 16 cores took 11.4 s with the old cap of 4 workers, 5.3 s with 15. On 2 cores with one search
 * worker a build keeps the two workers it had, which the OS shares fairly with the searches.
 */
export function defaultBuildWorkers(cores: number, searchWorkers: number): number {
  return Math.min(buildWorkersMax(searchWorkers), Math.max(Math.min(2, cores), cores - searchWorkers, 1));
}

/**
 * Graphs built off the event loop in worker threads over the shared vector memory, in parallel by
 * `workers` threads on larger collections.
 */
export function indexBuilderInWorkers(workers: number, searchWorkers = 0): IndexBuilder {
  const max = buildWorkersMax(searchWorkers);
  if (!Number.isInteger(workers) || workers < 1 || workers > max) {
    throw new SvcError('invalid_argument', `build workers must be an integer from 1 to ${max} beside ${searchWorkers} search workers (each holds one of the ${ENGINE_LANES} scratch lanes of a store the engine's threads share), got ${workers}`);
  }
  return (store: VectorStore, slots: Int32Array, opts: HnswOptions, signal?: AbortSignal, from?: Hnsw) => {
    if (from !== undefined) return extendInWorker(store, from, missingFrom(from, slots), signal);
    if (workers >= 2 && slots.length >= PARALLEL_BUILD_MIN_SLOTS) return buildParallel(store, slots, opts, workers, signal);
    return buildInWorker(store, slots, opts, signal);
  };
}

/** The slots a graph read back from a file lacks, in order. */
function missingFrom(graph: Hnsw, slots: Int32Array): Int32Array {
  return slots.filter((s) => !graph.has(s));
}

/** The default with no search pool: one build worker per core (Database picks per its pool). */
export const buildIndexInWorker: IndexBuilder = (store, slots, opts, signal, from) =>
  indexBuilderInWorkers(defaultBuildWorkers(availableParallelism(), 0))(store, slots, opts, signal, from);

/** Starts a build worker ahead of the first build (build-worker.ts keeps it for a while). */
export function prewarmIndexBuilds(): void {
  prewarmBuildWorker();
}

/** Inline builds, for tests that drive the freshness state machine step by step. */
export const buildIndexInline: IndexBuilder = async (store, slots, opts, _signal, from) => {
  if (from === undefined) return Hnsw.build(store, slots, opts);
  for (const s of missingFrom(from, slots)) from.insert(s);
  return from;
};

/** Off-thread absorbs (a read replica's): a build worker extends a copy of the graph. */
export const extendGraphInWorker: GraphExtender = (store, graph, slots, levels, signal) => extendCopyInWorker(store, graph, slots, levels, signal);

/** The same on the calling thread, for tests with inline builds: a copy extended, the original unchanged. */
export const extendGraphInline: GraphExtender = async (store, graph, slots, levels) => {
  const next = Hnsw.deserialize(store, Hnsw.copyData(graph.serialize()));
  next.continueLevelsOf(graph);
  for (let i = 0; i < slots.length; i++) next.insertAtLevel(slots[i], levels[i]);
  return next;
};
