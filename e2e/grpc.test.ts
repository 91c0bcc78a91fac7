/**
 * gRPC end to end: `svc serve` as a real process, called with a client built from proto/svc.proto.
 * What a user sees must match REST: the same results, the same limits, the same error codes, the same
 * roles and scopes (CONTRACT.md sections 1 to 4).
 */
import { readFileSync, writeFileSync } from 'node:fs';
import https from 'node:https';
import { join } from 'node:path';
import { credentials, status } from '@grpc/grpc-js';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { fromStruct, SvcGrpc, toStruct, type Reply } from './grpc-client.js';
import { api, makeCerts, MASTER, serve, tempDir, type Server } from './harness.js';

const ADMIN = 'admin-key';
const KEYS = { reader: 'reader-key', writer: 'writer-key', teamAdmin: 'team-admin-key' };

/** CONTRACT.md section 2, written out here: the gRPC status of each contract code. */
const GRPC_OF: Record<string, number> = {
  invalid_argument: status.INVALID_ARGUMENT, limit_exceeded: status.INVALID_ARGUMENT,
  unauthenticated: status.UNAUTHENTICATED, permission_denied: status.PERMISSION_DENIED,
  read_only_replica: status.PERMISSION_DENIED, not_found: status.NOT_FOUND, already_exists: status.ALREADY_EXISTS,
  rate_limited: status.RESOURCE_EXHAUSTED, provider_error: status.UNAVAILABLE, not_ready: status.UNAVAILABLE,
  internal: status.INTERNAL,
};

const LIMITS = {
  SVC_MAX_K: '50', SVC_MAX_EF_SEARCH: '200', SVC_MAX_FETCH_LIMIT: '100', SVC_MAX_BATCH_SIZE: '20',
  SVC_MAX_REQUEST_BODY_BYTES: '262144', SVC_MAX_SPARSE_TERMS: '8', SVC_MAX_VECTOR_DIM: '64',
};

function writeConfig(dir: string): string {
  const toml = [
    ['reader', 'read', KEYS.reader], ['writer', 'write', KEYS.writer], ['team-admin', 'admin', KEYS.teamAdmin],
  ].map(([name, role, key]) => `[[api_keys]]\nname = "${name}"\nrole = "${role}"\ncollections = ["team_a.*"]\nkey = "${key}"\n`).join('\n');
  const file = join(dir, 'svc.toml');
  writeFileSync(file, toml);
  return file;
}

/** `svc serve` with the keys and limits above; `ready` probes an https server (TLS tests). */
async function start(extra: Record<string, string> = {}, ready?: (base: string) => Promise<boolean>): Promise<Server> {
  const dir = tempDir('svc-grpc-e2e-');
  return serve({
    SVC_API_KEYS: ADMIN, SVC_ENCRYPTION_KEY: MASTER, SVC_DATA_DIR: join(dir, 'data'), SVC_CONFIG: writeConfig(dir), ...LIMITS, ...extra,
  }, { cwd: dir, ...(ready ? { ready, scheme: 'https' } : {}) });
}

/** Asserts a gRPC failure: the mapped status, the contract code, and (optionally) words of the message. */
function expectError(r: Reply, code: string, words?: string): void {
  expect(r.err, `expected ${code}, got a reply`).toBeDefined();
  expect([r.err?.code, r.code]).toEqual([GRPC_OF[code], code]);
  if (words !== undefined) expect(r.err?.details).toContain(words);
}

const vec = (xs: number[]): { vector: number[] } => ({ vector: xs });

describe('gRPC end to end', () => {
  let server: Server;
  let g: SvcGrpc;
  let rest: ReturnType<typeof api>;

  beforeAll(async () => {
    server = await start();
    g = new SvcGrpc(`127.0.0.1:${server.grpcPort}`);
    rest = api(server.base, ADMIN);
  });
  afterAll(async () => {
    g?.close();
    expect(await server.stop()).toBe(0);
  });

  it('serves a collection through its whole life, with the same answers as REST', async () => {
    const created = await g.call('CreateCollection', {
      name: 'team_a.docs', dim: 4, metric: 'l2',
      filterable: [{ path: 'lang', field_type: 'keyword' }, { path: 'n', field_type: 'numeric' }],
    }, ADMIN);
    expect(created.err).toBeUndefined();
    expect(created.res).toMatchObject({ name: 'team_a.docs', dim: 4, metric: 'l2', index: 'hnsw' });
    expect(created.res.count ?? 0).toBe(0); // proto3 does not send zeros
    expectError(await g.call('CreateCollection', { name: 'team_a.docs', dim: 4, metric: 'l2' }, ADMIN), 'already_exists');

    const points = Array.from({ length: 8 }, (_, i) => ({
      id: `p${i}`, vector: [i, i % 3, 1, -i / 2], payload: toStruct({ lang: i % 2 === 0 ? 'en' : 'de', n: i, tags: ['x', i] }),
    }));
    expect((await g.call('Upsert', { collection: 'team_a.docs', points }, ADMIN)).res).toEqual({ upserted: 8 });

    const list = await g.call('ListCollections', {}, ADMIN);
    expect(list.res.collections.map((c: { name: string }) => c.name)).toContain('team_a.docs');
    expect((await g.call('GetCollection', { collection: 'team_a.docs' }, ADMIN)).res).toMatchObject({ count: 8, dim: 4 });

    const got = await g.call('GetPoint', { collection: 'team_a.docs', id: 'p3', with_vector: true }, ADMIN);
    expect(got.res.id).toBe('p3');
    expect(got.res.vector).toEqual([3, 0, 1, -1.5]);
    expect(fromStruct(got.res.payload)).toEqual({ lang: 'de', n: 3, tags: ['x', 3] });
    expectError(await g.call('GetPoint', { collection: 'team_a.docs', id: 'nope' }, ADMIN), 'not_found');

    // Search: the same hits, ranks and scores as the REST query.
    const query = { vector: [2.2, 1, 1, -1], k: 3 };
    const s = await g.call('Search', { collection: 'team_a.docs', ...query, consistency: 'strong' }, ADMIN);
    const r = await rest('POST', '/v1/collections/team_a.docs/query', { ...query, consistency: 'strong' });
    expect(r.status).toBe(200);
    expect(s.res.hits.map((h: any) => [h.id, h.rank ?? 0, h.score, fromStruct(h.payload)])) // proto3 does not send rank 0
      .toEqual(r.json.hits.map((h: any) => [h.id, h.rank, h.score, h.payload]));
    expect(s.res.hits.map((h: any) => h.id)).toEqual(['p2', 'p1', 'p3']);

    const filtered = await g.call('Search', { collection: 'team_a.docs', vector: [0, 0, 1, 0], k: 10, filter: toStruct({ eq: { field: 'lang', value: 'de' } }), with_payload: false }, ADMIN);
    expect(filtered.res.hits.map((h: any) => h.id).sort()).toEqual(['p1', 'p3', 'p5', 'p7']);
    expect(filtered.res.hits.every((h: any) => h.payload === undefined || h.payload === null)).toBe(true);

    // Fetch pages through everything with next_cursor, absent on the last page.
    const seen: string[] = [];
    let cursor: string | undefined;
    for (let page = 0; page < 10; page++) {
      const f = await g.call('Fetch', { collection: 'team_a.docs', limit: 3, ...(cursor ? { cursor } : {}) }, ADMIN);
      expect(f.err).toBeUndefined();
      seen.push(...(f.res.points ?? []).map((p: { id: string }) => p.id));
      cursor = f.res.next_cursor ?? undefined;
      if (!cursor) break;
    }
    expect(seen.sort()).toEqual(points.map((p) => p.id).sort());

    // Bulk with raw float32 bytes, as REST's vector_b64.
    const v = Float32Array.from([9, 8, 7, 6]);
    const bulk = await g.call('BulkUpsert', { collection: 'team_a.docs', points: [{ id: 'b1', vector_b64: Buffer.from(v.buffer) }] }, ADMIN);
    expect(bulk.res).toEqual({ upserted: 1 });
    expect((await g.call('GetPoint', { collection: 'team_a.docs', id: 'b1', with_vector: true }, ADMIN)).res.vector).toEqual([9, 8, 7, 6]);
    expectError(await g.call('BulkUpsert', { collection: 'team_a.docs', points: [{ id: 'b2', vector_b64: Buffer.from([1, 2, 3]) }] }, ADMIN), 'invalid_argument');

    // Hybrid, dense side only: RRF over one ranking, as REST.
    const hq = { vector: [2.2, 1, 1, -1], k: 2 };
    const hy = await g.call('HybridSearch', { collection: 'team_a.docs', ...hq, consistency: 'strong' }, ADMIN);
    const hr = await rest('POST', '/v1/collections/team_a.docs/query/hybrid', { ...hq, consistency: 'strong' });
    expect(hy.err).toBeUndefined();
    expect(hy.res.hits.map((h: any) => [h.id, h.score])).toEqual(hr.json.hits.map((h: any) => [h.id, h.score]));

    expect((await g.call('DeletePoint', { collection: 'team_a.docs', id: 'p0' }, ADMIN)).res).toEqual({ deleted: true });
    expect((await g.call('DeletePoint', { collection: 'team_a.docs', id: 'p0' }, ADMIN)).res ?? {}).toEqual({});

    const stats = await g.call('Stats', {}, ADMIN);
    expect(stats.res.per_collection.find((p: { name: string }) => p.name === 'team_a.docs')).toMatchObject({ count: 8 });
    const snap = await g.call('Snapshot', { name: 'snap1' }, ADMIN);
    expect(snap.res).toMatchObject({ name: 'snap1' });
    expectError(await g.call('Snapshot', { name: '../escape' }, ADMIN), 'invalid_argument');

    expect((await g.call('DeleteCollection', { collection: 'team_a.docs' }, ADMIN)).res).toEqual({ existed: true });
    expectError(await g.call('GetCollection', { collection: 'team_a.docs' }, ADMIN), 'not_found');
  });

  it('answers the text and multi-vector calls as REST does', async () => {
    // Each pair is the same request over both transports; the outcome (result or contract code) must agree.
    // Multi-vector collections: created (or refused, while the engine lacks them) alike on both transports.
    const mvRest = await rest('POST', '/v1/collections', { name: 'team_a.mv', dim: 2, metric: 'cosine', multivector: true });
    const mvGrpc = await g.call('CreateCollection', { name: 'team_a.mv2', dim: 2, metric: 'cosine', multivector: true }, ADMIN);
    if (mvRest.status === 201) expect(mvGrpc.res).toMatchObject({ multivector: true });
    else expectError(mvGrpc, mvRest.json.error.code);
    expect((await rest('POST', '/v1/collections', { name: 'team_a.plain', dim: 2, metric: 'cosine' })).status).toBe(201);
    const outcomes: string[] = [];
    const pairs: [string, object, string, string, object][] = [
      ['UpsertDocuments', { collection: 'team_a.mv', documents: [{ id: 'd1', vectors: [{ values: [1, 0] }, { values: [0, 1] }] }, { id: 'd2', vectors: [{ values: [1, 1] }] }] },
        'PUT', '/v1/collections/team_a.mv/documents', { documents: [{ id: 'd1', vectors: [[1, 0], [0, 1]] }, { id: 'd2', vectors: [[1, 1]] }] }],
      ['SearchMultiVector', { collection: 'team_a.mv', vectors: [{ values: [1, 0] }], k: 2, consistency: 'strong' },
        'POST', '/v1/collections/team_a.mv/query/multi', { vectors: [[1, 0]], k: 2, consistency: 'strong' }],
      ['DeleteDocument', { collection: 'team_a.mv', id: 'd2' }, 'DELETE', '/v1/collections/team_a.mv/documents/d2', {}],
      ['DeleteDocument', { collection: 'team_a.mv', id: 'd2' }, 'DELETE', '/v1/collections/team_a.mv/documents/d2', {}],
      ['UpsertText', { collection: 'team_a.plain', points: [{ id: 't', text: 'hello world' }] }, 'POST', '/v1/collections/team_a.plain/points:text', { points: [{ id: 't', text: 'hello world' }] }],
      ['SearchText', { collection: 'team_a.plain', text: 'hello' }, 'POST', '/v1/collections/team_a.plain/query/text', { text: 'hello' }],
      ['UpsertDocuments', { collection: 'team_a.plain', documents: [{ id: 'x', vectors: [{ values: [1, 0] }] }] }, 'PUT', '/v1/collections/team_a.plain/documents', { documents: [{ id: 'x', vectors: [[1, 0]] }] }],
    ];
    for (const [rpc, req, method, path, body] of pairs) {
      const gr = await g.call(rpc, req, ADMIN);
      const rr = await rest(method, path, method === 'DELETE' ? undefined : body);
      outcomes.push(`${rpc} ${rr.status < 300 ? 'ok' : rr.json.error.code}`);
      if (rr.status < 300) {
        expect(gr.err, `${rpc}: REST said ${rr.status}`).toBeUndefined();
        if (rr.json?.hits) expect(gr.res.hits.map((h: any) => [h.id, h.score])).toEqual(rr.json.hits.map((h: any) => [h.id, h.score]));
        if (typeof rr.json?.upserted === 'number') expect(gr.res.upserted).toBe(rr.json.upserted);
      } else {
        expectError(gr, rr.json.error.code);
      }
    }
    // A collection without an embedding provider refuses text on both transports.
    expect(outcomes.filter((o) => o.startsWith('UpsertText')).every((o) => !o.endsWith(' ok'))).toBe(true);
  });

  it('answers Count, SetPayload, DeletePoints and exist_ok as REST does', async () => {
    // The same writes on two collections of the same shape, one over each transport: the same answers
    // and the same stored points.
    const shape = { dim: 2, metric: 'l2', filterable: [{ path: 'g', field_type: 'keyword' }] };
    const made = await g.call('CreateCollection', { name: 'team_a.ops_g', ...shape, exist_ok: true }, ADMIN);
    expect(made.res).toMatchObject({ name: 'team_a.ops_g', dim: 2 });
    expect((await rest('POST', '/v1/collections', { name: 'team_a.ops_r', ...shape, exist_ok: true })).status).toBe(201);
    const again = await g.call('CreateCollection', { name: 'team_a.ops_g', ...shape, exist_ok: true }, ADMIN);
    expect(again.res).toMatchObject({ name: 'team_a.ops_g', dim: 2 });
    expect((await rest('POST', '/v1/collections', { name: 'team_a.ops_r', ...shape, exist_ok: true })).status).toBe(200);
    expectError(await g.call('CreateCollection', { name: 'team_a.ops_g', ...shape, dim: 3, exist_ok: true }, ADMIN), 'already_exists');
    const pts = [{ id: 'a', vector: [1, 0], payload: { g: 'x', n: 1 } }, { id: 'b', vector: [0, 1], payload: { g: 'y' } }, { id: 'c', vector: [1, 1], payload: { g: 'x' } }];
    await g.call('Upsert', { collection: 'team_a.ops_g', points: pts.map((p) => ({ ...p, payload: toStruct(p.payload) })) }, ADMIN);
    await rest('PUT', '/v1/collections/team_a.ops_r/points', { points: pts });
    const x = { eq: { field: 'g', value: 'x' } };
    const pairs: [string, object, string, object][] = [
      ['Count', {}, 'points:count', {}],
      ['Count', { filter: toStruct(x) }, 'points:count', { filter: x }],
      ['SetPayload', { points: [{ id: 'a', payload: toStruct({ g: 'y' }) }] }, 'points:payload', { points: [{ id: 'a', payload: { g: 'y' } }] }],
      ['SetPayload', { points: [{ id: 'b', payload: toStruct({ z: true }) }], mode: 'replace' }, 'points:payload', { points: [{ id: 'b', payload: { z: true } }], mode: 'replace' }],
      ['SetPayload', { points: [{ id: 'a', payload: toStruct({}) }, { id: 'ghost', payload: toStruct({}) }] }, 'points:payload', { points: [{ id: 'a', payload: {} }, { id: 'ghost', payload: {} }] }],
      ['SetPayload', { points: [{ id: 'a', payload: toStruct({}) }], mode: 'upsert' }, 'points:payload', { points: [{ id: 'a', payload: {} }], mode: 'upsert' }],
      ['Count', { filter: toStruct({ eq: { field: 'n', value: 1 } }) }, 'points:count', { filter: { eq: { field: 'n', value: 1 } } }],
      ['DeletePoints', { filter: toStruct(x) }, 'points:delete', { filter: x }],
      ['DeletePoints', { ids: ['a', 'nope'] }, 'points:delete', { ids: ['a', 'nope'] }],
      ['DeletePoints', { ids: ['b'], filter: toStruct(x) }, 'points:delete', { ids: ['b'], filter: x }],
      ['DeletePoints', { ids: Array.from({ length: 21 }, (_, i) => `i${i}`) }, 'points:delete', { ids: Array.from({ length: 21 }, (_, i) => `i${i}`) }],
      ['Count', {}, 'points:count', {}],
    ];
    const outcomes: string[] = [];
    for (const [rpc, req, action, body] of pairs) {
      const gr = await g.call(rpc, { collection: 'team_a.ops_g', ...req }, ADMIN);
      const rr = await rest('POST', `/v1/collections/team_a.ops_r/${action}`, body);
      outcomes.push(`${rpc} ${rr.status < 300 ? JSON.stringify(rr.json) : rr.json.error.code}`);
      if (rr.status < 300) {
        expect(gr.err, `${rpc}: REST said ${rr.status}`).toBeUndefined();
        // proto3 does not send zeros.
        const key = Object.keys(rr.json)[0];
        expect(gr.res[key] ?? 0, `${rpc} ${JSON.stringify(req)}`).toBe(rr.json[key]);
      } else {
        expectError(gr, rr.json.error.code);
      }
    }
    expect(outcomes).toEqual([
      'Count {"count":3}', 'Count {"count":2}', 'SetPayload {"updated":1}', 'SetPayload {"updated":1}', 'SetPayload not_found',
      'SetPayload invalid_argument', 'Count invalid_argument', 'DeletePoints {"deleted":1}', 'DeletePoints {"deleted":1}',
      'DeletePoints invalid_argument', 'DeletePoints limit_exceeded', 'Count {"count":1}',
    ]);
    const left = await g.call('Fetch', { collection: 'team_a.ops_g' }, ADMIN);
    expect(left.res.points.map((p: any) => [p.id, fromStruct(p.payload)])).toEqual([['b', { z: true }]]);
    expect((await rest('POST', '/v1/collections/team_a.ops_r/points:fetch', {})).json.points).toEqual([{ id: 'b', payload: { z: true } }]);
  });

  it('applies the same cost limits as REST, naming the variable', async () => {
    await g.call('CreateCollection', { name: 'team_a.lim', dim: 4, metric: 'dot', filterable: [{ path: 'n', field_type: 'numeric' }] }, ADMIN);
    const c = { collection: 'team_a.lim' };
    expectError(await g.call('Search', { ...c, ...vec([1, 0, 0, 0]), k: 51 }, ADMIN), 'limit_exceeded', 'SVC_MAX_K');
    expectError(await g.call('Search', { ...c, ...vec([1, 0, 0, 0]), ef_search: 201 }, ADMIN), 'limit_exceeded', 'SVC_MAX_EF_SEARCH');
    expectError(await g.call('Fetch', { ...c, limit: 101 }, ADMIN), 'limit_exceeded', 'SVC_MAX_FETCH_LIMIT');
    const many = Array.from({ length: 21 }, (_, i) => ({ id: `m${i}`, vector: [1, 0, 0, 0] }));
    expectError(await g.call('Upsert', { ...c, points: many }, ADMIN), 'limit_exceeded', 'SVC_MAX_BATCH_SIZE');
    expectError(await g.call('HybridSearch', { ...c, sparse: { indices: [1, 2, 3, 4, 5, 6, 7, 8, 9], values: [1, 1, 1, 1, 1, 1, 1, 1, 1] } }, ADMIN), 'limit_exceeded', 'SVC_MAX_SPARSE_TERMS');
    expectError(await g.call('CreateCollection', { name: 'team_a.wide', dim: 65, metric: 'l2' }, ADMIN), 'limit_exceeded', 'SVC_MAX_VECTOR_DIM');
    const big = { ...c, points: [{ id: 'big', vector: [1, 0, 0, 0], payload: toStruct({ blob: 'x'.repeat(300_000) }) }] };
    expectError(await g.call('Upsert', big, ADMIN), 'limit_exceeded', 'SVC_MAX_REQUEST_BODY_BYTES');
    // Bad values are refused as REST refuses them.
    expectError(await g.call('Search', { ...c, ...vec([1, 0]) }, ADMIN), 'invalid_argument');
    expectError(await g.call('CreateCollection', { name: 'bad/name', dim: 2, metric: 'l2' }, ADMIN), 'invalid_argument');
    expectError(await g.call('CreateCollection', { name: 'team_a.m', dim: 2, metric: 'hamming' }, ADMIN), 'invalid_argument', 'metric');
    expectError(await g.call('Search', { ...c, ...vec([1, 0, 0, 0]), filter: toStruct({ eq: { field: 'undeclared', value: 1 } }) }, ADMIN), 'invalid_argument');
    expectError(await g.call('Search', { collection: 'team_a.missing', ...vec([1, 0, 0, 0]) }, ADMIN), 'not_found');
    // The same requests over REST give the same codes.
    const rk = await rest('POST', '/v1/collections/team_a.lim/query', { vector: [1, 0, 0, 0], k: 51 });
    expect([rk.status, rk.json.error.code]).toEqual([400, 'limit_exceeded']);
  });

  it('asks for a key, and refuses roles and scopes as CONTRACT.md section 3 says, on every RPC', async () => {
    await g.call('CreateCollection', { name: 'team_a.auth', dim: 2, metric: 'l2' }, ADMIN);
    await g.call('CreateCollection', { name: 'team_b.auth', dim: 2, metric: 'l2' }, ADMIN);
    type Need = 'read' | 'write' | 'admin' | 'admin*';
    // Each RPC, the role it needs (admin* = admin scoped to every collection), and a request naming `col`.
    const rpcs: [string, Need, (col: string) => object][] = [
      ['ListCollections', 'read', () => ({})],
      ['GetCollection', 'read', (col) => ({ collection: col })],
      ['GetPoint', 'read', (col) => ({ collection: col, id: 'p' })],
      ['Fetch', 'read', (col) => ({ collection: col })],
      ['Search', 'read', (col) => ({ collection: col, vector: [1, 0] })],
      ['HybridSearch', 'read', (col) => ({ collection: col, vector: [1, 0] })],
      ['SearchText', 'read', (col) => ({ collection: col, text: 'x' })],
      ['SearchMultiVector', 'read', (col) => ({ collection: col, vectors: [{ values: [1, 0] }] })],
      ['Count', 'read', (col) => ({ collection: col })],
      ['Stats', 'read', () => ({})],
      ['Upsert', 'write', (col) => ({ collection: col, points: [{ id: 'p', vector: [1, 0] }] })],
      ['BulkUpsert', 'write', (col) => ({ collection: col, points: [{ id: 'q', vector: [0, 1] }] })],
      ['DeletePoint', 'write', (col) => ({ collection: col, id: 'q' })],
      ['UpsertText', 'write', (col) => ({ collection: col, points: [{ id: 't', text: 'x' }] })],
      ['UpsertDocuments', 'write', (col) => ({ collection: col, documents: [{ id: 'd', vectors: [{ values: [1, 0] }] }] })],
      ['DeleteDocument', 'write', (col) => ({ collection: col, id: 'd' })],
      ['SetPayload', 'write', (col) => ({ collection: col, points: [] })],
      ['DeletePoints', 'write', (col) => ({ collection: col, ids: ['nope'] })],
      ['CreateCollection', 'admin', (col) => ({ name: `${col}.new`, dim: 2, metric: 'l2' })],
      ['Snapshot', 'admin*', () => ({ name: 'authz-snap' })],
      ['DeleteCollection', 'admin', (col) => ({ collection: `${col}.new` })],
    ];
    const callers: [string, string | undefined, Need | null, string][] = [
      ['no key', undefined, null, '*'], ['unknown key', 'not-a-key', null, '*'],
      ['read', KEYS.reader, 'read', 'team_a.*'], ['write', KEYS.writer, 'write', 'team_a.*'],
      ['admin scoped', KEYS.teamAdmin, 'admin', 'team_a.*'], ['admin', ADMIN, 'admin*', '*'],
    ];
    const rank: Record<Need, number> = { read: 1, write: 2, admin: 3, 'admin*': 4 };
    const failures: string[] = [];
    for (const [who, key, role, scope] of callers) {
      for (const col of ['team_a.auth', 'team_b.auth']) {
        for (const [rpc, need, req] of rpcs) {
          const collectionBound = !['ListCollections', 'Stats', 'Snapshot'].includes(rpc);
          const inScope = scope === '*' || !collectionBound || col.startsWith('team_a.');
          const want = role === null ? 'unauthenticated'
            : rank[role] < rank[need] || !inScope ? 'permission_denied' : 'allowed';
          const r = await g.call(rpc, req(col), key);
          const got = r.err === undefined ? 'allowed'
            : r.code === 'unauthenticated' || r.code === 'permission_denied' ? r.code : 'allowed';
          if (got !== want) failures.push(`${who} ${rpc} ${col}: want ${want}, got ${r.code ?? 'ok'} ${r.err?.details ?? ''}`);
          if (r.err && r.code !== undefined) expect(r.err.code, `${who} ${rpc}`).toBe(GRPC_OF[r.code]);
        }
      }
    }
    expect(failures).toEqual([]);
    // Listing hides what is out of scope.
    const listed = await g.call('ListCollections', {}, KEYS.reader);
    expect(listed.res.collections.map((c: { name: string }) => c.name)).not.toContain('team_b.auth');
    // Replicate: admin over every collection only.
    const anon = await g.replicate();
    expect([anon.err?.code, anon.err?.metadata.get('svc-error-code')[0]]).toEqual([status.UNAUTHENTICATED, 'unauthenticated']);
    for (const key of [KEYS.reader, KEYS.writer, KEYS.teamAdmin]) expect((await g.replicate(key)).err?.code).toBe(status.PERMISSION_DENIED);
    const rep = await g.replicate(ADMIN, { until: (events) => events.length >= 1 });
    expect(rep.err).toBeUndefined();
  });
});


describe('gRPC end to end over TLS and mTLS', () => {
  const dir = tempDir('svc-grpc-tls-');
  const f = (n: string) => readFileSync(join(dir, n));
  const target = (s: Server) => `127.0.0.1:${s.grpcPort}`;
  const nameOverride = { 'grpc.ssl_target_name_override': 'localhost' };
  let tls: Server;
  let mtls: Server;

  beforeAll(async () => {
    makeCerts(dir);
    const tlsEnv = { SVC_TLS_CERT: join(dir, 'server.pem'), SVC_TLS_KEY: join(dir, 'server.key') };
    // REST shares the TLS settings; its readiness is probed with the CA (and the client certificate under mTLS).
    const probe = (extra: https.RequestOptions) => (b: string) => new Promise<boolean>((resolve) => {
      const req = https.request(`${b}/readyz`, { ca: f('ca.pem'), ...extra }, (r) => { r.resume(); resolve(r.statusCode === 200); });
      req.on('error', () => resolve(false));
      req.end();
    });
    tls = await start(tlsEnv, probe({}));
    mtls = await start({ ...tlsEnv, SVC_TLS_CLIENT_CA: join(dir, 'ca.pem') }, probe({ cert: f('client.pem'), key: f('client.key') }));
  });
  afterAll(async () => {
    await tls?.stop();
    await mtls?.stop();
  });

  const outcome = async (address: string, creds: ReturnType<typeof credentials.createSsl>, key: string | null = ADMIN): Promise<string> => {
    const c = new SvcGrpc(address, creds, nameOverride);
    const r = await c.call('ListCollections', {}, key ?? undefined);
    c.close();
    return r.err ? `${status[r.err.code]}` : 'ok';
  };

  it('serves clients that trust the CA, and no plaintext client', async () => {
    expect(await outcome(target(tls), credentials.createSsl(f('ca.pem')))).toBe('ok');
    expect(await outcome(target(tls), credentials.createInsecure())).toBe('UNAVAILABLE');
    expect(await outcome(target(tls), credentials.createSsl(f('other-ca.pem')))).toBe('UNAVAILABLE');
  });

  it('with a client CA, serves only clients whose certificate chains to it, and still asks for the key', async () => {
    expect(await outcome(target(mtls), credentials.createSsl(f('ca.pem'), f('client.key'), f('client.pem')))).toBe('ok');
    expect(await outcome(target(mtls), credentials.createSsl(f('ca.pem')))).toBe('UNAVAILABLE');
    expect(await outcome(target(mtls), credentials.createSsl(f('ca.pem'), f('stranger.key'), f('stranger.pem')))).toBe('UNAVAILABLE');
    expect(await outcome(target(mtls), credentials.createSsl(f('ca.pem'), f('client.key'), f('client.pem')), null)).toBe('UNAUTHENTICATED');
  });
});
