import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { SvcError } from '../base/errors.js';
import { collectionExisted, type Filter, type Payload } from '../base/model.js';
import { Prng } from '../base/prng.js';
import { Database } from './database.js';
import { NodeEngine } from '../engine/node.js';
import { buildIndexInline } from './rebuild.js';

/**
 * The operations users reach for first (issue 21): count, payload updates, delete by ids or filter,
 * create with exist_ok. Semantics through the engine (the embedded API); transports have their own tests.
 */

const KEY = new Uint8Array(32).fill(5);
const dirs: string[] = [];
afterEach(() => {
  for (const d of dirs.splice(0)) rmSync(d, { recursive: true, force: true });
});

async function open(extra: Partial<Parameters<typeof Database.open>[0]> = {}): Promise<Database> {
  const d = mkdtempSync(join(tmpdir(), 'svc-ops-'));
  dirs.push(d);
  return Database.open({ dataDir: join(d, 'data'), masterKey: KEY, buildIndex: buildIndexInline, ...extra });
}

async function codeOf(p: Promise<unknown>): Promise<string> {
  try {
    await p;
    return 'ok';
  } catch (e) {
    return e instanceof SvcError ? e.code : `not an SvcError: ${String(e)}`;
  }
}

const FILTERABLE = [
  { path: 'tag', field_type: 'keyword' as const },
  { path: 'n', field_type: 'numeric' as const },
  { path: 'meta.color', field_type: 'keyword' as const },
];

async function withPoints(n = 10): Promise<Database> {
  const db = await open();
  await db.createCollection({ name: 'c', dim: 3, metric: 'l2', filterable: FILTERABLE });
  await db.upsert('c', {
    points: Array.from({ length: n }, (_, i) => ({ id: `p${i}`, vector: [i, 1, 0], payload: { tag: i % 2 === 0 ? 'even' : 'odd', n: i, keep: 'yes' } })),
  });
  return db;
}

async function payloads(db: Database, name = 'c'): Promise<Record<string, Payload>> {
  const out: Record<string, Payload> = {};
  for (const p of (await db.fetch(name, { limit: 10_000 })).points) out[p.id] = p.payload;
  return out;
}

describe('count', () => {
  it('counts every point, or those a filter matches; refuses what search refuses', async () => {
    const db = await withPoints(10);
    expect(await db.count('c')).toEqual({ count: 10 });
    expect(await db.count('c', {})).toEqual({ count: 10 });
    expect(await db.count('c', { filter: { eq: { field: 'tag', value: 'odd' } } })).toEqual({ count: 5 });
    expect(await db.count('c', { filter: { and: [{ gte: { field: 'n', value: 3 } }, { lt: { field: 'n', value: 7 } }] } })).toEqual({ count: 4 });
    expect(await db.count('c', { filter: { eq: { field: 'tag', value: 'none' } } })).toEqual({ count: 0 });
    expect(await codeOf(db.count('c', { filter: { eq: { field: 'keep', value: 'yes' } } }))).toBe('invalid_argument');
    expect(await codeOf(db.count('c', { filter: {} as Filter }))).toBe('invalid_argument');
    expect(await codeOf(db.count('c', { k: 3 } as never))).toBe('invalid_argument');
    expect(await codeOf(db.count('nope'))).toBe('not_found');
    expect(await codeOf(db.count('bad/name'))).toBe('invalid_argument');
    // Deletes and updates are counted at once: the point table answers, not an index.
    await db.delete('c', 'p1');
    expect(await db.count('c', { filter: { eq: { field: 'tag', value: 'odd' } } })).toEqual({ count: 4 });
    await db.close();
  });

  it('counts documents, not token rows, in a multi-vector collection', async () => {
    const db = await open();
    await db.createCollection({ name: 'm', dim: 2, metric: 'cosine', multivector: true, filterable: [{ path: 'k', field_type: 'numeric' }] });
    await db.upsertDocuments('m', { documents: [
      { id: 'a', vectors: [[1, 0], [0, 1], [1, 1]], payload: { k: 1 } },
      { id: 'b', vectors: [[1, 0]], payload: { k: 2 } },
    ] });
    expect(await db.count('m')).toEqual({ count: 2 });
    expect(await db.count('m', { filter: { eq: { field: 'k', value: 1 } } })).toEqual({ count: 1 });
    await db.close();
  });
});

describe('setPayload', () => {
  it('merges by default: the keys given replace those keys, the others stay; vectors are untouched', async () => {
    const db = await withPoints(4);
    const before = await db.get('c', 'p2', { with_vector: true });
    expect(await db.setPayload('c', { points: [{ id: 'p2', payload: { tag: 'odd', extra: [1, 2] } }] })).toEqual({ updated: 1 });
    expect(await db.get('c', 'p2', { with_vector: true })).toEqual({ id: 'p2', vector: before.vector, payload: { tag: 'odd', n: 2, keep: 'yes', extra: [1, 2] } });
    expect(await db.setPayload('c', { mode: 'merge', points: [{ id: 'p2', payload: { n: null } }] })).toEqual({ updated: 1 });
    expect((await db.get('c', 'p2')).payload).toEqual({ tag: 'odd', n: null, keep: 'yes', extra: [1, 2] });
    // Other points are not touched.
    expect((await db.get('c', 'p3')).payload).toEqual({ tag: 'odd', n: 3, keep: 'yes' });
    await db.close();
  });

  it('replace mode makes the payload exactly the one given ({} clears it)', async () => {
    const db = await withPoints(3);
    expect(await db.setPayload('c', { mode: 'replace', points: [{ id: 'p0', payload: { only: 1 } }, { id: 'p1', payload: {} }] })).toEqual({ updated: 2 });
    expect((await db.get('c', 'p0')).payload).toEqual({ only: 1 });
    expect((await db.get('c', 'p1')).payload).toEqual({});
    await db.close();
  });

  it('applies a batch in order; an id given twice is one point updated', async () => {
    const db = await withPoints(2);
    expect(await db.setPayload('c', { points: [{ id: 'p0', payload: { a: 1, b: 1 } }, { id: 'p0', payload: { b: 2 } }] })).toEqual({ updated: 1 });
    expect((await db.get('c', 'p0')).payload).toEqual({ tag: 'even', n: 0, keep: 'yes', a: 1, b: 2 });
    await db.close();
  });

  it('keeps the payload index current: filters see the new values and no longer the old ones', async () => {
    const db = await withPoints(6);
    const odd = { eq: { field: 'tag', value: 'odd' } } as Filter;
    expect((await db.count('c', { filter: odd })).count).toBe(3);
    await db.setPayload('c', { points: [{ id: 'p0', payload: { tag: 'odd' } }, { id: 'p2', payload: { tag: 'odd', meta: { color: 'red' } } }] });
    expect((await db.count('c', { filter: odd })).count).toBe(5);
    expect((await db.count('c', { filter: { eq: { field: 'tag', value: 'even' } } })).count).toBe(1);
    expect((await db.count('c', { filter: { eq: { field: 'meta.color', value: 'red' } } })).count).toBe(1);
    await db.setPayload('c', { mode: 'replace', points: [{ id: 'p2', payload: { n: 100 } }] });
    expect((await db.count('c', { filter: { eq: { field: 'meta.color', value: 'red' } } })).count).toBe(0);
    expect((await db.count('c', { filter: { gte: { field: 'n', value: 100 } } })).count).toBe(1);
    // Filtered search and fetch agree with the index.
    const hits = await db.search('c', { vector: [2, 1, 0], k: 10, filter: odd });
    expect(hits.hits.map((h) => h.id).sort()).toEqual(['p0', 'p1', 'p3', 'p5']);
    expect((await db.fetch('c', { filter: { gte: { field: 'n', value: 100 } } })).points.map((p) => p.id)).toEqual(['p2']);
    await db.close();
  });

  it('keeps the text index current: BM25 finds the new words and not the old ones', async () => {
    const db = await open();
    await db.createCollection({ name: 't', dim: 2, metric: 'l2' });
    await db.upsert('t', { points: [
      { id: 'a', vector: [1, 0], payload: { __svc_text__: 'a heron over the marsh' } },
      { id: 'b', vector: [0, 1], payload: { __svc_text__: 'an engine in the shed' } },
    ] });
    // BM25 ranks in the database; the node's engine fuses (core/engine/node.ts).
    const engine = new NodeEngine(db);
    const words = async (q: string) => (await engine.hybridSearch('t', { query_text: q, k: 5 })).hits.map((h) => h.id);
    expect(await words('heron')).toEqual(['a']);
    await db.setPayload('t', { points: [{ id: 'a', payload: { __svc_text__: 'a turbine in the yard' } }] });
    expect(await words('heron')).toEqual([]);
    expect(await words('turbine')).toEqual(['a']);
    await db.setPayload('t', { mode: 'replace', points: [{ id: 'b', payload: { note: 'no text now' } }] });
    expect(await words('engine')).toEqual([]);
    await db.close();
  });

  it('is all or nothing: a missing id is not_found and nothing changes', async () => {
    const db = await withPoints(3);
    const before = await payloads(db);
    const err = await db.setPayload('c', { points: [{ id: 'p0', payload: { x: 1 } }, { id: 'ghost', payload: { x: 1 } }] }).catch((e: SvcError) => e);
    expect(err).toMatchObject({ code: 'not_found' });
    expect((err as SvcError).message).toContain('ghost');
    expect(await payloads(db)).toEqual(before);
    await db.close();
  });

  it('refuses bad bodies and limits with the contract codes, changing nothing', async () => {
    const db = await withPoints(3);
    const before = await payloads(db);
    const limited = await open({ limits: { maxBatchSize: 2, maxPayloadBytes: 64 } });
    await limited.createCollection({ name: 'c', dim: 3, metric: 'l2' });
    await limited.upsert('c', { points: [{ id: 'a', vector: [1, 2, 3], payload: { s: 'x'.repeat(40) } }, { id: 'b', vector: [1, 2, 3] }] });
    const cases: [Database, unknown, string][] = [
      [db, { points: [{ id: 'p0', payload: { x: 1 } }], mode: 'upsert' }, 'invalid_argument'],
      [db, { points: [{ id: 'p0', payload: [1] }] }, 'invalid_argument'],
      [db, { points: [{ id: 'p0' }] }, 'invalid_argument'],
      [db, { points: [{ id: 'p0', payload: null }] }, 'invalid_argument'],
      [db, { points: [{ id: 'p0', payload: { x: 1 }, vector: [1, 2, 3] }] }, 'invalid_argument'],
      [db, { points: [{ id: '', payload: { x: 1 } }] }, 'invalid_argument'],
      [db, { points: 'p0' }, 'invalid_argument'],
      [db, { points: [], extra: 1 }, 'invalid_argument'],
      [db, { points: [{ id: 'p0', payload: { x: 1 } }, { id: 'p1', payload: { __svc_sparse__: 'no' } }] }, 'invalid_argument'],
      [db, { points: [{ id: 'p0', payload: JSON.parse('{"__proto__":{"admin":true}}') }] }, 'invalid_argument'],
      [limited, { points: [{ id: 'a', payload: {} }, { id: 'b', payload: {} }, { id: 'a', payload: {} }] }, 'limit_exceeded'],
      [limited, { points: [{ id: 'b', payload: { s: 'y'.repeat(80) } }] }, 'limit_exceeded'],
      // The merged payload is what must fit: each part does, the two together do not.
      [limited, { points: [{ id: 'b', payload: { t: 1 } }, { id: 'a', payload: { t: 'z'.repeat(30) } }] }, 'limit_exceeded'],
    ];
    for (const [target, body, code] of cases) expect(await codeOf(target.setPayload('c', body as never)), JSON.stringify(body)).toBe(code);
    expect(await payloads(db)).toEqual(before);
    expect(await payloads(limited)).toEqual({ a: { s: 'x'.repeat(40) }, b: {} });
    // Replacing it with a smaller one fits.
    expect(await limited.setPayload('c', { mode: 'replace', points: [{ id: 'a', payload: { t: 'z'.repeat(30) } }] })).toEqual({ updated: 1 });
    expect(await codeOf(db.setPayload('nope', { points: [] }))).toBe('not_found');
    expect(await db.setPayload('c', { points: [] })).toEqual({ updated: 0 });
    await limited.close();
    await db.close();
  });

  it('updates a multi-vector document\'s payload', async () => {
    const db = await open();
    await db.createCollection({ name: 'm', dim: 2, metric: 'cosine', multivector: true, filterable: [{ path: 'k', field_type: 'numeric' }] });
    await db.upsertDocuments('m', { documents: [{ id: 'a', vectors: [[1, 0], [0, 1]], payload: { k: 1 } }] });
    await db.setPayload('m', { points: [{ id: 'a', payload: { k: 2 } }] });
    expect((await db.get('m', 'a')).payload).toEqual({ k: 2 });
    expect((await db.searchMultiVector('m', { vectors: [[1, 0]], k: 5, filter: { eq: { field: 'k', value: 2 } } })).hits.map((h) => h.id)).toEqual(['a']);
    await db.close();
  });
});

describe('deletePoints', () => {
  it('by ids: deletes those there and counts them', async () => {
    const db = await withPoints(5);
    expect(await db.deletePoints('c', { ids: ['p0', 'p3', 'ghost', 'p3'] })).toEqual({ deleted: 2 });
    expect((await db.fetch('c')).points.map((p) => p.id)).toEqual(['p1', 'p2', 'p4']);
    expect(await db.deletePoints('c', { ids: ['p0'] })).toEqual({ deleted: 0 });
    expect(await db.deletePoints('c', { ids: [] })).toEqual({ deleted: 0 });
    await db.close();
  });

  it('by filter: deletes every match, and search, fetch and count agree', async () => {
    const db = await withPoints(10);
    expect(await db.deletePoints('c', { filter: { eq: { field: 'tag', value: 'even' } } })).toEqual({ deleted: 5 });
    expect((await db.collectionInfo('c')).count).toBe(5);
    expect((await db.search('c', { vector: [0, 1, 0], k: 10 })).hits.map((h) => h.id).sort()).toEqual(['p1', 'p3', 'p5', 'p7', 'p9']);
    expect(await db.deletePoints('c', { filter: { eq: { field: 'tag', value: 'even' } } })).toEqual({ deleted: 0 });
    expect(await db.deletePoints('c', { filter: { not: { lt: { field: 'n', value: 5 } } } })).toEqual({ deleted: 3 });
    expect((await db.fetch('c')).points.map((p) => p.id)).toEqual(['p1', 'p3']);
    await db.close();
  });

  it('by filter on a multi-vector collection deletes whole documents', async () => {
    const db = await open();
    await db.createCollection({ name: 'm', dim: 2, metric: 'cosine', multivector: true, filterable: [{ path: 'k', field_type: 'numeric' }] });
    await db.upsertDocuments('m', { documents: [
      { id: 'a', vectors: [[1, 0], [0, 1]], payload: { k: 1 } }, { id: 'b', vectors: [[1, 1]], payload: { k: 2 } },
    ] });
    expect(await db.deletePoints('m', { filter: { eq: { field: 'k', value: 1 } } })).toEqual({ deleted: 1 });
    expect((await db.searchMultiVector('m', { vectors: [[1, 0]], k: 5 })).hits.map((h) => h.id)).toEqual(['b']);
    await db.close();
  });

  it('refuses bad bodies and limits with the contract codes, deleting nothing', async () => {
    const db = await withPoints(4);
    const limited = await open({ limits: { maxBatchSize: 2 } });
    await limited.createCollection({ name: 'c', dim: 3, metric: 'l2' });
    await limited.upsert('c', { points: [{ id: 'a', vector: [1, 2, 3] }, { id: 'b', vector: [1, 2, 3] }] });
    const cases: [Database, unknown, string][] = [
      [db, {}, 'invalid_argument'],
      [db, { ids: ['p0'], filter: { eq: { field: 'tag', value: 'even' } } }, 'invalid_argument'],
      [db, { ids: 'p0' }, 'invalid_argument'],
      [db, { ids: ['p0', 7] }, 'invalid_argument'],
      [db, { ids: ['p0', 'x'.repeat(257)] }, 'invalid_argument'],
      [db, { filter: { eq: { field: 'keep', value: 'yes' } } }, 'invalid_argument'],
      [db, { filter: { eq: { field: 'tag' } } }, 'invalid_argument'],
      [db, { filter: {} }, 'invalid_argument'],
      [db, { ids: ['p0'], limit: 1 }, 'invalid_argument'],
      [limited, { ids: ['a', 'b', 'c'] }, 'limit_exceeded'],
    ];
    for (const [target, body, code] of cases) expect(await codeOf(target.deletePoints('c', body as never)), JSON.stringify(body)).toBe(code);
    expect((await db.collectionInfo('c')).count).toBe(4);
    expect((await limited.collectionInfo('c')).count).toBe(2);
    expect(await codeOf(db.deletePoints('nope', { ids: ['a'] }))).toBe('not_found');
    await limited.close();
    await db.close();
  });
});

describe('createCollection with exist_ok', () => {
  it('answers an existing collection of the same shape; another shape is still already_exists', async () => {
    const db = await open();
    const params = { name: 'c', dim: 3, metric: 'l2' as const, filterable: [FILTERABLE[0], FILTERABLE[1]] };
    const made = await db.createCollection({ ...params, exist_ok: true });
    expect(collectionExisted(made)).toBe(false);
    await db.upsert('c', { points: [{ id: 'a', vector: [1, 2, 3] }] });
    // Same shape (defaults spelled out, fields in another order): the existing one, points and all.
    const again = await db.createCollection({ ...params, index: 'hnsw', index_params: { m: 16 }, filterable: [FILTERABLE[1], FILTERABLE[0]], exist_ok: true });
    expect(collectionExisted(again)).toBe(true);
    expect(again).toMatchObject({ name: 'c', count: 1 });
    expect(JSON.parse(JSON.stringify(again))).toEqual(await db.collectionInfo('c'));
    expect((await db.listCollections()).collections).toHaveLength(1);
    for (const other of [{ dim: 4 }, { metric: 'dot' }, { index: 'flat' }, { index_params: { m: 8 } }, { filterable: [FILTERABLE[0]] }, { multivector: true }]) {
      expect(await codeOf(db.createCollection({ ...params, ...other, exist_ok: true } as never)), JSON.stringify(other)).toBe('already_exists');
    }
    expect(await codeOf(db.createCollection(params))).toBe('already_exists');
    expect(await codeOf(db.createCollection({ ...params, exist_ok: false }))).toBe('already_exists');
    expect(await codeOf(db.createCollection({ ...params, exist_ok: 'yes' } as never))).toBe('invalid_argument');
    // A bad body is invalid_argument even when the name exists.
    expect(await codeOf(db.createCollection({ ...params, dim: 0, exist_ok: true }))).toBe('invalid_argument');
    expect((await db.get('c', 'a')).id).toBe('a');
    await db.close();
  });

  it('concurrent creates with exist_ok: one creates, the others get it; without exist_ok the others are refused', async () => {
    const db = await open();
    const params = { name: 'r', dim: 2, metric: 'l2' as const, exist_ok: true };
    const got = await Promise.all([1, 2, 3].map(() => db.createCollection(params)));
    expect(got.map((i) => collectionExisted(i)).sort()).toEqual([false, true, true]);
    expect((await db.listCollections()).collections.map((c) => c.name)).toEqual(['r']);
    const plain = await Promise.all([1, 2].map(() => codeOf(db.createCollection({ name: 's', dim: 2, metric: 'l2' }))));
    expect(plain.sort()).toEqual(['already_exists', 'ok']);
    await db.close();
  });
});

// ---------------------------------------------------------------------------------------------------
// A seeded randomized check: count and delete-by-filter against a brute-force filter over a model of
// the points, through upserts, payload updates and deletes. The evaluator below is written from the
// contract (docs/filters.md), independently of core/query.

type Model = Map<string, Payload>;

function valuesAt(p: Payload, path: string): unknown[] {
  let v: unknown = p;
  for (const part of path.split('.')) {
    if (typeof v !== 'object' || v === null || Array.isArray(v)) return [];
    v = (v as Record<string, unknown>)[part];
  }
  if (v === undefined) return [];
  return Array.isArray(v) ? v : [v];
}

function matches(p: Payload, f: Filter): boolean {
  const o = f as Record<string, any>;
  if (o.and) return (o.and as Filter[]).every((c) => matches(p, c));
  if (o.or) return (o.or as Filter[]).some((c) => matches(p, c));
  if (o.not) return !matches(p, o.not as Filter);
  const [op, { field, value }] = Object.entries(o)[0] as [string, { field: string; value: any }];
  const vs = valuesAt(p, field);
  const numeric = field === 'n';
  const same = (x: unknown, y: unknown) => (numeric ? typeof x === 'number' && x === y : (typeof x === 'string' || typeof x === 'boolean') && x === y);
  switch (op) {
    case 'eq': return vs.some((x) => same(x, value));
    case 'ne': return !vs.some((x) => same(x, value));
    case 'in': return vs.some((x) => (value as unknown[]).some((y) => same(x, y)));
    case 'gt': return vs.some((x) => typeof x === 'number' && x > value);
    case 'gte': return vs.some((x) => typeof x === 'number' && x >= value);
    case 'lt': return vs.some((x) => typeof x === 'number' && x < value);
    case 'lte': return vs.some((x) => typeof x === 'number' && x <= value);
  }
  throw new Error(`unknown operator ${op}`);
}

function randomPayload(r: Prng): Payload {
  const p: Payload = {};
  const tag = r.int(7);
  if (tag < 3) p.tag = ['a', 'b', 'c'][tag];
  else if (tag === 3) p.tag = ['a', 'c'];
  else if (tag === 4) p.tag = r.int(2) === 0;
  else if (tag === 5) p.tag = 7; // the wrong type: never matches a keyword condition
  const n = r.int(6);
  if (n < 3) p.n = r.int(10);
  else if (n === 3) p.n = [r.int(10), r.int(10) + 0.5];
  else if (n === 4) p.n = 'five';
  if (r.int(3) === 0) p.meta = { color: ['red', 'blue'][r.int(2)] };
  return p;
}

function randomFilter(r: Prng, depth = 0): Filter {
  const kind = depth >= 2 ? 3 + r.int(7) : r.int(10);
  const tag = () => (r.int(5) === 0 ? true : ['a', 'b', 'c', 'd'][r.int(4)]);
  const num = () => r.int(11) + (r.int(3) === 0 ? 0.5 : 0);
  switch (kind) {
    case 0: return { and: [randomFilter(r, depth + 1), randomFilter(r, depth + 1)] };
    case 1: return { or: [randomFilter(r, depth + 1), randomFilter(r, depth + 1), randomFilter(r, depth + 1)] };
    case 2: return { not: randomFilter(r, depth + 1) };
    case 3: return { eq: { field: 'tag', value: tag() } };
    case 4: return { ne: { field: 'tag', value: tag() } };
    case 5: return { in: { field: r.int(2) === 0 ? 'tag' : 'meta.color', value: r.int(2) === 0 ? ['a', 'red'] : ['b', 'blue', true] } } as Filter;
    case 6: return { eq: { field: 'n', value: num() } };
    case 7: return { [(['gt', 'gte', 'lt', 'lte'] as const)[r.int(4)]]: { field: 'n', value: num() } } as Filter;
    case 8: return { in: { field: 'n', value: [num(), num(), num()] } };
    default: return { eq: { field: 'meta.color', value: ['red', 'blue'][r.int(2)] } };
  }
}

async function runSeed(seed: number): Promise<{ deletedByFilter: number; updated: number }> {
  const r = new Prng(seed);
  const db = await open({ checkpointPoints: 50 });
  await db.createCollection({ name: 'c', dim: 3, metric: 'l2', index: r.int(2) === 0 ? 'flat' : 'hnsw', filterable: FILTERABLE });
  const model: Model = new Map();
  let nextId = 0;
  let deletedByFilter = 0;
  let updated = 0;
  const upsertSome = async () => {
    const points = Array.from({ length: 5 + r.int(40) }, () => {
      const id = model.size > 0 && r.int(4) === 0 ? [...model.keys()][r.int(model.size)] : `p${nextId++}`;
      return { id, vector: [r.next(), r.next(), r.next()], payload: randomPayload(r) };
    });
    await db.upsert('c', { points });
    for (const p of points) model.set(p.id, p.payload);
  };
  const expectCount = async (f: Filter | undefined) => {
    const want = f === undefined ? model.size : [...model.values()].filter((p) => matches(p, f)).length;
    expect((await db.count('c', f === undefined ? {} : { filter: f })).count, JSON.stringify(f)).toBe(want);
  };
  await upsertSome();
  for (let step = 0; step < 40; step++) {
    const what = r.int(6);
    if (what === 0) await upsertSome();
    else if (what === 1 && model.size > 0) {
      const ids = [...model.keys()];
      const mode = r.int(2) === 0 ? 'merge' as const : 'replace' as const;
      const points = Array.from({ length: 1 + r.int(8) }, () => ({ id: ids[r.int(ids.length)], payload: randomPayload(r) }));
      const res = await db.setPayload('c', { mode, points });
      for (const p of points) model.set(p.id, mode === 'replace' ? p.payload : { ...model.get(p.id), ...p.payload });
      expect(res.updated).toBe(new Set(points.map((p) => p.id)).size);
      updated += res.updated;
    } else if (what === 2) {
      const f = randomFilter(r);
      const gone = [...model.entries()].filter(([, p]) => matches(p, f)).map(([id]) => id);
      expect((await db.deletePoints('c', { filter: f })).deleted, JSON.stringify(f)).toBe(gone.length);
      for (const id of gone) model.delete(id);
      deletedByFilter += gone.length;
    } else if (what === 3 && model.size > 0) {
      const ids = [...model.keys()];
      const pick = Array.from({ length: 1 + r.int(5) }, () => (r.int(4) === 0 ? `missing${r.int(9)}` : ids[r.int(ids.length)]));
      const there = new Set(pick.filter((id) => model.has(id)));
      expect((await db.deletePoints('c', { ids: pick })).deleted).toBe(there.size);
      for (const id of there) model.delete(id);
    } else {
      await expectCount(randomFilter(r));
    }
    await expectCount(undefined);
  }
  // Every point's payload is the model's, and so is every count, after a reopen too (checkpoints ran).
  for (let i = 0; i < 15; i++) await expectCount(randomFilter(r));
  expect(await payloads(db)).toEqual(Object.fromEntries(model));
  const dataDir = (db as unknown as { opts: { dataDir: string } }).opts.dataDir;
  await db.close();
  const again = await Database.open({ dataDir, masterKey: KEY, buildIndex: buildIndexInline });
  expect(await payloads(again)).toEqual(Object.fromEntries(model));
  for (let i = 0; i < 10; i++) {
    const f = randomFilter(r);
    expect((await again.count('c', { filter: f })).count, JSON.stringify(f)).toBe([...model.values()].filter((p) => matches(p, f)).length);
  }
  await again.close();
  return { deletedByFilter, updated };
}

describe('count and delete by filter against a brute-force filter (seeded)', () => {
  it('agree through upserts, payload updates and deletes, over several seeds', async () => {
    const seeds = Number(process.env.SVC_OPS_SEEDS ?? 8);
    const first = Number(process.env.SVC_OPS_SEED ?? 1);
    let deleted = 0;
    let updated = 0;
    for (let seed = first; seed < first + seeds; seed++) {
      const got = await runSeed(seed).catch((e: unknown) => {
        throw new Error(`seed ${seed} (SVC_OPS_SEED=${seed} SVC_OPS_SEEDS=1 to replay): ${e instanceof Error ? e.stack : String(e)}`);
      });
      deleted += got.deletedByFilter;
      updated += got.updated;
    }
    // The runs did what they are for.
    expect(deleted).toBeGreaterThan(20);
    expect(updated).toBeGreaterThan(20);
  }, 120_000);
});
