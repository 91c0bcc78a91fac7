import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { InMemoryTransport } from '@modelcontextprotocol/sdk/inMemory.js';
import { afterEach, describe, expect, it } from 'vitest';
import { systemClock } from '../../core/base/clock.js';
import { resolveLimits } from '../../core/base/limits.js';
import { openDatabase } from '../../core/index.js';
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

async function session(principal: Principal, engineOverride?: Partial<EngineApi>) {
  const root = mkdtempSync(join(tmpdir(), 'svc-mcp-'));
  const db = await openDatabase({ dataDir: join(root, 'data'), insecure: true });
  const engine = Object.assign(Object.create(db) as EngineApi, engineOverride ?? {});
  const audit: AuditRecord[] = [];
  const service = createService(engine, {
    keys: [], insecure: true, limits: resolveLimits(), rateLimit: { requestsPerSecond: 0, burst: 0 },
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
  return { call, audit, internal };
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
