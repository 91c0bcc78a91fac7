import { describe, expect, it } from 'vitest';
import type { Clock } from '../base/clock.js';
import { SvcError } from '../base/errors.js';
import { DEFAULT_LIMITS } from '../base/limits.js';
import type { MembershipApi } from '../cluster/coordinator/coordinator.js';
import type { CallContext } from './api.js';
import { AuditChain, verifyAuditChain, type AuditRecord } from './audit.js';
import { createClusterService, NO_DATA_PLANE } from './cluster.js';
import { silentLogger } from './log.js';
import { noopMetrics } from './metrics.js';
import type { ApiKey } from './service.js';

const KEYS: ApiKey[] = [
  { name: 'env:0', role: 'admin', collections: ['*'], secret: 'admin' },
  { name: 'team-admin', role: 'admin', collections: ['team_a.*'], secret: 'team-admin' },
  { name: 'writer', role: 'write', collections: ['*'], secret: 'writer' },
  { name: 'reader', role: 'read', collections: ['*'], secret: 'reader' },
];
const clock: Clock = { nowMs: () => 1_700_000_000_000, monotonicMs: () => 0 };

function setup() {
  const calls: string[] = [];
  const membership: MembershipApi = {
    map: () => { calls.push('map'); return { version: 1, shards: [], standby: [] }; },
    register: async (b) => { calls.push(`register ${JSON.stringify(b)}`); return { id: 3, version: 2 }; },
    drain: async (id) => { calls.push(`drain ${id}`); return { id: Number(id), state: 'draining', version: 3 }; },
    remove: async (id) => { calls.push(`remove ${id}`); return { removed: true, version: 4 }; },
  };
  const audit: AuditRecord[] = [];
  const cluster = createClusterService(membership, {
    keys: KEYS, insecure: false, limits: DEFAULT_LIMITS, rateLimit: { requestsPerSecond: 0, burst: 0 },
    audit: { append: (r) => audit.push(r) }, clock, metrics: noopMetrics, log: silentLogger, auditLog: silentLogger,
  });
  const ctx = (secret: string): CallContext => ({
    principal: cluster.service.authenticate(`Bearer ${secret}`), requestId: `r-${secret}`, transport: 'rest', remote: '127.0.0.1',
  });
  return { cluster, calls, audit, ctx };
}

describe('cluster service (the coordinator API behind auth and audit)', () => {
  it('lets an admin key scoped to * read and change the map; changes are audited with their status', async () => {
    const { cluster, calls, audit, ctx } = setup();
    expect(await cluster.map(ctx('admin'))).toEqual({ version: 1, shards: [], standby: [] });
    expect(await cluster.registerShard(ctx('admin'), { url: 'http://a:1' })).toEqual({ id: 3, version: 2 });
    await cluster.drainShard(ctx('admin'), '3');
    await cluster.removeShard(ctx('admin'), '3');
    expect(calls).toEqual(['map', 'register {"url":"http://a:1"}', 'drain 3', 'remove 3']);
    expect(audit.map((r) => [r.key, r.action, r.resource, r.outcome, r.status])).toEqual([
      ['env:0', 'registerShard', 'cluster/shards', 'ok', 201],
      ['env:0', 'drainShard', 'cluster/shard/3', 'ok', 202],
      ['env:0', 'removeShard', 'cluster/shard/3', 'ok', 200],
    ]);
  });

  it('refuses read and write keys, and an admin key scoped to some collections, with permission_denied, audited', async () => {
    const { cluster, calls, audit, ctx } = setup();
    for (const secret of ['reader', 'writer', 'team-admin']) {
      await expect(cluster.map(ctx(secret))).rejects.toMatchObject({ code: 'permission_denied' });
      await expect(cluster.registerShard(ctx(secret), { url: 'http://a:1' })).rejects.toMatchObject({ code: 'permission_denied' });
      await expect(cluster.drainShard(ctx(secret), '0')).rejects.toMatchObject({ code: 'permission_denied' });
      await expect(cluster.removeShard(ctx(secret), '0')).rejects.toMatchObject({ code: 'permission_denied' });
    }
    expect(calls).toEqual([]);
    expect(audit).toHaveLength(12);
    expect(new Set(audit.map((r) => r.outcome))).toEqual(new Set(['denied']));
    expect(() => cluster.service.authenticate('Bearer nope')).toThrow(expect.objectContaining({ code: 'unauthenticated' }));
  });

  it('audits a failed change as an error with its status', async () => {
    const audit: AuditRecord[] = [];
    const failing = createClusterService({
      map: () => ({ version: 0, shards: [], standby: [] }),
      register: async () => { throw new Error('a bug'); },
      drain: async () => { throw new SvcError('not_found', 'no shard 9 in the shard map'); },
      remove: async () => ({ removed: true, version: 1 }),
    }, {
      keys: KEYS, insecure: false, limits: DEFAULT_LIMITS, rateLimit: { requestsPerSecond: 0, burst: 0 },
      audit: { append: (r) => audit.push(r) }, clock, metrics: noopMetrics, log: silentLogger, auditLog: silentLogger,
    });
    const admin: CallContext = { principal: failing.service.authenticate('Bearer admin'), requestId: 'r', transport: 'rest' };
    await expect(failing.drainShard(admin, '9')).rejects.toMatchObject({ code: 'not_found' });
    await expect(failing.registerShard(admin, {})).rejects.toMatchObject({ code: 'internal' });
    expect(audit.map((r) => [r.action, r.outcome, r.status])).toEqual([['drainShard', 'error', 404], ['registerShard', 'error', 500]]);
  });

  it('audits a decision of the server\'s own with its reason, in a line that verifies', () => {
    const { cluster, audit } = setup();
    cluster.service.auditEvent({ actor: 'autoscale', action: 'autoscale_scale_out', resource: 'cluster/shard/2', outcome: 'ok', status: 201, requestId: 'autoscale-1', reason: 'shard 0 holds 12 points' });
    expect(audit).toEqual([{ ts: '2023-11-14T22:13:20.000Z', key: 'autoscale', action: 'autoscale_scale_out', resource: 'cluster/shard/2', outcome: 'ok', status: 201, request_id: 'autoscale-1', remote: '', reason: 'shard 0 holds 12 points' }]);
    const key = new Uint8Array(32).fill(1);
    const line = new AuditChain(key).line(audit[0]);
    expect(JSON.parse(line)).toMatchObject({ reason: 'shard 0 holds 12 points' });
    expect(verifyAuditChain(`${line}\n`, key)).toEqual({ ok: true, lines: 1 });
  });

  it('has no data plane: a data operation is refused, never answered', async () => {
    expect(() => NO_DATA_PLANE.search('c', { vector: [1] })).toThrow(/holds no data/);
    await expect(NO_DATA_PLANE.close()).resolves.toBeUndefined();
  });
});
