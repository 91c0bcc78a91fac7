/**
 * Responsiveness: p99 latency of light requests (GET /healthz, and a k=1 search on a tiny collection)
 * while the server rebuilds a big collection's graph (200k x 128 in full mode), against the same
 * requests on the idle server. The rebuild is started by a bulk load (which leaves the graph stale) and
 * a read; it runs in a worker thread, and the light requests must not wait for it.
 */
import { randomVectors, row } from '../lib/data.js';
import { startSvc } from '../lib/server-proc.js';
import { percentile, round } from '../lib/stats.js';
import { b64 } from '../peers/svc.js';
import type { Mode } from '../run.js';

const DIM = 128;

async function sample(light: () => Promise<unknown>, until: () => boolean, maxMs: number): Promise<{ requests: number; p50_ms: number; p99_ms: number; max_ms: number }> {
  const lat: number[] = [];
  const end = performance.now() + maxMs;
  while (!until() && performance.now() < end) {
    const s = performance.now();
    await light();
    lat.push(performance.now() - s);
    await new Promise((r) => setTimeout(r, 2));
  }
  lat.sort((a, b) => a - b);
  return { requests: lat.length, p50_ms: round(percentile(lat, 50)), p99_ms: round(percentile(lat, 99)), max_ms: round(lat.at(-1) ?? NaN) };
}

export async function runResponsive(mode: Mode, log: (l: string) => void): Promise<Record<string, unknown>> {
  const n = mode === 'full' ? 200_000 : mode === 'quick' ? 20_000 : 2_000;
  const m = randomVectors(n, DIM, 77);
  const srv = await startSvc();
  try {
    await srv.call('POST', '/v1/collections', { name: 'big', dim: DIM, metric: 'l2' });
    await srv.call('POST', '/v1/collections', { name: 'tiny', dim: 4, metric: 'l2' });
    await srv.call('PUT', '/v1/collections/tiny/points', { points: [{ id: 'a', vector: [1, 2, 3, 4] }, { id: 'b', vector: [4, 3, 2, 1] }] });
    const bulk = async (tag: string) => {
      for (let i = 0; i < n; i += 10_000) {
        const points = Array.from({ length: Math.min(10_000, n - i) }, (_, j) => ({ id: `${tag}${i + j}`, vector_b64: b64(row(m, DIM, i + j)) }));
        await srv.call('POST', '/v1/collections/big/points:bulk', { points });
      }
    };
    await bulk('p');
    await srv.call('POST', '/v1/collections/big/query', { vector: Array.from(row(m, DIM, 0)), k: 1, consistency: 'strong' });
    const lights = {
      healthz: () => srv.call('GET', '/healthz'),
      tiny_search: () => srv.call('POST', '/v1/collections/tiny/query', { vector: [1, 2, 3, 4], k: 1 }),
    };
    const idle: Record<string, unknown> = {};
    for (const [name, f] of Object.entries(lights)) idle[name] = await sample(f, () => false, mode === 'tiny' ? 300 : 2000);

    // A second bulk load of every id replaces them all: the graph goes stale, a read starts the rebuild.
    await bulk('p');
    const t0 = performance.now();
    let done = false;
    const strong = srv.call('POST', '/v1/collections/big/query', { vector: Array.from(row(m, DIM, 1)), k: 1, consistency: 'strong' })
      .finally(() => { done = true; });
    await srv.call('POST', '/v1/collections/big/query', { vector: Array.from(row(m, DIM, 1)), k: 1 });
    const during: Record<string, unknown> = {};
    const names = Object.keys(lights) as (keyof typeof lights)[];
    // Alternate the two light requests while the rebuild runs.
    const samples = await sample(async () => { for (const k of names) await lights[k](); }, () => done, 15 * 60_000);
    await strong;
    const rebuild_s = round((performance.now() - t0) / 1000);
    during.healthz_then_tiny_search = samples;
    log(`  responsiveness: rebuild of ${n} took ${rebuild_s} s; light pair p99 ${samples.p99_ms} ms during (${samples.requests} samples), idle healthz p99 ${(idle.healthz as { p99_ms: number }).p99_ms} ms`);
    return { points: n, dim: DIM, rebuild_s, idle, during_rebuild: during };
  } finally {
    await srv.stop();
  }
}
