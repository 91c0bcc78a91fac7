import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { afterEach, describe, expect, it } from 'vitest';
import { SvcError } from '../base/errors.js';
import { createEmbedder, createReranker, FakeEmbedder, retryAfterMs, type ProviderOptions } from './index.js';

const KEY = 'sk-test-SECRET-0123456789abcdef';

interface Seen {
  method: string;
  url: string;
  headers: IncomingMessage['headers'];
  body: any;
}
type Reply = { status?: number; headers?: Record<string, string>; json?: unknown; raw?: string } | 'hang';

const servers: Server[] = [];
const hanging: ServerResponse[] = [];

/** A real HTTP server on 127.0.0.1 (port 0) answering each request with `handler`. */
async function serve(handler: (req: Seen, n: number) => Reply): Promise<{ url: string; seen: Seen[] }> {
  const seen: Seen[] = [];
  const server = createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => {
      const text = Buffer.concat(chunks).toString('utf8');
      const s: Seen = { method: req.method ?? '', url: req.url ?? '', headers: req.headers, body: text ? JSON.parse(text) : undefined };
      seen.push(s);
      const reply = handler(s, seen.length);
      if (reply === 'hang') {
        hanging.push(res);
        return;
      }
      res.writeHead(reply.status ?? 200, { 'content-type': 'application/json', ...reply.headers });
      res.end(reply.raw ?? JSON.stringify(reply.json ?? {}));
    });
  });
  servers.push(server);
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as AddressInfo;
  return { url: `http://127.0.0.1:${port}/v1`, seen };
}

afterEach(async () => {
  for (const r of hanging.splice(0)) r.destroy();
  await Promise.all(servers.splice(0).map(stop));
});

/** Close a server now, including the idle keep-alive sockets the client pool holds. */
function stop(s: Server): Promise<unknown> {
  return new Promise((resolve) => {
    s.close(resolve);
    s.closeAllConnections();
  });
}

const waits: number[] = [];
const opts = (over: Partial<ProviderOptions> = {}): ProviderOptions => ({
  timeoutMs: 2000,
  retries: 2,
  backoffBaseMs: 1,
  sleep: async (ms) => {
    waits.push(ms);
  },
  ...over,
});

/** The OpenAI-compatible reply for the inputs of a request: vector i = [len(text), i, 1]. */
const openAiReply = (req: Seen): Reply => ({
  json: { data: (req.body.input as string[]).map((t, i) => ({ index: i, embedding: [t.length, i, 1] })) },
});

async function providerFailure(p: Promise<unknown>): Promise<SvcError> {
  try {
    await p;
  } catch (e) {
    expect(e).toBeInstanceOf(SvcError);
    expect((e as SvcError).code).toBe('provider_error');
    expect((e as SvcError).message).not.toContain(KEY);
    return e as SvcError;
  }
  throw new Error('expected a provider_error');
}

describe('OpenAI-compatible adapter (hosted_a, local_compatible, http)', () => {
  it('posts {model, input} to {endpoint}/embeddings with the bearer key and orders vectors by index', async () => {
    const srv = await serve((req) => {
      const input = req.body.input as string[];
      // reply in reverse order: the adapter must place vectors by `index`
      return { json: { data: input.map((t, i) => ({ index: i, embedding: [t.length, i, 1] })).reverse() } };
    });
    const e = createEmbedder({ provider: 'hosted_a', model: 'm-1', endpoint: srv.url + '/', dim: 3, apiKey: KEY }, opts());
    const v = await e.embed(['a', 'bbb'], 'document');
    expect(v.map((x) => Array.from(x))).toEqual([[1, 0, 1], [3, 1, 1]]);
    expect(srv.seen).toHaveLength(1);
    expect(srv.seen[0].method).toBe('POST');
    expect(srv.seen[0].url).toBe('/v1/embeddings');
    expect(srv.seen[0].body).toEqual({ model: 'm-1', input: ['a', 'bbb'] });
    expect(srv.seen[0].headers.authorization).toBe(`Bearer ${KEY}`);
    expect(srv.seen[0].headers['content-type']).toBe('application/json');
  });

  it('sends no authorization header without a key, and batches inputs', async () => {
    const srv = await serve(openAiReply);
    const e = createEmbedder({ provider: 'local_compatible', model: 'm', endpoint: srv.url, dim: 3 }, opts({ batchSize: 2 }));
    const v = await e.embed(['a', 'bb', 'ccc', 'dddd', 'eeeee'], 'query');
    expect(v.map((x) => x[0])).toEqual([1, 2, 3, 4, 5]);
    expect(srv.seen.map((s) => s.body.input)).toEqual([['a', 'bb'], ['ccc', 'dddd'], ['eeeee']]);
    expect(srv.seen[0].headers.authorization).toBeUndefined();
    expect(await e.embed([], 'query')).toEqual([]);
  });

  it('retries a 429 and honours retry-after', async () => {
    waits.length = 0;
    const srv = await serve((req, n) => (n === 1 ? { status: 429, headers: { 'retry-after': '3' }, json: { error: 'slow down' } } : openAiReply(req)));
    const e = createEmbedder({ provider: 'http', model: 'm', endpoint: srv.url, dim: 3 }, opts());
    expect((await e.embed(['x'], 'document'))[0][0]).toBe(1);
    expect(srv.seen).toHaveLength(2);
    expect(waits).toEqual([3000]);
  });

  it('caps retry-after and backs off exponentially on 5xx', async () => {
    waits.length = 0;
    const srv = await serve((req, n) =>
      n === 1 ? { status: 429, headers: { 'retry-after': '3600' } } : n <= 3 ? { status: 503, raw: 'unavailable' } : openAiReply(req),
    );
    const e = createEmbedder({ provider: 'http', model: 'm', endpoint: srv.url, dim: 3 }, opts({ retries: 3, backoffBaseMs: 10, backoffMaxMs: 500 }));
    await e.embed(['x'], 'document');
    expect(srv.seen).toHaveLength(4);
    expect(waits).toEqual([500, 20, 40]);
  });

  it('gives up after the retries on persistent 500s', async () => {
    const srv = await serve(() => ({ status: 500, raw: 'internal kaboom' }));
    const e = createEmbedder({ provider: 'hosted_a', model: 'm', endpoint: srv.url, dim: 3, apiKey: KEY }, opts({ retries: 2 }));
    const err = await providerFailure(e.embed(['x'], 'document'));
    expect(srv.seen).toHaveLength(3);
    expect(err.message).toMatch(/HTTP 500/);
    expect(err.message).toMatch(/3 attempts/);
    expect(err.message).toMatch(/kaboom/);
  });

  it('does not retry a 4xx other than 429', async () => {
    const srv = await serve(() => ({ status: 401, json: { error: 'bad key' } }));
    const e = createEmbedder({ provider: 'hosted_a', model: 'm', endpoint: srv.url, dim: 3, apiKey: KEY }, opts({ retries: 5 }));
    const err = await providerFailure(e.embed(['x'], 'document'));
    expect(srv.seen).toHaveLength(1);
    expect(err.message).toMatch(/HTTP 401/);
  });

  it('times out a server that never answers, retrying within the bound', async () => {
    const srv = await serve(() => 'hang');
    const e = createEmbedder({ provider: 'http', model: 'm', endpoint: srv.url, dim: 3 }, opts({ timeoutMs: 100, retries: 1 }));
    const err = await providerFailure(e.embed(['x'], 'document'));
    expect(err.message).toMatch(/timed out after 100 ms/);
    expect(srv.seen).toHaveLength(2);
  });

  it('reports a connection failure as a provider error', async () => {
    const srv = await serve(openAiReply);
    const url = srv.url;
    await Promise.all(servers.splice(0).map(stop));
    const e = createEmbedder({ provider: 'hosted_a', model: 'm', endpoint: url, dim: 3, apiKey: KEY }, opts({ retries: 1 }));
    const err = await providerFailure(e.embed(['x'], 'document'));
    expect(err.message).toMatch(/ECONNREFUSED|connect/i);
  });

  const malformed: [string, (req: Seen) => Reply, RegExp][] = [
    ['non-JSON body', () => ({ raw: '<html>oops</html>' }), /malformed JSON/],
    ['no data list', () => ({ json: { embeddings: [] } }), /no data list/],
    ['too few embeddings', () => ({ json: { data: [{ index: 0, embedding: [1, 2, 3] }] } }), /1 embeddings for 2 inputs/],
    ['repeated index', () => ({ json: { data: [{ index: 0, embedding: [1, 2, 3] }, { index: 0, embedding: [1, 2, 3] }] } }), /bad or repeated index/],
    ['index out of range', () => ({ json: { data: [{ index: 0, embedding: [1, 2, 3] }, { index: 5, embedding: [1, 2, 3] }] } }), /bad or repeated index/],
    ['non-numeric component', () => ({ json: { data: [{ index: 0, embedding: [1, 'x', 3] }, { index: 1, embedding: [1, 2, 3] }] } }), /not a finite number/],
    ['embedding not a list', () => ({ json: { data: [{ index: 0, embedding: 'abc' }, { index: 1, embedding: [1, 2, 3] }] } }), /not a list/],
    ['wrong dimension', () => ({ json: { data: [{ index: 0, embedding: [1, 2] }, { index: 1, embedding: [1, 2, 3] }] } }), /length 2, expected the configured dim 3/],
  ];
  for (const [name, reply, pattern] of malformed) {
    it(`rejects a response with ${name}`, async () => {
      const srv = await serve(reply);
      const e = createEmbedder({ provider: 'http', model: 'm', endpoint: srv.url, dim: 3 }, opts());
      const err = await providerFailure(e.embed(['a', 'b'], 'document'));
      expect(err.message).toMatch(pattern);
      expect(srv.seen).toHaveLength(1); // a malformed 200 is not retried
    });
  }
});

describe('the key never reaches an error message', () => {
  it('even when the server echoes the authorization header back', async () => {
    const echo = (req: Seen): string => `you sent ${req.headers.authorization} with key ${KEY}`;
    for (const status of [500, 400, 200]) {
      const srv = await serve((req) => ({ status, raw: echo(req) }));
      const e = createEmbedder({ provider: 'hosted_a', model: 'm', endpoint: srv.url, dim: 3, apiKey: KEY }, opts({ retries: 0 }));
      const err = await providerFailure(e.embed(['x'], 'document'));
      expect(err.message).toContain('[redacted]');
      expect(err.message).not.toMatch(/SECRET/);
      expect(JSON.stringify(err.detail)).not.toContain(KEY);
    }
  });

  it('when the key sits in the endpoint URL', async () => {
    const srv = await serve(() => ({ status: 503, raw: 'down' }));
    const e = createEmbedder(
      { provider: 'hosted_b', model: 'm', endpoint: `${srv.url}?key=${KEY}`, dim: 3, apiKey: KEY },
      opts({ retries: 0 }),
    );
    await providerFailure(e.embed(['x'], 'document'));
  });
});

describe('hosted_b adapter', () => {
  it('embeds with input_type by kind', async () => {
    const srv = await serve((req) => ({
      json: { id: 'x', embeddings: { float: (req.body.texts as string[]).map((t) => [t.length, 0]) } },
    }));
    const e = createEmbedder({ provider: 'hosted_b', model: 'embed-v', endpoint: srv.url, dim: 2, apiKey: KEY }, opts());
    const d = await e.embed(['ab', 'abc'], 'document');
    const q = await e.embed(['abcd'], 'query');
    expect([...d, ...q].map((v) => v[0])).toEqual([2, 3, 4]);
    expect(srv.seen[0].url).toBe('/v1/embed');
    expect(srv.seen[0].body).toEqual({ model: 'embed-v', texts: ['ab', 'abc'], input_type: 'search_document', embedding_types: ['float'] });
    expect(srv.seen[1].body.input_type).toBe('search_query');
    expect(srv.seen[0].headers.authorization).toBe(`Bearer ${KEY}`);
  });

  it('rejects a wrong dimension and a missing embeddings list', async () => {
    const srv = await serve((_req, n) => (n === 1 ? { json: { embeddings: { float: [[1, 2, 3]] } } } : { json: { embeddings: {} } }));
    const e = createEmbedder({ provider: 'hosted_b', model: 'm', endpoint: srv.url, dim: 2, apiKey: KEY }, opts());
    expect((await providerFailure(e.embed(['x'], 'document'))).message).toMatch(/expected the configured dim 2/);
    expect((await providerFailure(e.embed(['x'], 'document'))).message).toMatch(/no embeddings.float/);
  });

  it('reranks in one round trip, best first, at most top_n', async () => {
    const srv = await serve((req) => ({
      json: {
        results: [
          { index: 2, relevance_score: 0.2 },
          { index: 0, relevance_score: 0.9 },
          { index: 1, relevance_score: 0.5 },
        ].slice(0, req.body.top_n),
      },
    }));
    const r = createReranker({ provider: 'hosted_b', model: 'rerank-v', endpoint: srv.url, apiKey: KEY }, opts());
    expect(await r.rerank('q', ['d0', 'd1', 'd2'], 3)).toEqual([
      { index: 0, score: 0.9 },
      { index: 1, score: 0.5 },
      { index: 2, score: 0.2 },
    ]);
    expect(srv.seen[0].url).toBe('/v1/rerank');
    expect(srv.seen[0].body).toEqual({ model: 'rerank-v', query: 'q', documents: ['d0', 'd1', 'd2'], top_n: 3 });
    expect(await r.rerank('q', ['d0', 'd1', 'd2'], 2)).toHaveLength(2);
    expect(await r.rerank('q', [], 2)).toEqual([]);
    expect(srv.seen).toHaveLength(2);
  });

  it('rejects rerank results with bad indices or scores, and retries a 429', async () => {
    const replies: Reply[] = [
      { json: { results: [{ index: 7, relevance_score: 1 }] } },
      { json: { results: [{ index: 0, relevance_score: 'high' }] } },
      { json: { nothing: true } },
      { status: 429, headers: { 'retry-after': '0' } },
      { json: { results: [{ index: 1, relevance_score: 0.3 }] } },
    ];
    const srv = await serve((_req, n) => replies[n - 1]);
    const r = createReranker({ provider: 'hosted_b', model: 'm', endpoint: srv.url, apiKey: KEY }, opts());
    expect((await providerFailure(r.rerank('q', ['a', 'b'], 2))).message).toMatch(/bad or repeated index/);
    expect((await providerFailure(r.rerank('q', ['a', 'b'], 2))).message).toMatch(/relevance_score/);
    expect((await providerFailure(r.rerank('q', ['a', 'b'], 2))).message).toMatch(/no results list/);
    expect(await r.rerank('q', ['a', 'b'], 2)).toEqual([{ index: 1, score: 0.3 }]);
  });
});

describe('fake provider', () => {
  const cos = (a: Float32Array, b: Float32Array): number => a.reduce((s, x, i) => s + x * b[i], 0);

  it('is deterministic and gives unit vectors of the configured dim', async () => {
    const e = createEmbedder({ provider: 'fake', model: 'any', dim: 32 }, opts());
    const [a, b] = await e.embed(['Hello world', 'Hello world'], 'document');
    const [c] = await new FakeEmbedder(32).embed(['Hello world'], 'query');
    expect(a).toHaveLength(32);
    expect(Array.from(a)).toEqual(Array.from(b));
    expect(Array.from(a)).toEqual(Array.from(c));
    expect(cos(a, a)).toBeCloseTo(1, 5);
    const [empty, emoji] = await e.embed(['', '🙂'], 'document');
    expect(cos(empty, empty)).toBeCloseTo(1, 5);
    expect(Array.from(empty)).not.toEqual(Array.from(emoji));
  });

  it('puts texts that share words closer together', async () => {
    const e = new FakeEmbedder(64);
    const [q, near, far] = await e.embed(['rocket engine thrust', 'the thrust of a rocket', 'banana bread recipe'], 'document');
    expect(cos(q, near)).toBeGreaterThan(cos(q, far));
    expect(cos(q, near)).toBeGreaterThan(0.5);
  });

  it('reranks by shared query terms', async () => {
    const r = createReranker({ provider: 'fake', model: 'x' }, opts());
    expect(await r.rerank('rocket engines', ['bread', 'rocket', 'rocket engine'], 2)).toEqual([
      { index: 2, score: 1 },
      { index: 1, score: 0.5 },
    ]);
  });
});

describe('configuration', () => {
  const bad: [string, () => unknown, RegExp][] = [
    ['an unknown provider', () => createEmbedder({ provider: 'nope', model: 'm', dim: 3 }, opts()), /unknown embedding provider/],
    ['a missing endpoint for http', () => createEmbedder({ provider: 'http', model: 'm', dim: 3 }, opts()), /endpoint is required/],
    ['a non-http endpoint', () => createEmbedder({ provider: 'http', model: 'm', endpoint: 'file:///etc', dim: 3 }, opts()), /http or https/],
    ['hosted_b without a key', () => createEmbedder({ provider: 'hosted_b', model: 'm', dim: 3 }, opts()), /needs an api key/],
    ['hosted_a without a key', () => createEmbedder({ provider: 'hosted_a', model: 'm', dim: 3 }, opts()), /needs an api key/],
    ['a bad dim', () => createEmbedder({ provider: 'fake', model: 'm', dim: 0 }, opts()), /dim must be a positive integer/],
    ['a rerank provider that cannot rerank', () => createReranker({ provider: 'hosted_a', model: 'm' }, opts()), /unknown rerank provider/],
    ['a zero timeout', () => createEmbedder({ provider: 'fake', model: 'm', dim: 3 }, opts({ timeoutMs: 0 })), /timeoutMs/],
  ];
  for (const [name, f, pattern] of bad) {
    it(`refuses ${name}`, () => {
      try {
        f();
        expect.unreachable();
      } catch (e) {
        expect((e as SvcError).code).toBe('invalid_argument');
        expect((e as SvcError).message).toMatch(pattern);
      }
    });
  }

  it('defaults hosted endpoints to the vendors without contacting them', () => {
    expect(() => createEmbedder({ provider: 'hosted_a', model: 'm', dim: 3, apiKey: KEY }, opts())).not.toThrow();
    expect(() => createReranker({ provider: 'hosted_b', model: 'm', apiKey: KEY }, opts())).not.toThrow();
  });

  it('reads retry-after as seconds or an HTTP date', () => {
    expect(retryAfterMs('2', 0)).toBe(2000);
    expect(retryAfterMs(undefined, 0)).toBeUndefined();
    expect(retryAfterMs('soon', 0)).toBeUndefined();
    const now = Date.parse('2026-01-01T00:00:00Z');
    expect(retryAfterMs('Thu, 01 Jan 2026 00:00:05 GMT', now)).toBe(5000);
    expect(retryAfterMs('Thu, 01 Jan 2025 00:00:05 GMT', now)).toBe(0);
  });
});
