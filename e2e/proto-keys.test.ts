import { join } from 'node:path';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StdioClientTransport } from '@modelcontextprotocol/sdk/client/stdio.js';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { SvcGrpc, toStruct } from './grpc-client.js';
import { MAIN, MASTER, ROOT, api, cleanEnv, serve, tempDir, type Server } from './harness.js';

/**
 * One behaviour for the same body on every transport: a payload or filter holding a key that could
 * rewrite a prototype (`__proto__`, or `constructor` holding `prototype`) is refused with invalid_argument
 * over REST, gRPC, MCP and the embedded API, and nothing is stored. The embedded API is the package's
 * public entry (`import('svc')`, the package's own name), as a user imports it.
 */
const KEY = 'proto-keys-admin';
const FILTERABLE = [{ path: 'n', field_type: 'numeric' }];

const PAYLOADS = [
  '{"__proto__":{"admin":true}}',
  '{"constructor":{"prototype":{"admin":true}}}',
  '{"a":{"b":[{"__proto__":{"admin":true}}]}}',
  '{"ok":1,"x":{"constructor":{"prototype":null}}}',
];
const FILTERS = [
  '{"eq":{"field":"n","value":1},"__proto__":{"admin":true}}',
  '{"and":[{"eq":{"field":"n","value":1}},{"constructor":{"prototype":{}}}]}',
];

let server: Server;
let grpc: SvcGrpc;
let mcp: Client;
let embedded: any;
const dir = tempDir();

beforeAll(async () => {
  server = await serve({ SVC_API_KEYS: KEY, SVC_ENCRYPTION_KEY: MASTER, SVC_DATA_DIR: join(dir, 'data') }, { cwd: dir });
  grpc = new SvcGrpc(`127.0.0.1:${server.grpcPort}`);
  const rest = api(server.base, KEY);
  expect((await rest('POST', '/v1/collections', { name: 'c', dim: 2, metric: 'l2', filterable: FILTERABLE })).status).toBe(201);

  // MCP holds its own data directory (a data directory has one holder at a time).
  const transport = new StdioClientTransport({
    command: process.execPath, args: [MAIN, 'mcp', '--data-dir', join(dir, 'mcp-data')],
    env: cleanEnv({ SVC_API_KEYS: KEY, SVC_API_KEY: KEY, SVC_ENCRYPTION_KEY: MASTER }), cwd: ROOT, stderr: 'pipe',
  });
  mcp = new Client({ name: 'proto-keys', version: '1' });
  await mcp.connect(transport);
  await mcp.callTool({ name: 'create_collection', arguments: { name: 'c', dim: 2, metric: 'l2', filterable: FILTERABLE } });

  const pkg = 'svc';
  const { openDatabase } = await import(pkg);
  embedded = await openDatabase({ dataDir: join(dir, 'embedded-data'), encryptionKey: MASTER });
  await embedded.createCollection({ name: 'c', dim: 2, metric: 'l2', filterable: FILTERABLE });
}, 60_000);

afterAll(async () => {
  grpc?.close();
  await mcp?.close();
  await embedded?.close();
  await server?.stop();
});

/** The contract code each transport answers a body with ('ok' when it is accepted). */
const transports: Record<string, { upsert(payload: string): Promise<string>; search(filter: string): Promise<string>; count(): Promise<number> }> = {
  rest: {
    async upsert(payload) {
      const r = await api(server.base, KEY)('PUT', '/v1/collections/c/points', `{"points":[{"id":"x","vector":[1,0],"payload":${payload}}]}`);
      return r.status === 200 ? 'ok' : r.json.error.code;
    },
    async search(filter) {
      const r = await api(server.base, KEY)('POST', '/v1/collections/c/query', `{"vector":[1,0],"k":1,"filter":${filter}}`);
      return r.status === 200 ? 'ok' : r.json.error.code;
    },
    async count() {
      return (await api(server.base, KEY)('GET', '/v1/collections/c')).json.count;
    },
  },
  grpc: {
    async upsert(payload) {
      const r = await grpc.call('Upsert', { collection: 'c', points: [{ id: 'x', vector: [1, 0], payload: toStruct(JSON.parse(payload)) }] }, KEY);
      return r.err ? r.code! : 'ok';
    },
    async search(filter) {
      const r = await grpc.call('Search', { collection: 'c', vector: [1, 0], k: 1, filter: toStruct(JSON.parse(filter)) }, KEY);
      return r.err ? r.code! : 'ok';
    },
    async count() {
      return (await grpc.call('GetCollection', { collection: 'c' }, KEY)).res.count ?? 0; // proto3 does not send a zero
    },
  },
  mcp: {
    async upsert(payload) {
      const r = await mcp.callTool({ name: 'upsert', arguments: JSON.parse(`{"collection":"c","points":[{"id":"x","vector":[1,0],"payload":${payload}}]}`) }) as any;
      return r.isError ? r.structuredContent.error.code : 'ok';
    },
    async search(filter) {
      const r = await mcp.callTool({ name: 'search', arguments: JSON.parse(`{"collection":"c","vector":[1,0],"k":1,"filter":${filter}}`) }) as any;
      return r.isError ? r.structuredContent.error.code : 'ok';
    },
    async count() {
      return ((await mcp.callTool({ name: 'collection_info', arguments: { collection: 'c' } })) as any).structuredContent.count;
    },
  },
  embedded: {
    async upsert(payload) {
      return embedded.upsert('c', JSON.parse(`{"points":[{"id":"x","vector":[1,0],"payload":${payload}}]}`)).then(() => 'ok', (e: any) => e.code);
    },
    async search(filter) {
      return embedded.search('c', JSON.parse(`{"vector":[1,0],"k":1,"filter":${filter}}`)).then(() => 'ok', (e: any) => e.code);
    },
    async count() {
      return (await embedded.collectionInfo('c')).count;
    },
  },
};

describe('prototype-poisoning keys, the same on every transport', () => {
  it('a payload holding one is refused with invalid_argument everywhere, and nothing is stored', async () => {
    const seen: Record<string, string[]> = {};
    for (const [name, t] of Object.entries(transports)) {
      seen[name] = [];
      for (const p of PAYLOADS) seen[name].push(await t.upsert(p));
      expect(await t.count(), name).toBe(0);
    }
    const expected = PAYLOADS.map(() => 'invalid_argument');
    expect(seen).toEqual({ rest: expected, grpc: expected, mcp: expected, embedded: expected });
  });

  it('a filter holding one is refused with invalid_argument everywhere', async () => {
    const seen: Record<string, string[]> = {};
    for (const [name, t] of Object.entries(transports)) seen[name] = await Promise.all(FILTERS.map((f) => t.search(f)));
    const expected = FILTERS.map(() => 'invalid_argument');
    expect(seen).toEqual({ rest: expected, grpc: expected, mcp: expected, embedded: expected });
  });

  it('the same bodies without those keys are accepted everywhere (the check is not a blanket refusal)', async () => {
    for (const [name, t] of Object.entries(transports)) {
      expect(await t.upsert('{"constructor":"x","prototype":{"a":1},"n":1}'), name).toBe('ok');
      expect(await t.search('{"eq":{"field":"n","value":1}}'), name).toBe('ok');
      expect(await t.count(), name).toBe(1);
    }
  });
});
