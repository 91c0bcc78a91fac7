import type { AddressInfo } from 'node:net';
import { afterEach, describe, expect, it } from 'vitest';
import { systemClock } from '../../core/base/clock.js';
import { DEFAULT_LIMITS } from '../../core/base/limits.js';
import { Coordinator } from '../../core/cluster/coordinator/coordinator.js';
import { MemoryStore } from '../../core/cluster/coordinator/store.js';
import { createClusterService } from '../../core/service/cluster.js';
import { silentLogger } from '../../core/service/log.js';
import { buildCoordinatorApp } from '../coordinator/rest.js';
import { createPromMetrics } from '../rest/metrics.js';
import { HttpShard, shardPool } from './http-shard.js';
import { RouterMap, startMapRefresh } from './map.js';

const closing: (() => Promise<unknown>)[] = [];
afterEach(async () => {
  for (const c of closing.splice(0).reverse()) await c();
});

const KEYS = [{ name: 'env:0', role: 'admin' as const, collections: ['*'], secret: 'admin' }];

async function coordinatorOn(): Promise<{ coordinator: Coordinator; url: string; call(headers: Record<string, string>): Promise<Response> }> {
  const coordinator = await Coordinator.open({
    store: new MemoryStore(), clock: systemClock, seedUrls: ['http://127.0.0.1:1'],
    client: { pointCount: async () => 0, ready: async () => undefined },
    autoscale: { enabled: false, highWaterPoints: 0, maxShards: null, cooldownMs: 0, standbyUrls: [] },
  });
  const metrics = createPromMetrics();
  const cluster = createClusterService(coordinator, {
    keys: KEYS, insecure: false, limits: DEFAULT_LIMITS, rateLimit: { requestsPerSecond: 0, burst: 0 },
    audit: { append: () => undefined }, clock: systemClock, metrics, log: silentLogger, auditLog: silentLogger,
  });
  const app = buildCoordinatorApp(cluster, { limits: DEFAULT_LIMITS, metrics, log: silentLogger });
  await app.listen({ host: '127.0.0.1', port: 0 });
  closing.push(() => app.close());
  const url = `http://127.0.0.1:${(app.server.address() as AddressInfo).port}`;
  return { coordinator, url, call: (headers) => fetch(`${url}/cluster/map`, { headers: { authorization: 'Bearer admin', ...headers } }) };
}

describe('a router\'s map refresh', () => {
  it('names itself and the version it routes by, so the coordinator knows when it has read a new map', async () => {
    const { coordinator, url } = await coordinatorOn();
    const pool = shardPool();
    closing.push(() => pool.close());
    const map = new RouterMap({ client: (id, u) => new HttpShard({ id, url: u, key: 'admin', timeoutMs: 1000, dispatcher: pool }), timeoutMs: 1000 }, []);
    const refresh = startMapRefresh(map, { coordinatorUrl: url, key: 'admin', timeoutMs: 1000, intervalMs: 60_000, dispatcher: pool, log: silentLogger });
    closing.push(() => refresh.stop());
    await until(() => map.source() === 'coordinator');
    // Its first read had no map of the coordinator's: behind until it says so.
    expect(coordinator.routersBehind().map((r) => r.version)).toEqual([-1]);
    await coordinator.register({ url: 'http://127.0.0.1:2' });
    await refresh.now();
    expect(map.current().version).toBe(coordinator.map().version);
    expect(coordinator.routersBehind().map((r) => r.version)).toEqual([1]); // it asked while on version 1
    await new Promise((r) => setTimeout(r, 210)); // reads asked for by `moved` answers are 200 ms apart at least
    await refresh.now();
    expect(coordinator.routersBehind()).toEqual([]);
    expect(coordinator.routers()).toBe(1);
  });

  it('the coordinator refuses a malformed router header, and answers a client that sends none as before', async () => {
    const { coordinator, call } = await coordinatorOn();
    for (const headers of [{ 'svc-router-id': 'a b' }, { 'svc-router-id': 'a', 'svc-router-map-version': '-3' }]) {
      const r = await call(headers);
      expect(r.status).toBe(400);
      expect(((await r.json()) as { error: { code: string } }).error.code).toBe('invalid_argument');
    }
    const plain = await call({});
    expect(plain.status).toBe(200);
    expect(coordinator.routers()).toBe(0);
  });
});

async function until(cond: () => boolean): Promise<void> {
  const end = performance.now() + 5000;
  while (!cond()) {
    if (performance.now() > end) throw new Error('timed out');
    await new Promise((r) => setTimeout(r, 10));
  }
}
