import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { SvcError } from '../../core/base/errors.js';
import { DEFAULT_LIMITS, resolveLimits, type Limits } from '../../core/base/limits.js';
import type { CollectionInfo, PointOutput } from '../../core/base/model.js';
import type { EngineApi } from '../../core/service/api.js';
import type { AuditRecord } from '../../core/service/audit.js';
import { silentLogger } from '../../core/service/log.js';
import { createService } from '../../core/service/service.js';
import { createPromMetrics } from './metrics.js';
import { REST_ROUTES } from './routes.js';
import { buildRestApp, type RestState } from './server.js';

/** A tiny in-memory engine: enough to see the transport's behaviour, not the engine's. */
function memoryEngine(): EngineApi {
  const cols = new Map<string, { info: CollectionInfo; points: Map<string, PointOutput> }>();
  const must = (n: string) => {
    const c = cols.get(n);
    if (!c) throw new SvcError('not_found', `collection ${n} does not exist`);
    return c;
  };
  const notYet = async (): Promise<never> => { throw new SvcError('invalid_argument', 'not implemented yet'); };
  return {
    listCollections: async () => ({ collections: [...cols.values()].map((c) => ({ ...c.info, count: c.points.size })) }),
    collectionInfo: async (n) => ({ ...must(n).info, count: must(n).points.size }),
    createCollection: async (p) => {
      if (cols.has(p.name)) throw new SvcError('already_exists', 'exists');
      const info: CollectionInfo = {
        name: p.name, dim: p.dim, metric: p.metric, index: 'flat', index_params: { m: 16, ef_construction: 200, ef_search: 64 },
        quantization: 'none', pq_subspaces: null, filterable: [], multivector: false, vector_encryption: null, count: 0, index_state: 'current',
      };
      cols.set(p.name, { info, points: new Map() });
      return info;
    },
    deleteCollection: async (n) => ({ existed: cols.delete(n) }),
    upsert: async (n, b) => {
      const c = must(n);
      for (const p of b.points) if (p.vector.length !== c.info.dim) throw new SvcError('invalid_argument', 'wrong dim');
      for (const p of b.points) c.points.set(p.id, { id: p.id, vector: [...p.vector], payload: p.payload ?? {} });
      return { upserted: b.points.length };
    },
    bulkUpsert: async (n, b) => ({ upserted: (must(n), b.points.length) }),
    get: async (n, id) => {
      const p = must(n).points.get(id);
      if (!p) throw new SvcError('not_found', 'no point');
      return p;
    },
    delete: async (n, id) => ({ deleted: must(n).points.delete(id) }),
    fetch: async (n) => ({ points: [...must(n).points.values()], next_cursor: null }),
    search: async (n, q) => {
      if ((q.k ?? 10) > DEFAULT_LIMITS.maxK) throw new SvcError('limit_exceeded', 'k above SVC_MAX_K');
      return { hits: [...must(n).points.values()].slice(0, q.k ?? 10).map((p, rank) => ({ id: p.id, rank, score: 0, payload: p.payload })) };
    },
    count: async (n) => ({ count: must(n).points.size }),
    setPayload: notYet, deletePoints: notYet,
    hybridSearch: notYet, upsertText: notYet, searchText: notYet, upsertDocuments: notYet, searchMultiVector: notYet, deleteDocument: notYet,
    rankings: notYet, textStats: notYet,
    stats: async () => ({ collections: cols.size, total_points: 0, per_collection: [], snapshot_status: { manifest_version: 1, disk_bytes: 0 } }),
    snapshot: async () => { throw new Error('disk on fire'); },
    close: async () => undefined,
  };
}

function setup(o: { limits?: Limits; rps?: number; ready?: boolean } = {}) {
  const limits = o.limits ?? DEFAULT_LIMITS;
  const metrics = createPromMetrics();
  const audit: AuditRecord[] = [];
  const engine = memoryEngine();
  const service = createService(engine, {
    keys: [
      { name: 'env:0', role: 'admin', collections: ['*'], secret: 'admin' },
      { name: 'reader', role: 'read', collections: ['a*'], secret: 'reader' },
    ],
    insecure: false, limits, rateLimit: { requestsPerSecond: o.rps ?? 0, burst: 1 }, audit: { append: (r) => audit.push(r) },
    clock: { nowMs: () => 0, monotonicMs: () => 0 }, metrics, log: silentLogger,
  });
  const state: RestState = { service: o.ready === false ? null : service };
  const app = buildRestApp(state, { limits, metrics, log: silentLogger });
  const admin = { authorization: 'Bearer admin' };
  return { app, state, service, audit, metrics, admin };
}

describe('REST', () => {
  it('creates, upserts, gets, queries and deletes with the contract statuses', async () => {
    const { app, admin } = setup();
    let r = await app.inject({ method: 'POST', url: '/v1/collections', headers: admin, payload: { name: 'a1', dim: 2, metric: 'l2' } });
    expect(r.statusCode).toBe(201);
    r = await app.inject({ method: 'POST', url: '/v1/collections', headers: admin, payload: { name: 'a1', dim: 2, metric: 'l2' } });
    expect([r.statusCode, r.json().error.code]).toEqual([409, 'already_exists']);
    r = await app.inject({ method: 'PUT', url: '/v1/collections/a1/points', headers: admin, payload: { points: [{ id: 'x/1', vector: [1, 2], payload: { t: 1 } }] } });
    expect(r.json()).toEqual({ upserted: 1 });
    r = await app.inject({ method: 'GET', url: '/v1/collections/a1/points/x%2F1?with_vector=true', headers: admin });
    expect(r.json()).toEqual({ id: 'x/1', vector: [1, 2], payload: { t: 1 } });
    r = await app.inject({ method: 'POST', url: '/v1/collections/a1/query', headers: admin, payload: { vector: [0, 0], k: 1 } });
    expect(r.json().hits[0]).toMatchObject({ id: 'x/1', rank: 0 });
    r = await app.inject({ method: 'POST', url: '/v1/collections/a1/points:fetch', headers: { ...admin, 'content-type': 'application/json' } });
    expect(r.json(), r.body).toMatchObject({ points: [{ id: "x/1" }] });
    r = await app.inject({ method: 'DELETE', url: '/v1/collections/a1/points/x%2F1', headers: { ...admin, 'content-type': 'application/json' } });
    expect(r.json()).toEqual({ deleted: true });
    r = await app.inject({ method: 'GET', url: '/v1/collections/zz', headers: admin });
    expect([r.statusCode, r.json().error.code]).toEqual([404, 'not_found']);
  });

  it('answers every failure in the error shape with the right status and headers', async () => {
    const { app, admin } = setup({ limits: resolveLimits({ maxRequestBodyBytes: 200 }) });
    await app.inject({ method: 'POST', url: '/v1/collections', headers: admin, payload: { name: 'a1', dim: 2, metric: 'l2' } });
    const cases: [Parameters<typeof app.inject>[0], number, string][] = [
      [{ method: 'GET', url: '/v1/collections' }, 401, 'unauthenticated'],
      [{ method: 'GET', url: '/v1/collections', headers: { authorization: 'Bearer nope' } }, 401, 'unauthenticated'],
      [{ method: 'POST', url: '/v1/collections/a1/query', headers: { ...admin, 'content-type': 'application/json' }, payload: '{"vector": [1,' }, 400, 'invalid_argument'],
      [{ method: 'POST', url: '/v1/collections/a1/query', headers: admin, payload: { vector: [1, 2], bogus: 1 } }, 400, 'invalid_argument'],
      [{ method: 'POST', url: '/v1/collections/a1/query', headers: admin, payload: { vector: [1, 2], k: '3' } }, 400, 'invalid_argument'],
      [{ method: 'POST', url: '/v1/collections/a1/query', headers: { ...admin, 'content-type': 'text/plain' }, payload: 'hi' }, 400, 'invalid_argument'],
      [{ method: 'POST', url: '/v1/collections/a1/query', headers: { ...admin, 'content-type': 'application/x-www-form-urlencoded' }, payload: 'a=b' }, 400, 'invalid_argument'],
      [{ method: 'POST', url: '/v1/collections/a1/query', headers: admin, payload: { vector: Array(100).fill(0.123456) } }, 400, 'limit_exceeded'],
      [{ method: 'POST', url: '/v1/collections/a1/query', headers: admin, payload: { vector: [1, 2], k: 10_001 } }, 400, 'limit_exceeded'],
      [{ method: 'POST', url: '/v1/collections/a1/query/text', headers: admin, payload: { text: 'x' } }, 400, 'invalid_argument'],
      [{ method: 'GET', url: '/v1/nowhere', headers: admin }, 404, 'not_found'],
      [{ method: 'PATCH', url: '/v1/collections', headers: admin }, 404, 'not_found'],
      [{ method: 'POST', url: '/v1/snapshots', headers: admin, payload: { name: 's' } }, 500, 'internal'],
      [{ method: 'GET', url: '/v1/collections/a1/points/p?with_vector=maybe', headers: admin }, 400, 'invalid_argument'],
    ];
    for (const [req, status, code] of cases) {
      const r = await app.inject(req);
      expect({ req: `${req.method} ${req.url}`, status: r.statusCode, code: r.json().error?.code }).toEqual({ req: `${req.method} ${req.url}`, status, code });
      expect(Object.keys(r.json())).toEqual(['error']);
      expect(r.body).not.toMatch(/at .*\.(ts|js):\d+/);
      if (status === 401) expect(r.headers['www-authenticate']).toBe('Bearer');
    }
    const big = await app.inject({ method: 'POST', url: '/v1/collections/a1/query', headers: admin, payload: { vector: Array(100).fill(0.123456) } });
    expect(big.json().error.message).toContain('SVC_MAX_REQUEST_BODY_BYTES');
    const internal = await app.inject({ method: 'POST', url: '/v1/snapshots', headers: admin, payload: { name: 's' } });
    expect(internal.json().error.message).not.toContain('disk on fire');
  });

  it('refuses a read key before looking at the body, and hides collections out of scope', async () => {
    const { app, admin } = setup();
    for (const name of ['a1', 'b1']) await app.inject({ method: 'POST', url: '/v1/collections', headers: admin, payload: { name, dim: 2, metric: 'l2' } });
    const reader = { authorization: 'Bearer reader' };
    let r = await app.inject({ method: 'PUT', url: '/v1/collections/a1/points', headers: reader, payload: { nonsense: true } });
    expect([r.statusCode, r.json().error.code]).toEqual([403, 'permission_denied']);
    // Before the body is even parsed: broken JSON, a poisoned key or the wrong type tell it nothing.
    const asJson = { ...reader, 'content-type': 'application/json' };
    for (const payload of ['{"points": [', '{"points": [], "__proto__": {"x": 1}}']) {
      r = await app.inject({ method: 'PUT', url: '/v1/collections/a1/points', headers: asJson, payload });
      expect([r.statusCode, r.json().error.code], payload).toEqual([403, 'permission_denied']);
    }
    r = await app.inject({ method: 'PUT', url: '/v1/collections/a1/points', headers: { ...reader, 'content-type': 'text/plain' }, payload: 'x' });
    expect([r.statusCode, r.json().error.code]).toEqual([403, 'permission_denied']);
    r = await app.inject({ method: 'POST', url: '/v1/collections', headers: asJson, payload: '{"name": ' });
    expect([r.statusCode, r.json().error.code]).toEqual([403, 'permission_denied']);
    r = await app.inject({ method: 'POST', url: '/v1/collections', headers: reader, payload: { name: 'a2', dim: 2, metric: 'l2' } });
    expect(r.statusCode).toBe(403);
    r = await app.inject({ method: 'GET', url: '/v1/collections/b1', headers: reader });
    expect(r.statusCode).toBe(403);
    r = await app.inject({ method: 'GET', url: '/v1/collections', headers: reader });
    expect(r.json().collections.map((c: CollectionInfo) => c.name)).toEqual(['a1']);
  });

  it('rate limits with 429 and retry-after', async () => {
    const { app, admin } = setup({ rps: 1 });
    expect((await app.inject({ method: 'GET', url: '/v1/stats', headers: admin })).statusCode).toBe(200);
    const r = await app.inject({ method: 'GET', url: '/v1/stats', headers: admin });
    expect([r.statusCode, r.headers['retry-after'], r.json().error.code]).toEqual([429, '1', 'rate_limited']);
  });

  it('health is open, readiness waits for the engine, /v1 answers not_ready until then', async () => {
    const { app, state, service, admin } = setup({ ready: false });
    expect((await app.inject({ url: '/healthz' })).json()).toEqual({ status: 'ok' });
    expect((await app.inject({ url: '/readyz' })).statusCode).toBe(503);
    expect((await app.inject({ url: '/v1/stats', headers: admin })).json().error.code).toBe('not_ready');
    state.service = service;
    expect((await app.inject({ url: '/readyz' })).statusCode).toBe(200);
    // Serving, but busy for now (a consensus member restoring a snapshot): not ready, the routes still answer.
    let busy: string | null = 'this consensus member is restoring a snapshot from its leader';
    state.busy = () => busy;
    const r = await app.inject({ url: '/readyz' });
    expect(r.statusCode).toBe(503);
    expect(r.json().error).toMatchObject({ code: 'not_ready', message: expect.stringMatching(/restoring a snapshot/) });
    expect((await app.inject({ url: '/v1/stats', headers: admin })).statusCode).toBe(200);
    busy = null;
    expect((await app.inject({ url: '/readyz' })).statusCode).toBe(200);
  });

  it('metrics are labelled by route template, never by concrete path', async () => {
    const { app, admin } = setup();
    await app.inject({ method: 'GET', url: '/v1/collections/secret-name/points/p1', headers: admin });
    await app.inject({ method: 'GET', url: '/v1/stats' });
    await app.inject({ method: 'GET', url: '/healthz' });
    await app.inject({ method: 'HEAD', url: '/healthz' });
    await app.inject({ method: 'POST', url: '/no/such/secret-route' });
    const text = (await app.inject({ url: '/metrics' })).body;
    expect(text).toContain('svc_http_requests_total{method="GET",route="/v1/collections/{name}/points/{id}"} 1');
    expect(text).toContain('svc_http_requests_total{method="GET",route="/healthz"} 1');
    expect(text).toContain('svc_http_requests_total{method="HEAD",route="/healthz"} 1');
    expect(text).toContain('svc_http_request_errors_total{method="POST",route="unmatched"} 1');
    expect(text).toContain('svc_http_request_duration_seconds_count{method="GET",route="/v1/stats"} 1');
    expect(text).not.toContain('secret-route');
    expect(text).toContain('svc_http_request_errors_total{method="GET",route="/v1/collections/{name}/points/{id}"} 1');
    expect(text).toContain('svc_auth_failures_total 1');
    expect(text).toMatch(/svc_collections 0/);
    expect(text).toMatch(/svc_vector_bytes 0/);
    expect(text).toMatch(/svc_graph_bytes 0/);
    expect(text).not.toContain('secret-name');
  });

  it('every route is registered and fuzzed bodies never give a 5xx', async () => {
    const { app, admin } = setup();
    await app.inject({ method: 'POST', url: '/v1/collections', headers: admin, payload: { name: 'a1', dim: 2, metric: 'l2' } });
    const routes = REST_ROUTES.filter((r) => r.op !== 'snapshot');
    await fc.assert(fc.asyncProperty(fc.constantFrom(...routes), fc.jsonValue(), async (route, body) => {
      const url = route.template.replace('{name}', 'a1').replace('{id}', 'p');
      const r = await app.inject({ method: route.method, url, headers: { ...admin, 'content-type': 'application/json' }, payload: JSON.stringify(body) });
      expect(r.statusCode).toBeLessThan(500);
      expect(r.statusCode === 404 && r.json().error.message.startsWith('no route')).toBe(false);
    }), { numRuns: 300 });
  });

  it('search replies (compiled serializer) carry exactly what the engine answered, payloads and vectors included', async () => {
    const json = fc.jsonValue({ maxDepth: 3 });
    const hitArb = fc.record({
      id: fc.string(), rank: fc.nat(1000), score: fc.double({ noNaN: true, noDefaultInfinity: true }),
      payload: fc.option(fc.dictionary(fc.string(), json), { nil: undefined }),
      vector: fc.option(fc.array(fc.float({ noNaN: true, noDefaultInfinity: true })), { nil: undefined }),
      extra: fc.option(json, { nil: undefined }),
    }, { requiredKeys: ['id', 'rank', 'score'] });
    let answer: { hits: unknown[] } = { hits: [] };
    const engine = memoryEngine();
    const answering = { ...engine, search: async () => answer, hybridSearch: async () => answer, searchText: async () => answer, searchMultiVector: async () => answer };
    const service = createService(answering, {
      keys: [{ name: 'env:0', role: 'admin', collections: ['*'], secret: 'admin' }], insecure: false, limits: DEFAULT_LIMITS,
      rateLimit: { requestsPerSecond: 0, burst: 1 }, audit: { append: () => undefined }, clock: { nowMs: () => 0, monotonicMs: () => 0 },
      metrics: createPromMetrics(), log: silentLogger,
    });
    const app = buildRestApp({ service }, { limits: DEFAULT_LIMITS, metrics: createPromMetrics(), log: silentLogger });
    const bodies: Record<string, unknown> = {
      '/v1/collections/a/query': { vector: [1] }, '/v1/collections/a/query/hybrid': { vector: [1] },
      '/v1/collections/a/query/text': { text: 't' }, '/v1/collections/a/query/multi': { vectors: [[1]] },
    };
    await fc.assert(fc.asyncProperty(fc.array(hitArb, { maxLength: 5 }), fc.constantFrom(...Object.keys(bodies)), async (hits, url) => {
      answer = { hits };
      const r = await app.inject({ method: 'POST', url, headers: { authorization: 'Bearer admin' }, payload: bodies[url] as object });
      expect(r.statusCode, r.body).toBe(200);
      expect(JSON.parse(r.body)).toEqual(JSON.parse(JSON.stringify(answer)));
    }), { numRuns: 200 });
  });
});
