// Build worker thread. Each request re-opens the shared vector store (its own scratch lane) and either
// builds a whole graph and posts it back, inserts slots into a graph it is given (a graph read back from
// a file), or into a copy of one (a read replica's absorb), and posts that back, or takes its share of a parallel build into a graph shared
// with the other threads. Graph arrays are SharedArrayBuffer-backed, so posting them copies nothing.
// The thread stays for the next request (build-worker.ts keeps idle workers for a while).
import { readlinkSync } from 'node:fs';
import { setPriority } from 'node:os';
import { parentPort } from 'node:worker_threads';
import { VectorStore } from '../vector-store.js';
import { Hnsw } from './hnsw.js';
import type { WorkerRequest } from './build-worker.js';

function handle(req: WorkerRequest): unknown {
  const store = VectorStore.open(req.store);
  try {
    if (req.type === 'build') {
      const h = Hnsw.build(store, req.slots, req.opts);
      return { ok: true, data: h.serialize() };
    }
    if (req.type === 'extend') {
      const h = Hnsw.deserialize(store, req.copy === true ? Hnsw.copyData(req.data) : req.data);
      const levels = req.levels;
      if (levels === undefined) for (let i = 0; i < req.slots.length; i++) h.insert(req.slots[i]);
      else for (let i = 0; i < req.slots.length; i++) h.insertAtLevel(req.slots[i], levels[i]);
      return { ok: true, data: h.serialize() };
    }
    const h = Hnsw.deserialize(store, req.data);
    for (let i = req.from + req.worker; i < req.slots.length; i += req.workers) {
      h.insertConcurrent(req.slots[i], req.levels[i], req.sync);
    }
    return { ok: true };
  } catch (e) {
    return { ok: false, error: e instanceof Error ? e.message : String(e) };
  } finally {
    // Released before replying, so a lane is never held by a worker that is idle or being stopped.
    store.close();
  }
}

/**
 * Builds yield a busy core to the threads that answer requests and apply writes: this thread runs at
 * nice BUILD_NICE (Linux, where a thread is a task with its own id and its own nice value; lowering a
 * priority needs no privilege). On an idle machine a build runs as fast as before; on a loaded one
 * the event loop and the search workers go first, and the build takes the rest. Elsewhere, or if the
 * kernel says no, the build runs at the process's priority.
 */
function yieldToServing(): void {
  try {
    const tid = Number(readlinkSync('/proc/thread-self').split('/').pop());
    if (Number.isInteger(tid) && tid > 0) setPriority(tid, BUILD_NICE);
  } catch {
    // not Linux (no /proc/thread-self), or not allowed: nothing changes
  }
}
/** Named in build-worker.test.ts, which checks a build thread runs at it. */
const BUILD_NICE = 10;
yieldToServing();

parentPort!.on('message', (req: WorkerRequest) => {
  parentPort!.postMessage(handle(req));
});
