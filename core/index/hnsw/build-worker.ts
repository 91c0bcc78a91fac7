import { Worker } from 'node:worker_threads';
import { SvcError } from '../../base/errors.js';
import type { VectorStore, VectorStoreHandle } from '../vector-store.js';
import { workerEntry } from '../worker-url.js';
import { Hnsw, type HnswData, type HnswOptions, type SharedSync } from './hnsw.js';

export type WorkerRequest =
  | { type: 'build'; store: VectorStoreHandle; slots: Int32Array; opts: HnswOptions }
  /** `levels`: drawn by the caller, one per slot; `copy`: extend a copy of `data`, which readers still use. */
  | { type: 'extend'; store: VectorStoreHandle; data: HnswData; slots: Int32Array; levels?: Int8Array; copy?: boolean }
  | {
      type: 'insert';
      store: VectorStoreHandle;
      data: HnswData;
      sync: SharedSync;
      slots: Int32Array;
      levels: Int8Array;
      from: number;
      worker: number;
      workers: number;
    };

type WorkerReply = { ok: true; data?: HnswData } | { ok: false; error: string };

/**
 * How long a build worker stays after its last job. Starting one (thread, module graph, WASM) takes
 * about 40 ms from dist/ here and 130 ms under tsx: a good part of building a 2,000-vector graph. Kept
 * workers make every rebuild after the first start at once; idle ones never keep the process alive.
 */
const WORKER_IDLE_MS = 15_000;

interface Kept {
  worker: Worker;
  timer: NodeJS.Timeout | undefined;
  /** Exited or crashed: never handed out again. */
  dead: boolean;
}

const idle: Kept[] = [];
/** Threads started and jobs run, for tests. */
const counts = { started: 0, jobs: 0 };
/** Workers handed out and not yet back (or gone): builds running now. */
const busy = new Set<Kept>();

export function buildWorkerCounts(): { started: number; jobs: number; idle: number; busy: number } {
  return { ...counts, idle: idle.length, busy: busy.size };
}

/** The idle workers' threads, for tests that make one die while it waits. */
export function idleBuildWorkersForTests(): Worker[] {
  return idle.map((k) => k.worker);
}

function forget(k: Kept): void {
  k.dead = true;
  busy.delete(k);
  if (k.timer !== undefined) clearTimeout(k.timer);
  const at = idle.indexOf(k);
  if (at >= 0) idle.splice(at, 1);
}

function startWorker(): Kept {
  const entry = workerEntry(import.meta.url, 'build-worker-main');
  counts.started++;
  const k: Kept = { worker: new Worker(entry.filename, { eval: entry.eval }), timer: undefined, dead: false };
  // For the worker's whole life, not only its jobs: one that dies while idle leaves the pool (and an
  // 'error' without a listener would be thrown in this thread).
  k.worker.on('error', () => forget(k));
  k.worker.once('exit', () => forget(k));
  return k;
}

/** An idle worker, or a new one; it keeps the process alive while it works. */
function acquire(): Kept {
  let k = idle.pop();
  while (k !== undefined && k.dead) k = idle.pop();
  k ??= startWorker();
  if (k.timer !== undefined) clearTimeout(k.timer);
  k.timer = undefined;
  k.worker.ref();
  busy.add(k);
  return k;
}

function release(k: Kept): void {
  busy.delete(k);
  if (k.dead) return;
  k.worker.unref();
  k.timer = setTimeout(() => {
    forget(k);
    void k.worker.terminate();
  }, WORKER_IDLE_MS);
  k.timer.unref();
  idle.push(k);
}

/**
 * Starts a build worker now, so that the first build does not wait for one. It is kept like any
 * other (WORKER_IDLE_MS) and keeps nothing alive.
 */
export function prewarmBuildWorker(): void {
  if (idle.length === 0) release(startWorker());
}

/**
 * Runs one request in a build worker and resolves to its reply. A worker that fails is not kept, nor
 * one whose job is cancelled through `signal` (its thread is terminated: a build has no other way to stop).
 */
function runWorker(req: WorkerRequest, signal?: AbortSignal): Promise<HnswData | undefined> {
  if (signal?.aborted) return Promise.reject(cancelled());
  const k = acquire();
  counts.jobs++;
  return new Promise((resolve, reject) => {
    const w = k.worker;
    const done = (): void => {
      w.off('message', onMessage);
      w.off('error', onError);
      w.off('exit', onExit);
      signal?.removeEventListener('abort', onAbort);
    };
    const onAbort = (): void => {
      done();
      forget(k);
      void w.terminate();
      reject(cancelled());
    };
    const onMessage = (reply: WorkerReply): void => {
      done();
      if (reply.ok) {
        release(k);
        resolve(reply.data);
      } else {
        forget(k);
        void w.terminate();
        reject(new SvcError('internal', `index build failed in a worker: ${reply.error}`));
      }
    };
    const onError = (e: Error): void => {
      done();
      forget(k);
      void w.terminate();
      reject(new SvcError('internal', `index build worker crashed: ${e.message}`));
    };
    const onExit = (code: number): void => {
      done();
      reject(new SvcError('internal', `index build worker exited with code ${code}`));
    };
    w.on('message', onMessage);
    w.once('error', onError);
    w.once('exit', onExit);
    signal?.addEventListener('abort', onAbort, { once: true });
    w.postMessage(req);
  });
}

function cancelled(): SvcError {
  return new SvcError('not_ready', 'index build cancelled: its collection was closed or dropped');
}

/**
 * Builds the graph in a worker thread that reads the vectors in place from the store's shared memory;
 * the calling thread stays free. The graph comes back as SharedArrayBuffer-backed arrays (no copy).
 */
export async function buildInWorker(store: VectorStore, slots: Int32Array, opts: HnswOptions, signal?: AbortSignal): Promise<Hnsw> {
  const data = await runWorker({ type: 'build', store: store.handle(), slots, opts }, signal);
  return Hnsw.deserialize(store, data!);
}

/**
 * Inserts `slots` (none of them in it yet) into `graph` in a worker thread, which continues on the
 * graph's shared arrays: a graph read back from a file, completed with the points written since. The
 * graph must not be searched or changed meanwhile; the result replaces it.
 */
export async function extendInWorker(store: VectorStore, graph: Hnsw, slots: Int32Array, signal?: AbortSignal): Promise<Hnsw> {
  if (slots.length === 0) return graph;
  const data = await runWorker({ type: 'extend', store: store.handle(), data: graph.serialize(), slots }, signal);
  return Hnsw.deserialize(store, data!);
}

/**
 * Inserts `slots` (none of them in it yet) into a copy of `graph` made in a worker thread, at `levels`
 * (graph.drawLevels: one per slot, in order): the graph that inserting them here would make, while this
 * thread goes on searching (and the search pool reading) `graph` itself, unchanged. The copy continues
 * `graph`'s level stream. Nothing may change `graph` meanwhile.
 */
export async function extendCopyInWorker(store: VectorStore, graph: Hnsw, slots: Int32Array, levels: Int8Array, signal?: AbortSignal): Promise<Hnsw> {
  if (slots.length !== levels.length) throw new SvcError('internal', `extend: ${slots.length} slots with ${levels.length} levels`);
  const data = await runWorker({ type: 'extend', store: store.handle(), data: graph.serialize(), slots, levels, copy: true }, signal);
  const next = Hnsw.deserialize(store, data!);
  next.continueLevelsOf(graph);
  return next;
}

/** Inserts done on the calling thread before the workers start, so they begin from a connected core. */
const SEED_INSERTS = 1000;

/**
 * Builds one graph with `workers` threads inserting concurrently into shared arrays (hnswlib's
 * parallel addPoint, with Atomics spin locks per node). Levels are drawn up front from the seed, but the
 * interleaving of inserts is not deterministic, so neither is the exact graph (its quality is).
 * The calling thread inserts the first SEED_INSERTS slots, then waits.
 */
export async function buildParallel(store: VectorStore, slots: Int32Array, opts: HnswOptions, workers = 2, signal?: AbortSignal): Promise<Hnsw> {
  const h = new Hnsw(store, opts);
  const levels = h.drawLevels(slots.length);
  const sync = h.prepareShared(slots, levels);
  const from = Math.min(slots.length, SEED_INSERTS);
  for (let i = 0; i < from; i++) h.insertConcurrent(slots[i], levels[i], sync);
  if (from < slots.length) {
    const data = h.serialize();
    await Promise.all(
      Array.from({ length: workers }, (_, worker) =>
        runWorker({ type: 'insert', store: store.handle(), data, sync, slots, levels, from, worker, workers }, signal),
      ),
    );
  }
  h.finishShared(sync);
  return h;
}
