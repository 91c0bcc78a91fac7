import { afterEach, describe, expect, it } from 'vitest';
import { Writable } from 'node:stream';
import { systemClock } from '../../core/base/clock.js';
import { DEFAULT_LIMITS } from '../../core/base/limits.js';
import { Coordinator } from '../../core/cluster/coordinator/coordinator.js';
import type { MoveClient } from '../../core/cluster/coordinator/mover.js';
import { MemoryStore } from '../../core/cluster/coordinator/store.js';
import { createClusterService } from '../../core/service/cluster.js';
import { silentLogger } from '../../core/service/log.js';
import { createLogs } from '../log.js';
import { createPromMetrics } from '../rest/metrics.js';
import { coordinatorMetrics } from './metrics.js';
import { startRebalanceLoop } from './rebalance-loop.js';

/**
 * "Routers first" (docs/cluster.md, Rebalancing), through the loop: a move starts only once every
 * router heard from lately routes by the map that names the joining shard, however long past the
 * settle time that is, and the wait is logged. The rules themselves, on a clock the test moves, are in
 * core/cluster/coordinator/coordinator.test.ts.
 */
const loops: { stop(): Promise<void> }[] = [];
afterEach(async () => {
  for (const l of loops.splice(0)) await l.stop();
});

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

async function setup(readerForgetMs: number) {
  // Past its own forget time at once (a coordinator just started waits that long for routers it has
  // not heard yet: core/cluster/coordinator/coordinator.test.ts).
  let skew = 0;
  const clock = { nowMs: () => Date.now(), monotonicMs: () => performance.now() + skew };
  const coordinator = await Coordinator.open({
    store: new MemoryStore(), clock, seedUrls: ['http://s0:6333'], readerForgetMs,
    client: { pointCount: async () => 0, ready: async () => undefined },
    autoscale: { enabled: false, highWaterPoints: 0, maxShards: null, cooldownMs: 0, standbyUrls: [] },
  });
  skew = readerForgetMs;
  const metrics = createPromMetrics();
  const cluster = createClusterService(coordinator, {
    keys: [], insecure: true, limits: DEFAULT_LIMITS, rateLimit: { requestsPerSecond: 0, burst: 0 },
    audit: { append: () => undefined }, clock: systemClock, metrics, log: silentLogger, auditLog: silentLogger,
  });
  const batches: string[] = [];
  const client: MoveClient = {
    batch: async (url) => {
      batches.push(url);
      return { done: true };
    },
    commit: async () => ({ moved: 0 }),
    apply: async () => ({ applied: 0, deleted: 0 }),
  };
  let logged = '';
  const sink = new Writable({ write(chunk, _enc, done) { logged += String(chunk); done(); } });
  const start = () => {
    const loop = startRebalanceLoop(coordinator, client, cluster, coordinatorMetrics(metrics, coordinator), createLogs('warn', sink), {
      idleMs: 20, retryMs: 20, batchPoints: 10, leaseMs: 1000, settleMs: 60,
    });
    loops.push(loop);
  };
  const stateOf = (id: number) => coordinator.map().shards.find((s) => s.id === id)?.state;
  return { coordinator, batches, start, stateOf, metrics, logged: () => logged };
}

describe('the rebalance loop waits for its routers', () => {
  it('starts a move only once every router says it routes by the map with the joining shard', async () => {
    const { coordinator, batches, start, stateOf, metrics, logged } = await setup(60_000);
    const v1 = coordinator.map({ id: 'router-a', version: -1 }).version;
    coordinator.map({ id: 'router-b', version: -1 });
    const { version: v2 } = await coordinator.register({ url: 'http://s1:6333' });
    expect(v2).toBeGreaterThan(v1);
    coordinator.map({ id: 'router-a', version: v1 }); // read v2, still routes by v1 when it asked
    coordinator.map({ id: 'router-b', version: v1 });
    start();
    await waitFor(() => logged().includes('waits for routers')); // past the settle time
    expect(JSON.parse(logged().trim().split('\n')[0])).toMatchObject({ version: v2, behind: 2 });
    await sleep(100);
    expect(batches).toEqual([]);
    expect(stateOf(1)).toBe('joining');
    expect(await metrics.registry.getSingleMetricAsString('svc_cluster_routers')).toMatch(/map="behind"} 2/);

    coordinator.map({ id: 'router-a', version: v2 });
    await sleep(200);
    expect(batches).toEqual([]); // router-b still routes by v1

    coordinator.map({ id: 'router-b', version: v2 });
    await waitFor(() => stateOf(1) === 'active');
    expect(batches).toEqual(['http://s0:6333']);
    // The move's end is a new version again: behind until they read it.
    const v3 = coordinator.map().version;
    expect(v3).toBeGreaterThan(v2);
    coordinator.map({ id: 'router-a', version: v3 });
    coordinator.map({ id: 'router-b', version: v3 });
    const routers = await metrics.registry.getSingleMetricAsString('svc_cluster_routers');
    expect(routers).toMatch(/map="behind"} 0/);
    expect(routers).toMatch(/map="current"} 2/);
  });

  it('starts after the settle time when no router reads the map (routers seeded by a list)', async () => {
    const { coordinator, batches, start, stateOf } = await setup(60_000);
    await coordinator.register({ url: 'http://s1:6333' });
    start();
    await waitFor(() => stateOf(1) === 'active');
    expect(batches).toEqual(['http://s0:6333']);
  });
});

async function waitFor(cond: () => boolean, ms = 5000): Promise<void> {
  const end = performance.now() + ms;
  while (!cond()) {
    if (performance.now() > end) throw new Error('timed out');
    await sleep(10);
  }
}
