import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { connect, type Socket } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { credentials, Metadata, type ServiceError } from '@grpc/grpc-js';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { auditMacKey, verifyAuditChain } from '../../core/service/audit.js';
import { SvcClient } from '../../proto/gen/svc.js';
import { startServer, type RunningServer } from '../cli/serve.js';
import { loadConfig } from '../config.js';
import { createLogs } from '../log.js';
import { probeReusePort } from '../reuse-port.js';
import { httpLoopsFor } from './loops.js';
import { loopRequests, type LoopAnswer } from '../testing/loop-requests.js';

/**
 * The multi-loop server (SVC_HTTP_LOOPS, issue 20). On a runtime that shares a port (Node 24 in
 * `npm run test:node24`) a real server with two request loops: every route answers the same on each
 * loop, the rate limit and the audit chain are the process's, /metrics adds the loops up, a loop that
 * dies is replaced, and shutdown lets requests in flight on every loop finish. On Node 20 (`npm test`)
 * more than one loop is refused with the reason, and auto stays at one.
 */
const support = await probeReusePort();
const MASTER = 'c3'.repeat(32);
const KEY = 'loops-admin-key';

function config(dir: string, extra: Record<string, string> = {}) {
  return loadConfig({
    SVC_DATA_DIR: join(dir, 'data'), SVC_REST_ADDR: '127.0.0.1:0', SVC_GRPC_ADDR: '127.0.0.1:0', SVC_ENCRYPTION_KEY: MASTER,
    SVC_API_KEYS: KEY, RUST_LOG: 'error', ...extra,
  }, { defaultFile: null, cwd: dir });
}

const logs = createLogs('error');

describe('SVC_HTTP_LOOPS on a runtime that cannot share a port', () => {
  it('auto is one loop with the reason; an explicit count above one is refused', () => {
    const no = { ok: false as const, reason: 'Node.js v20.0.0 on linux: a second listener with reusePort on the same port failed (EADDRINUSE)' };
    expect(httpLoopsFor(null, 16, no)).toEqual({ count: 1, why: no.reason });
    expect(() => httpLoopsFor(4, 16, no)).toThrow(/SVC_HTTP_LOOPS.*4 loops need listeners that share a port.*EADDRINUSE.*Fix: Node.js 22.12/);
    expect(httpLoopsFor(1, 16, no)).toEqual({ count: 1, why: null });
    expect(httpLoopsFor(null, 1, { ok: true })).toMatchObject({ count: 1, why: expect.stringMatching(/^1 core:/) as string });
    expect(httpLoopsFor(null, 2, { ok: true })).toMatchObject({ count: 1, why: expect.stringMatching(/^2 cores:/) as string });
    expect(httpLoopsFor(null, 16, { ok: true })).toEqual({ count: 4, why: null });
    expect(httpLoopsFor(null, 64, { ok: true })).toEqual({ count: 16, why: null });
    expect(httpLoopsFor(3, 2, { ok: true })).toEqual({ count: 3, why: null });
  });

  it.runIf(!support.ok)(`a server asked for two loops does not start on Node ${process.versions.node}`, async () => {
    const dir = mkdtempSync(join(tmpdir(), 'svc-loops-'));
    try {
      await expect(startServer(config(dir, { SVC_HTTP_LOOPS: '2' }), logs)).rejects.toThrow(/SVC_HTTP_LOOPS/);
      const one = await startServer(config(dir), logs);
      expect(one.loops).toBeNull();
      await one.close();
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });
});

const { fresh, onEveryLoop } = loopRequests(KEY);
type Answer = LoopAnswer;

function grpcCall<Res>(client: SvcClient, method: string, req: unknown): Promise<{ res?: Res; err?: ServiceError }> {
  const md = new Metadata();
  md.set('authorization', `Bearer ${KEY}`);
  return new Promise((resolve) => {
    (client as unknown as Record<string, (r: unknown, m: Metadata, cb: (e: ServiceError | null, r: Res) => void) => void>)[method](req, md, (err, res) => resolve(err ? { err } : { res }));
  });
}

describe.runIf(support.ok)(`two request loops on Node ${process.versions.node}`, () => {
  let dir: string;
  let server: RunningServer;
  let base: string;
  const LOOPS = 2;

  beforeAll(async () => {
    dir = mkdtempSync(join(tmpdir(), 'svc-loops-'));
    // A provider for text queries (the fake one: a hash of the text, the same in every thread).
    writeFileSync(join(dir, 'svc.toml'), ['[embedding.txt]', 'provider = "fake"', 'model = "hash"', 'dim = 8', '', '[rerank.txt]', 'provider = "fake"', 'model = "r"', ''].join('\n'));
    server = await startServer(config(dir, {
      SVC_CONFIG: join(dir, 'svc.toml'),
      SVC_HTTP_LOOPS: String(LOOPS), SVC_AUDIT_LOG: join(dir, 'audit.jsonl'),
      SVC_RATE_LIMIT_REQUESTS_PER_SECOND: '0.01', SVC_RATE_LIMIT_BURST: '100000',
    }), logs);
    base = `http://127.0.0.1:${server.restPort}`;
    expect(server.loops?.count).toBe(LOOPS);
    expect((await fresh(base, 'POST', '/v1/collections', { name: 'c', dim: 3, metric: 'l2' })).status).toBe(201);
    const points = Array.from({ length: 40 }, (_, i) => ({ id: `p${i}`, vector: [i, i % 7, 1], payload: { i, even: i % 2 === 0 } }));
    expect((await fresh(base, 'PUT', '/v1/collections/c/points', { points })).status).toBe(200);
    // Answers compared across loops must not move under them: the index settles first.
    for (let until = Date.now() + 30_000; Date.now() < until;) {
      if (((await fresh(base, 'GET', '/v1/collections/c')).body as { index_state: string }).index_state === 'current') break;
      await new Promise((r) => setTimeout(r, 100));
    }
  });

  afterAll(async () => {
    await server?.close();
    rmSync(dir, { recursive: true, force: true });
  });

  it('every route answers the same on every loop, REST and gRPC', async () => {
    const reads: [string, string, unknown?][] = [
      ['GET', '/v1/collections'],
      ['GET', '/v1/collections/c'],
      ['GET', '/v1/collections/c/points/p3?with_vector=true'],
      ['POST', '/v1/collections/c/query', { vector: [5, 5, 1], k: 5, filter: { even: true } }],
      ['POST', '/v1/collections/c/points:count', {}],
      ['POST', '/v1/collections/c/points:fetch', { limit: 7 }],
      ['GET', '/v1/collections/missing'],
      ['POST', '/v1/collections/c/query', { vector: [1, 2], k: 5 }],
    ];
    for (const [method, path, body] of reads) {
      const answers = [...(await onEveryLoop(base, LOOPS, method, path, body)).values()];
      for (const a of answers.slice(1)) expect({ path, status: a.status, body: a.body }).toEqual({ path, status: answers[0].status, body: answers[0].body });
    }
    // A write on each loop lands in the one engine: every loop then reads every write.
    const written = await onEveryLoop(base, LOOPS, 'PUT', '/v1/collections/c/points', { points: [{ id: 'w', vector: [0, 0, 0] }] });
    expect([...written.values()].map((a) => a.status)).toEqual([200, 200]);
    const counts = await onEveryLoop(base, LOOPS, 'POST', '/v1/collections/c/points:count', {});
    expect([...counts.values()].map((a) => a.body)).toEqual([{ count: 41 }, { count: 41 }]);

    // gRPC: separate connections until both loops answered; they give the same hits as REST.
    const rest = (await fresh(base, 'POST', '/v1/collections/c/query', { vector: [5, 5, 1], k: 3 })).body as { hits: { id: string }[] };
    const ids = new Set<string>();
    for (let i = 0; i < 20; i++) {
      const client = new SvcClient(`127.0.0.1:${server.grpcPort}`, credentials.createInsecure(), { 'grpc.use_local_subchannel_pool': 1 });
      const got = await grpcCall<{ hits: { id: string }[] }>(client, 'search', { collection: 'c', vector: [5, 5, 1], k: 3 });
      client.close();
      expect(got.err).toBeUndefined();
      ids.add(got.res!.hits.map((h) => h.id).join(','));
    }
    expect([...ids]).toEqual([rest.hits.map((h) => h.id).join(',')]);
  });

  it('a loop answers a plain search itself, as the engine would, and sees every write acknowledged on any loop', async () => {
    const answered = () => metricValue(base, 'svc_loop_searches_total{answered="loop",reason=""}').catch(() => 0);
    const before = await answered();
    // A strong read always goes to the engine thread: the reference for each loop's own answer.
    const q = { vector: [5, 5, 1], k: 6, with_vector: true };
    const reference = (await fresh(base, 'POST', '/v1/collections/c/query', { ...q, consistency: 'strong' })).body;
    for (let i = 0; i < 3; i++) {
      for (const a of (await onEveryLoop(base, LOOPS, 'POST', '/v1/collections/c/query', q)).values()) expect(a.body).toEqual(reference);
    }
    expect(await answered()).toBeGreaterThan(before);

    // Written through one connection, read at once through others (either loop): the write is there,
    // and after its delete it is gone, with its payload as last written.
    for (let i = 0; i < 6; i++) {
      const id = `fresh${i}`;
      const far = [1000 + i, 1000, 1000];
      expect((await fresh(base, 'PUT', '/v1/collections/c/points', { points: [{ id, vector: far, payload: { n: i } }] })).status).toBe(200);
      for (const a of (await onEveryLoop(base, LOOPS, 'POST', '/v1/collections/c/query', { vector: far, k: 1 })).values()) {
        expect((a.body as { hits: unknown[] }).hits).toEqual([{ id, rank: 0, score: 0, payload: { n: i } }]);
      }
      expect((await fresh(base, 'POST', '/v1/collections/c/points:payload', { points: [{ id, payload: { m: i } }] })).status).toBe(200);
      for (const a of (await onEveryLoop(base, LOOPS, 'POST', '/v1/collections/c/query', { vector: far, k: 1 })).values()) {
        expect((a.body as { hits: { payload: unknown }[] }).hits[0].payload).toEqual({ n: i, m: i });
      }
      expect((await fresh(base, 'DELETE', `/v1/collections/c/points/${id}`)).status).toBe(200);
      for (const a of (await onEveryLoop(base, LOOPS, 'POST', '/v1/collections/c/query', { vector: far, k: 1 })).values()) {
        expect((a.body as { hits: { id: string }[] }).hits[0].id).not.toBe(id);
      }
    }

    // A collection dropped and made again under its name: each loop answers from the new one.
    for (const [name, id] of [['again', 'first'], ['again', 'second']]) {
      await fresh(base, 'DELETE', `/v1/collections/${name}`);
      expect((await fresh(base, 'POST', '/v1/collections', { name, dim: 3, metric: 'l2' })).status).toBe(201);
      expect((await fresh(base, 'PUT', `/v1/collections/${name}/points`, { points: [{ id, vector: [1, 1, 1] }] })).status).toBe(200);
      for (let round = 0; round < 2; round++) {
        for (const a of (await onEveryLoop(base, LOOPS, 'POST', `/v1/collections/${name}/query`, { vector: [1, 1, 1], k: 3 })).values()) {
          expect((a.body as { hits: { id: string }[] }).hits.map((h) => h.id)).toEqual([id]);
        }
      }
    }
    await fresh(base, 'DELETE', '/v1/collections/again');
  });

  it('a loop answers a filtered search itself once it holds the filter\'s match bits, and never from before a write', async () => {
    const loopAnswered = () => metricValue(base, 'svc_loop_searches_total{answered="loop",reason=""}').catch(() => 0);
    const handedOn = () => metricValue(base, 'svc_loop_searches_total{answered="engine",reason="filter"}').catch(() => 0);
    expect((await fresh(base, 'POST', '/v1/collections', { name: 'f', dim: 3, metric: 'l2', filterable: [{ path: 'tag', field_type: 'keyword' }] })).status).toBe(201);
    const points = Array.from({ length: 60 }, (_, i) => ({ id: `q${i}`, vector: [i % 9, i % 5, 1], payload: { tag: ['x', 'y', 'z'][i % 3] } }));
    expect((await fresh(base, 'PUT', '/v1/collections/f/points', { points })).status).toBe(200);
    const q = { vector: [4, 2, 1], k: 7, filter: { eq: { field: 'tag', value: 'y' } } };
    const strong = async () => (await fresh(base, 'POST', '/v1/collections/f/query', { ...q, consistency: 'strong' })).body;
    let reference = await strong();
    const [loopBefore, handedBefore] = [await loopAnswered(), await handedOn()];
    for (let i = 0; i < 4; i++) {
      for (const a of (await onEveryLoop(base, LOOPS, 'POST', '/v1/collections/f/query', q)).values()) expect(a.body).toEqual(reference);
    }
    // Each loop handed the first one on and asked for the bits; later ones it answered itself.
    expect(await handedOn()).toBeGreaterThan(handedBefore);
    expect(await loopAnswered()).toBeGreaterThan(loopBefore);
    // Points moved out of the filter and into it: every loop's next answer has them so.
    for (let round = 0; round < 3; round++) {
      const hits = (reference as { hits: { id: string }[] }).hits;
      const moves = [{ id: hits[0].id, payload: { tag: 'x' } }, { id: `q${round * 3}`, payload: { tag: 'y' } }];
      expect((await fresh(base, 'POST', '/v1/collections/f/points:payload', { points: moves })).status).toBe(200);
      reference = await strong();
      expect((reference as { hits: { id: string }[] }).hits.map((h) => h.id)).not.toContain(hits[0].id);
      for (let i = 0; i < 3; i++) {
        for (const a of (await onEveryLoop(base, LOOPS, 'POST', '/v1/collections/f/query', q)).values()) expect(a.body).toEqual(reference);
      }
    }
    expect((await fresh(base, 'DELETE', '/v1/collections/f')).status).toBe(200);
  });

  it('a loop answers hybrid searches and shard rankings itself (dense, sparse and BM25 over shared memory), and sees every write', async () => {
    const hybridLoop = () => metricValue(base, 'svc_loop_queries_total{op="hybrid",answered="loop",reason=""}').catch(() => 0);
    const rankingsLoop = () => metricValue(base, 'svc_loop_queries_total{op="rankings",answered="loop",reason=""}').catch(() => 0);
    expect((await fresh(base, 'POST', '/v1/collections', { name: 'h', dim: 3, metric: 'cosine', filterable: [{ path: 'tag', field_type: 'keyword' }] })).status).toBe(201);
    const words = ['shock', 'wave', 'boundary', 'layer', 'heat', 'plate'];
    const points = Array.from({ length: 50 }, (_, i) => ({
      id: `h${i}`, vector: [1 + (i % 7), 1 + (i % 3), 1],
      payload: i % 5 === 0
        ? { tag: 'sparse', __svc_sparse__: { indices: [i % 4, 4 + (i % 3)], values: [0.5 + (i % 3), 1] } }
        : { tag: ['x', 'y'][i % 2], __svc_text__: `${words[i % 6]} ${words[(i * 7) % 6]} ${words[(i * 5) % 6]}` },
    }));
    expect((await fresh(base, 'PUT', '/v1/collections/h/points', { points })).status).toBe(200);
    const queries = [
      { vector: [3, 1, 1], query_text: 'shock wave', k: 8 },
      { query_text: 'boundary layer heat', k: 5, with_vector: true },
      { vector: [2, 2, 1], sparse_indices: [1, 5], sparse_values: [1, 0.5], query_text: 'plate', k: 10, rrf_k0: 10 },
      { query_text: 'shock', k: 6, filter: { eq: { field: 'tag', value: 'x' } } },
    ];
    const [hybridBefore, rankingsBefore] = [await hybridLoop(), await rankingsLoop()];
    for (const q of queries) {
      // A strong read goes to the engine thread: the reference for each loop's own answer.
      const reference = (await fresh(base, 'POST', '/v1/collections/h/query/hybrid', { ...q, consistency: 'strong' })).body;
      expect((reference as { hits: unknown[] }).hits.length, JSON.stringify(reference)).toBeGreaterThan(0);
      for (let i = 0; i < 3; i++) {
        for (const a of (await onEveryLoop(base, LOOPS, 'POST', '/v1/collections/h/query/hybrid', q)).values()) expect(a.body).toEqual(reference);
      }
    }
    const body = { vector: [3, 1, 1], query_text: 'shock wave', depth: 20 };
    const rankings = (await fresh(base, 'POST', '/v1/collections/h/query/rankings', { ...body, consistency: 'strong' })).body;
    for (let i = 0; i < 3; i++) {
      for (const a of (await onEveryLoop(base, LOOPS, 'POST', '/v1/collections/h/query/rankings', body)).values()) expect(a.body).toEqual(rankings);
    }
    const countLoop = () => metricValue(base, 'svc_loop_queries_total{op="count",answered="loop",reason=""}').catch(() => 0);
    const countsBefore = await countLoop();
    for (const q of [{}, { filter: { eq: { field: 'tag', value: 'x' } } }]) {
      for (let i = 0; i < 3; i++) {
        for (const a of (await onEveryLoop(base, LOOPS, 'POST', '/v1/collections/h/points:count', q)).values()) expect(a.body).toEqual({ count: 'filter' in q ? 20 : 50 });
      }
    }
    expect(await countLoop()).toBeGreaterThan(countsBefore);
    // Point reads: a point that is here is read by the loop itself; one that is not is the engine's 404.
    const getLoop = () => metricValue(base, 'svc_loop_queries_total{op="get",answered="loop",reason=""}').catch(() => 0);
    const getsBefore = await getLoop();
    const one = (await fresh(base, 'GET', '/v1/collections/h/points/h7?with_vector=true')).body;
    expect(one).toMatchObject({ id: 'h7', vector: expect.any(Array) as unknown });
    for (let i = 0; i < 3; i++) {
      for (const a of (await onEveryLoop(base, LOOPS, 'GET', '/v1/collections/h/points/h7?with_vector=true')).values()) expect(a.body).toEqual(one);
      for (const a of (await onEveryLoop(base, LOOPS, 'GET', '/v1/collections/h/points/nope')).values()) expect(a.status).toBe(404);
    }
    expect(await getLoop()).toBeGreaterThan(getsBefore);
    // Pages of points (id order, a filter, vectors): the loop's pages are a strong read's, cursor for cursor.
    const fetchLoop = () => metricValue(base, 'svc_loop_queries_total{op="fetch",answered="loop",reason=""}').catch(() => 0);
    const fetchesBefore = await fetchLoop();
    for (const q of [{ limit: 7 }, { limit: 6, filter: { eq: { field: 'tag', value: 'x' } }, with_vector: true }]) {
      let cursor: string | null = null;
      let pages = 0;
      do {
        const page: Record<string, unknown> = cursor === null ? q : { ...q, cursor };
        const reference = (await fresh(base, 'POST', '/v1/collections/h/points:fetch', { ...page, consistency: 'strong' })).body as { points: unknown[]; next_cursor: string | null };
        for (let i = 0; i < 2; i++) {
          for (const a of (await onEveryLoop(base, LOOPS, 'POST', '/v1/collections/h/points:fetch', page)).values()) expect(a.body).toEqual(reference);
        }
        cursor = reference.next_cursor;
        pages++;
      } while (cursor !== null);
      expect(pages).toBe('filter' in q ? 4 : 8);
    }
    for (const a of (await onEveryLoop(base, LOOPS, 'POST', '/v1/collections/h/points:fetch', { limit: 0 })).values()) expect(a.status).toBe(400);
    expect(await fetchLoop()).toBeGreaterThan(fetchesBefore);
    expect(await hybridLoop()).toBeGreaterThan(hybridBefore);
    expect(await rankingsLoop()).toBeGreaterThan(rankingsBefore);
    // A text written through one connection is found through others at once (either loop), and its
    // new text replaces it; after its delete it is gone.
    for (let i = 0; i < 4; i++) {
      const id = `new${i}`;
      const q = { query_text: `zeppelin${i}`, k: 3 };
      expect((await fresh(base, 'PUT', '/v1/collections/h/points', { points: [{ id, vector: [1, 1, 1], payload: { __svc_text__: `zeppelin${i} hangar` } }] })).status).toBe(200);
      for (const a of (await onEveryLoop(base, LOOPS, 'POST', '/v1/collections/h/query/hybrid', q)).values()) {
        expect((a.body as { hits: { id: string }[] }).hits.map((h) => h.id)).toEqual([id]);
      }
      expect((await fresh(base, 'POST', '/v1/collections/h/points:payload', { points: [{ id, payload: { __svc_text__: 'blimp' } }], mode: 'replace' })).status).toBe(200);
      for (const a of (await onEveryLoop(base, LOOPS, 'POST', '/v1/collections/h/query/hybrid', q)).values()) expect(a.body).toEqual({ hits: [] });
      // The page after h9 (new0.. sort after every h): the point is there at once, on every loop.
      const after = { cursor: Buffer.from('h9').toString('base64url'), limit: 5 };
      for (const a of (await onEveryLoop(base, LOOPS, 'POST', '/v1/collections/h/points:fetch', after)).values()) {
        expect((a.body as { points: { id: string }[] }).points.map((p) => p.id)).toEqual([id]);
      }
      expect((await fresh(base, 'DELETE', `/v1/collections/h/points/${id}`)).status).toBe(200);
      for (const a of (await onEveryLoop(base, LOOPS, 'POST', '/v1/collections/h/points:fetch', after)).values()) expect(a.body).toEqual({ points: [], next_cursor: null });
      for (const a of (await onEveryLoop(base, LOOPS, 'POST', '/v1/collections/h/query/hybrid', { query_text: 'blimp', k: 3 })).values()) {
        expect(a.body).toEqual({ hits: [] });
      }
    }
    expect((await fresh(base, 'DELETE', '/v1/collections/h')).status).toBe(200);
  });

  it('a loop answers text queries itself (its own provider adapter, its own rankings), reranked too, as the engine thread does', async () => {
    const rankingsLoop = () => metricValue(base, 'svc_loop_queries_total{op="rankings",answered="loop",reason=""}').catch(() => 0);
    expect((await fresh(base, 'POST', '/v1/collections', { name: 'txt', dim: 8, metric: 'cosine', filterable: [{ path: 'tag', field_type: 'keyword' }] })).status).toBe(201);
    const words = ['shock', 'wave', 'boundary', 'layer', 'heat', 'plate', 'wing'];
    const points = Array.from({ length: 30 }, (_, i) => ({ id: `t${i}`, text: `${words[i % 7]} ${words[(i * 3) % 7]} ${words[(i * 5) % 7]}`, payload: { tag: ['x', 'y'][i % 2] } }));
    expect((await fresh(base, 'POST', '/v1/collections/txt/points:text', { points })).status).toBe(200);
    const queries = [
      { text: 'shock wave', k: 5 }, { text: 'boundary layer heat', k: 4, with_vector: true }, { text: 'wing', k: 6, filter: { eq: { field: 'tag', value: 'x' } } },
      { text: 'plate heat', k: 3, rerank: true, rerank_pool: 10 },
    ];
    const before = await rankingsLoop();
    for (const q of queries) {
      const reference = (await fresh(base, 'POST', '/v1/collections/txt/query/text', { ...q, consistency: 'strong' })).body;
      expect((reference as { hits: unknown[] }).hits.length, JSON.stringify(reference)).toBeGreaterThan(0);
      for (let i = 0; i < 3; i++) {
        for (const a of (await onEveryLoop(base, LOOPS, 'POST', '/v1/collections/txt/query/text', q)).values()) expect(a.body).toEqual(reference);
      }
    }
    // The rankings came from the loops' own views: the engine thread only stored the points.
    expect(await rankingsLoop()).toBeGreaterThan(before);
    // Errors are the engine's: a collection without a provider, an empty text, a rerank without a reranker.
    expect((await fresh(base, 'POST', '/v1/collections', { name: 'nop', dim: 8, metric: 'cosine' })).status).toBe(201);
    for (const [name, q, code] of [['nop', { text: 'x' }, 400], ['txt', { text: '' }, 400], ['txt', { text: 'x', k: 0 }, 400], ['absent', { text: 'x' }, 404]] as const) {
      const answers = [...(await onEveryLoop(base, LOOPS, 'POST', `/v1/collections/${name}/query/text`, q)).values()];
      for (const a of answers) expect([a.status, a.body]).toEqual([code, answers[0].body]);
    }
    for (const name of ['txt', 'nop']) expect((await fresh(base, 'DELETE', `/v1/collections/${name}`)).status).toBe(200);
  });

  it('a loop answers multi-vector searches itself, and sees every document written, replaced and deleted', async () => {
    const multiLoop = () => metricValue(base, 'svc_loop_queries_total{op="multi_vector",answered="loop",reason=""}').catch(() => 0);
    expect((await fresh(base, 'POST', '/v1/collections', { name: 'mv', dim: 3, metric: 'cosine', multivector: true })).status).toBe(201);
    const documents = Array.from({ length: 40 }, (_, i) => ({ id: `m${i}`, vectors: [[1 + (i % 5), 1, 0], [0, 1 + (i % 3), 1]], payload: { n: i } }));
    expect((await fresh(base, 'PUT', '/v1/collections/mv/documents', { documents })).status).toBe(200);
    const q = { vectors: [[3, 1, 0], [0, 2, 1]], k: 5, with_vector: true };
    const reference = (await fresh(base, 'POST', '/v1/collections/mv/query/multi', { ...q, consistency: 'strong' })).body;
    expect((reference as { hits: unknown[] }).hits.length, JSON.stringify(reference)).toBe(5);
    const before = await multiLoop();
    for (let i = 0; i < 3; i++) {
      for (const a of (await onEveryLoop(base, LOOPS, 'POST', '/v1/collections/mv/query/multi', q)).values()) expect(a.body).toEqual(reference);
    }
    expect(await multiLoop()).toBeGreaterThan(before);
    const near = { vectors: [[-5, -5, 9]], k: 1 };
    expect((await fresh(base, 'PUT', '/v1/collections/mv/documents', { documents: [{ id: 'x', vectors: [[-5, -5, 9]], payload: { v: 1 } }] })).status).toBe(200);
    for (const a of (await onEveryLoop(base, LOOPS, 'POST', '/v1/collections/mv/query/multi', near)).values()) {
      expect((a.body as { hits: { id: string; payload: unknown }[] }).hits.map((h) => [h.id, h.payload])).toEqual([['x', { v: 1 }]]);
    }
    expect((await fresh(base, 'PUT', '/v1/collections/mv/documents', { documents: [{ id: 'x', vectors: [[1, 0, 0]], payload: { v: 2 } }] })).status).toBe(200);
    for (const a of (await onEveryLoop(base, LOOPS, 'POST', '/v1/collections/mv/query/multi', near)).values()) {
      expect((a.body as { hits: { id: string }[] }).hits.map((h) => h.id)).not.toContain('x');
    }
    expect((await fresh(base, 'DELETE', '/v1/collections/mv/documents/x')).status).toBe(200);
    for (const a of (await onEveryLoop(base, LOOPS, 'POST', '/v1/collections/mv/query/multi', { vectors: [[1, 0, 0]], k: 50 })).values()) {
      expect((a.body as { hits: { id: string }[] }).hits.map((h) => h.id)).not.toContain('x');
    }
    expect((await fresh(base, 'DELETE', '/v1/collections/mv')).status).toBe(200);
  });

  it('the audit chain and /metrics are the process\'s, not each loop\'s', async () => {
    const before = await metricValue(base, 'svc_http_requests_total{method="GET",route="/v1/collections/{name}"}');
    const answers = await Promise.all(Array.from({ length: 30 }, () => fresh(base, 'GET', '/v1/collections/c')));
    const loops = new Set(answers.map((a) => a.loop));
    expect(loops.size).toBe(LOOPS);
    // Counted by whichever loop answered; /metrics (from any loop) shows all of them.
    expect(await metricValue(base, 'svc_http_requests_total{method="GET",route="/v1/collections/{name}"}')).toBe(before + 30);
    // The engine gauges come from one stats read, kept 100 ms so that every gauge of a scrape shares it
    // (roles/rest/metrics.ts): a scrape that soon after the last (the previous test's) may still show the
    // collection it dropped. Within a few of those, the engine's own count.
    let points = await metricValue(base, 'svc_points');
    for (let i = 0; i < 20 && points !== 41; i++) {
      await new Promise((r) => setTimeout(r, 150));
      points = await metricValue(base, 'svc_points');
    }
    expect(points).toBe(41);

    // One chain, written by the engine thread, holds the writes answered on every loop.
    const text = readFileSync(join(dir, 'audit.jsonl'), 'utf8');
    expect(verifyAuditChain(text, auditMacKey(Buffer.from(MASTER, 'hex')))).toMatchObject({ ok: true });
    expect(text.split('\n').filter((l) => l.includes('"action":"upsert"')).length).toBeGreaterThanOrEqual(3);
  });

  it('a second server on the same ports is refused, not given a share of the connections', async () => {
    const other = mkdtempSync(join(tmpdir(), 'svc-loops-'));
    try {
      const cfg = loadConfig({
        SVC_DATA_DIR: join(other, 'data'), SVC_REST_ADDR: `127.0.0.1:${server.restPort}`, SVC_GRPC_ADDR: '127.0.0.1:0', SVC_ENCRYPTION_KEY: MASTER,
        SVC_API_KEYS: KEY, RUST_LOG: 'error', SVC_HTTP_LOOPS: '2',
      }, { defaultFile: null, cwd: other });
      await expect(startServer(cfg, logs)).rejects.toMatchObject({ code: 'EADDRINUSE' });
      // One port given for both REST and gRPC: refused too (each loop's two listeners would share it).
      const same = loadConfig({
        SVC_DATA_DIR: join(other, 'data'), SVC_REST_ADDR: '127.0.0.1:47113', SVC_GRPC_ADDR: '127.0.0.1:47113', SVC_ENCRYPTION_KEY: MASTER,
        SVC_API_KEYS: KEY, RUST_LOG: 'error', SVC_HTTP_LOOPS: '2',
      }, { defaultFile: null, cwd: other });
      await expect(startServer(same, logs)).rejects.toMatchObject({ code: 'EADDRINUSE', message: expect.stringContaining('both given port 47113') });
    } finally {
      rmSync(other, { recursive: true, force: true });
    }
  });

  it('a loop that dies is replaced on the same ports; requests go on', async () => {
    await server.loops!.terminate(0);
    // The other loop answers meanwhile; the replacement joins the port and answers too.
    await expect.poll(() => server.loops!.replaced).toBe(1);
    const answers = await onEveryLoop(base, LOOPS, 'POST', '/v1/collections/c/points:count', {});
    expect([...answers.values()].map((a) => a.body), JSON.stringify([...answers.values()])).toEqual([{ count: 41 }, { count: 41 }]);
    expect(await metricValue(base, 'svc_http_loops')).toBe(2);
    expect(await metricValue(base, 'svc_http_loop_restarts_total')).toBe(1);
  });

  it('close lets a request in flight on every loop finish, then refuses connections', async () => {
    // Upserts whose bodies are half sent on several connections: both loops hold one in flight.
    const inflight: { socket: Socket; rest: string; answer: Promise<string> }[] = [];
    for (let i = 0; i < 8; i++) {
      const body = JSON.stringify({ points: [{ id: `late${i}`, vector: [9, 9, i] }] });
      const socket = connect(server.restPort, '127.0.0.1');
      await new Promise((r) => socket.once('connect', r));
      socket.write(`PUT /v1/collections/c/points HTTP/1.1\r\nhost: x\r\nconnection: close\r\nauthorization: Bearer ${KEY}\r\ncontent-type: application/json\r\ncontent-length: ${Buffer.byteLength(body)}\r\n\r\n${body.slice(0, 10)}`);
      let got = '';
      const answer = new Promise<string>((resolve) => {
        socket.on('data', (b: Buffer) => { got += b.toString(); });
        socket.on('close', () => resolve(got));
      });
      inflight.push({ socket, rest: body.slice(10), answer });
    }
    await new Promise((r) => setTimeout(r, 200));
    const closing = server.close();
    await new Promise((r) => setTimeout(r, 200));
    for (const f of inflight) f.socket.write(f.rest);
    const answers = await Promise.all(inflight.map((f) => f.answer));
    for (const a of answers) expect(a).toMatch(/^HTTP\/1.1 200/);
    const loops = new Set(answers.map((a) => /x-svc-loop: (\d+)/.exec(a)?.[1]));
    expect(loops.size).toBe(LOOPS);
    await closing;
    await expect(fetch(`${base}/healthz`)).rejects.toThrow();
    // What they wrote is durable: a fresh single-loop server on the directory reads it.
    const again = await startServer(config(dir, { SVC_HTTP_LOOPS: '1' }), logs);
    try {
      const r = await fetch(`http://127.0.0.1:${again.restPort}/v1/collections/c/points:count`, {
        method: 'POST', headers: { authorization: `Bearer ${KEY}`, 'content-type': 'application/json' }, body: '{}',
      });
      expect(await r.json()).toEqual({ count: 49 });
    } finally {
      await again.close();
    }
  });
});

describe.runIf(support.ok)('the rate limit of a multi-loop server', () => {
  it('is the process\'s: a key\'s burst is shared by every loop, not granted per loop', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'svc-loops-'));
    const server = await startServer(config(dir, { SVC_HTTP_LOOPS: '2', SVC_RATE_LIMIT_REQUESTS_PER_SECOND: '0.01', SVC_RATE_LIMIT_BURST: '12' }), logs);
    try {
      const base = `http://127.0.0.1:${server.restPort}`;
      const answers: Answer[] = [];
      for (let i = 0; i < 30; i++) answers.push(await fresh(base, 'GET', '/v1/collections'));
      expect(answers.filter((a) => a.status === 200)).toHaveLength(12);
      const refused = answers.filter((a) => a.status === 429);
      expect(refused).toHaveLength(18);
      expect(new Set(refused.map((a) => a.loop)).size).toBe(2);
    } finally {
      await server.close();
      rmSync(dir, { recursive: true, force: true });
    }
  });
});

describe.runIf(support.ok)('the connection caps of a multi-loop server', () => {
  const made: Socket[] = [];
  /** Opens `n` idle sockets and resolves, after a moment, to those the server left open. */
  async function idle(port: number, n: number): Promise<Socket[]> {
    const all = await Promise.all(Array.from({ length: n }, () => new Promise<{ s: Socket; closed: () => boolean }>((resolve) => {
      const s = connect(port, '127.0.0.1');
      made.push(s);
      let closed = false;
      s.on('error', () => undefined);
      s.on('close', () => { closed = true; });
      s.once('connect', () => resolve({ s, closed: () => closed }));
    })));
    await new Promise((r) => setTimeout(r, 500));
    for (const x of all) if (x.closed()) x.s.destroy();
    return all.filter((x) => !x.closed()).map((x) => x.s);
  }

  it('are the process\'s: SVC_MAX_CONNECTIONS open across every loop, and a dead loop\'s connections given back', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'svc-loops-'));
    const server = await startServer(config(dir, { SVC_HTTP_LOOPS: '2', SVC_MAX_CONNECTIONS: '10', SVC_HEADERS_TIMEOUT_SECS: '25' }), logs);
    try {
      let open = await idle(server.restPort, 30);
      expect(open).toHaveLength(10);
      for (const s of open) s.destroy();
      await new Promise((r) => setTimeout(r, 300));
      // Refused by whichever loop accepted them, and counted there: 20 in the process's /metrics.
      expect(await metricValue(`http://127.0.0.1:${server.restPort}`, 'svc_connections_refused_total{transport="rest",reason="limit"}')).toBe(20);
      await new Promise((r) => setTimeout(r, 300));
      open = await idle(server.restPort, 10);
      expect(open).toHaveLength(10);
      // A loop killed while it holds some of them: what it held no longer counts once it is gone.
      await server.loops!.terminate(0);
      await expect.poll(() => server.loops!.replaced).toBe(1);
      for (const s of open) s.destroy();
      await new Promise((r) => setTimeout(r, 300));
      open = await idle(server.restPort, 12);
      expect(open).toHaveLength(10);
    } finally {
      for (const s of made) s.destroy();
      await server.close();
      rmSync(dir, { recursive: true, force: true });
    }
  });
});

async function metricValue(base: string, series: string): Promise<number> {
  const text = await (await fetch(`${base}/metrics`, { headers: { connection: 'close' } })).text();
  const line = text.split('\n').find((l) => l.startsWith(`${series} `));
  return line === undefined ? 0 : Number(line.slice(series.length + 1));
}
