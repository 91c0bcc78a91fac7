import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import type { CollectionInfo, Hit } from '../../core/base/model.js';
import * as pb from '../../proto/gen/svc.js';
import * as c from './convert.js';

/** What the server sees of a message a client sent: encoded, then decoded, as on the wire. */
function wire<T>(fns: { encode(m: T): { finish(): Uint8Array }; decode(b: Uint8Array): T }, m: T): T {
  return fns.decode(fns.encode(m).finish());
}

// Every key survives the Struct round trip, `__proto__` included (the engine refuses it; see validate.test.ts).
const key = fc.oneof(fc.constantFrom('__proto__', 'constructor', 'prototype'), fc.string());
const jsonObject = fc.dictionary(key, fc.jsonValue({ maxDepth: 3 }), { maxKeys: 6 }) as fc.Arbitrary<Record<string, unknown>>;
const f32 = (xs: number[]): number[] => Array.from(Float32Array.from(xs));

describe('requests from the wire', () => {
  it('keeps any JSON payload of an upserted point as sent (google.protobuf.Struct)', () => {
    fc.assert(fc.property(fc.string({ minLength: 1 }), fc.array(fc.float({ noNaN: true }), { maxLength: 8 }), jsonObject, (id, vector, payload) => {
      const got = c.pointInput(wire(pb.PointInput, { id, vector, payload }));
      expect(got).toEqual({ id, vector: f32(vector), payload });
    }));
  });

  it('keeps any JSON filter of a query as sent', () => {
    fc.assert(fc.property(jsonObject, (filter) => {
      const got = c.searchQuery(wire(pb.SearchRequest, { collection: 'c', vector: [1], filter }));
      expect(got.filter).toEqual(filter);
    }));
  });

  it('checks a search on the typed message exactly as the REST schema does (same body, same refusal)', () => {
    const outcome = (f: () => unknown) => { try { return { ok: f() }; } catch (e) { return { err: (e as Error).message }; } };
    const opt = <T>(a: fc.Arbitrary<T>) => fc.option(a, { nil: undefined });
    fc.assert(fc.property(
      fc.array(fc.float({ noNaN: true }), { maxLength: 6 }), opt(fc.integer({ min: 0, max: 2 ** 32 - 1 })), opt(jsonObject),
      opt(fc.integer({ min: 0, max: 2 ** 32 - 1 })), opt(fc.boolean()), opt(fc.boolean()),
      opt(fc.oneof(fc.constantFrom('eventual', 'strong', 'Strong', '', 'constructor', 'toString'), fc.string())),
      (vector, k, filter, ef_search, with_payload, with_vector, consistency) => {
        const r = wire(pb.SearchRequest, { collection: 'c', vector, k, filter, ef_search, with_payload, with_vector, consistency });
        const direct = outcome(() => c.searchQuery(r));
        expect(direct).toEqual(outcome(() => c.searchQueryBySchema(r)));
        if ('ok' in direct) expect(Object.keys(direct.ok as object)).toEqual(Object.keys(outcome(() => c.searchQueryBySchema(r)).ok as object));
      },
    ), { numRuns: 300 });
  });

  it('leaves unset optional fields absent, so the engine applies the REST defaults', () => {
    const q = c.searchQuery(wire(pb.SearchRequest, { collection: 'c', vector: [0.5, 1] }));
    expect(q).toEqual({ vector: [0.5, 1] });
    expect(Object.keys(q)).toEqual(['vector']);
    const set = c.searchQuery(wire(pb.SearchRequest, { collection: 'c', vector: [1], k: 0, with_payload: false, ef_search: 7, consistency: 'strong' }));
    expect(set).toEqual({ vector: [1], k: 0, with_payload: false, ef_search: 7, consistency: 'strong' });
  });

  it('reads a hybrid query with an empty dense vector as sparse-only, and no sparse message as dense-only', () => {
    const sparseOnly = c.hybridQuery(wire(pb.HybridSearchRequest, {
      collection: 'c', vector: [], sparse: { indices: [3, 9], values: [0.5, 2] }, k: 5, rrf_k0: 10, query_text: 'hello',
    }));
    expect(sparseOnly).toEqual({ sparse_indices: [3, 9], sparse_values: [0.5, 2], k: 5, rrf_k0: 10, query_text: 'hello' });
    const denseOnly = c.hybridQuery(wire(pb.HybridSearchRequest, { collection: 'c', vector: [1, 2] }));
    expect(denseOnly).toEqual({ vector: [1, 2] });
  });

  it('turns bulk vector bytes into the same vector_b64 string a REST client sends', () => {
    const v = Float32Array.from([1.5, -2, 0.25]);
    const bytes = Buffer.from(v.buffer);
    const got = c.bulkPointInput(wire(pb.BulkPointInput, { id: 'a', vector: [], vector_b64: bytes }));
    expect(got).toEqual({ id: 'a', vector_b64: bytes.toString('base64') });
    expect(c.bulkPointInput(wire(pb.BulkPointInput, { id: 'b', vector: [1, 2], vector_b64: Buffer.alloc(0) }))).toEqual({ id: 'b', vector: [1, 2] });
  });

  it('builds collection params with only what the client set', () => {
    const got = c.createCollectionParams(wire(pb.CreateCollectionRequest, {
      name: 'docs', dim: 4, metric: 'l2', filterable: [{ path: 'lang', field_type: 'keyword' }], index_params: { m: 8 },
    }));
    expect(got).toEqual({ name: 'docs', dim: 4, metric: 'l2', filterable: [{ path: 'lang', field_type: 'keyword' }], index_params: { m: 8 } });
    expect(c.createCollectionParams(wire(pb.CreateCollectionRequest, { name: 'x', dim: 2, metric: 'dot', filterable: [] })))
      .toEqual({ name: 'x', dim: 2, metric: 'dot' });
  });

  it('reads multi-vector documents and queries as lists of vectors', () => {
    const d = c.documentInput(wire(pb.DocumentInput, { id: 'd', vectors: [{ values: [1, 0] }, { values: [0, 1] }], payload: { a: 1 } }));
    expect(d).toEqual({ id: 'd', vectors: [[1, 0], [0, 1]], payload: { a: 1 } });
    const q = c.multiVectorQuery(wire(pb.SearchMultiVectorRequest, { collection: 'c', vectors: [{ values: [1, 0] }], k: 3 }));
    expect(q).toEqual({ vectors: [[1, 0]], k: 3 });
    // ef_search and with_vector, as the body has them (issue 21: the proto lacked both).
    const full = c.multiVectorQuery(wire(pb.SearchMultiVectorRequest, { collection: 'c', vectors: [{ values: [1, 0] }], ef_search: 32, with_vector: true }));
    expect(full).toEqual({ vectors: [[1, 0]], ef_search: 32, with_vector: true });
    const hit = wire(pb.SearchResponse, c.hits({ hits: [{ id: 'm', rank: 0, score: 1, vectors: [[1, 0], [0, 1]] }] })).hits[0];
    expect(hit.vectors).toEqual([{ values: [1, 0] }, { values: [0, 1] }]);
  });
});

describe('responses to the wire', () => {
  const hitArb: fc.Arbitrary<Hit> = fc.record({
    id: fc.string({ minLength: 1 }),
    rank: fc.nat(),
    score: fc.double({ noNaN: true }),
    payload: fc.option(jsonObject, { nil: undefined }),
    vector: fc.option(fc.array(fc.float({ noNaN: true }), { maxLength: 4 }), { nil: undefined }),
  }, { requiredKeys: ['id', 'rank', 'score'] });

  it('gives a client every hit as the REST body has it (vector empty when not asked for)', () => {
    fc.assert(fc.property(fc.array(hitArb, { maxLength: 5 }), (hits) => {
      const got = wire(pb.SearchResponse, c.hits({ hits }));
      expect(got.hits.length).toBe(hits.length);
      got.hits.forEach((h, i) => {
        expect(h.id).toBe(hits[i].id);
        expect(h.rank).toBe(hits[i].rank);
        expect(h.score).toBe(hits[i].score + 0); // proto3 does not send a zero, so -0 arrives as 0 (as in JSON)
        expect(h.payload).toEqual(hits[i].payload);
        expect(h.vector).toEqual(f32(hits[i].vector ?? []));
      });
    }));
  });

  it('says "last page" by leaving next_cursor absent', () => {
    expect(wire(pb.FetchResponse, c.fetchResponse({ points: [{ id: 'a', payload: {} }], next_cursor: null })))
      .toEqual({ points: [{ id: 'a', vector: [], payload: {} }], next_cursor: undefined });
    expect(wire(pb.FetchResponse, c.fetchResponse({ points: [], next_cursor: 'abc' })).next_cursor).toBe('abc');
  });

  it('carries collection info, with null fields absent', () => {
    const info: CollectionInfo = {
      name: 'docs', dim: 3, metric: 'cosine', index: 'hnsw', index_params: { m: 16, ef_construction: 200, ef_search: 64 },
      quantization: 'none', pq_subspaces: null, filterable: [{ path: 'n', field_type: 'numeric' }], multivector: false,
      vector_encryption: null, count: 12, index_state: 'current',
    };
    const got = wire(pb.CollectionInfo, c.collectionInfo(info));
    expect(got).toEqual({ ...info, pq_subspaces: undefined, vector_encryption: undefined });
  });
});
