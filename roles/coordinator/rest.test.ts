import { afterEach, describe, expect, it } from 'vitest';
import { systemClock } from '../../core/base/clock.js';
import { SvcError } from '../../core/base/errors.js';
import { DEFAULT_LIMITS } from '../../core/base/limits.js';
import { Coordinator } from '../../core/cluster/coordinator/coordinator.js';
import { MemoryStore } from '../../core/cluster/coordinator/store.js';
import type { AuditRecord } from '../../core/service/audit.js';
import { createClusterService } from '../../core/service/cluster.js';
import { silentLogger } from '../../core/service/log.js';
import { createPromMetrics } from '../rest/metrics.js';
import { coordinatorMetrics } from './metrics.js';
import { buildCoordinatorApp } from './rest.js';

const KEYS = [
  { name: 'env:0', role: 'admin' as const, collections: ['*'], secret: 'admin' },
  { name: 'reader', role: 'read' as const, collections: ['*'], secret: 'reader' },
];
const apps: { close(): Promise<unknown> }[] = [];
afterEach(async () => {
  for (const a of apps.splice(0)) await a.close();
});

async function setup() {
  const counts = new Map<string, number>([['http://s0:6333', 7]]);
  const coordinator = await Coordinator.open({
    store: new MemoryStore(), clock: systemClock, seedUrls: ['http://s0:6333'],
    client: {
      pointCount: async (url) => { const n = counts.get(url); if (n === undefined) throw new SvcError('unavailable', 'down'); return n; },
      ready: async () => undefined,
    },
    autoscale: { enabled: false, highWaterPoints: 0, maxShards: null, cooldownMs: 0, standbyUrls: ['http://sb:6333'] },
  });
  const audit: AuditRecord[] = [];
  const metrics = createPromMetrics();
  const cluster = createClusterService(coordinator, {
    keys: KEYS, insecure: false, limits: DEFAULT_LIMITS, rateLimit: { requestsPerSecond: 0, burst: 0 },
    audit: { append: (r) => audit.push(r) }, clock: systemClock, metrics, log: silentLogger, auditLog: silentLogger,
  });
  coordinatorMetrics(metrics, coordinator);
  const app = buildCoordinatorApp(cluster, { limits: DEFAULT_LIMITS, metrics, log: silentLogger });
  apps.push(app);
  const call = (method: 'GET' | 'POST' | 'DELETE', url: string, key?: string, payload?: unknown) => app.inject({
    method, url, ...(key ? { headers: { authorization: `Bearer ${key}`, ...(payload !== undefined ? { 'content-type': 'application/json' } : {}) } } : {}),
    ...(payload !== undefined ? { payload: typeof payload === 'string' ? payload : JSON.stringify(payload) } : {}),
  });
  return { call, audit, coordinator, counts };
}

describe('coordinator REST (CONTRACT.md section 11)', () => {
  it('serves the membership API with the contract\'s statuses and bodies', async () => {
    const { call, coordinator, counts } = await setup();
    await coordinator.sample();
    const map = await call('GET', '/cluster/map', 'admin');
    expect([map.statusCode, map.json()]).toEqual([200, {
      version: 1, shards: [{ id: 0, url: 'http://s0:6333', replicas: [], state: 'active', points: 7 }], standby: ['http://sb:6333'],
    }]);
    const reg = await call('POST', '/cluster/shards', 'admin', { url: 'http://s1:6333', replicas: ['http://s1r:6333'] });
    expect([reg.statusCode, reg.json()]).toEqual([201, { id: 1, version: 2 }]);
    const drain = await call('POST', '/cluster/shards/1/drain', 'admin');
    expect([drain.statusCode, drain.json()]).toEqual([202, { id: 1, state: 'draining', version: 3 }]);
    counts.set('http://s1:6333', 0);
    const del = await call('DELETE', '/cluster/shards/1', 'admin');
    expect([del.statusCode, del.json()]).toEqual([200, { removed: true, version: 4 }]);
  });

  it('answers every failure in the contract\'s shape', async () => {
    const { call } = await setup();
    const cases: [Promise<{ statusCode: number; json(): any; headers: Record<string, unknown> }>, number, string][] = [
      [call('GET', '/cluster/map'), 401, 'unauthenticated'],
      [call('GET', '/cluster/map', 'wrong'), 401, 'unauthenticated'],
      [call('GET', '/cluster/map', 'reader'), 403, 'permission_denied'],
      [call('POST', '/cluster/shards', 'reader', '{not json'), 403, 'permission_denied'],
      [call('POST', '/cluster/shards', 'admin', '{not json'), 400, 'invalid_argument'],
      [call('POST', '/cluster/shards', 'admin', { url: 'http://s0:6333' }), 409, 'already_exists'],
      [call('POST', '/cluster/shards', 'admin', { url: 'gopher://x' }), 400, 'invalid_argument'],
      [call('POST', '/cluster/shards', 'admin', { url: 'http://x:1', shard: 1 }), 400, 'invalid_argument'],
      [call('POST', '/cluster/shards/9/drain', 'admin'), 404, 'not_found'],
      [call('POST', '/cluster/shards/0/drain', 'admin'), 400, 'invalid_argument'],
      [call('DELETE', '/cluster/shards/0', 'admin'), 409, 'shard_not_drained'],
      [call('DELETE', '/cluster/shards/abc', 'admin'), 400, 'invalid_argument'],
      [call('GET', '/v1/collections', 'admin'), 404, 'not_found'],
    ];
    for (const [p, status, code] of cases) {
      const r = await p;
      expect([r.statusCode, r.json().error.code], r.body).toEqual([status, code]);
      expect(typeof r.json().error.message).toBe('string');
      if (status === 401) expect(r.headers['www-authenticate']).toBe('Bearer');
    }
    const map = await call('GET', '/cluster/map', 'admin');
    expect(map.json().version).toBe(1);
  });

  it('health, readiness and metrics need no key; metrics name shards by id only', async () => {
    const { call, coordinator } = await setup();
    await coordinator.sample();
    expect((await call('GET', '/healthz')).json()).toEqual({ status: 'ok' });
    expect((await call('GET', '/readyz')).statusCode).toBe(200);
    await call('GET', '/cluster/map', 'admin');
    const text = (await call('GET', '/metrics')).body;
    expect(text).toContain('svc_cluster_shards{state="active"} 1');
    expect(text).toContain('svc_cluster_map_version 1');
    expect(text).toContain('svc_cluster_shard_points{shard="0"} 7');
    expect(text).toContain('svc_autoscale_standby_left 1');
    expect(text).toContain('svc_autoscale_last_scale_out_timestamp_seconds 0');
    expect(text).toContain('svc_http_requests_total{method="GET",route="/cluster/map"} 1');
    expect(text).not.toContain('s0:6333');
  });

  it('audits changes and denials, never the map reads', async () => {
    const { call, audit } = await setup();
    await call('GET', '/cluster/map', 'admin');
    await call('POST', '/cluster/shards', 'admin', { url: 'http://s1:6333' });
    await call('POST', '/cluster/shards', 'reader', { url: 'http://s2:6333' });
    expect(audit.map((r) => [r.key, r.action, r.resource, r.outcome, r.status])).toEqual([
      ['env:0', 'registerShard', 'cluster/shards', 'ok', 201],
      ['reader', 'registerShard', 'database', 'denied', 403],
    ]);
  });
});
