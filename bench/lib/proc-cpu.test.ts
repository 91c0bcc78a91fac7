import { spawn } from 'node:child_process';
import { describe, expect, it } from 'vitest';
import { cpuSample, withCpuCost } from './proc-cpu.js';

const linux = process.platform === 'linux';

/** A child that spins for `ms` on its main thread, then idles until killed. */
function spinner(ms: number): { pid: number; ready: Promise<void>; kill(): void } {
  const child = spawn(process.execPath, ['-e', `process.stdout.write('go'); const t = Date.now(); while (Date.now() - t < ${ms}); setInterval(() => {}, 1000);`], { stdio: ['ignore', 'pipe', 'ignore'] });
  const ready = new Promise<void>((resolve) => child.stdout!.once('data', () => resolve()));
  return { pid: child.pid!, ready, kill: () => child.kill('SIGKILL') };
}

describe.runIf(linux)('server CPU from /proc', () => {
  it('charges a process its main thread’s busy time, and nothing when it idles', async () => {
    const s = spinner(600);
    try {
      await s.ready;
      const busy = await withCpuCost(s.pid, async () => {
        await new Promise((r) => setTimeout(r, 500));
        return { qps: 1000 };
      });
      // Spinning for most of the half second: close to one core, all of it on the main thread.
      expect(busy.server_cores).toBeGreaterThan(0.3); // less when other tests share the cores
      expect(busy.server_cores).toBeLessThan(1.3);
      expect(busy.main_thread_us_per_request).toBeGreaterThan(250);
      expect(busy.server_cpu_us_per_request).toBeGreaterThanOrEqual(busy.main_thread_us_per_request!);
      await new Promise((r) => setTimeout(r, 300)); // the spin is over
      const idle = await withCpuCost(s.pid, async () => {
        await new Promise((r) => setTimeout(r, 400));
        return { qps: 1000 };
      });
      expect(idle.server_cores).toBeLessThan(0.1);
    } finally {
      s.kill();
    }
  });

  it('counts reaped children when asked (a postmaster’s backends)', async () => {
    const before = cpuSample(process.pid)!;
    const r = await withCpuCost(process.pid, async () => {
      // A child that does a fixed amount of work (some 0.2 s of CPU here) and exits; node reaps it
      // before 'exit' fires.
      const c = spawn(process.execPath, ['-e', 'let x = 0; for (let i = 0; i < 2e8; i++) x += i % 7; if (x < 0) console.log(x);'], { stdio: 'ignore' });
      await new Promise((res) => c.once('exit', res));
      return { qps: 10 };
    }, { withChildren: true, settleMs: 50 });
    const after = cpuSample(process.pid)!;
    const child = after.children - before.children;
    expect(child).toBeGreaterThan(0.05);
    expect(r.main_thread_us_per_request).toBeNull();
    // This process only waits meanwhile: the cores come from the child it reaped.
    expect(r.server_cores!).toBeGreaterThan(0.1);
    expect(r.server_cpu_us_per_request).toBeCloseTo((r.server_cores! / 10) * 1e6, -2);
  });

  it('gives nulls for a process that is gone', async () => {
    const r = await withCpuCost(2 ** 22 + 12345, async () => ({ qps: 5 }));
    expect(r).toEqual({ qps: 5, server_cores: null, server_cpu_us_per_request: null, main_thread_us_per_request: null });
  });
});
