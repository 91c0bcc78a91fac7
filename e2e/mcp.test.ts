/**
 * `svc mcp` from outside: the SDK's own Client over stdio spawns the built program (npm test builds
 * first) and calls every kind of tool as a model would. Imports no project code.
 */
import { spawn } from 'node:child_process';
import { existsSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StdioClientTransport } from '@modelcontextprotocol/sdk/client/stdio.js';
import { afterEach, describe, expect, it } from 'vitest';
import { MAIN, MASTER, ROOT, cleanEnv, tempDir } from './harness.js';

const ADMIN = 'admin-secret-1';
const READER = 'reader-secret-1';

const TOOL_NAMES = [
  'list_collections', 'collection_info', 'database_stats', 'create_collection', 'delete_collection', 'snapshot',
  'upsert', 'search', 'fetch', 'get', 'delete', 'upsert_document', 'search_multi_vector', 'delete_document',
  'hybrid_search', 'upsert_text', 'search_text', 'count', 'set_payload', 'delete_points',
];

const open: Client[] = [];
afterEach(async () => {
  for (const c of open.splice(0)) await c.close().catch(() => undefined);
});

async function connect(args: string[], env: Record<string, string>): Promise<{ client: Client; stderr: () => string }> {
  const transport = new StdioClientTransport({
    command: process.execPath, args: [MAIN, 'mcp', ...args], env: cleanEnv(env), cwd: ROOT, stderr: 'pipe',
  });
  let err = '';
  transport.stderr?.on('data', (d: Buffer) => { err += d.toString(); });
  const client = new Client({ name: 'svc-e2e', version: '1.0.0' });
  await client.connect(transport);
  open.push(client);
  return { client, stderr: () => err };
}

interface Result { isError?: boolean; structuredContent?: any; content: { type: string; text: string }[] }

async function call(client: Client, name: string, args: Record<string, unknown> = {}): Promise<Result> {
  const r = (await client.callTool({ name, arguments: args })) as Result;
  // The text is the same JSON as the structured content, for clients that read only text.
  expect(JSON.parse(r.content[0].text)).toEqual(r.structuredContent);
  return r;
}

async function ok(client: Client, name: string, args: Record<string, unknown> = {}): Promise<any> {
  const r = await call(client, name, args);
  expect(r.isError, JSON.stringify(r.structuredContent)).toBeFalsy();
  return r.structuredContent;
}

async function fails(client: Client, name: string, args: Record<string, unknown>, code: string): Promise<string> {
  const r = await call(client, name, args);
  expect(r.isError).toBe(true);
  expect(r.structuredContent.error.code).toBe(code);
  return r.structuredContent.error.message as string;
}

/** Starts the program as a model host would, but without a client: for the refusals. */
function startRaw(args: string[], env: Record<string, string>): Promise<{ code: number | null; stdout: string; stderr: string }> {
  return new Promise((resolve) => {
    const child = spawn(process.execPath, [MAIN, 'mcp', ...args], { env: cleanEnv(env), cwd: ROOT, stdio: ['pipe', 'pipe', 'pipe'] });
    let out = '';
    let err = '';
    child.stdout.on('data', (d: Buffer) => { out += d.toString(); });
    child.stderr.on('data', (d: Buffer) => { err += d.toString(); });
    child.on('exit', (code) => resolve({ code, stdout: out, stderr: err }));
  });
}

const adminEnv = (extra: Record<string, string> = {}) => ({ SVC_API_KEYS: ADMIN, SVC_API_KEY: ADMIN, SVC_ENCRYPTION_KEY: MASTER, ...extra });

describe('svc mcp over stdio', () => {
  it('lists every tool of the spec with a description of the tool and of each parameter', async () => {
    const { client } = await connect(['--data-dir', tempDir()], adminEnv());
    const { tools } = await client.listTools();
    expect(tools.map((t) => t.name).sort()).toEqual([...TOOL_NAMES].sort());
    for (const t of tools) {
      expect(t.description, t.name).toMatch(/\w{3,}/);
      const props = (t.inputSchema.properties ?? {}) as Record<string, { description?: string }>;
      for (const [p, s] of Object.entries(props)) expect(s.description, `${t.name}.${p}`).toMatch(/\w{3,}/);
    }
    const search = tools.find((t) => t.name === 'search')!;
    expect(search.inputSchema.required).toEqual(expect.arrayContaining(['collection', 'vector']));
  });

  it('runs a whole session: create, upsert, filtered search, fetch pages, get, delete, stats, snapshot, drop', async () => {
    const dir = tempDir();
    const { client } = await connect(['--data-dir', join(dir, 'data')], adminEnv());
    const info = await ok(client, 'create_collection', {
      name: 'docs', dim: 3, metric: 'l2', filterable: [{ path: 'color', field_type: 'keyword' }, { path: 'n', field_type: 'numeric' }],
    });
    expect(info).toMatchObject({ name: 'docs', dim: 3, metric: 'l2', count: 0 });
    await fails(client, 'create_collection', { name: 'docs', dim: 3, metric: 'l2' }, 'already_exists');

    const points = Array.from({ length: 25 }, (_, i) => ({
      id: `p${String(i).padStart(2, '0')}`, vector: [i, 0, 0], payload: { color: i % 2 === 0 ? 'red' : 'blue', n: i },
    }));
    expect(await ok(client, 'upsert', { collection: 'docs', points })).toEqual({ upserted: 25 });

    const red = await ok(client, 'search', { collection: 'docs', vector: [7.2, 0, 0], k: 3, filter: { eq: { field: 'color', value: 'red' } } });
    expect(red.hits.map((h: any) => h.id)).toEqual(['p08', 'p06', 'p10']);
    expect(red.hits.map((h: any) => h.rank)).toEqual([0, 1, 2]);
    expect(red.hits[0].score).toBeCloseTo(0.8, 4);
    expect(red.hits[0].payload).toEqual({ color: 'red', n: 8 });

    const seen: string[] = [];
    let cursor: string | null = null;
    for (let page = 0; page < 10; page++) {
      const r: any = await ok(client, 'fetch', { collection: 'docs', limit: 4, filter: { gte: { field: 'n', value: 10 } }, ...(cursor ? { cursor } : {}) });
      expect(r.points.length).toBeLessThanOrEqual(4);
      seen.push(...r.points.map((p: any) => p.id));
      cursor = r.next_cursor;
      if (cursor === null) break;
    }
    expect(seen).toEqual(points.slice(10).map((p) => p.id));

    expect(await ok(client, 'get', { collection: 'docs', id: 'p03', with_vector: true })).toEqual({ id: 'p03', vector: [3, 0, 0], payload: { color: 'blue', n: 3 } });
    expect(await ok(client, 'delete', { collection: 'docs', id: 'p03' })).toEqual({ deleted: true });
    expect(await ok(client, 'delete', { collection: 'docs', id: 'p03' })).toEqual({ deleted: false });
    await fails(client, 'get', { collection: 'docs', id: 'p03' }, 'not_found');

    const stats = await ok(client, 'database_stats');
    expect(stats).toMatchObject({ collections: 1, total_points: 24, per_collection: [{ name: 'docs', count: 24 }] });
    expect(stats.snapshot_status.manifest_version).toBeGreaterThan(0);
    expect(stats.snapshot_status.disk_bytes).toBeGreaterThan(0);

    const snap = await ok(client, 'snapshot', { name: 'before-drop' });
    expect(snap).toMatchObject({ name: 'before-drop', path: join(dir, 'data-snapshots', 'before-drop') });
    expect(existsSync(join(snap.path, 'manifest'))).toBe(true);
    for (const bad of ['../x', '/abs', 'a/b']) await fails(client, 'snapshot', { name: bad }, 'invalid_argument');
    expect(existsSync(join(dir, 'x'))).toBe(false);

    expect(await ok(client, 'delete_collection', { collection: 'docs' })).toEqual({ existed: true });
    expect(await ok(client, 'list_collections')).toEqual({ collections: [] });
    await client.close();

    // The snapshot opens as a data directory with the same key: the state before the drop is there.
    const restored = await connect(['--data-dir', snap.path], adminEnv());
    const again = await ok(restored.client, 'collection_info', { collection: 'docs' });
    expect(again.count).toBe(24);
    const hit = await ok(restored.client, 'search', { collection: 'docs', vector: [11, 0, 0], k: 1 });
    expect(hit.hits[0].id).toBe('p11');
  });

  it('takes one point or a batch, counts, updates payloads and deletes by filter (issue 21)', async () => {
    const { client } = await connect(['--data-dir', tempDir()], adminEnv());
    await ok(client, 'create_collection', { name: 'c', dim: 2, metric: 'l2', filterable: [{ path: 'g', field_type: 'keyword' }] });
    expect((await ok(client, 'create_collection', { name: 'c', dim: 2, metric: 'l2', filterable: [{ path: 'g', field_type: 'keyword' }], exist_ok: true })).name).toBe('c');
    expect(await ok(client, 'upsert', { collection: 'c', id: 'one', vector: [1, 0], payload: { g: 'x' } })).toEqual({ upserted: 1 });
    expect(await ok(client, 'upsert', { collection: 'c', points: [{ id: 'two', vector: [0, 1], payload: { g: 'y' } }, { id: 'three', vector: [1, 1], payload: { g: 'x' } }] })).toEqual({ upserted: 2 });
    expect(await ok(client, 'count', { collection: 'c', filter: { eq: { field: 'g', value: 'x' } } })).toEqual({ count: 2 });
    expect(await ok(client, 'set_payload', { collection: 'c', points: [{ id: 'two', payload: { g: 'x', note: 1 } }] })).toEqual({ updated: 1 });
    expect((await ok(client, 'get', { collection: 'c', id: 'two' })).payload).toEqual({ g: 'x', note: 1 });
    await fails(client, 'set_payload', { collection: 'c', points: [{ id: 'ghost', payload: {} }] }, 'not_found');
    expect(await ok(client, 'delete_points', { collection: 'c', filter: { eq: { field: 'g', value: 'x' } } })).toEqual({ deleted: 3 });
    expect(await ok(client, 'count', { collection: 'c' })).toEqual({ count: 0 });
    await fails(client, 'upsert', { collection: 'c', id: 'x', vector: [1, 0], points: [] }, 'invalid_argument');
  });

  it('reports bad arguments with invalid_argument, whether the schema or the engine catches them', async () => {
    const { client } = await connect(['--data-dir', tempDir()], adminEnv());
    await ok(client, 'create_collection', { name: 'c', dim: 2, metric: 'cosine' });
    const unknownField = await fails(client, 'search', { collection: 'c', vector: [1, 0], colour: 'red' }, 'invalid_argument');
    expect(unknownField).toMatch(/colour/);
    await fails(client, 'search', { collection: 'c', vector: 'not a vector' }, 'invalid_argument');
    expect(await fails(client, 'search', { collection: 'c', vector: [1, 0, 0] }, 'invalid_argument')).toMatch(/dim|length|2/);
    await fails(client, 'search', { collection: 'nope', vector: [1, 0] }, 'not_found');
    await fails(client, 'search', { collection: 'c', vector: [1, 0], filter: { eq: { field: 'undeclared', value: 1 } } }, 'invalid_argument');
  });

  it('enforces the query cost limits of the environment', async () => {
    const { client } = await connect(['--data-dir', tempDir()], adminEnv({ SVC_MAX_K: '5', SVC_MAX_BATCH_SIZE: '2' }));
    await ok(client, 'create_collection', { name: 'c', dim: 2, metric: 'l2' });
    const msg = await fails(client, 'search', { collection: 'c', vector: [1, 0], k: 6 }, 'limit_exceeded');
    expect(msg).toMatch(/SVC_MAX_K/);
    await ok(client, 'search', { collection: 'c', vector: [1, 0], k: 5 });
    const points = [1, 2, 3].map((i) => ({ id: `${i}`, vector: [i, 0] }));
    expect(await fails(client, 'upsert', { collection: 'c', points }, 'limit_exceeded')).toMatch(/SVC_MAX_BATCH_SIZE/);
  });

  it('acts with the role and scopes of SVC_API_KEY from --config', async () => {
    const dir = tempDir();
    const config = join(dir, 'svc.toml');
    writeFileSync(config, `[[api_keys]]\nname = "reader"\nrole = "read"\ncollections = ["team_a.*"]\nkey = "${READER}"\n`);
    const data = join(dir, 'data');
    const admin = await connect(['--data-dir', data, '--config', config], adminEnv());
    for (const name of ['team_a.docs', 'team_b.docs']) {
      await ok(admin.client, 'create_collection', { name, dim: 2, metric: 'l2' });
      await ok(admin.client, 'upsert', { collection: name, points: [{ id: 'x', vector: [1, 2] }] });
    }
    await admin.client.close();

    const reader = await connect(['--data-dir', data, '--config', config], adminEnv({ SVC_API_KEY: READER }));
    const c = reader.client;
    expect((await ok(c, 'list_collections')).collections.map((x: any) => x.name)).toEqual(['team_a.docs']);
    expect((await ok(c, 'search', { collection: 'team_a.docs', vector: [1, 2], k: 1 })).hits[0].id).toBe('x');
    expect(await fails(c, 'upsert', { collection: 'team_a.docs', points: [{ id: 'y', vector: [0, 0] }] }, 'permission_denied')).toMatch(/write/);
    await fails(c, 'collection_info', { collection: 'team_b.docs' }, 'permission_denied');
    await fails(c, 'search', { collection: 'team_b.docs', vector: [1, 2] }, 'permission_denied');
    await fails(c, 'create_collection', { name: 'team_a.new', dim: 2, metric: 'l2' }, 'permission_denied');
    await fails(c, 'snapshot', { name: 's1' }, 'permission_denied');
    // Role and scope come before the arguments' checks, as over REST and gRPC: bad bodies teach a reader nothing.
    expect(await fails(c, 'upsert', { collection: 'team_a.docs', points: 'not a list', colour: 'red' }, 'permission_denied')).toMatch(/write/);
    await fails(c, 'delete_collection', { collection: 'team_a.docs', extra: 1 }, 'permission_denied');
    await fails(c, 'search', { collection: 'team_b.docs', vector: 'not a vector' }, 'permission_denied');
    await fails(c, 'search', { collection: 'team_a.docs', vector: 'not a vector' }, 'invalid_argument');
    const stats = await ok(c, 'database_stats');
    expect(stats).toMatchObject({ collections: 1, total_points: 1 });
  });

  it('refuses to start without a key, with an unknown key, and starts without one only when insecure', async () => {
    const none = await startRaw(['--data-dir', join(tempDir(), 'd')], { SVC_API_KEYS: ADMIN, SVC_ENCRYPTION_KEY: MASTER });
    expect(none.code).toBe(2);
    expect(none.stderr).toMatch(/SVC_API_KEY/);
    expect(none.stdout).toBe('');

    const wrongDir = join(tempDir(), 'd');
    const wrong = await startRaw(['--data-dir', wrongDir], adminEnv({ SVC_API_KEY: 'not-a-key' }));
    expect(wrong.code).toBe(2);
    expect(wrong.stderr).toMatch(/unknown API key/);
    expect(existsSync(wrongDir)).toBe(false);

    const noKeys = await startRaw(['--data-dir', join(tempDir(), 'd')], { SVC_ENCRYPTION_KEY: MASTER });
    expect(noKeys.code).toBe(2);

    const { client } = await connect(['--data-dir', join(tempDir(), 'd')], { SVC_INSECURE: 'true' });
    await ok(client, 'create_collection', { name: 'dev', dim: 2, metric: 'dot' });
  });
});
