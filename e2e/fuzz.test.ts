import fc from 'fast-check';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { MASTER, api, serve, tempDir, type Server } from './harness.js';

/** Fuzzes every body-taking route: never a 5xx, never a crash, and a refused request changes nothing. */
const BODY_ROUTES: [string, string, () => fc.Arbitrary<unknown>][] = [
  ['POST', '/v1/collections', () => fc.record({ name: fc.constantFrom('f', 'f2', '', '..', 'a/b'), dim: fc.oneof(fc.integer(), fc.jsonValue()), metric: fc.jsonValue() }, { requiredKeys: [] })],
  ['PUT', '/v1/collections/f/points', () => fc.record({ points: fc.array(fc.record({ id: fc.oneof(fc.string(), fc.jsonValue()), vector: fc.oneof(fc.array(fc.double(), { maxLength: 4 }), fc.jsonValue()), payload: fc.jsonValue() }, { requiredKeys: [] }), { maxLength: 3 }) })],
  ['POST', '/v1/collections/f/points:bulk', () => fc.record({ points: fc.array(fc.record({ id: fc.string(), vector_b64: fc.string(), vector: fc.jsonValue() }, { requiredKeys: [] }), { maxLength: 3 }) })],
  ['POST', '/v1/collections/f/points:fetch', () => fc.record({ filter: fc.jsonValue(), limit: fc.oneof(fc.integer(), fc.double()), cursor: fc.oneof(fc.string(), fc.constant(null)) }, { requiredKeys: [] })],
  ['POST', '/v1/collections/f/points:count', () => fc.record({ filter: fc.jsonValue() }, { requiredKeys: [] })],
  ['POST', '/v1/collections/f/points:payload', () => fc.record({ points: fc.array(fc.record({ id: fc.oneof(fc.string(), fc.jsonValue()), payload: fc.jsonValue() }, { requiredKeys: [] }), { maxLength: 3 }), mode: fc.oneof(fc.constantFrom('merge', 'replace'), fc.jsonValue()) }, { requiredKeys: [] })],
  ['POST', '/v1/collections/f/points:delete', () => fc.record({ ids: fc.oneof(fc.array(fc.string(), { maxLength: 3 }), fc.jsonValue()), filter: fc.jsonValue() }, { requiredKeys: [] })],
  ['POST', '/v1/collections/f/query', () => fc.record({ vector: fc.oneof(fc.array(fc.double(), { maxLength: 4 }), fc.jsonValue()), k: fc.oneof(fc.integer(), fc.jsonValue()), filter: fc.jsonValue(), ef_search: fc.integer() }, { requiredKeys: [] })],
  ['POST', '/v1/collections/f/query/hybrid', () => fc.record({ vector: fc.array(fc.double(), { maxLength: 4 }), sparse_indices: fc.array(fc.integer()), sparse_values: fc.array(fc.double()), k: fc.integer(), rrf_k0: fc.double() }, { requiredKeys: [] })],
  ['POST', '/v1/collections/f/points:text', () => fc.record({ points: fc.array(fc.record({ id: fc.string(), text: fc.string() }), { maxLength: 2 }) })],
  ['POST', '/v1/collections/f/query/text', () => fc.record({ text: fc.string(), k: fc.integer(), rerank: fc.boolean() }, { requiredKeys: [] })],
  ['PUT', '/v1/collections/f/documents', () => fc.record({ documents: fc.array(fc.record({ id: fc.string(), vectors: fc.array(fc.array(fc.double(), { maxLength: 4 }), { maxLength: 2 }) }), { maxLength: 2 }) })],
  ['POST', '/v1/collections/f/query/multi', () => fc.record({ vectors: fc.array(fc.array(fc.double(), { maxLength: 4 }), { maxLength: 2 }), k: fc.integer() }, { requiredKeys: [] })],
  ['POST', '/v1/snapshots', () => fc.record({ name: fc.oneof(fc.string(), fc.constantFrom('../x', '/etc', 'a/../../b')) })],
];

let server: Server;
let call: ReturnType<typeof api>;
beforeAll(async () => {
  server = await serve({ SVC_API_KEYS: 'k', SVC_ENCRYPTION_KEY: MASTER, SVC_DATA_DIR: join(tempDir(), 'data'), SVC_MAX_REQUEST_BODY_BYTES: '65536' });
  call = api(server.base, 'k');
  await call('POST', '/v1/collections', { name: 'f', dim: 4, metric: 'l2' });
  await call('PUT', '/v1/collections/f/points', { points: [{ id: 'keep', vector: [1, 2, 3, 4], payload: { a: 1 } }] });
});
afterAll(async () => { await server?.stop(); });

async function state(): Promise<string> {
  const cols = await call('GET', '/v1/collections');
  const pts = await call('POST', '/v1/collections/f/points:fetch', { limit: 10000, with_vector: true });
  return JSON.stringify([cols.json.collections.map((c: { name: string; count: number }) => [c.name, c.count]).sort(), pts.json.points]);
}

describe('fuzzing every body', () => {
  it('never answers 5xx, never crashes, and a refused request leaves stored data unchanged', async () => {
    const arb = fc.oneof(...BODY_ROUTES.map(([m, p, body]) => fc.tuple(fc.constant(m), fc.constant(p), fc.oneof(body(), fc.jsonValue(), fc.string()))));
    await fc.assert(fc.asyncProperty(arb, fc.boolean(), async ([method, path, body], raw) => {
      const before = await state();
      const r = await call(method, path, raw && typeof body === 'string' ? body : body === undefined ? null : body);
      expect(r.status, `${method} ${path} ${JSON.stringify(body)} -> ${JSON.stringify(r.json)}`).toBeLessThan(500);
      expect(Object.keys(r.json ?? {})).toEqual(r.status >= 400 ? ['error'] : expect.anything());
      if (r.status >= 400) expect(await state()).toBe(before);
    }), { numRuns: 250, seed: 42 });
    expect(server.child.exitCode).toBeNull();
    expect((await call('GET', '/v1/collections/f/points/keep')).json).toMatchObject({ id: 'keep', payload: { a: 1 } });
  });
});
