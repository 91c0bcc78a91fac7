import { Worker } from 'node:worker_threads';
import { describe, expect, it } from 'vitest';
import { SharedTokenBuckets, TokenBuckets } from './rate-limit.js';
import { systemClock } from '../base/clock.js';

/** A worker thread that takes `n` tokens of `key` from the shared buckets and posts how many it got. */
const TAKER = `
const { parentPort, workerData } = require('node:worker_threads');
const { sab, keys, opts, key, n, mod, start } = workerData;
import(mod).then(({ SharedTokenBuckets }) => {
  const b = new SharedTokenBuckets(sab, keys, opts);
  // Every taker starts at once, when the test releases them: their takes overlap.
  const gate = new Int32Array(start);
  Atomics.add(gate, 1, 1);
  Atomics.wait(gate, 0, 0);
  let ok = 0;
  for (let i = 0; i < n; i++) if (b.take(key).ok) ok++;
  parentPort.postMessage(ok);
});
`;

describe('SharedTokenBuckets', () => {
  it('behaves as TokenBuckets on one thread: a burst, then refusals with a retry time', () => {
    const opts = { requestsPerSecond: 0.001, burst: 3 };
    const shared = new SharedTokenBuckets(SharedTokenBuckets.allocate(['a', 'b'], opts), ['a', 'b'], opts);
    const own = new TokenBuckets(opts, systemClock);
    const seq = (t: { take(k: string): { ok: boolean } }) => ['a', 'a', 'a', 'a', 'b', 'a', 'b'].map((k) => t.take(k).ok);
    expect(seq(shared)).toEqual(seq(own));
    expect(shared.take('a')).toEqual({ ok: false, retryAfterSeconds: expect.any(Number) as number });
    expect(new SharedTokenBuckets(SharedTokenBuckets.allocate(['a'], { requestsPerSecond: 0, burst: 0 }), ['a'], { requestsPerSecond: 0, burst: 0 }).take('a')).toEqual({ ok: true });
  });

  it('threads taking at once draw on one bucket: together they get the burst, not a burst each', async () => {
    // The workers load the TypeScript module through tsx, as the server's workers do from source.
    const opts = { requestsPerSecond: 0.001, burst: 300_000 };
    const keys = ['k1', 'k2'];
    const sab = SharedTokenBuckets.allocate(keys, opts);
    const mod = new URL('./rate-limit.ts', import.meta.url).href;
    const start = new SharedArrayBuffer(8);
    const gate = new Int32Array(start);
    const code = TAKER.replace('import(mod)', `import(${JSON.stringify(import.meta.resolve('tsx/esm/api'))}).then((t) => t.tsImport(mod, ${JSON.stringify(import.meta.url)}))`);
    const run = (key: string) => new Promise<number>((resolve, reject) => {
      const w = new Worker(code, { eval: true, workerData: { sab, keys, opts, key, n: 150_000, mod, start } });
      w.once('message', (n: number) => { resolve(n); void w.terminate(); });
      w.once('error', reject);
    });
    const runs = [run('k1'), run('k1'), run('k1'), run('k2')];
    await expect.poll(() => Atomics.load(gate, 1), { timeout: 30_000 }).toBe(4);
    Atomics.store(gate, 0, 1);
    Atomics.notify(gate, 0);
    const got = await Promise.all(runs);
    // 450,000 takes of k1 racing on three threads: exactly the burst succeeds (a lost update would give more).
    expect(got[0] + got[1] + got[2]).toBe(300_000);
    expect(got[3]).toBe(150_000);
  });
});
