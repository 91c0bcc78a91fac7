import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { SvcError } from '../base/errors.js';
import type { Embedder } from '../base/model.js';
import { Database } from '../collection/database.js';
import { buildIndexInline } from '../collection/rebuild.js';
import { openDatabase } from '../embedded.js';
import { FakeEmbedder, FakeReranker } from '../providers/fake.js';
import { Engine } from './engine.js';
import { NodeEngine } from './node.js';

/**
 * A single node answers through the Engine (issue 16, "the single node on the Engine"): the Database
 * is storage and shard operations only; embedding, fusion and reranking are the Engine's, so a node's
 * answer is the router's over that node as its one shard; what the node answers whole goes straight to it.
 */

const dirs: string[] = [];
afterEach(() => { for (const d of dirs.splice(0)) rmSync(d, { recursive: true, force: true }); });

async function open(): Promise<Database> {
  const d = mkdtempSync(join(tmpdir(), 'svc-node-'));
  dirs.push(d);
  return Database.open({ dataDir: d, masterKey: null, buildIndex: buildIndexInline });
}

const SENTENCES = [
  'the cat sat on the warm mat', 'dogs chase cats in the park', 'vector databases index embeddings',
  'hybrid search fuses dense and sparse rankings', 'the quick brown fox jumps over the lazy dog',
  'a mat for the cat', 'search engines rank documents', 'cats and dogs are popular pets',
];

/** Counts each provider call, so a test sees what was (not) embedded. */
class CountingEmbedder implements Embedder {
  readonly inner = new FakeEmbedder(8);
  readonly dim = 8;
  calls = 0;
  async embed(texts: string[], kind: 'document' | 'query'): Promise<Float32Array[]> {
    this.calls++;
    return this.inner.embed(texts, kind);
  }
}

describe('the single node on the Engine', () => {
  it('the Database carries no orchestration: text, fusion and reranking are the engine\'s', () => {
    for (const m of ['hybridSearch', 'searchText', 'upsertText']) expect(m in Database.prototype, m).toBe(false);
    for (const m of ['rankings', 'textStats', 'search', 'upsert']) expect(m in Database.prototype, m).toBe(true);
  });

  it('openDatabase resolves to the engine over the data directory\'s Database', async () => {
    const d = mkdtempSync(join(tmpdir(), 'svc-node-'));
    dirs.push(d);
    const db = await openDatabase({ dataDir: d, insecure: true });
    expect(db).toBeInstanceOf(NodeEngine);
    expect(db).toBeInstanceOf(Engine);
    expect(db.node).toBeInstanceOf(Database);
    await db.close();
  });

  it('answers hybrid, text and reranked queries as a router over that node as its one shard', async () => {
    const db = await open();
    const embedders = new Map([['t', new FakeEmbedder(8)]]);
    const rerankers = new Map([['t', new FakeReranker()]]);
    const node = new NodeEngine(db, { embedders, rerankers });
    let now = 0;
    const router = new Engine({ shards: () => [{ id: 0, name: 'shard 0', shard: db }], limits: db.limits, embedders, rerankers, monotonicMs: () => now++ });
    await node.createCollection({ name: 't', dim: 8, metric: 'cosine', filterable: [{ path: 'n', field_type: 'numeric' }] });
    await node.upsertText('t', { points: SENTENCES.map((text, i) => ({ id: `s${i}`, text, payload: { n: i % 3 } })) });
    for (const text of ['cat mat', 'dogs in the park', 'search rankings', 'fox']) {
      const filter = { lt: { field: 'n', value: 2 } };
      const bodies = [{ text, k: 4 }, { text, k: 3, filter }, { text, k: 3, rerank: true, rerank_pool: 6 }];
      for (const q of bodies) expect(await node.searchText('t', q), `${text} ${JSON.stringify(q)}`).toEqual(await router.searchText('t', q));
      const [v] = await embedders.get('t')!.embed([text], 'query');
      const h = { vector: Array.from(v), query_text: text, k: 5, rrf_k0: 10 };
      expect(await node.hybridSearch('t', h)).toEqual(await router.hybridSearch('t', h));
    }
    expect((await node.searchText('t', { text: 'cat mat', k: 2 })).hits.length).toBe(2);
    await node.close();
  });

  it('a dense search goes straight to the database: no parameters asked, no merge', async () => {
    const db = await open();
    await db.createCollection({ name: 'c', dim: 2, metric: 'l2' });
    await db.upsert('c', { points: [{ id: 'a', vector: [0, 0] }, { id: 'b', vector: [1, 1] }] });
    const calls: string[] = [];
    const counted = new Proxy(db, {
      get(target, prop) {
        const v = Reflect.get(target, prop, target) as unknown;
        if (typeof v !== 'function') return v;
        return (...args: unknown[]) => {
          calls.push(String(prop));
          return (v as (...a: unknown[]) => unknown).apply(target, args);
        };
      },
    });
    const node = new NodeEngine(counted);
    const r = await node.search('c', { vector: [0.1, 0], k: 1 });
    expect(r.hits.map((x) => x.id)).toEqual(['a']);
    expect(calls).toEqual(['search']);
    await node.close();
  });

  it('a text query with a bad filter or too many terms costs no embedding', async () => {
    const db = await open();
    const emb = new CountingEmbedder();
    const node = new NodeEngine(db, { embedders: new Map([['t', emb]]) });
    await node.createCollection({ name: 't', dim: 8, metric: 'cosine' });
    await expect(node.searchText('t', { text: 'cat', filter: { eq: { field: 'nope', value: 1 } } })).rejects.toMatchObject({ code: 'invalid_argument' });
    const long = Array.from({ length: db.limits.maxSparseTerms + 1 }, (_, i) => `w${i}`).join(' ');
    await expect(node.searchText('t', { text: long })).rejects.toMatchObject({ code: 'limit_exceeded' });
    expect(emb.calls).toBe(0);
    await node.close();
  });

  it('refuses a new collection its embedding provider does not fit, and answers an existing one as the database does', async () => {
    const db = await open();
    const node = new NodeEngine(db, { embedders: new Map([['t', new FakeEmbedder(8)]]) });
    await expect(node.createCollection({ name: 't', dim: 4 })).rejects.toThrow("collection 't' has dim 4 but its embedding provider gives 8");
    await node.createCollection({ name: 't', dim: 8 });
    await expect(node.createCollection({ name: 't', dim: 4 })).rejects.toMatchObject({ code: 'already_exists' });
    await node.close();
  });
});

describe('NodeEngine on a consensus member', () => {
  it('an empty text upsert is answered as an empty plain upsert: only once the collection is shown current', async () => {
    const db = await open();
    const node = new NodeEngine(db, { embedders: new Map([['t', new FakeEmbedder(8)]]) });
    await node.createCollection({ name: 't', dim: 8, metric: 'cosine' });
    // A leader that cannot confirm its state (cut off from its group): no answer from the collection it holds.
    db.useProposer({ propose: async () => { throw new Error('nothing is proposed'); }, confirm: async () => { throw new SvcError('unavailable', 'not confirmed'); } });
    await expect(node.upsert('t', { points: [] })).rejects.toMatchObject({ code: 'unavailable' });
    await expect(node.upsertText('t', { points: [] })).rejects.toMatchObject({ code: 'unavailable' });
    await db.close();
  });
});
