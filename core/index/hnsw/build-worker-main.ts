// Worker thread entry. Re-opens the shared vector store (its own scratch lane) and either builds a
// whole graph and posts it back, or takes its share of a parallel build into a graph shared with the
// other threads. Graph arrays are SharedArrayBuffer-backed, so posting them copies nothing.
import { parentPort, workerData } from 'node:worker_threads';
import { VectorStore } from '../vector-store.js';
import { Hnsw } from './hnsw.js';
import type { WorkerRequest } from './build-worker.js';

const req = workerData as WorkerRequest;
const store = VectorStore.open(req.store);
let reply: unknown;
try {
  if (req.type === 'build') {
    const h = Hnsw.build(store, req.slots, req.opts);
    reply = { ok: true, data: h.serialize() };
  } else {
    const h = Hnsw.deserialize(store, req.data);
    for (let i = req.from + req.worker; i < req.slots.length; i += req.workers) {
      h.insertConcurrent(req.slots[i], req.levels[i], req.sync);
    }
    reply = { ok: true };
  }
} catch (e) {
  reply = { ok: false, error: e instanceof Error ? e.message : String(e) };
} finally {
  // Released before replying: the parent terminates the worker as soon as the reply arrives, which can
  // stop this thread before a later close ran and leak the lane (16 rebuilds later, none could start).
  store.close();
}
parentPort!.postMessage(reply);
