// The cost of a call between a request loop and the engine thread (roles/loops/link.ts, issue 20): one
// process, a worker thread answering every call at once with a search-sized answer (10 hits with
// payloads), the main thread keeping --concurrency calls in flight with a 64-d query body. Per mode
// (messages batched per turn of the event loop, the default, against one postMessage per message):
// calls per second and the CPU of both threads per call. Rounds alternate the modes; compare within a run.
// Run: npm run bench:link [-- --calls 100000] [--rounds 2] [--concurrency 1,16]
import { isMainThread, parentPort, Worker, workerData } from 'node:worker_threads';
import { workerEntry } from '../core/index/worker-url.js';
import { Link, type LinkPort } from '../roles/loops/link.js';

const HITS = Array.from({ length: 10 }, (_, i) => ({ id: `p${i}`, rank: i, score: 0.1 * i, payload: { i, tag: 'x' } }));

if (!isMainThread) {
  const link = new Link(parentPort as unknown as LinkPort, { batch: (workerData as { batch: boolean }).batch });
  link.handle('search', () => ({ hits: HITS }));
} else {
  const arg = (name: string, dflt: string): string => {
    const i = process.argv.indexOf(`--${name}`);
    return i >= 0 ? process.argv[i + 1] : dflt;
  };
  const calls = Number(arg('calls', '100000'));
  const rounds = Number(arg('rounds', '2'));
  const levels = arg('concurrency', '1,16').split(',').map(Number);
  const body = { vector: new Float32Array(64).fill(0.5), k: 10 };

  const run = async (batch: boolean, concurrency: number): Promise<{ calls_per_s: number; cpu_us_per_call: number }> => {
    const entry = workerEntry(import.meta.url, 'link');
    const w = new Worker(entry.filename, { eval: entry.eval, workerData: { batch } });
    const link = new Link(w as unknown as LinkPort, { batch });
    await link.call('search', 'c', body);
    let sent = 0;
    let done = 0;
    const c0 = process.cpuUsage();
    const t0 = performance.now();
    await new Promise<void>((resolve) => {
      const one = (): void => {
        if (sent >= calls) return;
        sent++;
        void link.call('search', 'c', body).then(() => {
          if (++done === calls) resolve();
          else one();
        });
      };
      for (let i = 0; i < concurrency; i++) one();
    });
    const ms = performance.now() - t0;
    const cpu = process.cpuUsage(c0);
    await w.terminate();
    return { calls_per_s: Math.round((calls / ms) * 1000), cpu_us_per_call: Math.round(((cpu.user + cpu.system) / calls) * 10) / 10 };
  };

  const rows: { round: number; concurrency: number; batched: boolean; calls_per_s: number; cpu_us_per_call: number }[] = [];
  for (let round = 1; round <= rounds; round++) {
    for (const concurrency of levels) {
      const order = round % 2 === 1 ? [true, false] : [false, true];
      for (const batch of order) {
        const r = await run(batch, concurrency);
        rows.push({ round, concurrency, batched: batch, ...r });
        console.log(`round ${round} concurrency ${concurrency} ${batch ? 'batched  ' : 'unbatched'} ${r.calls_per_s} calls/s, ${r.cpu_us_per_call} µs CPU per call (both threads)`);
      }
    }
  }
  console.log(JSON.stringify({ node: process.version, calls, rows }));
}
