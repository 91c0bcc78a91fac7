import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { InMemoryTransport } from '@modelcontextprotocol/sdk/inMemory.js';
import { afterEach, describe, expect, it } from 'vitest';
import { systemClock } from '../../core/base/clock.js';
import { resolveLimits, type Limits } from '../../core/base/limits.js';
import { openDatabase } from '../../core/embedded.js';
import type { AuditRecord } from '../../core/service/audit.js';
import type { EngineApi, Principal } from '../../core/service/api.js';
import { noopMetrics } from '../../core/service/metrics.js';
import { createService } from '../../core/service/service.js';
import { createMcpServer, withContractErrors } from './server.js';

/** The MCP plane in process: the SDK's Client over an in-memory transport, a real engine and service. */

const cleanup: (() => Promise<void>)[] = [];
afterEach(async () => {
  for (const f of cleanup.splice(0).reverse()) await f();
});

const silent = { info: () => undefined, warn: () => undefined, error: () => undefined, debug: () => undefined } as never;

async function session(principal: Principal, engineOverride?: Partial<EngineApi>, limits?: Partial<Limits>) {
  const root = mkdtempSync(join(tmpdir(), 'svc-mcp-'));
  const db = await openDatabase({ dataDir: join(root, 'data'), insecure: true, limits, limitsFrom: 'environment' });
  const engine = Object.assign(Object.create(db) as EngineApi, engineOverride ?? {});
  const audit: AuditRecord[] = [];
  const service = createService(engine, {
    keys: [], insecure: true, limits: resolveLimits(limits), rateLimit: { requestsPerSecond: 0, burst: 0 },
    audit: { append: (r) => audit.push(r) }, clock: systemClock, metrics: noopMetrics, log: silent,
  });
  const internal: string[] = [];
  const server = createMcpServer({ service, principal, version: 'test', onInternalError: (id) => internal.push(id) });
  const [clientSide, serverSide] = InMemoryTransport.createLinkedPair();
  await server.connect(withContractErrors(serverSide));
  const client = new Client({ name: 'unit', version: '1' });
  await client.connect(clientSide);
  cleanup.push(async () => {
    await client.close();
    await server.close();
    await db.close();
    rmSync(root, { recursive: true, force: true });
  });
  const call = async (name: string, args: Record<string, unknown> = {}) =>
    (await client.callTool({ name, arguments: args })) as { isError?: boolean; structuredContent: any };
  return { call, audit, internal, client, db };
}

const admin: Principal = { keyName: 'tester', role: 'admin', collections: ['*'] };

describe('MCP tools over the service layer', () => {
  it('takes the collection name as `name` (the REST field) or `collection`, but not two different ones', async () => {
    const { call } = await session(admin);
    expect((await call('create_collection', { name: 'a', dim: 2, metric: 'l2' })).structuredContent.name).toBe('a');
    expect((await call('create_collection', { collection: 'b', dim: 2, metric: 'l2' })).structuredContent.name).toBe('b');
    const both = await call('create_collection', { name: 'c', collection: 'd', dim: 2, metric: 'l2' });
    expect(both.isError).toBe(true);
    expect(both.structuredContent.error.code).toBe('invalid_argument');
    const neither = await call('create_collection', { dim: 2, metric: 'l2' });
    expect(neither.structuredContent.error.code).toBe('invalid_argument');
  });

  it('audits writes with the key name and sees its own writes at once', async () => {
    const { call, audit } = await session(admin);
    await call('create_collection', { name: 'a', dim: 2, metric: 'l2' });
    for (let i = 0; i < 30; i++) {
      await call('upsert', { collection: 'a', points: [{ id: `p${i}`, vector: [i, 1] }] });
      // Re-writing an id makes the HNSW index stale; a read over MCP still sees the write. Thirty rounds
      // are thirty worker rebuilds: more than the vector store's 16 scratch lanes, so a leaked lane shows.
      await call('upsert', { collection: 'a', points: [{ id: `p${i}`, vector: [i, 0], payload: { i } }] });
      const hit = await call('search', { collection: 'a', vector: [i, 0], k: 1 });
      expect(hit.structuredContent.hits?.[0], JSON.stringify(hit.structuredContent)).toMatchObject({ id: `p${i}`, score: 0 });
    }
    expect(audit.filter((r) => r.action === 'upsert' && r.key === 'tester' && r.outcome === 'ok')).toHaveLength(60);
    expect(audit.every((r) => r.remote === 'stdio')).toBe(true);
  });

  it('hides an internal error behind a request id and reports it to the host', async () => {
    const { call, internal } = await session(admin, { listCollections: () => Promise.reject(new Error('disk on fire at /secret/path')) });
    const r = await call('list_collections');
    expect(r.isError).toBe(true);
    expect(r.structuredContent.error.code).toBe('internal');
    expect(r.structuredContent.error.message).not.toMatch(/secret|fire/);
    expect(internal).toHaveLength(1);
    expect(r.structuredContent.error.message).toContain(internal[0]);
  });

  it('gives an unknown tool the contract shape too', async () => {
    const { call } = await session(admin);
    const r = await call('drop_everything');
    expect(r.isError).toBe(true);
    expect(r.structuredContent.error.code).toBe('invalid_argument');
    expect(r.structuredContent.error.message).toMatch(/drop_everything/);
  });

  it('checks role and scope before the arguments: a read key calling a write tool with a bad body is denied', async () => {
    const { call: asAdmin } = await session(admin);
    await asAdmin('create_collection', { name: 'team_a.c', dim: 2, metric: 'l2' });
    const reader = await session({ keyName: 'reader', role: 'read', collections: ['*'] });
    for (const bad of [{ collection: 'team_a.c', points: 'not a list' }, { collection: 'team_a.c', points: [{ id: 'x', vector: [1, 2], colour: 'red' }] }, { collection: 7 }]) {
      const r = await reader.call('upsert', bad);
      expect(r.structuredContent.error.code, JSON.stringify(bad)).toBe('permission_denied');
    }
    expect(reader.audit.filter((a) => a.action === 'upsert' && a.outcome === 'denied' && a.key === 'reader')).toHaveLength(3);
    // Out of scope: the same, for a write key scoped elsewhere.
    const scoped = await session({ keyName: 'b-writer', role: 'write', collections: ['team_b.*'] });
    expect((await scoped.call('upsert', { collection: 'team_a.c', points: 'not a list' })).structuredContent.error.code).toBe('permission_denied');
    expect((await scoped.call('search', { collection: 'team_a.c', vector: 'no' })).structuredContent.error.code).toBe('permission_denied');
    // With the right, the same body is a validation error.
    expect((await scoped.call('upsert', { collection: 'team_b.c', points: 'not a list' })).structuredContent.error.code).toBe('invalid_argument');
  });

  it('refuses __proto__ and constructor.prototype anywhere in the arguments, storing nothing', async () => {
    const { call } = await session(admin);
    await call('create_collection', { name: 'c', dim: 2, metric: 'l2', filterable: [{ path: 'n', field_type: 'numeric' }] });
    const bodies = [
      '{"collection":"c","points":[{"id":"x","vector":[1,2],"payload":{"__proto__":{"admin":true}}}]}',
      '{"collection":"c","points":[{"id":"x","vector":[1,2],"payload":{"constructor":{"prototype":{"admin":true}}}}]}',
      '{"collection":"c","points":[{"id":"x","vector":[1,2],"payload":{"a":[{"__proto__":1}]}}]}',
    ];
    for (const b of bodies) {
      const r = await call('upsert', JSON.parse(b));
      expect(r.structuredContent.error?.code, b).toBe('invalid_argument');
      expect(r.structuredContent.error.message).toMatch(/__proto__|constructor/);
    }
    for (const f of ['{"__proto__":{"eq":{"field":"n","value":1}}}', '{"eq":{"field":"n","value":1},"constructor":{"prototype":{}}}']) {
      const r = await call('search', { collection: 'c', vector: [1, 2], filter: JSON.parse(f) });
      expect(r.structuredContent.error?.code, f).toBe('invalid_argument');
    }
    expect((await call('collection_info', { collection: 'c' })).structuredContent.count).toBe(0);
    expect(({} as Record<string, unknown>).admin).toBeUndefined();
  });
});

describe('MCP point operations (issue 21)', () => {
  it('upsert takes the spec\'s single point as well as a batch; both or neither is invalid_argument', async () => {
    const { call } = await session(admin);
    await call('create_collection', { name: 'c', dim: 2, metric: 'l2' });
    expect((await call('upsert', { collection: 'c', id: 'one', vector: [1, 2], payload: { k: 1 } })).structuredContent).toEqual({ upserted: 1 });
    expect((await call('upsert', { collection: 'c', id: 'two', vector: [3, 4] })).structuredContent).toEqual({ upserted: 1 });
    expect((await call('upsert', { collection: 'c', points: [{ id: 'three', vector: [5, 6] }] })).structuredContent).toEqual({ upserted: 1 });
    expect((await call('get', { collection: 'c', id: 'one', with_vector: true })).structuredContent).toEqual({ id: 'one', vector: [1, 2], payload: { k: 1 } });
    for (const bad of [
      { collection: 'c', id: 'x', vector: [1, 2], points: [{ id: 'y', vector: [1, 2] }] },
      { collection: 'c', payload: { k: 1 }, points: [] },
      { collection: 'c' },
      { collection: 'c', id: 'x' },
      { collection: 'c', vector: [1, 2] },
      { collection: 'c', id: 'x', vector: [1, 2, 3] },
    ]) {
      const r = await call('upsert', bad);
      expect(r.structuredContent.error?.code, JSON.stringify(bad)).toBe('invalid_argument');
    }
    expect((await call('count', { collection: 'c' })).structuredContent).toEqual({ count: 3 });
  });

  it('upsert_document takes one document as well as a batch', async () => {
    const { call } = await session(admin);
    await call('create_collection', { name: 'm', dim: 2, metric: 'cosine', multivector: true });
    expect((await call('upsert_document', { collection: 'm', id: 'd1', vectors: [[1, 0], [0, 1]], payload: { k: 1 } })).structuredContent).toEqual({ upserted: 1 });
    expect((await call('upsert_document', { collection: 'm', documents: [{ id: 'd2', vectors: [[1, 1]] }] })).structuredContent).toEqual({ upserted: 1 });
    expect((await call('get', { collection: 'm', id: 'd1' })).structuredContent).toEqual({ id: 'd1', payload: { k: 1 } });
    for (const bad of [{ collection: 'm', id: 'd3', vectors: [[1, 0]], documents: [] }, { collection: 'm', id: 'd3' }, { collection: 'm' }]) {
      expect((await call('upsert_document', bad)).structuredContent.error?.code, JSON.stringify(bad)).toBe('invalid_argument');
    }
    expect((await call('count', { collection: 'm' })).structuredContent).toEqual({ count: 2 });
  });

  it('count, set_payload and delete_points mirror the REST routes', async () => {
    const { call, audit } = await session(admin);
    await call('create_collection', { name: 'c', dim: 2, metric: 'l2', filterable: [{ path: 'g', field_type: 'keyword' }] });
    await call('upsert', { collection: 'c', points: [
      { id: 'a', vector: [1, 0], payload: { g: 'x', n: 1 } }, { id: 'b', vector: [0, 1], payload: { g: 'y' } }, { id: 'c', vector: [1, 1], payload: { g: 'x' } },
    ] });
    expect((await call('count', { collection: 'c', filter: { eq: { field: 'g', value: 'x' } } })).structuredContent).toEqual({ count: 2 });
    expect((await call('set_payload', { collection: 'c', points: [{ id: 'a', payload: { g: 'y' } }] })).structuredContent).toEqual({ updated: 1 });
    expect((await call('get', { collection: 'c', id: 'a' })).structuredContent.payload).toEqual({ g: 'y', n: 1 });
    expect((await call('set_payload', { collection: 'c', mode: 'replace', points: [{ id: 'b', payload: { g: 'x' } }] })).structuredContent).toEqual({ updated: 1 });
    const missing = await call('set_payload', { collection: 'c', points: [{ id: 'a', payload: { g: 'z' } }, { id: 'ghost', payload: {} }] });
    expect(missing.structuredContent.error.code).toBe('not_found');
    expect((await call('get', { collection: 'c', id: 'a' })).structuredContent.payload).toEqual({ g: 'y', n: 1 });
    expect((await call('delete_points', { collection: 'c', filter: { eq: { field: 'g', value: 'x' } } })).structuredContent).toEqual({ deleted: 2 });
    expect((await call('delete_points', { collection: 'c', ids: ['a', 'nope'] })).structuredContent).toEqual({ deleted: 1 });
    expect((await call('count', { collection: 'c' })).structuredContent).toEqual({ count: 0 });
    for (const [tool, bad] of [
      ['delete_points', { collection: 'c' }], ['delete_points', { collection: 'c', ids: ['a'], filter: { eq: { field: 'g', value: 'x' } } }],
      ['set_payload', { collection: 'c', points: [{ id: 'a' }] }], ['set_payload', { collection: 'c', points: [], mode: 'upsert' }],
      ['count', { collection: 'c', filter: { eq: { field: 'n', value: 1 } } }],
    ] as const) {
      expect((await call(tool, bad)).structuredContent.error?.code, `${tool} ${JSON.stringify(bad)}`).toBe('invalid_argument');
    }
    expect(audit.filter((r) => r.action === 'setPayload' || r.action === 'deletePoints').map((r) => [r.action, r.outcome, r.status])).toEqual([
      ['setPayload', 'ok', 200], ['setPayload', 'ok', 200], ['setPayload', 'error', 404], ['deletePoints', 'ok', 200], ['deletePoints', 'ok', 200],
      // The engine refuses these two (one of ids/filter); the schema refused the other bad calls before the service.
      ['deletePoints', 'error', 400], ['deletePoints', 'error', 400],
    ]);
  });

  it('applies the batch limit to set_payload and delete_points, and create_collection takes exist_ok', async () => {
    const { call } = await session(admin, undefined, { maxBatchSize: 2 });
    await call('create_collection', { name: 'c', dim: 2, metric: 'l2' });
    expect((await call('create_collection', { name: 'c', dim: 2, metric: 'l2', exist_ok: true })).structuredContent).toMatchObject({ name: 'c', count: 0 });
    expect((await call('create_collection', { name: 'c', dim: 3, metric: 'l2', exist_ok: true })).structuredContent.error.code).toBe('already_exists');
    await call('upsert', { collection: 'c', points: [{ id: 'a', vector: [1, 0] }, { id: 'b', vector: [0, 1] }] });
    const three = [{ id: 'a', payload: {} }, { id: 'b', payload: {} }, { id: 'a', payload: {} }];
    const over = await call('set_payload', { collection: 'c', points: three });
    expect([over.structuredContent.error.code, over.structuredContent.error.message]).toEqual(['limit_exceeded', expect.stringContaining('SVC_MAX_BATCH_SIZE')]);
    expect((await call('delete_points', { collection: 'c', ids: ['a', 'b', 'x'] })).structuredContent.error.code).toBe('limit_exceeded');
    expect((await call('count', { collection: 'c' })).structuredContent).toEqual({ count: 2 });
  });

  it('a read key may count but not set payloads or delete, before its arguments are looked at', async () => {
    const reader = await session({ keyName: 'reader', role: 'read', collections: ['*'] });
    await reader.db.createCollection({ name: 'c', dim: 2, metric: 'l2' });
    await reader.db.upsert('c', { points: [{ id: 'a', vector: [1, 2] }] });
    expect((await reader.call('count', { collection: 'c' })).structuredContent).toEqual({ count: 1 });
    for (const [tool, args] of [
      ['set_payload', { collection: 'c', points: [{ id: 'a', payload: { x: 1 } }] }], ['set_payload', { collection: 'c', points: 'nonsense' }],
      ['delete_points', { collection: 'c', ids: ['a'] }], ['delete_points', { collection: 'c', bogus: 1 }],
    ] as const) {
      expect((await reader.call(tool, args)).structuredContent.error.code, `${tool} ${JSON.stringify(args)}`).toBe('permission_denied');
    }
    expect(await reader.db.get('c', 'a')).toEqual({ id: 'a', payload: {} });
    expect(reader.audit.filter((r) => r.outcome === 'denied').map((r) => r.action)).toEqual(['setPayload', 'setPayload', 'deletePoints', 'deletePoints']);
  });

  it('lists the new tools with read-only hints that say what they do', async () => {
    const { client } = await session(admin);
    const { tools } = await client.listTools();
    const hint = (n: string) => tools.find((t) => t.name === n)?.annotations?.readOnlyHint;
    expect([hint('count'), hint('set_payload'), hint('delete_points')]).toEqual([true, false, false]);
    const upsert = tools.find((t) => t.name === 'upsert')!;
    expect(upsert.inputSchema.type).toBe('object');
    expect(Object.keys(upsert.inputSchema.properties ?? {}).sort()).toEqual(['collection', 'id', 'payload', 'points', 'vector']);
  });
});
