import { spawn } from 'node:child_process';
import { describe, expect, it } from 'vitest';
import { cpuSample, withCpuCost } from './proc-cpu.js';

const linux = process.platform === 'linux';

/**
 * A child that does a fixed amount of work on its main thread once told to, reports the CPU that took
 * by its own account, then idles until killed.
 */
function worker(): { pid: number; work(): Promise<number>; kill(): void } {
  const code = `process.stdin.once('data', () => { const u0 = process.cpuUsage(); let x = 0; for (let i = 0; i < 2e8; i++) x += i % 7;
    const u = process.cpuUsage(u0); process.stdout.write(JSON.stringify({ cpu: (u.user + u.system) / 1e6, x })); }); setInterval(() => {}, 1000);`;
  const child = spawn(process.execPath, ['-e', code], { stdio: ['pipe', 'pipe', 'ignore'] });
  return {
    pid: child.pid!,
    work: () => new Promise<number>((resolve) => {
      child.stdout!.once('data', (b: Buffer) => resolve((JSON.parse(b.toString()) as { cpu: number }).cpu));
      child.stdin!.write('go');
    }),
    kill: () => child.kill('SIGKILL'),
  };
}

describe.runIf(linux)('server CPU from /proc', () => {
  it('charges a process its main thread’s busy time, and nothing when it idles', async () => {
    const w = worker();
    try {
      await new Promise((r) => setTimeout(r, 300)); // started
      // 1,000 "requests" over however long the work took: the CPU per request is the work's CPU over
      // 1,000, whatever else shares the cores.
      let reported = 0;
      const busy = await withCpuCost(w.pid, async () => {
        const t0 = performance.now();
        reported = await w.work();
        return { qps: 1000 / ((performance.now() - t0) / 1000) };
      });
      const perRequest = (reported / 1000) * 1e6;
      expect(busy.main_thread_us_per_request!).toBeGreaterThan(perRequest * 0.7);
      expect(busy.main_thread_us_per_request!).toBeLessThan(perRequest * 1.5);
      // The process and its main thread are two counters read one after the other, each in clock ticks
      // (10 ms: 10 µs a request here), so the whole may trail its part by a tick or two; never by more.
      expect(busy.server_cpu_us_per_request!).toBeGreaterThanOrEqual(busy.main_thread_us_per_request! - 20.5);
      const idle = await withCpuCost(w.pid, async () => {
        await new Promise((r) => setTimeout(r, 400));
        return { qps: 1000 };
      });
      expect(idle.server_cores).toBeLessThan(0.1);
    } finally {
      w.kill();
    }
  });

  it('counts reaped children when asked (a postmaster’s backends)', async () => {
    const before = cpuSample(process.pid)!;
    const r = await withCpuCost(process.pid, async () => {
      // A child that does a fixed amount of work and exits; node reaps it before 'exit' fires. Ten
      // "requests" over however long that took.
      const t0 = performance.now();
      const c = spawn(process.execPath, ['-e', 'let x = 0; for (let i = 0; i < 2e8; i++) x += i % 7; if (x < 0) console.log(x);'], { stdio: 'ignore' });
      await new Promise((res) => c.once('exit', res));
      return { qps: 10 / ((performance.now() - t0) / 1000) };
    }, { withChildren: true, settleMs: 50 });
    const child = cpuSample(process.pid)!.children - before.children;
    expect(child).toBeGreaterThan(0.05);
    expect(r.main_thread_us_per_request).toBeNull();
    // The run's CPU, ten requests' worth, holds the child's: this process only waited meanwhile.
    const charged = (r.server_cpu_us_per_request! * 10) / 1e6;
    expect(charged).toBeGreaterThan(child * 0.8);
    expect(charged).toBeLessThan(child + 0.3);
  });

  it('gives nulls for a process that is gone', async () => {
    const r = await withCpuCost(2 ** 22 + 12345, async () => ({ qps: 5 }));
    expect(r).toEqual({ qps: 5, server_cores: null, server_cpu_us_per_request: null, main_thread_us_per_request: null });
  });
});
