/**
 * The router end to end (issue 16): three shard nodes, a router in front of them (`svc serve` with
 * SVC_CLUSTER_SHARDS and SVC_CLUSTER_SHARD_KEY) and a separate single node fed the same writes as the
 * reference. Through the router every write answers as the reference does, every query kind (dense,
 * filtered, hnsw, hybrid, text with and without rerank, multi-vector), every fetch page, count, get and
 * error equals the reference's answer, and the points lie on all three shards. The router's keys are
 * its own; gRPC answers as REST; a shard killed with -9 makes what needs it fail with 503 `unavailable`
 * naming it. Imports no project code.
 */
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { call, eventually, KEY, startNode } from './cluster-harness.js';
import { SvcGrpc, fromStruct, toStruct } from './grpc-client.js';
import { seededRandom } from './load-harness.js';
import { api, MASTER, serve, tempDir, type Server } from './harness.js';

const SHARD_KEY = 'router-to-shards-key';
const ROUTER_KEY = 'router-admin-key';
const running = new Set<Server>();
afterAll(async () => {
  await Promise.all([...running].map((s) => s.stop('SIGKILL')));
});

async function started(p: Promise<Server>): Promise<Server> {
  const s = await p;
  running.add(s);
  return s;
}

/** Keys of the router and the reference besides their admin key: a reader and a writer, scoped to every collection. */
const TOML = [
  '[embedding.t]', 'provider = "fake"', 'model = "hash"', 'dim = 8', '',
  '[rerank.t]', 'provider = "fake"', 'model = "overlap"', '',
  ...['read', 'write'].flatMap((role) => ['[[api_keys]]', `name = "${role}er"`, `role = "${role}"`, 'collections = ["*"]', `key = "${role}-key"`, '']),
].join('\n');

const rand = seededRandom(16);
const int = (n: number) => Math.floor(rand() * n);
/** Coarse values, so equal scores (and the tie order by id) come up often. */
const vec = (dim: number) => Array.from({ length: dim }, () => int(5) - 2 || 1);
const WORDS = ['wing', 'flutter', 'boundary', 'layer', 'shock', 'wave', 'heat', 'transfer', 'nozzle', 'plate', 'flow', 'jet'];
const sentence = () => Array.from({ length: 2 + int(6) }, () => WORDS[int(WORDS.length)]).join(' ');
const b64 = (v: number[]) => Buffer.from(new Float32Array(v).buffer).toString('base64');

describe('the router', () => {
  let shards: Server[];
  let reference: Server;
  let router: Server;
  let viaRouter: ReturnType<typeof api>;
  let viaReference: ReturnType<typeof api>;

  /** The same request to the router and to the reference: the same status and body, returned. */
  async function same(method: string, path: string, body?: unknown): Promise<any> {
    const [r, want] = [await viaRouter(method, path, body), await viaReference(method, path, body)];
    expect({ status: r.status, json: r.json }, `${method} ${path} ${JSON.stringify(body)?.slice(0, 200)}`).toEqual({ status: want.status, json: want.json });
    return r.json;
  }

  beforeAll(async () => {
    const dir = tempDir('svc-router-e2e-');
    const toml = join(dir, 'svc.toml');
    writeFileSync(toml, TOML);
    [reference, ...shards] = await Promise.all([
      started(startNode(join(dir, 'reference'), { SVC_CONFIG: toml })),
      ...[0, 1, 2].map((i) => started(startNode(join(dir, `shard-${i}`), { SVC_API_KEYS: `${KEY},${SHARD_KEY}` }))),
    ]);
    router = await started(serve({
      SVC_API_KEYS: ROUTER_KEY, SVC_ENCRYPTION_KEY: MASTER, SVC_CONFIG: toml, SVC_CLUSTER_SHARD_KEY: SHARD_KEY,
      SVC_CLUSTER_SHARDS: `[${shards.map((s) => s.base).join(',')}]`, SVC_CLUSTER_TIMEOUT_SECS: '5',
    }));
    viaRouter = api(router.base, ROUTER_KEY);
    viaReference = call(reference);
  }, 120_000);

  it('takes every kind of write as one node does, and spreads the points over all three shards', async () => {
    const filterable = [{ path: 'tag', field_type: 'keyword' }, { path: 'n', field_type: 'numeric' }];
    await same('POST', '/v1/collections', { name: 'c', dim: 4, metric: 'l2', index: 'flat', filterable });
    await same('POST', '/v1/collections', { name: 'h', dim: 4, metric: 'cosine', index: 'hnsw', index_params: { m: 8, ef_construction: 100, ef_search: 400 }, filterable });
    await same('POST', '/v1/collections', { name: 't', dim: 8, metric: 'cosine', index: 'flat', filterable });
    await same('POST', '/v1/collections', { name: 'm', dim: 3, metric: 'dot', multivector: true });
    // Again: 409 without exist_ok, 200 with it, as on one node.
    await same('POST', '/v1/collections', { name: 'c', dim: 4, metric: 'l2', index: 'flat', filterable });
    await same('POST', '/v1/collections', { name: 'c', dim: 4, metric: 'l2', index: 'flat', filterable, exist_ok: true });

    const points = Array.from({ length: 240 }, (_, i) => ({
      id: i % 40 === 7 ? `odd/${i} ü` : `p${i}`, vector: vec(4),
      payload: { tag: ['a', 'b', 'c'][int(3)], n: int(10), __svc_sparse__: { indices: [int(6), 6 + int(6)], values: [1 + int(3), 1] } },
    }));
    for (let b = 0; b < 120; b += 60) await same('PUT', '/v1/collections/c/points', { points: points.slice(b, b + 60) });
    await same('POST', '/v1/collections/c/points:bulk', { points: points.slice(120).map((p, i) => (i % 2 ? p : { id: p.id, vector_b64: b64(p.vector), payload: p.payload })) });
    await same('POST', '/v1/collections/h/points:bulk', { points: points.map((p) => ({ ...p, vector: vec(4) })) });
    await same('POST', '/v1/collections/t/points:text', { points: Array.from({ length: 60 }, (_, i) => ({ id: `t${i}`, text: sentence(), payload: { tag: i % 2 ? 'a' : 'b', n: i % 10 } })) });
    await same('PUT', '/v1/collections/m/documents', { documents: Array.from({ length: 40 }, (_, i) => ({ id: `m${i}`, vectors: Array.from({ length: 1 + (i % 3) }, () => vec(3)), payload: { i } })) });

    // Updates, deletes, payload changes, each to the owner of its id.
    await same('PUT', '/v1/collections/c/points', { points: [{ id: 'p3', vector: [2, 2, 2, 2], payload: { tag: 'c', n: 9 } }] });
    await same('DELETE', '/v1/collections/c/points/p4');
    await same('DELETE', '/v1/collections/c/points/never-there');
    await same('POST', '/v1/collections/c/points:delete', { ids: ['p5', 'p6', 'nope'] });
    await same('POST', '/v1/collections/h/points:delete', { filter: { eq: { field: 'n', value: 7 } } });
    await same('POST', '/v1/collections/c/points:payload', { points: [{ id: 'p8', payload: { n: 3 } }, { id: 'p9', payload: { tag: 'a' } }], mode: 'merge' });
    await same('POST', '/v1/collections/c/points:payload', { points: [{ id: 'p10', payload: { tag: 'b' } }, { id: 'missing', payload: {} }] });
    await same('DELETE', '/v1/collections/m/documents/m3');
    // A batch refused whole, before any shard stores any of it.
    await same('PUT', '/v1/collections/c/points', { points: [{ id: 'new1', vector: [1, 1, 1, 1] }, { id: 'new2', vector: [1, 1] }] });
    await same('GET', '/v1/collections/c/points/new1');

    for (const name of ['c', 'h', 't', 'm']) {
      const counts = await Promise.all(shards.map(async (s) => (await call(s)('POST', `/v1/collections/${name}/points:count`, {})).json.count as number));
      const total = (await viaReference('POST', `/v1/collections/${name}/points:count`, {})).json.count;
      expect(counts.reduce((a, b) => a + b, 0), name).toBe(total);
      expect(Math.min(...counts), `${name} on every shard: ${counts}`).toBeGreaterThan(0);
    }
  });

  it('answers every query kind as the single node holding everything', async () => {
    /** The same answer, and not an empty one (so the comparison says something). */
    const hits = async (path: string, body: unknown) => expect((await same('POST', path, body)).hits.length, path).toBeGreaterThan(0);
    const filters = [undefined, { eq: { field: 'tag', value: 'a' } }, { and: [{ gte: { field: 'n', value: 3 } }, { ne: { field: 'tag', value: 'c' } }] }];
    for (let q = 0; q < 6; q++) {
      const filter = filters[q % filters.length];
      const k = [1, 5, 10, 37][q % 4];
      const vector = vec(4);
      await hits('/v1/collections/c/query', { vector, k, filter, consistency: 'strong' });
      await hits('/v1/collections/h/query', { vector, k, filter, ef_search: 400, consistency: 'strong' });
      await hits('/v1/collections/c/query/hybrid', { vector, sparse_indices: [int(6), 6 + int(6)], sparse_values: [1, 2], k, filter, consistency: 'strong' });
      await hits('/v1/collections/c/query/hybrid', { sparse_indices: [int(6)], sparse_values: [1], k, rrf_k0: 0, consistency: 'strong' });
      await hits('/v1/collections/t/query/hybrid', { vector: vec(8), query_text: sentence(), k, filter, consistency: 'strong' });
      await hits('/v1/collections/t/query/hybrid', { query_text: sentence(), k, consistency: 'strong' });
      await hits('/v1/collections/t/query/text', { text: sentence(), k, filter, consistency: 'strong' });
      await hits('/v1/collections/t/query/text', { text: sentence(), k, rerank: true, consistency: 'strong' });
      await hits('/v1/collections/m/query/multi', { vectors: [vec(3), vec(3)], k, consistency: 'strong' });
      await same('POST', '/v1/collections/c/points:count', filter === undefined ? {} : { filter });
    }
    await same('POST', '/v1/collections/c/query', { vector: [1, 0, 0, 1], k: 3, with_vector: true, with_payload: false, consistency: 'strong' });
    await same('GET', `/v1/collections/c/points/${encodeURIComponent('odd/7 ü')}?with_vector=true`);
    await same('GET', '/v1/collections/c/points/p8');
    await same('GET', '/v1/collections/c/points/p4');
    await same('GET', '/v1/collections/c');
    await same('GET', '/v1/collections');
    // Errors of the request read as one node's.
    await same('POST', '/v1/collections/nope/query', { vector: [1, 0, 0, 1] });
    await same('POST', '/v1/collections/c/query', { vector: [1, 0] });
    await same('POST', '/v1/collections/c/query', { vector: [1, 0, 0, 1], filter: { eq: { field: 'undeclared', value: 1 } } });
    await same('POST', '/v1/collections/c/query', { vector: [1, 0, 0, 1], k: 1_000_000 });
    await same('POST', '/v1/collections/m/query', { vector: [1, 0, 0] });

    const stats = (await viaRouter('GET', '/v1/stats')).json;
    const want = (await viaReference('GET', '/v1/stats')).json;
    expect([stats.collections, stats.total_points]).toEqual([want.collections, want.total_points]);
    expect(stats.per_collection.map((c: any) => [c.name, c.count])).toEqual(want.per_collection.map((c: any) => [c.name, c.count]));
  });

  it('pages a fetch through every shard with one cursor, page for page as the single node', async () => {
    for (const [limit, body] of [[7, { filter: { eq: { field: 'tag', value: 'a' } } }], [50, { with_vector: true }], [1000, {}]] as const) {
      let cursor: string | null = null;
      let pages = 0;
      do {
        const page: { points: unknown[]; next_cursor: string | null } = await same('POST', '/v1/collections/c/points:fetch', { ...body, limit, cursor });
        cursor = page.next_cursor;
        pages++;
      } while (cursor !== null);
      expect(pages).toBeGreaterThan(limit === 1000 ? 0 : 2);
    }
  });

  it('answers gRPC as REST', async () => {
    const g = new SvcGrpc(`127.0.0.1:${router.grpcPort}`);
    try {
      for (const filter of [undefined, { eq: { field: 'tag', value: 'b' } }]) {
        const query = { vector: [1, -1, 2, 1], k: 12, consistency: 'strong' };
        const s = await g.call('Search', { collection: 'c', ...query, ...(filter ? { filter: toStruct(filter) } : {}) }, ROUTER_KEY);
        expect(s.err).toBeUndefined();
        const r = await viaRouter('POST', '/v1/collections/c/query', { ...query, filter });
        expect(r.json.hits.length).toBe(12);
        // proto3 does not send a 0 (rank 0, an l2 distance of 0)
        expect(s.res.hits.map((h: any) => [h.id, h.rank ?? 0, h.score ?? 0, fromStruct(h.payload)])).toEqual(r.json.hits.map((h: any) => [h.id, h.rank, h.score, h.payload]));
      }
      const missing = await g.call('Search', { collection: 'nope', vector: [1, 0, 0, 1] }, ROUTER_KEY);
      expect(missing.code).toBe('not_found');
    } finally {
      g.close();
    }
  });

  it('checks the caller against its own keys and scopes, and shows its map to an admin', async () => {
    const unknown = await api(router.base, 'who-is-this')('POST', '/v1/collections/c/query', { vector: [1, 0, 0, 1] });
    expect([unknown.status, unknown.json.error.code, unknown.headers.get('www-authenticate')]).toEqual([401, 'unauthenticated', 'Bearer']);
    // The shards' key is not one of the router's.
    expect((await api(router.base, SHARD_KEY)('GET', '/v1/collections')).status).toBe(401);
    const reader = api(router.base, 'read-key');
    expect((await reader('POST', '/v1/collections/c/query', { vector: [1, 0, 0, 1], k: 2 })).status).toBe(200);
    const write = await reader('PUT', '/v1/collections/c/points', { points: [{ id: 'r1', vector: [1, 1, 1, 1] }] });
    expect([write.status, write.json.error.code]).toEqual([403, 'permission_denied']);
    const writer = api(router.base, 'write-key');
    expect((await writer('POST', '/v1/collections', { name: 'w', dim: 2 })).status).toBe(403);
    expect((await viaRouter('GET', '/v1/collections/c/points/r1')).status).toBe(404);

    const map = await viaRouter('GET', '/cluster/map');
    expect([map.status, map.json]).toEqual([200, {
      version: 0, standby: [], shards: shards.map((s, id) => ({ id, url: s.base, replicas: [], state: 'active', points: null })),
    }]);
    expect((await reader('GET', '/cluster/map')).status).toBe(403);
    const metrics = await (await fetch(`${router.base}/metrics`)).text();
    expect(metrics).toMatch(/^svc_router_shard_calls_total\{shard="2",outcome="ok"\} [1-9]\d*$/m);
  });

  it('with SVC_COORDINATOR_URL routes by the coordinator\'s map, through a drain (e2e/rebalance.test.ts has the moves under load)', async () => {
    const coordinator = await started(serve({
      SVC_COORDINATOR: 'true', SVC_API_KEYS: SHARD_KEY, SVC_ENCRYPTION_KEY: MASTER, SVC_CLUSTER_SHARD_KEY: SHARD_KEY,
      SVC_CLUSTER_SHARDS: `[${shards.map((s) => s.base).join(',')}]`, SVC_AUTOSCALE_INTERVAL_SECS: '0.5', SVC_CLUSTER_MAP_REFRESH_SECS: '0.1',
    }));
    const admin = api(coordinator.base, SHARD_KEY);
    // No list of its own: ready once the coordinator's map came and its shards answer.
    const second = await started(serve({
      SVC_API_KEYS: ROUTER_KEY, SVC_ENCRYPTION_KEY: MASTER, SVC_CLUSTER_SHARD_KEY: SHARD_KEY,
      SVC_COORDINATOR_URL: coordinator.base, SVC_CLUSTER_MAP_REFRESH_SECS: '0.1',
    }));
    const via = api(second.base, ROUTER_KEY);
    const mapOf = async () => (await via('GET', '/cluster/map')).json;
    expect(await mapOf()).toMatchObject({ version: 1, shards: shards.map((s, id) => ({ id, url: s.base, state: 'active' })) });
    const query = { vector: [2, -1, 1, 1], k: 20, filter: { eq: { field: 'tag', value: 'a' } } };
    const want = (await viaRouter('POST', '/v1/collections/c/query', query)).json;
    expect((await via('POST', '/v1/collections/c/query', query)).json).toEqual(want);

    expect((await admin('POST', '/cluster/shards/2/drain')).status).toBe(202);
    // Version 2: the drain; 3: its move ended, shard 2 `moved` and no longer routed.
    await eventually('the router takes the drained map', async () => ((await mapOf()).version === 3 ? true : `version ${(await mapOf()).version}`), 60_000);
    expect((await mapOf()).shards.map((s: any) => [s.state, s.moved ?? false])).toEqual([['active', false], ['active', false], ['draining', true]]);
    expect((await call(shards[2])('POST', '/v1/collections/c/points:count', {})).json).toEqual({ count: 0 });
    // The same answers from the two shards left, through this router and the first (whose own list still names shard 2).
    expect((await via('POST', '/v1/collections/c/query', query)).json).toEqual(want);
    expect((await viaRouter('POST', '/v1/collections/c/query', query)).json).toEqual(want);
    expect((await via('POST', '/v1/collections/c/points:count', {})).json).toEqual((await viaReference('POST', '/v1/collections/c/points:count', {})).json);
    const metrics = await (await fetch(`${second.base}/metrics`)).text();
    expect(metrics).toMatch(/^svc_cluster_map_version 3$/m);
    expect(metrics).toMatch(/^svc_router_shards 2$/m);
  });

  it('fails with 503 unavailable naming a shard killed with -9, for a read and for a write that touches it', async () => {
    const dead = shards[1];
    dead.child.kill('SIGKILL');
    await dead.exited;
    running.delete(dead);
    const named = `shard 1 (${dead.base})`;
    const search = await viaRouter('POST', '/v1/collections/c/query', { vector: [1, 0, 0, 1], k: 5 });
    expect([search.status, search.json.error.code]).toEqual([503, 'unavailable']);
    expect(search.json.error.message).toContain(named);
    const batch = Array.from({ length: 30 }, (_, i) => ({ id: `late${i}`, vector: [i, 1, 1, 1] }));
    const write = await viaRouter('PUT', '/v1/collections/c/points', { points: batch });
    expect([write.status, write.json.error.code]).toEqual([503, 'unavailable']);
    expect(write.json.error.message).toContain(named);
    const text = await viaRouter('POST', '/v1/collections/t/query/text', { text: 'wing flutter', k: 3 });
    expect([text.status, text.json.error.code]).toEqual([503, 'unavailable']);
    // A point the live shards own is still readable one by one.
    const owned = await Promise.all(['p0', 'p1', 'p2', 'p11', 'p12'].map((id) => viaRouter('GET', `/v1/collections/c/points/${id}`)));
    expect(owned.some((r) => r.status === 200)).toBe(true);
    for (const r of owned) expect([200, 503]).toContain(r.status);
  });
});
