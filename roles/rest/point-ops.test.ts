import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { resolveLimits } from '../../core/base/limits.js';
import { openDatabase } from '../../core/embedded.js';
import type { AuditRecord } from '../../core/service/audit.js';
import { silentLogger } from '../../core/service/log.js';
import { createService } from '../../core/service/service.js';
import { createPromMetrics } from './metrics.js';
import { buildRestApp } from './server.js';

/**
 * points:count, points:payload, points:delete and create with exist_ok over REST (CONTRACT.md section 1),
 * on a real engine behind the real service layer: statuses, bodies, error shapes, roles, limits, audit.
 */

const cleanup: (() => Promise<void>)[] = [];
afterEach(async () => {
  for (const f of cleanup.splice(0).reverse()) await f();
});

async function setup() {
  const root = mkdtempSync(join(tmpdir(), 'svc-rest-ops-'));
  const limits = resolveLimits({ maxBatchSize: 3, maxPayloadBytes: 200 });
  const db = await openDatabase({ dataDir: join(root, 'data'), insecure: true, limits, limitsFrom: 'environment' });
  const audit: AuditRecord[] = [];
  const metrics = createPromMetrics();
  const service = createService(db, {
    keys: [
      { name: 'admin', role: 'admin', collections: ['*'], secret: 'admin' },
      { name: 'writer', role: 'write', collections: ['a*'], secret: 'writer' },
      { name: 'reader', role: 'read', collections: ['a*'], secret: 'reader' },
    ],
    insecure: false, limits, rateLimit: { requestsPerSecond: 0, burst: 0 }, audit: { append: (r) => audit.push(r) },
    clock: { nowMs: () => 0, monotonicMs: () => 0 }, metrics, log: silentLogger,
  });
  const app = buildRestApp({ service }, { limits, metrics, log: silentLogger });
  cleanup.push(async () => {
    await app.close();
    await db.close();
    rmSync(root, { recursive: true, force: true });
  });
  const as = (key: string) => async (method: 'GET' | 'POST' | 'PUT' | 'DELETE', url: string, payload?: unknown) => {
    const r = await app.inject({ method, url, headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json' }, payload: payload === undefined ? undefined : JSON.stringify(payload) });
    return { status: r.statusCode, json: r.json() };
  };
  const admin = as('admin');
  expect((await admin('POST', '/v1/collections', { name: 'a1', dim: 2, metric: 'l2', filterable: [{ path: 'g', field_type: 'keyword' }] })).status).toBe(201);
  expect((await admin('PUT', '/v1/collections/a1/points', { points: [
    { id: 'p1', vector: [1, 0], payload: { g: 'x', n: 1 } }, { id: 'p2', vector: [0, 1], payload: { g: 'y' } }, { id: 'p3', vector: [1, 1], payload: { g: 'x' } },
  ] })).status).toBe(200);
  return { app, audit, metrics, admin, writer: as('writer'), reader: as('reader') };
}

describe('REST points:count, points:payload, points:delete', () => {
  it('answer the contract bodies', async () => {
    const { admin, reader, writer } = await setup();
    expect(await reader('POST', '/v1/collections/a1/points:count', {})).toEqual({ status: 200, json: { count: 3 } });
    expect(await reader('POST', '/v1/collections/a1/points:count', { filter: { eq: { field: 'g', value: 'x' } } })).toEqual({ status: 200, json: { count: 2 } });
    // An empty body is an empty object.
    expect(await reader('POST', '/v1/collections/a1/points:count')).toEqual({ status: 200, json: { count: 3 } });

    expect(await writer('POST', '/v1/collections/a1/points:payload', { points: [{ id: 'p1', payload: { g: 'y' } }] })).toEqual({ status: 200, json: { updated: 1 } });
    expect((await admin('GET', '/v1/collections/a1/points/p1')).json).toEqual({ id: 'p1', payload: { g: 'y', n: 1 } });
    expect(await writer('POST', '/v1/collections/a1/points:payload', { points: [{ id: 'p1', payload: { z: 1 } }], mode: 'replace' })).toEqual({ status: 200, json: { updated: 1 } });
    expect((await admin('GET', '/v1/collections/a1/points/p1')).json).toEqual({ id: 'p1', payload: { z: 1 } });

    expect(await writer('POST', '/v1/collections/a1/points:delete', { filter: { eq: { field: 'g', value: 'x' } } })).toEqual({ status: 200, json: { deleted: 1 } });
    expect(await writer('POST', '/v1/collections/a1/points:delete', { ids: ['p1', 'nope'] })).toEqual({ status: 200, json: { deleted: 1 } });
    expect(await reader('POST', '/v1/collections/a1/points:count', {})).toEqual({ status: 200, json: { count: 1 } });
  });

  it('an unknown id is not_found and changes nothing', async () => {
    const { admin, writer } = await setup();
    const r = await writer('POST', '/v1/collections/a1/points:payload', { points: [{ id: 'p1', payload: { g: 'z' } }, { id: 'ghost', payload: {} }] });
    expect([r.status, r.json.error.code]).toEqual([404, 'not_found']);
    expect((await admin('GET', '/v1/collections/a1/points/p1')).json.payload).toEqual({ g: 'x', n: 1 });
  });

  it('refuse bad bodies and limits in the contract shape, changing nothing', async () => {
    const { admin, writer } = await setup();
    const cases: [string, unknown, number, string][] = [
      ['points:count', { filter: { eq: { field: 'n', value: 1 } } }, 400, 'invalid_argument'],
      ['points:count', { limit: 3 }, 400, 'invalid_argument'],
      ['points:payload', { points: [{ id: 'p1', payload: {} }], mode: 'upsert' }, 400, 'invalid_argument'],
      ['points:payload', { points: [{ id: 'p1' }] }, 400, 'invalid_argument'],
      ['points:payload', { points: [{ id: 'p1', payload: {}, vector: [1, 2] }] }, 400, 'invalid_argument'],
      ['points:payload', { points: [{ id: 'p1', payload: [] }] }, 400, 'invalid_argument'],
      ['points:payload', { points: [{ id: 'p1', payload: {} }, { id: 'p2', payload: {} }, { id: 'p3', payload: {} }, { id: 'p1', payload: {} }] }, 400, 'limit_exceeded'],
      ['points:payload', { points: [{ id: 'p1', payload: { s: 'x'.repeat(200) } }] }, 400, 'limit_exceeded'],
      ['points:delete', {}, 400, 'invalid_argument'],
      ['points:delete', { ids: ['p1'], filter: { eq: { field: 'g', value: 'x' } } }, 400, 'invalid_argument'],
      ['points:delete', { ids: [1] }, 400, 'invalid_argument'],
      ['points:delete', { ids: ['p1', 'p2', 'p3', 'p4'] }, 400, 'limit_exceeded'],
      ['points:delete', { filter: { eq: { field: 'n', value: 1 } } }, 400, 'invalid_argument'],
    ];
    for (const [action, body, status, code] of cases) {
      const r = await writer('POST', `/v1/collections/a1/${action}`, body);
      expect([action, r.status, r.json.error?.code], JSON.stringify(body)).toEqual([action, status, code]);
      expect(Object.keys(r.json)).toEqual(['error']);
    }
    const big = await writer('POST', '/v1/collections/a1/points:delete', { ids: ['p1', 'p2', 'p3', 'p4'] });
    expect(big.json.error.message).toContain('SVC_MAX_BATCH_SIZE');
    expect((await admin('POST', '/v1/collections/a1/points:fetch', {})).json.points).toEqual([
      { id: 'p1', payload: { g: 'x', n: 1 } }, { id: 'p2', payload: { g: 'y' } }, { id: 'p3', payload: { g: 'x' } },
    ]);
    expect((await writer('POST', '/v1/collections/a9/points:count', {})).json.error.code).toBe('not_found');
  });

  it('a read key may count but not update or delete, and learns nothing from the body first; writes and denials are audited', async () => {
    const { reader, writer, audit } = await setup();
    for (const [action, body] of [['points:payload', { points: [{ id: 'p1', payload: {} }] }], ['points:delete', { ids: ['p1'] }], ['points:delete', { nonsense: 1 }]] as const) {
      const r = await reader('POST', `/v1/collections/a1/${action}`, body);
      expect([r.status, r.json.error.code]).toEqual([403, 'permission_denied']);
    }
    // Out of scope: refused before the collection is looked up.
    expect((await writer('POST', '/v1/collections/b1/points:delete', { ids: ['p1'] })).status).toBe(403);
    expect((await reader('POST', '/v1/collections/b1/points:count', {})).status).toBe(403);
    await writer('POST', '/v1/collections/a1/points:payload', { points: [{ id: 'p1', payload: {} }] });
    await writer('POST', '/v1/collections/a1/points:delete', { ids: ['p2'] });
    await reader('POST', '/v1/collections/a1/points:count', {});
    const mine = audit.filter((a) => ['setPayload', 'deletePoints', 'count'].includes(a.action));
    expect(mine.map((a) => [a.key, a.action, a.resource, a.outcome, a.status])).toEqual([
      ['reader', 'setPayload', 'collection/a1', 'denied', 403],
      ['reader', 'deletePoints', 'collection/a1', 'denied', 403],
      ['reader', 'deletePoints', 'collection/a1', 'denied', 403],
      ['writer', 'deletePoints', 'collection/b1', 'denied', 403],
      ['reader', 'count', 'collection/b1', 'denied', 403],
      ['writer', 'setPayload', 'collection/a1', 'ok', 200],
      ['writer', 'deletePoints', 'collection/a1', 'ok', 200],
    ]);
  });

  it('are counted under their route templates', async () => {
    const { app, reader } = await setup();
    await reader('POST', '/v1/collections/a1/points:count', {});
    const text = (await app.inject({ url: '/metrics' })).body;
    expect(text).toContain('svc_http_requests_total{method="POST",route="/v1/collections/{name}/points:count"} 1');
  });
});

describe('REST create with exist_ok', () => {
  it('is 201 when created, 200 with the existing info for the same shape, 409 for another shape', async () => {
    const { admin, audit } = await setup();
    const body = { name: 'a2', dim: 2, metric: 'l2', exist_ok: true };
    const made = await admin('POST', '/v1/collections', body);
    expect([made.status, made.json.name, made.json.count]).toEqual([201, 'a2', 0]);
    await admin('PUT', '/v1/collections/a2/points', { points: [{ id: 'q', vector: [1, 2] }] });
    const again = await admin('POST', '/v1/collections', body);
    expect([again.status, again.json.count]).toEqual([200, 1]);
    expect(again.json).toEqual((await admin('GET', '/v1/collections/a2')).json);
    const other = await admin('POST', '/v1/collections', { ...body, dim: 3 });
    expect([other.status, other.json.error.code]).toEqual([409, 'already_exists']);
    const plain = await admin('POST', '/v1/collections', { name: 'a2', dim: 2, metric: 'l2' });
    expect([plain.status, plain.json.error.code]).toEqual([409, 'already_exists']);
    const bad = await admin('POST', '/v1/collections', { ...body, exist_ok: 'yes' });
    expect([bad.status, bad.json.error.code]).toEqual([400, 'invalid_argument']);
    // The body schema refuses the last before the operation runs: it is not a create attempt.
    expect(audit.filter((a) => a.action === 'createCollection' && a.resource === 'collection/a2').map((a) => a.status)).toEqual([201, 200, 409, 409]);
  });
});
