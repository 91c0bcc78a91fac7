/**
 * The embedded API's types, checked by the compiler (`tsc -p .`, so `npm run build` and `npm run
 * typecheck`, and core/embedded-types.test.ts under vitest): every right body below compiles, and every
 * wrong one is refused, or its `@ts-expect-error` is itself an error. The types come from the one schema
 * of each body (core/base/bodies.ts). Nothing here runs; it only has to compile.
 */
import type { CollectionInfo, Database, Filter, Hit, IndexKind, PointOutput, Quantization } from '../embedded.js';

export async function rightBodies(db: Database): Promise<void> {
  const info: CollectionInfo = await db.createCollection({
    name: 'docs', dim: 3, metric: 'cosine', index: 'hnsw', index_params: { m: 16 }, quantization: 'scalar',
    filterable: [{ path: 'lang', field_type: 'keyword' }], exist_ok: true,
  });
  const index: 'hnsw' | 'flat' = info.index;
  await db.createCollection({ name: 'flat', dim: 3, index: 'flat' });
  const upserted: number = (await db.upsert('docs', { points: [{ id: 'a', vector: [1, 0, 0], payload: { lang: 'en' } }] })).upserted;
  await db.upsert('docs', { points: [{ id: 'b', vector: Float32Array.of(0, 1, 0) }] });
  await db.bulkUpsert('docs', { points: [{ id: 'c', vector_b64: 'AACAPwAAAAAAAAAA' }, { id: 'd', vector: [0, 0, 1] }] });
  const filter: Filter = { and: [{ eq: { field: 'lang', value: 'en' } }, { not: { in: { field: 'lang', value: ['fr', 'de'] } } }] };
  const hits: Hit[] = (await db.search('docs', { vector: [1, 0, 0], k: 5, filter, consistency: 'strong' })).hits;
  await db.hybridSearch('docs', { vector: [1, 0, 0], sparse_indices: [1], sparse_values: [0.5], query_text: 'hello', rrf_k0: 60 });
  await db.searchText('docs', { text: 'hello', rerank: false });
  await db.upsertText('docs', { points: [{ id: 't', text: 'hello world' }] });
  await db.upsertDocuments('multi', { documents: [{ id: 'm', vectors: [[1, 0, 0], [0, 1, 0]] }] });
  await db.searchMultiVector('multi', { vectors: [[1, 0, 0]], k: 3, ef_search: 64, with_vector: true });
  const point: PointOutput = await db.get('docs', 'a', { with_vector: true });
  const page = await db.fetch('docs', { filter, limit: 10, cursor: null });
  const next: string | null = page.next_cursor;
  const count: number = (await db.count('docs', { filter })).count;
  await db.count('docs');
  await db.setPayload('docs', { points: [{ id: 'a', payload: { lang: 'fr' } }], mode: 'merge' });
  await db.deletePoints('docs', { ids: ['a'] });
  await db.deletePoints('docs', { filter: { gte: { field: 'year', value: 2000 } } });
  const existed: boolean = (await db.deleteCollection('flat')).existed;
  const total: number = (await db.stats()).total_points;
  const path: string = (await db.snapshot({ name: 'nightly' })).path;
  void [index, upserted, hits, point, next, count, existed, total, path];
}

export async function wrongBodies(db: Database): Promise<void> {
  // @ts-expect-error: the index kinds this build does not have are not in the type
  await db.createCollection({ name: 'docs', dim: 3, index: 'ivf' });
  // @ts-expect-error: nor the quantizers it does not have
  await db.createCollection({ name: 'docs', dim: 3, quantization: 'product' });
  // @ts-expect-error: dim is required
  await db.createCollection({ name: 'docs' });
  // @ts-expect-error: an unknown field (a typo) is refused
  await db.createCollection({ name: 'docs', dims: 3 });
  // @ts-expect-error: a metric is one of three words
  await db.createCollection({ name: 'docs', dim: 3, metric: 'euclid' });
  // @ts-expect-error: a vector is numbers
  await db.upsert('docs', { points: [{ id: 'a', vector: ['1', '0', '0'] }] });
  // @ts-expect-error: a point's fields are id, vector, payload
  await db.upsert('docs', { points: [{ id: 'a', vectr: [1, 0, 0] }] });
  // @ts-expect-error: a bulk point has a vector or a vector_b64
  await db.bulkUpsert('docs', { points: [{ id: 'a' }] });
  // @ts-expect-error: and not both
  await db.bulkUpsert('docs', { points: [{ id: 'a', vector: [1, 0, 0], vector_b64: 'AACAPw==' }] });
  // @ts-expect-error: a search needs a vector
  await db.search('docs', { k: 5 });
  // @ts-expect-error: consistency is eventual or strong
  await db.search('docs', { vector: [1, 0, 0], consistency: 'now' });
  // @ts-expect-error: a filter condition needs a value
  await db.search('docs', { vector: [1, 0, 0], filter: { eq: { field: 'lang' } } });
  // @ts-expect-error: rrf_k0 is a number
  await db.hybridSearch('docs', { vector: [1, 0, 0], rrf_k0: '60' });
  // @ts-expect-error: a text search needs its text
  await db.searchText('docs', { k: 3 });
  // @ts-expect-error: a multi-vector query is a list of vectors
  await db.searchMultiVector('multi', { vectors: [1, 0, 0] });
  // @ts-expect-error: a document's vectors are a list of vectors
  await db.upsertDocuments('multi', { documents: [{ id: 'm', vectors: [1, 0, 0] }] });
  // @ts-expect-error: a text point needs its text
  await db.upsertText('docs', { points: [{ id: 't' }] });
  // @ts-expect-error: limit is a number
  await db.fetch('docs', { limit: '10' });
  // @ts-expect-error: with_vector is a boolean
  await db.get('docs', 'a', { with_vector: 'yes' });
  // @ts-expect-error: mode is merge or replace
  await db.setPayload('docs', { points: [{ id: 'a', payload: {} }], mode: 'patch' });
  // @ts-expect-error: ids are strings
  await db.deletePoints('docs', { ids: [1, 2] });
  // @ts-expect-error: a snapshot needs a name
  await db.snapshot({});
  const info = await db.collectionInfo('docs');
  // @ts-expect-error: an answer's index is one this build has
  const ivf: 'ivf' = info.index;
  // @ts-expect-error: the exported IndexKind lists only hnsw and flat
  const kind: IndexKind = 'vamana';
  // @ts-expect-error: the exported Quantization lists only none and scalar
  const q: Quantization = 'binary';
  void [ivf, kind, q];
}
