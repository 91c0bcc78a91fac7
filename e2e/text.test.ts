/**
 * Text, sparse and hybrid search end to end (issue 4): `svc serve` as a real process whose svc.toml points
 * its providers at local stand-ins started here on 127.0.0.1, speaking the OpenAI-compatible embeddings
 * protocol and the embed/rerank protocol (CONTRACT.md section 8). Over REST and over gRPC.
 */
import { readdirSync, readFileSync, statSync, writeFileSync } from 'node:fs';
import type { IncomingMessage } from 'node:http';
import { join } from 'node:path';
import { status } from '@grpc/grpc-js';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { fromStruct, SvcGrpc, toStruct, type Reply } from './grpc-client.js';
import { api, cleanEnv, JsonStandIn, MASTER, run, serve, tempDir, type Server } from './harness.js';

const ADMIN = 'text-admin-key';
const EMBED_SECRET = 'sk-embed-4f1c0ffee-DO-NOT-LEAK';
const RERANK_SECRET = 'rk-rerank-77beef-DO-NOT-LEAK';
const DIM = 8;

/** A bag-of-words embedding: texts that share words point the same way (cosine grows with the overlap). */
function embed(text: string): number[] {
  const v = new Array<number>(DIM).fill(0.01);
  for (const w of text.toLowerCase().match(/[a-z]+/g) ?? []) {
    let h = 0;
    for (const c of w) h = (h * 31 + c.charCodeAt(0)) >>> 0;
    v[h % DIM] += 1;
  }
  return v;
}

function words(text: string): Set<string> {
  return new Set(text.toLowerCase().match(/[a-z]+/g) ?? []);
}

interface Seen { path: string; auth: string | undefined; body: any }

/** One stand-in provider: records every request; `fail` answers 503 echoing the caller's credentials. */
class StandIn extends JsonStandIn {
  readonly seen: Seen[] = [];
  fail = false;

  constructor() {
    super((req, raw) => this.answer(req, raw));
  }

  private answer(req: IncomingMessage, raw: string): [number, unknown] {
    const body = JSON.parse(raw);
    const auth = req.headers.authorization;
    this.seen.push({ path: req.url ?? '', auth, body });
    // A badly behaved provider: its error body repeats the key it was sent.
    if (this.fail) return [503, { error: `overloaded; you sent ${auth}` }];
    if (req.url === '/v1/embeddings') {
      return [200, { data: (body.input as string[]).map((t, index) => ({ index, embedding: embed(t) })).reverse() }];
    }
    if (req.url === '/embed') return [200, { embeddings: { float: (body.texts as string[]).map(embed) } }];
    if (req.url === '/rerank') {
      // Relevance: the share of query words in the document; the original position breaks ties.
      const q = words(body.query);
      const results = (body.documents as string[]).map((d, index) => {
        const dw = words(d);
        const hit = [...q].filter((w) => dw.has(w)).length;
        return { index, relevance_score: hit / Math.max(1, q.size) + 0.001 * (body.documents.length - index) };
      });
      results.sort((a, b) => b.relevance_score - a.relevance_score);
      return [200, { results: results.slice(0, body.top_n) }];
    }
    return [404, { error: 'no such path' }];
  }

  requests(path: string): Seen[] {
    return this.seen.filter((s) => s.path === path);
  }
}

function toml(openai: StandIn, hostedB: StandIn, opts: { dim?: number; embedKeyEnv?: string } = {}): string {
  return [
    '[embedding.docs]', 'provider = "local_compatible"', 'model = "bag-of-words"', `endpoint = "http://127.0.0.1:${openai.port}/v1"`,
    `dim = ${opts.dim ?? DIM}`, `api_key_env = "${opts.embedKeyEnv ?? 'EMBED_KEY'}"`, '',
    '[rerank.docs]', 'provider = "hosted_b"', 'model = "rerank-small"', `endpoint = "http://127.0.0.1:${hostedB.port}"`,
    'api_key_env = "RERANK_KEY"', '',
    '[embedding.notes]', 'provider = "hosted_b"', 'model = "embed-small"', `endpoint = "http://127.0.0.1:${hostedB.port}"`,
    `dim = ${DIM}`, 'api_key_env = "RERANK_KEY"', '',
  ].join('\n');
}

const CORPUS = [
  { id: 'cat', text: 'The cat sleeps on a warm mat', payload: { lang: 'en' } },
  { id: 'dog', text: 'A dog chases the cat around the garden', payload: { lang: 'en' } },
  { id: 'fox', text: 'The quick brown fox jumps over the lazy dog', payload: { lang: 'en' } },
  { id: 'chat', text: 'Le chat dort sur le tapis', payload: { lang: 'fr' } },
  { id: 'db', text: 'Vector databases search embeddings quickly', payload: { lang: 'en' } },
  { id: 'rrf', text: 'Rank fusion sums reciprocal ranks of documents', payload: { lang: 'en' } },
];

/** Every file under `dir`, recursively. */
function filesUnder(dir: string): string[] {
  return readdirSync(dir).flatMap((n) => {
    const p = join(dir, n);
    return statSync(p).isDirectory() ? filesUnder(p) : [p];
  });
}

async function exitOf(p: ReturnType<typeof run>, ms = 20_000): Promise<number | null> {
  const timer = new Promise<'timeout'>((r) => setTimeout(() => r('timeout'), ms));
  const code = await Promise.race([p.exited, timer]);
  if (code === 'timeout') {
    p.child.kill('SIGKILL');
    throw new Error(`svc serve did not stop: ${p.stderr()}`);
  }
  return code;
}

describe('text, sparse and hybrid search through svc serve', () => {
  const openai = new StandIn();
  const hostedB = new StandIn();
  let dir: string;
  let dataDir: string;
  let server: Server;
  let g: SvcGrpc;
  /** Every response body and error message a client saw, for the secret check. */
  const seenByClients: string[] = [];
  let call: ReturnType<typeof api>;

  const rest = async (method: string, path: string, body?: unknown) => {
    const r = await call(method, path, body);
    seenByClients.push(JSON.stringify(r.json), JSON.stringify([...r.headers]));
    return r;
  };
  const grpc = async (rpc: string, req: object): Promise<Reply> => {
    const r = await g.call(rpc, req, ADMIN);
    seenByClients.push(JSON.stringify(r.res ?? null), r.err?.details ?? '', r.err?.message ?? '');
    return r;
  };

  beforeAll(async () => {
    await Promise.all([openai.start(), hostedB.start()]);
    dir = tempDir('svc-text-e2e-');
    dataDir = join(dir, 'data');
    writeFileSync(join(dir, 'svc.toml'), toml(openai, hostedB));
    server = await serve({
      SVC_API_KEYS: ADMIN, SVC_ENCRYPTION_KEY: MASTER, SVC_DATA_DIR: dataDir, SVC_CONFIG: join(dir, 'svc.toml'),
      SVC_MAX_SPARSE_TERMS: '8', SVC_MAX_K: '100', EMBED_KEY: EMBED_SECRET, RERANK_KEY: RERANK_SECRET, RUST_LOG: 'debug',
    }, { cwd: dir });
    call = api(server.base, ADMIN);
    g = new SvcGrpc(`127.0.0.1:${server.grpcPort}`);
    expect((await rest('POST', '/v1/collections', {
      name: 'docs', dim: DIM, metric: 'cosine', filterable: [{ path: 'lang', field_type: 'keyword' }],
    })).status).toBe(201);
  });

  afterAll(async () => {
    g?.close();
    await server?.stop();
    await Promise.all([openai.close(), hostedB.close()]);
  });

  it('points:text embeds each text through the provider (with its key) and stores the text for BM25', async () => {
    const r = await rest('POST', '/v1/collections/docs/points:text', { points: CORPUS });
    expect(r.status, JSON.stringify(r.json)).toBe(200);
    expect(r.json).toEqual({ upserted: CORPUS.length });
    const calls = openai.requests('/v1/embeddings');
    expect(calls.length).toBe(1);
    expect(calls[0].auth).toBe(`Bearer ${EMBED_SECRET}`);
    expect(calls[0].body).toEqual({ model: 'bag-of-words', input: CORPUS.map((p) => p.text) });
    const p = await rest('GET', '/v1/collections/docs/points/fox?with_vector=true');
    expect(p.json.payload).toEqual({ lang: 'en', __svc_text__: CORPUS[2].text });
    const e = embed(CORPUS[2].text);
    const n = Math.hypot(...e);
    p.json.vector.forEach((x: number, i: number) => expect(x).toBeCloseTo(e[i] / n, 5));
    expect((await rest('GET', '/v1/collections/docs')).json.count).toBe(CORPUS.length);
  });

  it('query/text: the embedded query fused with BM25, filter applied, fused scores', async () => {
    const before = openai.requests('/v1/embeddings').length;
    const r = await rest('POST', '/v1/collections/docs/query/text', { text: 'sleeping cat on the mat', k: 3, consistency: 'strong' });
    expect(r.status, JSON.stringify(r.json)).toBe(200);
    expect(openai.requests('/v1/embeddings').length).toBe(before + 1);
    expect(openai.requests('/v1/embeddings').at(-1)!.body.input).toEqual(['sleeping cat on the mat']);
    expect(r.json.hits[0].id).toBe('cat');
    expect(r.json.hits.map((h: { rank: number }) => h.rank)).toEqual([0, 1, 2]);
    // First in both rankings: 1/61 + 1/61.
    expect(r.json.hits[0].score).toBeCloseTo(2 / 61, 12);
    for (const h of r.json.hits) expect(h.score).toBeLessThanOrEqual(2 / 61 + 1e-12);

    const fr = await rest('POST', '/v1/collections/docs/query/text', { text: 'cat', k: 10, filter: { eq: { field: 'lang', value: 'fr' } } });
    expect(fr.json.hits.map((h: { id: string }) => h.id)).toEqual(['chat']);
  });

  it('query/text with rerank: one rerank round trip over the pool, the reranker order and scores', async () => {
    const before = hostedB.requests('/rerank').length;
    const r = await rest('POST', '/v1/collections/docs/query/text', { text: 'dog chases fox', k: 2, rerank: true });
    expect(r.status, JSON.stringify(r.json)).toBe(200);
    const calls = hostedB.requests('/rerank').slice(before);
    expect(calls.length).toBe(1);
    expect(calls[0].auth).toBe(`Bearer ${RERANK_SECRET}`);
    expect(calls[0].body.model).toBe('rerank-small');
    expect(calls[0].body.query).toBe('dog chases fox');
    expect(calls[0].body.top_n).toBe(2);
    // The pool is max(4k, 50) deep: the whole (6-point) collection, as texts.
    expect([...calls[0].body.documents].sort()).toEqual(CORPUS.map((p) => p.text).sort());
    const hits = r.json.hits as { id: string; score: number; rank: number }[];
    expect(hits.map((h) => h.id).sort()).toEqual(['dog', 'fox']);
    expect(hits[0].score).toBeGreaterThan(hits[1].score);
    expect(hits[0].score).toBeGreaterThan(0.6); // the reranker's relevance, not a fused RRF score
    expect(hits.map((h) => h.rank)).toEqual([0, 1]);
  });

  it('hybrid: vector + sparse + query_text fused by RRF, each side optional, filter on every side', async () => {
    expect((await rest('POST', '/v1/collections', {
      name: 'hyb', dim: 3, metric: 'cosine', filterable: [{ path: 'tag', field_type: 'keyword' }],
    })).status).toBe(201);
    const up = await rest('PUT', '/v1/collections/hyb/points', {
      points: [
        { id: 'A', vector: [1, 0, 0], payload: { tag: 'x', __svc_sparse__: { indices: [7, 9], values: [2, 0.5] } } },
        { id: 'C', vector: [0.9, 0.3, 0], payload: { tag: 'x', __svc_text__: 'zebras' } },
        { id: 'B', vector: [0.2, 1, 0], payload: { tag: 'y', __svc_text__: 'striped zebra herds' } },
        { id: 'D', vector: [0, 0, 1], payload: { tag: 'y', __svc_sparse__: { indices: [9], values: [3] } } },
      ],
    });
    expect(up.status, JSON.stringify(up.json)).toBe(200);
    // dense: A, C, B, D; sparse (index 7 then 9): A (2.05), D (0.3); BM25 "zebra": C (shorter), B.
    const all = await rest('POST', '/v1/collections/hyb/query/hybrid', {
      vector: [1, 0, 0], sparse_indices: [7, 9], sparse_values: [1, 0.1], query_text: 'Zebra', k: 4, consistency: 'strong',
    });
    expect(all.status, JSON.stringify(all.json)).toBe(200);
    const byId = Object.fromEntries(all.json.hits.map((h: { id: string; score: number }) => [h.id, h.score]));
    expect(all.json.hits.map((h: { id: string }) => h.id)).toEqual(['A', 'C', 'B', 'D']);
    expect(byId.A).toBeCloseTo(1 / 61 + 1 / 61, 12);
    expect(byId.C).toBeCloseTo(1 / 62 + 1 / 61, 12);
    expect(byId.B).toBeCloseTo(1 / 63 + 1 / 62, 12);
    expect(byId.D).toBeCloseTo(1 / 64 + 1 / 62, 12);

    const k0 = await rest('POST', '/v1/collections/hyb/query/hybrid', { sparse_indices: [9], sparse_values: [1], k: 5, rrf_k0: 0 });
    expect(k0.json.hits.map((h: { id: string; score: number }) => [h.id, h.score])).toEqual([['D', 1], ['A', 0.5]]);

    const filtered = await rest('POST', '/v1/collections/hyb/query/hybrid', {
      vector: [1, 0, 0], query_text: 'zebra', k: 4, filter: { eq: { field: 'tag', value: 'y' } },
    });
    // dense among y: B, D; BM25 among y: B.
    expect(filtered.json.hits.map((h: { id: string }) => h.id)).toEqual(['B', 'D']);
    expect(filtered.json.hits[0].score).toBeCloseTo(2 / 61, 12);

    const tooMany = await rest('POST', '/v1/collections/hyb/query/hybrid', {
      sparse_indices: [1, 2, 3, 4, 5, 6, 7, 8, 9], sparse_values: [1, 1, 1, 1, 1, 1, 1, 1, 1],
    });
    expect(tooMany.status).toBe(400);
    expect(tooMany.json.error.code).toBe('limit_exceeded');
    expect(tooMany.json.error.message).toContain('SVC_MAX_SPARSE_TERMS');
    const tooManyWords = await rest('POST', '/v1/collections/hyb/query/hybrid', { query_text: 'one two three four five six seven eight nine' });
    expect([tooManyWords.status, tooManyWords.json.error.code]).toEqual([400, 'limit_exceeded']);
  });

  it('a provider failure is 502 provider_error without the secret, and nothing of the batch is stored', async () => {
    const count = (await rest('GET', '/v1/collections/docs')).json.count;
    openai.fail = true;
    try {
      const r = await rest('POST', '/v1/collections/docs/points:text', {
        points: [{ id: 'cat', text: 'overwritten?' }, { id: 'new1', text: 'brand new' }],
      });
      expect(r.status).toBe(502);
      expect(r.json.error.code).toBe('provider_error');
      expect(r.json.error.message).not.toContain(EMBED_SECRET);
      const q = await rest('POST', '/v1/collections/docs/query/text', { text: 'cat' });
      expect([q.status, q.json.error.code]).toEqual([502, 'provider_error']);
    } finally {
      openai.fail = false;
    }
    expect((await rest('GET', '/v1/collections/docs')).json.count).toBe(count);
    expect((await rest('GET', '/v1/collections/docs/points/new1')).status).toBe(404);
    expect((await rest('GET', '/v1/collections/docs/points/cat')).json.payload.__svc_text__).toBe(CORPUS[0].text);

    hostedB.fail = true;
    try {
      const r = await rest('POST', '/v1/collections/docs/query/text', { text: 'cat', rerank: true });
      expect([r.status, r.json.error.code]).toEqual([502, 'provider_error']);
      expect(r.json.error.message).not.toContain(RERANK_SECRET);
    } finally {
      hostedB.fail = false;
    }
  });

  it('a collection without a provider refuses text calls with a clear 400; hosted_b embeds through /embed', async () => {
    const r = await rest('POST', '/v1/collections/hyb/points:text', { points: [{ id: 'z', text: 'hello' }] });
    expect(r.status).toBe(400);
    expect(r.json.error.code).toBe('invalid_argument');
    expect(r.json.error.message).toContain('[embedding.hyb]');
    expect((await rest('POST', '/v1/collections', { name: 'notes', dim: DIM, metric: 'cosine' })).status).toBe(201);
    const up = await rest('POST', '/v1/collections/notes/points:text', { points: [{ id: 'n1', text: 'buy milk' }, { id: 'n2', text: 'call the bank' }] });
    expect(up.json).toEqual({ upserted: 2 });
    const embeds = hostedB.requests('/embed');
    expect(embeds.at(-1)!.body).toMatchObject({ model: 'embed-small', texts: ['buy milk', 'call the bank'], input_type: 'search_document' });
    expect(embeds.at(-1)!.auth).toBe(`Bearer ${RERANK_SECRET}`);
    const q = await rest('POST', '/v1/collections/notes/query/text', { text: 'milk', k: 1 });
    expect(q.json.hits.map((h: { id: string }) => h.id)).toEqual(['n1']);
    // A create whose dim differs from the configured provider's is refused.
    await rest('DELETE', '/v1/collections/notes');
    const bad = await rest('POST', '/v1/collections', { name: 'notes', dim: 4, metric: 'cosine' });
    expect([bad.status, bad.json.error.code]).toEqual([400, 'invalid_argument']);
    expect(bad.json.error.message).toContain('dim');
  });

  it('gRPC: UpsertText, SearchText (with and without rerank) and HybridSearch, same semantics', async () => {
    const up = await grpc('UpsertText', {
      collection: 'docs', points: [{ id: 'g1', text: 'gRPC streams protocol buffers', payload: toStruct({ lang: 'en' }) }],
    });
    expect(up.err).toBeUndefined();
    expect(up.res.upserted).toBe(1);
    const s = await grpc('SearchText', { collection: 'docs', text: 'protocol buffers', k: 2, consistency: 'strong' });
    expect(s.err).toBeUndefined();
    expect(s.res.hits[0].id).toBe('g1');
    expect(s.res.hits[0].score).toBeCloseTo(2 / 61, 12);
    expect(fromStruct(s.res.hits[0].payload)).toEqual({ lang: 'en', __svc_text__: 'gRPC streams protocol buffers' });
    const rr = await grpc('SearchText', { collection: 'docs', text: 'protocol buffers', k: 1, rerank: true, rerank_pool: 3 });
    expect(rr.res.hits.map((h: { id: string }) => h.id)).toEqual(['g1']);
    expect(hostedB.requests('/rerank').at(-1)!.body.documents.length).toBe(3);
    const h = await grpc('HybridSearch', {
      collection: 'hyb', vector: [1, 0, 0], sparse: { indices: [7, 9], values: [1, 0.1] }, query_text: 'zebra', k: 4,
    });
    expect(h.err).toBeUndefined();
    expect(h.res.hits.map((x: { id: string }) => x.id)).toEqual(['A', 'C', 'B', 'D']);
    expect(h.res.hits[0].score).toBeCloseTo(2 / 61, 12);
    const sparseOnly = await grpc('HybridSearch', { collection: 'hyb', sparse: { indices: [9], values: [1] }, k: 5, rrf_k0: 0 });
    expect(sparseOnly.res.hits.map((x: { id: string; score: number }) => [x.id, x.score])).toEqual([['D', 1], ['A', 0.5]]);

    openai.fail = true;
    try {
      const f = await grpc('UpsertText', { collection: 'docs', points: [{ id: 'g2', text: 'never stored' }] });
      expect([f.err?.code, f.code]).toEqual([status.UNAVAILABLE, 'provider_error']);
    } finally {
      openai.fail = false;
    }
    expect((await grpc('GetPoint', { collection: 'docs', id: 'g2' })).code).toBe('not_found');
    const noProvider = await grpc('UpsertText', { collection: 'hyb', points: [{ id: 'z', text: 'x' }] });
    expect([noProvider.err?.code, noProvider.code]).toEqual([status.INVALID_ARGUMENT, 'invalid_argument']);
    const tooMany = await grpc('HybridSearch', { collection: 'hyb', sparse: { indices: [1, 2, 3, 4, 5, 6, 7, 8, 9], values: [1, 1, 1, 1, 1, 1, 1, 1, 1] } });
    expect(tooMany.code).toBe('limit_exceeded');
  });

  it('the provider secrets reach no response, no log line and no file of the data directory', async () => {
    await server.stop();
    const logs = server.stderr() + server.stdout();
    expect(logs.length).toBeGreaterThan(0);
    expect(openai.requests('/v1/embeddings').some((s) => s.auth === `Bearer ${EMBED_SECRET}`)).toBe(true); // they were used
    for (const secret of [EMBED_SECRET, RERANK_SECRET]) {
      expect(seenByClients.filter((t) => t.includes(secret))).toEqual([]);
      expect(logs).not.toContain(secret);
      for (const f of filesUnder(dataDir)) expect(readFileSync(f).includes(secret), f).toBe(false);
    }
  });

  it('startup stops when api_key_env names an unset variable, naming it and the table', async () => {
    writeFileSync(join(dir, 'missing.toml'), toml(openai, hostedB, { embedKeyEnv: 'SVC_TEST_UNSET_EMBED_KEY' }));
    const p = run(['serve'], cleanEnv({
      SVC_API_KEYS: ADMIN, SVC_ENCRYPTION_KEY: MASTER, SVC_DATA_DIR: dataDir, SVC_CONFIG: join(dir, 'missing.toml'),
      SVC_REST_ADDR: '127.0.0.1:0', SVC_GRPC_ADDR: '127.0.0.1:0', RERANK_KEY: RERANK_SECRET,
    }), dir);
    expect(await exitOf(p)).not.toBe(0);
    expect(p.stderr()).toContain('SVC_TEST_UNSET_EMBED_KEY');
    expect(p.stderr()).toContain('[embedding.docs]');
  });

  it('startup stops when a provider dim differs from the existing collection dim', async () => {
    writeFileSync(join(dir, 'dim.toml'), toml(openai, hostedB, { dim: 16 }));
    const p = run(['serve'], cleanEnv({
      SVC_API_KEYS: ADMIN, SVC_ENCRYPTION_KEY: MASTER, SVC_DATA_DIR: dataDir, SVC_CONFIG: join(dir, 'dim.toml'),
      SVC_REST_ADDR: '127.0.0.1:0', SVC_GRPC_ADDR: '127.0.0.1:0', EMBED_KEY: EMBED_SECRET, RERANK_KEY: RERANK_SECRET,
    }), dir);
    expect(await exitOf(p)).not.toBe(0);
    expect(p.stderr()).toContain("[embedding.docs] has dim 16 but collection 'docs' has dim 8");
    expect(p.stderr()).not.toContain(EMBED_SECRET);
  });
});
