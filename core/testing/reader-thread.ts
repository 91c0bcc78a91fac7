import { Worker } from 'node:worker_threads';

/**
 * A thread that reads a collection's shared memory while a test writes it (shared-reads.ts tests): runs
 * `source` (a CommonJS script, evaluated) with workerData `{ handle, stop, url, tsx }`: the ReadView
 * handle, a shared int32 the test sets to 1 to stop it, and what the script needs to import
 * shared-reads.ts. `next()` is its next message (or its error).
 */
export function readerThread(source: string, handle: unknown): { worker: Worker; next(): Promise<unknown>; stop(): void } {
  const stop = new Int32Array(new SharedArrayBuffer(4));
  const worker = new Worker(source, { eval: true, workerData: {
    handle, stop: stop.buffer, url: new URL('../collection/shared-reads.ts', import.meta.url).href, tsx: import.meta.resolve('tsx/esm/api'),
  } });
  return {
    worker,
    next: () => new Promise((resolve, reject) => {
      worker.once('message', resolve);
      worker.once('error', reject);
    }),
    stop: () => Atomics.store(stop, 0, 1),
  };
}
