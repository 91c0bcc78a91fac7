import { Worker } from 'node:worker_threads';
import { SvcError } from '../../base/errors.js';
import type { VectorStore, VectorStoreHandle } from '../vector-store.js';
import { workerEntry } from '../worker-url.js';
import { Hnsw, type HnswData, type HnswOptions } from './hnsw.js';

export interface BuildRequest {
  store: VectorStoreHandle;
  slots: Int32Array;
  opts: HnswOptions;
}

type BuildReply = { ok: true; data: HnswData; kernelWasm: boolean } | { ok: false; error: string };

/** Runs one build request in a fresh worker thread and resolves to the graph it posts back. */
function runWorker(req: BuildRequest): Promise<HnswData> {
  const entry = workerEntry(import.meta.url, 'build-worker-main');
  return new Promise((resolve, reject) => {
    const worker = new Worker(entry.filename, { workerData: req, eval: entry.eval });
    let settled = false;
    worker.once('message', (reply: BuildReply) => {
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
  const data = await runWorker({ store: store.handle(), slots, opts });
  return Hnsw.deserialize(store, data);
}
