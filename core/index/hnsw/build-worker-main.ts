// Worker thread entry: re-open the shared vector store, build an HNSW over the given slots and post
// the graph back. The graph's arrays are SharedArrayBuffer-backed, so posting them copies nothing.
import { parentPort, workerData } from 'node:worker_threads';
import { VectorStore } from '../vector-store.js';
import { Hnsw } from './hnsw.js';
import type { BuildRequest } from './build-worker.js';

const req = workerData as BuildRequest;
const store = VectorStore.open(req.store);
try {
  const h = Hnsw.build(store, req.slots, req.opts);
  parentPort!.postMessage({ ok: true, data: h.serialize(), kernelWasm: store.kernel.isWasm });
} catch (e) {
  parentPort!.postMessage({ ok: false, error: e instanceof Error ? e.message : String(e) });
} finally {
  store.close();
}
