import { Worker } from 'node:worker_threads';
import { SvcError } from '../../base/errors.js';
import type { VectorStore, VectorStoreHandle } from '../vector-store.js';
import { workerEntry } from '../worker-url.js';
import { Hnsw, type HnswData, type HnswOptions, type SharedSync } from './hnsw.js';

export type WorkerRequest =
  | { type: 'build'; store: VectorStoreHandle; slots: Int32Array; opts: HnswOptions }
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

/** Runs one request in a fresh worker thread and resolves to its reply. */
function runWorker(req: WorkerRequest): Promise<HnswData | undefined> {
  const entry = workerEntry(import.meta.url, 'build-worker-main');
  return new Promise((resolve, reject) => {
    const worker = new Worker(entry.filename, { workerData: req, eval: entry.eval });
    let settled = false;
    worker.once('message', (reply: WorkerReply) => {
      settled = true;
      if (reply.ok) resolve(reply.data);
      else reject(new SvcError('internal', `index build failed in a worker: ${reply.error}`));
      void worker.terminate();
    });
    worker.once('error', (e) => {
      settled = true;
      reject(new SvcError('internal', `index build worker crashed: ${e.message}`));
    });
    worker.once('exit', (code) => {
      if (!settled) reject(new SvcError('internal', `index build worker exited with code ${code}`));
    });
  });
}

/**
 * Builds the graph in a worker thread that reads the vectors in place from the store's shared memory;
 * the calling thread stays free. The graph comes back as SharedArrayBuffer-backed arrays (no copy).
 */
export async function buildInWorker(store: VectorStore, slots: Int32Array, opts: HnswOptions): Promise<Hnsw> {
  const data = await runWorker({ type: 'build', store: store.handle(), slots, opts });
  return Hnsw.deserialize(store, data!);
}

/** Inserts done on the calling thread before the workers start, so they begin from a connected core. */
const SEED_INSERTS = 1000;

/**
 * Builds one graph with `workers` threads inserting concurrently into shared arrays (hnswlib's
 * parallel addPoint, with Atomics spin locks per node). Levels are drawn up front from the seed, but the
 * interleaving of inserts is not deterministic, so neither is the exact graph (its quality is).
 * The calling thread inserts the first SEED_INSERTS slots, then waits.
 */
export async function buildParallel(store: VectorStore, slots: Int32Array, opts: HnswOptions, workers = 2): Promise<Hnsw> {
  const h = new Hnsw(store, opts);
  const levels = h.drawLevels(slots.length);
  const sync = h.prepareShared(slots, levels);
  const from = Math.min(slots.length, SEED_INSERTS);
  for (let i = 0; i < from; i++) h.insertConcurrent(slots[i], levels[i], sync);
  if (from < slots.length) {
    const data = h.serialize();
    await Promise.all(
      Array.from({ length: workers }, (_, worker) =>
        runWorker({ type: 'insert', store: store.handle(), data, sync, slots, levels, from, worker, workers }),
      ),
    );
  }
  h.finishShared(sync);
  return h;
}
