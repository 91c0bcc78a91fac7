import { execFile } from 'node:child_process';
import { readdirSync, readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';
import { Prng } from '../../base/prng.js';
import { VectorStore } from '../vector-store.js';
import { buildInWorker, buildParallel, buildWorkerCounts, idleBuildWorkersForTests } from './build-worker.js';
import { Hnsw } from './hnsw.js';

function store(n: number, dim = 8): VectorStore {
  const prng = new Prng(5);
  const s = VectorStore.create({ dim, initialSlots: n });
  for (let i = 0; i < n; i++) s.add(Float32Array.from({ length: dim }, () => prng.next()));
  return s;
}
const range = (n: number) => Int32Array.from({ length: n }, (_, i) => i);
const opts = { m: 8, efConstruction: 40, kind: 'l2' as const, seed: 3 };

describe('build workers', () => {
  it('are kept between builds: the next build reuses a thread, and gives the same graph as one built here', async () => {
    const s = store(500);
    await buildInWorker(s, range(500), opts);
    const before = buildWorkerCounts();
    expect(before.idle).toBeGreaterThanOrEqual(1);
    const again = await buildInWorker(s, range(500), opts);
    const parallel = await buildParallel(s, range(500), opts, 2);
    const after = buildWorkerCounts();
    expect(after.jobs - before.jobs).toBe(1); // 500 slots: the parallel build inserts them all itself
    expect(after.started - before.started).toBe(0);
    expect(parallel.size).toBe(500);
    const here = Hnsw.build(s, range(500), opts);
    expect(Buffer.from(again.serialize().level0.buffer).equals(Buffer.from(here.serialize().level0.buffer))).toBe(true);
  });

  it.runIf(process.platform === 'linux')('runs builds at nice 10, below the threads that serve (Linux)', async () => {
    const s = store(500);
    await buildInWorker(s, range(500), opts);
    // stat(5) field 19, nice: the 17th after the command name.
    const nice = (tid: string): number | null => {
      try {
        const raw = readFileSync(`/proc/self/task/${tid}/stat`, 'utf8');
        return Number(raw.slice(raw.lastIndexOf(')') + 2).split(' ')[16]);
      } catch {
        return null; // a thread that ended meanwhile
      }
    };
    const base = nice(String(process.pid))!; // the main thread is untouched (0 unless the runner was niced)
    // The idle build worker kept for the next build (a runner niced past 10 already runs below it).
    expect(readdirSync('/proc/self/task').map(nice)).toContain(Math.max(base, 10));
  });

  it('drops a worker whose job failed, and the next build still runs', async () => {
    const s = store(50);
    const started = buildWorkerCounts().started;
    await expect(buildInWorker(s, range(50), { ...opts, m: 0 })).rejects.toThrow(/index build failed in a worker/);
    const g = await buildInWorker(s, range(50), opts);
    expect(g.size).toBe(50);
    expect(buildWorkerCounts().started - started).toBeLessThanOrEqual(2);
  });

  it('a cancelled build stops: its threads are terminated, it rejects, and the next build runs', async () => {
    const s = store(20_000, 32);
    const slow = { m: 16, efConstruction: 200, kind: 'l2' as const, seed: 3 };
    for (const build of [(sig: AbortSignal) => buildInWorker(s, range(20_000), slow, sig), (sig: AbortSignal) => buildParallel(s, range(20_000), slow, 2, sig)]) {
      const ctl = new AbortController();
      const running = build(ctl.signal);
      await new Promise((r) => setTimeout(r, 200));
      expect(buildWorkerCounts().busy).toBeGreaterThanOrEqual(1);
      ctl.abort();
      await expect(running).rejects.toThrow(/cancelled/);
      expect(buildWorkerCounts().busy).toBe(0);
    }
    const pre = new AbortController();
    pre.abort();
    await expect(buildInWorker(s, range(100), opts, pre.signal)).rejects.toThrow(/cancelled/);
    expect((await buildInWorker(s, range(100), opts)).size).toBe(100);
  });

  it('a kept worker that dies while idle leaves the pool, and the next build gets a live one', async () => {
    const s = store(100);
    await buildInWorker(s, range(100), opts);
    const kept = idleBuildWorkersForTests();
    expect(kept.length).toBeGreaterThanOrEqual(1);
    await Promise.all(kept.map((w) => w.terminate()));
    expect(buildWorkerCounts().idle).toBe(0);
    const g = await buildInWorker(s, range(100), opts);
    expect(g.size).toBe(100);
  });

  it('an idle kept worker does not keep the process alive', async () => {
    const here = fileURLToPath(new URL('.', import.meta.url));
    const script = `
      const { VectorStore } = await import(${JSON.stringify(`${here}../vector-store.ts`)});
      const { buildInWorker } = await import(${JSON.stringify(`${here}build-worker.ts`)});
      const s = VectorStore.create({ dim: 4, initialSlots: 10 });
      for (let i = 0; i < 10; i++) s.add([i, 1, 2, 3]);
      await buildInWorker(s, Int32Array.from({ length: 10 }, (_, i) => i), { m: 4, efConstruction: 8, kind: 'l2', seed: 1 });
      globalThis.builtAt = performance.now();
      process.on('exit', () => console.log(Math.round(performance.now() - globalThis.builtAt)));
    `;
    const out = await new Promise<string>((resolve, reject) => {
      execFile(process.execPath, ['--import', 'tsx', '--input-type=module', '-e', script], { timeout: 30_000 }, (err, stdout, stderr) => (err ? reject(new Error(`${err.message} ${stderr}`)) : resolve(stdout)));
    });
    // Exits as soon as the build is done, not after the kept worker's idle time (15 s).
    expect(Number(out.trim())).toBeLessThan(5000);
  });
});
