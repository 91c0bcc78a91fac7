import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { SvcError } from '../base/errors.js';
import { resolveLimits } from '../base/limits.js';
import { Prng } from '../base/prng.js';
import { Database } from '../collection/database.js';
import { buildIndexInline } from '../collection/rebuild.js';
import { FakeEmbedder, FakeReranker } from '../providers/fake.js';
import { Engine } from './engine.js';
import { NodeEngine } from './node.js';
import type { ShardRef } from './shard.js';

/**
 * The engine over three shards against one node holding every point (issue 16), itself the engine over
 * its one local shard (node.ts): the same writes go to both, and every query kind answers the same (hits, ranks, scores; ties by id), every page of a fetch,
 * every count. Seeded: a failure names its seed.
 */

const SEEDS = Number(process.env.SVC_ENGINE_SEEDS ?? 3);
const dirs: string[] = [];
afterEach(() => { for (const d of dirs.splice(0)) rmSync(d, { recursive: true, force: true }); });

const WORDS = ['wing', 'flutter', 'boundary', 'layer', 'shock', 'wave', 'heat', 'transfer', 'nozzle', 'plate', 'flow', 'jet'];
const embedders = new Map([['t', new FakeEmbedder(8)]]);
const rerankers = new Map([['t', new FakeReranker()]]);

async function open(): Promise<Database> {
  const d = mkdtempSync(join(tmpdir(), 'svc-engine-'));
  dirs.push(d);
  return Database.open({ dataDir: d, masterKey: null, buildIndex: buildIndexInline });
}

async function cluster(n: number): Promise<{ engine: Engine; shards: Database[] }> {
  const shards = await Promise.all(Array.from({ length: n }, () => open()));
  const refs: ShardRef[] = shards.map((shard, id) => ({ id, name: `shard ${id}`, shard }));
  let now = 0;
  const engine = new Engine({ shards: () => refs, limits: resolveLimits({}), embedders, rerankers, monotonicMs: () => now++ });
  return { engine, shards };
}

function text(rng: Prng): string {
  return Array.from({ length: 2 + rng.int(6) }, () => WORDS[rng.int(WORDS.length)]).join(' ');
}

/** Coarse values, so equal scores (and so the tie order) come up often. */
const vec = (rng: Prng, dim: number) => Array.from({ length: dim }, () => rng.int(5) - 2 || 1);

async function runSeed(seed: number): Promise<void> {
  const rng = new Prng(seed);
  // One node holding everything: its engine over its own database, as `svc serve` and openDatabase serve it.
  const single = new NodeEngine(await open(), { embedders, rerankers });
  const { engine, shards } = await cluster(3);
  const both = async <T>(f: (e: Engine) => Promise<T>): Promise<[T, T]> => [await f(single), await f(engine)];
  const same = async <T>(what: string, f: (e: Engine) => Promise<T>): Promise<T> => {
    const [a, b] = await both(f);
    expect(b, `seed ${seed}: ${what}`).toEqual(a);
    return a;
  };

  const filterable = [{ path: 'tag', field_type: 'keyword' }, { path: 'n', field_type: 'numeric' }];
  await same('create c', (e) => e.createCollection({ name: 'c', dim: 4, metric: 'l2', index: 'flat', filterable }));
  await same('create d', (e) => e.createCollection({ name: 'd', dim: 4, metric: 'cosine', index: 'hnsw', filterable }));
  await same('create t', (e) => e.createCollection({ name: 't', dim: 8, metric: 'cosine', index: 'flat', filterable }));
  await same('create m', (e) => e.createCollection({ name: 'm', dim: 3, metric: 'dot', multivector: true }));
  // exist_ok finds it on every shard; without it, already_exists.
  await same('exist_ok', (e) => e.createCollection({ name: 'c', dim: 4, metric: 'l2', index: 'flat', filterable, exist_ok: true }));
  const codeOf = (p: Promise<unknown>) => p.then(() => 'ok', (err: { code?: string }) => err.code);
  expect(await codeOf(engine.createCollection({ name: 'c', dim: 4, metric: 'l2', index: 'flat', filterable }))).toBe('already_exists');

  const n = 120 + rng.int(80);
  for (let b = 0; b < n; b += 40) {
    const points = Array.from({ length: Math.min(40, n - b) }, (_, j) => {
      const i = b + j;
      return { id: `p${i}`, vector: vec(rng, 4), payload: { tag: ['a', 'b', 'c'][rng.int(3)], n: rng.int(10), __svc_sparse__: { indices: [rng.int(6), 6 + rng.int(6)], values: [0.125 + rng.int(3), 1] } } };
    });
    await same('upsert c', (e) => e.upsert('c', { points }));
    await same('bulk d', (e) => e.bulkUpsert('d', { points }));
  }
  await same('text points', (e) => e.upsertText('t', { points: Array.from({ length: 60 }, (_, i) => ({ id: `t${i}`, text: text(new Prng(seed * 1000 + i)), payload: { tag: i % 2 ? 'a' : 'b', n: i % 10 } })) }));
  await same('documents', (e) => e.upsertDocuments('m', { documents: Array.from({ length: 40 }, (_, i) => ({ id: `m${i}`, vectors: Array.from({ length: 1 + (i % 3) }, () => vec(new Prng(seed + i * 7), 3)) })) }));
  // Updates, deletes, payload changes.
  await same('update', (e) => e.upsert('c', { points: [{ id: 'p3', vector: [2, 2, 2, 2], payload: { tag: 'c', n: 9 } }] }));
  await same('delete', (e) => e.delete('c', 'p4'));
  await same('delete points by ids', (e) => e.deletePoints('c', { ids: ['p5', 'p6', 'nope'] }));
  await same('delete points by filter', (e) => e.deletePoints('d', { filter: { eq: { field: 'n', value: 7 } } }));
  await same('set payload', (e) => e.setPayload('c', { points: [{ id: 'p7', payload: { n: 3 } }, { id: 'p8', payload: { tag: 'a' } }], mode: 'merge' }));
  // All or nothing across shards too: an unknown id, or a merged payload over the limit, changes nothing anywhere.
  const outcome = (p: Promise<unknown>) => p.then(() => 'ok', (err: { code?: string; message?: string }) => `${err.code}: ${err.message}`);
  const some = Array.from({ length: 20 }, (_, i) => ({ id: `p${20 + i}`, payload: { tag: 'zz' } }));
  await same('set payload, an unknown id', (e) => outcome(e.setPayload('c', { points: [...some, { id: 'nope', payload: {} }, { id: 'nope2', payload: {} }] })));
  await same('set payload, too large once merged', (e) => outcome(e.setPayload('c', { points: [...some, { id: 'p41', payload: { big: 'x'.repeat(40_000) } }, { id: 'p41', payload: { big2: 'x'.repeat(40_000) } }] })));
  await same('nothing changed', (e) => e.count('c', { filter: { eq: { field: 'tag', value: 'zz' } } }));

  // Every point is on exactly one shard.
  const counts = await Promise.all(shards.map(async (s) => (await s.count('c')).count));
  expect(counts.reduce((a, b) => a + b, 0)).toBe((await single.count('c')).count);
  expect(Math.min(...counts)).toBeGreaterThan(0);

  for (let q = 0; q < 12; q++) {
    const vector = vec(rng, 4);
    const k = 1 + rng.int(30);
    const filter = rng.int(2) === 0 ? undefined : { eq: { field: 'tag', value: ['a', 'b'][rng.int(2)] } };
    await same(`search c ${q}`, (e) => e.search('c', { vector, k, filter, consistency: 'strong' }));
    await same(`search d ${q}`, (e) => e.search('d', { vector, k, filter, ef_search: 400, consistency: 'strong' }));
    // Every random draw before the calls: both sides get the same query.
    const sparse = { sparse_indices: [rng.int(6), 6 + rng.int(6)], sparse_values: [1, 2] };
    const [v8, t1, t2, t3, t4] = [vec(rng, 8), text(rng), text(rng), text(rng), text(rng)];
    const k0 = rng.int(3) === 0 ? 0 : 60;
    const tokens = [vec(rng, 3), vec(rng, 3)];
    await same(`hybrid ${q}`, (e) => e.hybridSearch('c', { vector, ...sparse, k, filter, consistency: 'strong' }));
    await same(`hybrid text ${q}`, (e) => e.hybridSearch('t', { vector: v8, query_text: t1, k, filter, consistency: 'strong' }));
    // BM25 over documents from __svc_sparse__ with fractional weights: the shards' summed total length is too.
    await same(`hybrid sparse docs, text ${q}`, (e) => e.hybridSearch('c', { vector, query_text: t2, k, consistency: 'strong' }));
    await same(`bm25 only ${q}`, (e) => e.hybridSearch('t', { query_text: t2, k, rrf_k0: k0 }));
    await same(`text ${q}`, (e) => e.searchText('t', { text: t3, k, filter, consistency: 'strong' }));
    await same(`text rerank ${q}`, (e) => e.searchText('t', { text: t4, k, rerank: true, consistency: 'strong' }));
    await same(`multi ${q}`, (e) => e.searchMultiVector('m', { vectors: tokens, k, consistency: 'strong' }));
    // The engine answers the shards' own two questions as one node would (so an engine can be a shard).
    await same(`text stats ${q}`, (e) => e.textStats('t', { text: t2 }));
    await same(`rankings ${q}`, (e) => e.rankings('t', { vector: v8, query_text: t1, filter, depth: k, consistency: 'strong' }));
    await same(`count ${q}`, (e) => e.count('c', filter === undefined ? {} : { filter }));
  }
  for (const limit of [1, 7, 50]) {
    const pages = async (e: Engine) => {
      const all: string[] = [];
      let cursor: string | null = null;
      do {
        const page: { points: { id: string }[]; next_cursor: string | null } = await e.fetch('c', { limit, cursor, filter: { eq: { field: 'tag', value: 'a' } } });
        all.push(...page.points.map((p) => p.id));
        cursor = page.next_cursor;
      } while (cursor !== null);
      return all;
    };
    await same(`fetch by ${limit}`, pages);
  }
  await same('get', (e) => e.get('c', 'p7', { with_vector: true }));
  await same('info', (e) => e.collectionInfo('c'));
  await same('list', (e) => e.listCollections());
  await same('drop', (e) => e.deleteCollection('d'));
  await same('list after drop', (e) => e.listCollections());
  for (const db of [single, ...shards]) await db.close();
}

describe('the engine over shards answers as one node holding everything', () => {
  it(`every query kind, every page, every count: ${SEEDS} seeds`, async () => {
    for (let seed = 1; seed <= SEEDS; seed++) await runSeed(seed);
  }, 120_000);

  it('refuses a bad batch whole before any shard stores any of it', async () => {
    const { engine, shards } = await cluster(3);
    await engine.createCollection({ name: 'c', dim: 2, metric: 'l2', index: 'flat' });
    const points = Array.from({ length: 30 }, (_, i) => ({ id: `p${i}`, vector: [i, 1] }));
    points[17] = { id: 'p17', vector: [1, 2, 3] };
    await expect(engine.upsert('c', { points })).rejects.toMatchObject({ code: 'invalid_argument' });
    for (const s of shards) expect((await s.count('c')).count).toBe(0);
    for (const s of shards) await s.close();
  });
});

describe('a strong hybrid search over shards', () => {
  it('asks each shard for its BM25 statistics as strongly as for its rankings (a consensus member confirms both)', async () => {
    const { engine, shards } = await cluster(2);
    await engine.createCollection({ name: 'h', dim: 2, metric: 'l2' });
    await engine.upsert('h', { points: [{ id: 'a', vector: [1, 0], payload: { __svc_text__: 'shock wave' } }, { id: 'b', vector: [0, 1], payload: { __svc_text__: 'heat transfer' } }] });
    const asked: unknown[] = [];
    for (const s of shards) {
      const own = s.textStats.bind(s);
      s.textStats = async (name, body) => { asked.push(body); return own(name, body); };
    }
    const q = { vector: [1, 0], query_text: 'shock', k: 2 };
    const weak = await engine.hybridSearch('h', q);
    expect(asked).toEqual([{ text: 'shock' }, { text: 'shock' }]);
    asked.length = 0;
    expect(await engine.hybridSearch('h', { ...q, consistency: 'strong' })).toEqual(weak);
    expect(asked).toEqual([{ text: 'shock', consistency: 'strong' }, { text: 'shock', consistency: 'strong' }]);
    // A shard of an older build refuses the field (a rolling upgrade, routers first): asked as before.
    asked.length = 0;
    const old = shards[1].textStats.bind(shards[1]);
    shards[1].textStats = async (name, body) => {
      if ('consistency' in body) throw new SvcError('invalid_argument', "text stats body has an unknown field 'consistency' (known: text)");
      return old(name, body);
    };
    expect(await engine.hybridSearch('h', { ...q, consistency: 'strong' })).toEqual(weak);
    expect(asked).toEqual([{ text: 'shock', consistency: 'strong' }, { text: 'shock' }]);
  });
});
