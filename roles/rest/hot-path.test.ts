import { mkdtempSync, rmSync } from 'node:fs';
import { Agent, request } from 'node:http';
import { connect } from 'node:net';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import fc from 'fast-check';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { systemClock } from '../../core/base/clock.js';
import { resolveLimits } from '../../core/base/limits.js';
import { openDatabase, type Database } from '../../core/embedded.js';
import { silentLogger } from '../../core/service/log.js';
import { createService } from '../../core/service/service.js';
import { createPromMetrics } from './metrics.js';
import { REST_ROUTES } from './routes.js';
import { buildRestApp, type RestState } from './server.js';

/**
 * The search routes are answered on the wire by the hot path (hot-path.ts) and under inject() by the
 * fastify route. Both must answer every request alike: same status, same error code and headers, same
 * hits. A real engine checks the bodies, as it does for every transport.
 */

let root: string;
let db: Database;
let base: string;
let app: ReturnType<typeof buildRestApp>;
let fastifySaw = 0;
const state: RestState = { service: null };
const metrics = createPromMetrics();
const limits = resolveLimits({ maxRequestBodyBytes: 4096 });

beforeAll(async () => {
  root = mkdtempSync(join(tmpdir(), 'svc-hot-'));
  db = await openDatabase({ dataDir: join(root, 'data'), insecure: true });
  state.service = createService(db, {
    keys: [
      { name: 'env:0', role: 'admin', collections: ['*'], secret: 'admin' },
      { name: 'reader', role: 'read', collections: ['a*'], secret: 'reader' },
    ],
    insecure: false, limits, rateLimit: { requestsPerSecond: 0, burst: 1 }, audit: { append: () => undefined },
    clock: systemClock, metrics, log: silentLogger,
  });
  app = buildRestApp(state, { limits, metrics, log: silentLogger });
  app.addHook('onRequest', (_req, _reply, done) => {
    fastifySaw++;
    done();
  });
  await app.listen({ host: '127.0.0.1', port: 0 });
  base = `http://127.0.0.1:${(app.server.address() as AddressInfo).port}`;
  const admin = { authorization: 'Bearer admin' };
  for (const name of ['a1', 'b1']) {
    expect((await app.inject({ method: 'POST', url: '/v1/collections', headers: admin, payload: { name, dim: 2, metric: 'l2', filterable: [{ path: 'n', field_type: 'numeric' }] } })).statusCode).toBe(201);
    const points = Array.from({ length: 20 }, (_, i) => ({ id: `p${i}`, vector: [i, 20 - i], payload: { n: i } }));
    expect((await app.inject({ method: 'PUT', url: `/v1/collections/${name}/points`, headers: admin, payload: { points } })).statusCode).toBe(200);
  }
});

afterAll(async () => {
  await app.close();
  await db.close();
  rmSync(root, { recursive: true, force: true });
});

interface Sent { method?: string; url: string; headers?: Record<string, string>; body?: string }
interface Seen { status: number; code: string | null; body: unknown; headers: Record<string, string | undefined> }

const headersOf = (get: (h: string) => string | undefined) => ({
  'content-type': get('content-type'), 'www-authenticate': get('www-authenticate'), 'retry-after': get('retry-after'), 'x-request-id': get('x-request-id') === undefined ? undefined : 'present',
});

async function onWire(s: Sent): Promise<Seen> {
  const r = await fetch(base + s.url, { method: s.method ?? 'POST', headers: s.headers, body: s.body });
  const text = await r.text();
  const body = JSON.parse(text);
  return { status: r.status, code: body?.error?.code ?? null, body, headers: headersOf((h) => r.headers.get(h) ?? undefined) };
}

async function viaFastify(s: Sent): Promise<Seen> {
  const r = await app.inject({ method: (s.method ?? 'POST') as 'POST', url: s.url, headers: s.headers, payload: s.body });
  const body = JSON.parse(r.body);
  return { status: r.statusCode, code: body?.error?.code ?? null, body, headers: headersOf((h) => r.headers[h] as string | undefined) };
}

/** Same answer both ways; an error's message may differ (schema wording against the engine's). */
async function alike(s: Sent): Promise<Seen> {
  const [wire, fastify] = [await onWire(s), await viaFastify(s)];
  expect(wire.status, `${s.url} ${s.body}`).toBe(fastify.status);
  expect(wire.code, `${s.url} ${s.body}`).toBe(fastify.code);
  expect(wire.headers).toEqual(fastify.headers);
  if (wire.status < 400) expect(wire.body).toEqual(fastify.body);
  return wire;
}

const json = { 'content-type': 'application/json' };
const admin = { ...json, authorization: 'Bearer admin' };
const reader = { ...json, authorization: 'Bearer reader' };
const HOT = REST_ROUTES.filter((r) => r.hot).map((r) => r.template.replace('{name}', 'a1'));

describe('REST search routes on the hot path', () => {
  it('are the four search routes, and answer them without fastify', async () => {
    expect(HOT.sort()).toEqual(['/v1/collections/a1/query', '/v1/collections/a1/query/hybrid', '/v1/collections/a1/query/multi', '/v1/collections/a1/query/text']);
    const before = fastifySaw;
    const r = await onWire({ url: '/v1/collections/a1/query', headers: admin, body: JSON.stringify({ vector: [3, 17], k: 3, filter: { gte: { field: 'n', value: 2 } } }) });
    expect(r.status).toBe(200);
    expect((r.body as { hits: { id: string }[] }).hits.map((h) => h.id)).toEqual(['p3', 'p2', 'p4']);
    expect(fastifySaw).toBe(before);
    // Not certain: fastify answers (here a text/plain body, refused as before).
    const plain = await onWire({ url: '/v1/collections/a1/query', headers: { ...admin, 'content-type': 'text/plain' }, body: '{}' });
    expect([plain.status, plain.code]).toEqual([400, 'invalid_argument']);
    expect(fastifySaw).toBe(before + 1);
  });

  it('answer like the fastify routes: hits, and every failure in the contract shape', async () => {
    const q = '/v1/collections/a1/query';
    const cases: Sent[] = [
      { url: q, headers: admin, body: JSON.stringify({ vector: [1, 2], k: 5, with_vector: true }) },
      { url: q + '?x=1', headers: admin, body: JSON.stringify({ vector: [1, 2] }) },
      { url: '/v1/collections/a1/query/hybrid', headers: admin, body: JSON.stringify({ vector: [1, 2], query_text: 'flutter', k: 4 }) },
      { url: '/v1/collections/a1/query/text', headers: admin, body: JSON.stringify({ text: 'supersonic wing', k: 2 }) },
      { url: q, headers: { ...json, authorization: 'Bearer wrong' }, body: JSON.stringify({ vector: [1, 2] }) },
      { url: q, headers: json, body: JSON.stringify({ vector: [1, 2] }) },
      { url: '/v1/collections/b1/query', headers: reader, body: JSON.stringify({ vector: [1, 2] }) },
      { url: '/v1/collections/a9/query', headers: admin, body: JSON.stringify({ vector: [1, 2] }) },
      { url: q, headers: admin, body: '{"vector": [1, 2' },
      { url: q, headers: admin, body: '{"vector": [1, 2], "__proto__": {"x": 1}}' },
      { url: q, headers: admin, body: JSON.stringify({ vector: [1, 2], k: 20_000 }) },
      { url: q, headers: admin, body: JSON.stringify({ vector: [1, 2], nonsense: true }) },
      { url: q, headers: admin, body: JSON.stringify({ vector: [1, 2, 3] }) },
      { url: q, headers: admin, body: JSON.stringify({ vector: Array(2000).fill(0.5) }) },
      { url: q, headers: { ...admin, 'content-type': 'application/json; charset=utf-8' }, body: JSON.stringify({ vector: [1, 2] }) },
      { url: '/v1/collections/a1/query/multi', headers: admin, body: JSON.stringify({ vectors: [[1, 2]] }) },
      // The schema before the engine: null is not "not given", and a missing collection is not looked up first.
      { url: q, headers: admin, body: JSON.stringify({ vector: [1, 2], k: null }) },
      { url: '/v1/collections/a1/query/multi', headers: admin, body: JSON.stringify({ vectors: [[1, 2]], with_vector: true }) },
      { url: '/v1/collections/nope/query', headers: admin, body: '{}' },
      { url: q, headers: admin, body: JSON.stringify({ vector: 'x', k: 20_000 }) },
      // Authorization first: a key outside its scope learns nothing of a body's faults.
      { url: '/v1/collections/b1/query', headers: reader, body: '{"vector": [1, 2' },
      { url: '/v1/collections/b1/query/hybrid', headers: reader, body: '{"vector": [1, 2], "__proto__": {"x": 1}}' },
    ];
    const seen = [];
    for (const c of cases) seen.push(await alike(c));
    expect(seen.map((s) => s.code)).toEqual([
      null, null, null, 'invalid_argument', 'unauthenticated', 'unauthenticated', 'permission_denied', 'not_found', 'invalid_argument', 'invalid_argument',
      'limit_exceeded', 'invalid_argument', 'invalid_argument', 'limit_exceeded', null, 'invalid_argument',
      'invalid_argument', 'invalid_argument', 'invalid_argument', 'invalid_argument', 'permission_denied', 'permission_denied',
    ]);
  });

  it('close the connection after a body that cannot be parsed, and leave odd names to fastify', async () => {
    const raw = (path: string, body: string) => new Promise<{ status: number; connection: string | undefined }>((resolve, reject) => {
      // Options, not a URL string: a URL would drop a '#' and what follows it.
      const r = request({ host: '127.0.0.1', port: new URL(base).port, path, method: 'POST', headers: { ...admin, 'content-length': String(Buffer.byteLength(body)) }, agent: new Agent({ keepAlive: true }) }, (res) => {
        res.resume();
        res.on('end', () => resolve({ status: res.statusCode ?? 0, connection: res.headers.connection }));
      });
      r.on('error', reject);
      r.end(body);
    });
    expect(await raw('/v1/collections/a1/query', '{"vector": [1, 2')).toEqual({ status: 400, connection: 'close' });
    expect(await raw('/v1/collections/a1/query', '{"vector": [1, 2]}')).toEqual({ status: 200, connection: 'keep-alive' });
    // The router cuts a path at '#': fastify answers (no route), not the hot path with a name "a1#x".
    const before = fastifySaw;
    expect((await raw('/v1/collections/a1#x/query', '{"vector": [1, 2]}')).status).toBe(404);
    expect(fastifySaw).toBe(before + 1);
  });

  it('close the connection after an answer given before the body arrived, as the fastify route does', async () => {
    // The body is announced and not sent: the 401 must not wait for it, and the socket must not stay open.
    const held = (head: string) => new Promise<{ head: string; closed: boolean }>((resolve) => {
      const socket = connect(Number(new URL(base).port), '127.0.0.1');
      let text = '';
      socket.on('data', (d) => { text += d.toString(); });
      socket.on('error', () => undefined);
      const timer = setTimeout(() => { socket.destroy(); resolve({ head: text.split('\r\n\r\n')[0].toLowerCase(), closed: false }); }, 3000);
      socket.on('close', () => { clearTimeout(timer); resolve({ head: text.split('\r\n\r\n')[0].toLowerCase(), closed: true }); });
      socket.write(head);
    });
    const before = fastifySaw;
    const onHot = await held('POST /v1/collections/a1/query HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\ncontent-length: 4000\r\n\r\n{');
    expect(fastifySaw).toBe(before);
    // No content-length: the hot path leaves it to fastify.
    const onFastify = await held('POST /v1/collections/a1/query HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\ntransfer-encoding: chunked\r\n\r\n1\r\n{\r\n');
    expect(fastifySaw).toBe(before + 1);
    for (const r of [onHot, onFastify]) {
      expect(r.closed).toBe(true);
      expect(r.head).toMatch(/^http\/1\.1 401/);
      expect(r.head).toContain('connection: close');
    }
  });

  it('answer not_ready until the engine is open', async () => {
    const service = state.service;
    state.service = null;
    try {
      await alike({ url: '/v1/collections/a1/query', headers: admin, body: JSON.stringify({ vector: [1, 2] }) });
      expect((await onWire({ url: '/v1/collections/a1/query', headers: admin, body: JSON.stringify({ vector: [1, 2] }) })).code).toBe('not_ready');
    } finally {
      state.service = service;
    }
  });

  it('agree with fastify on fuzzed bodies of every search route', async () => {
    const value = fc.oneof(fc.jsonValue({ maxDepth: 2 }), fc.array(fc.double(), { minLength: 2, maxLength: 2 }), fc.integer({ min: -2, max: 60 }));
    const keys = ['vector', 'vectors', 'k', 'filter', 'ef_search', 'with_payload', 'with_vector', 'consistency', 'text', 'query_text',
      'sparse_indices', 'sparse_values', 'rrf_k0', 'rerank', 'rerank_pool', 'extra'];
    const fields = fc.dictionary(fc.constantFrom(...keys), fc.oneof(value, fc.constant(null)), { maxKeys: 3 });
    // Half the bodies carry a valid query, so the other fields decide the answer.
    const body = fc.tuple(fc.constantFrom('none', 'vector', 'vectors', 'text'), fields).map(([valid, f]) => ({
      ...(valid === 'vector' ? { vector: [1, 2] } : valid === 'vectors' ? { vectors: [[1, 2]] } : valid === 'text' ? { text: 'wing', query_text: 'wing' } : {}),
      ...f,
    }));
    await fc.assert(fc.asyncProperty(fc.constantFrom(...HOT), body, async (url, b) => {
      const r = await alike({ url, headers: admin, body: JSON.stringify(b) });
      expect(r.status).toBeLessThan(500);
    }), { numRuns: 300, seed: 7 });
  });

  it('count each request once, under the route template', async () => {
    const count = async (): Promise<number> => {
      const text = await (await fetch(base + '/metrics')).text();
      expect(text).not.toMatch(/route="\/v1\/collections\/a1/);
      return Number(/svc_http_requests_total\{method="POST",route="\/v1\/collections\/\{name\}\/query"\} (\d+)/.exec(text)?.[1] ?? 0);
    };
    const before = await count();
    expect((await onWire({ url: '/v1/collections/a1/query', headers: admin, body: JSON.stringify({ vector: [1, 2] }) })).status).toBe(200);
    expect(await count()).toBe(before + 1);
  });
});
