/**
 * Hybrid, text and sparse search on one node (the Database's rankings, fused, embedded and reranked by
 * its engine, core/engine/node.ts), against oracles written here from the spec's
 * formulas: RRF (`1 / (k0 + r + 1)` summed over lists), Okapi BM25 (docs/text-search.md: Lucene's idf,
 * k1 0.9, b 0.4) and the sparse dot product. The rankings fed to the RRF oracle are produced
 * independently: the dense one by `search()`, the sparse and BM25 ones by the oracles.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import fc from 'fast-check';
import { afterEach, describe, expect, it } from 'vitest';
import { SvcError } from '../base/errors.js';
import type { Embedder, Hit, Reranker } from '../base/model.js';
import { Prng } from '../base/prng.js';
import { openDatabase } from '../embedded.js';
import { NodeEngine, type NodeEngineOptions } from '../engine/node.js';
import { FakeEmbedder } from '../providers/fake.js';
import { termId } from '../text/tokenizer.js';
import { Database } from './database.js';
import { buildIndexInline } from './rebuild.js';

const KEY = new Uint8Array(32).fill(9);
const dirs: string[] = [];
function tempDir(): string {
  const d = mkdtempSync(join(tmpdir(), 'svc-hybrid-'));
  dirs.push(d);
  return join(d, 'data');
}
afterEach(() => {
  for (const d of dirs.splice(0)) rmSync(d, { recursive: true, force: true });
});

/** A node's engine over a Database (what a single node and the embedded API serve): the providers are the engine's. */
async function open(extra: Partial<Parameters<typeof Database.open>[0]> & NodeEngineOptions = {}): Promise<NodeEngine<Database>> {
  const { embedders, rerankers, ...rest } = extra;
  return new NodeEngine(await Database.open({ dataDir: tempDir(), masterKey: KEY, buildIndex: buildIndexInline, ...rest }), { embedders, rerankers });
}

async function codeOf(p: Promise<unknown>): Promise<string> {
  try {
    await p;
    return 'ok';
  } catch (e) {
    return e instanceof SvcError ? e.code : `not an SvcError: ${String(e)}`;
  }
}

/** Words that the analyser keeps as they are (no stop word, Porter2 leaves them alone). */
const VOCAB = [
  'alpha', 'bravo', 'delta', 'echo', 'foxtrot', 'golf', 'hotel', 'india', 'juliet', 'kilo', 'lima', 'mike',
  'oscar', 'papa', 'quebec', 'romeo', 'sierra', 'tango', 'uniform', 'victor', 'whiskey', 'xray', 'zulu',
  'amber', 'cobalt', 'copper', 'indigo', 'maroon', 'silver', 'violet', 'walnut', 'canyon',
];
const K1 = 0.9;
const B = 0.4;

/** A stored document as the oracle sees it: term id -> weight (term frequency for text). */
type Doc = Map<number, number>;

function textDoc(text: string): Doc {
  const d: Doc = new Map();
  for (const w of text.split(' ')) if (w !== '' && w !== 'the') d.set(termId(w), (d.get(termId(w)) ?? 0) + 1);
  return d;
}

function sparseDoc(indices: number[], values: number[]): Doc {
  return new Map(indices.map((ix, i) => [ix, Math.fround(values[i])]));
}

/** Okapi BM25 written from the formula; N and avgdl over documents with at least one term. */
function bm25Scores(docs: Map<string, Doc>, query: string[]): Map<string, number> {
  const live = [...docs].filter(([, d]) => d.size > 0);
  const n = live.length;
  const len = (d: Doc): number => [...d.values()].reduce((a, w) => a + (w > 0 ? w : 0), 0);
  const avgdl = live.reduce((a, [, d]) => a + len(d), 0) / n;
  const qtf = new Map<number, number>();
  for (const w of query) qtf.set(termId(w), (qtf.get(termId(w)) ?? 0) + 1);
  const out = new Map<string, number>();
  for (const [id, d] of live) {
    let s = 0;
    let touched = false;
    for (const [t, count] of qtf) {
      const tf = d.get(t);
      if (tf === undefined || tf <= 0) continue;
      const df = live.filter(([, e]) => e.has(t)).length;
      const idf = Math.log(1 + (n - df + 0.5) / (df + 0.5));
      s += (count * idf * tf * (K1 + 1)) / (tf + K1 * (1 - B + (B * len(d)) / avgdl));
      touched = true;
    }
    if (touched) out.set(id, s);
  }
  return out;
}

/** Sparse dot product; a document is in the ranking when it shares an index with the query. */
function dotScores(docs: Map<string, Doc>, indices: number[], values: number[]): Map<string, number> {
  const order = indices.map((_, i) => i).sort((a, b) => indices[a] - indices[b]);
  const out = new Map<string, number>();
  for (const [id, d] of docs) {
    let s = 0;
    let touched = false;
    for (const i of order) {
      const w = d.get(indices[i]);
      if (w === undefined) continue;
      s += Math.fround(values[i]) * w;
      touched = true;
    }
    if (touched) out.set(id, s);
  }
  return out;
}

/** Best first; equal scores in id order, by UTF-8 bytes (CONTRACT.md section 1, the engine's tie rule). */
function rank(scores: Map<string, number>, _order: string[], depth: number, keep: (id: string) => boolean): string[] {
  return [...scores].filter(([id]) => keep(id))
    .sort((a, b) => b[1] - a[1] || Buffer.compare(Buffer.from(a[0]), Buffer.from(b[0])))
    .slice(0, depth).map(([id]) => id);
}

/** RRF written from the spec: a document at zero-based rank r contributes 1 / (k0 + r + 1). */
function rrfOracle(lists: string[][], k0: number): Map<string, number> {
  const out = new Map<string, number>();
  for (const list of lists) list.forEach((id, r) => out.set(id, (out.get(id) ?? 0) + 1 / (k0 + r + 1)));
  return out;
}

/**
 * The hits are the oracle's top k: each score is the oracle's fused score, best first, ranks 0..k-1, and
 * no id left out scores above the last one returned (ties at the boundary may go either way).
 */
function expectFused(hits: Hit[], fused: Map<string, number>, k: number): void {
  expect(hits.length).toBe(Math.min(k, fused.size));
  hits.forEach((h, i) => {
    expect(h.rank).toBe(i);
    expect(fused.has(h.id), `${h.id} is in no ranking`).toBe(true);
    expect(h.score).toBeCloseTo(fused.get(h.id)!, 12);
    if (i > 0) expect(h.score).toBeLessThanOrEqual(hits[i - 1].score);
  });
  const last = hits.length === 0 ? Infinity : hits[hits.length - 1].score;
  const returned = new Set(hits.map((h) => h.id));
  for (const [id, s] of fused) if (!returned.has(id)) expect(s, `${id} scores above the last hit`).toBeLessThanOrEqual(last + 1e-15);
}

/** Fusion depth documented in docs/text-search.md: each ranking goes max(k, 100) deep, capped by SVC_MAX_K. */
const depthOf = (k: number, maxK = 10_000): number => Math.min(maxK, Math.max(k, 100));

interface Corpus {
  order: string[];
  docs: Map<string, Doc>;
  group: Map<string, string>;
}

/** 400 points: dense vectors, a keyword `group`, and either a text or (one in five) an explicit sparse vector. */
async function loadCorpus(db: NodeEngine<Database>, name: string, seed: number): Promise<Corpus> {
  await db.createCollection({ name, dim: 8, metric: 'cosine', filterable: [{ path: 'group', field_type: 'keyword' }] });
  const prng = new Prng(seed);
  const order: string[] = [];
  const docs = new Map<string, Doc>();
  const group = new Map<string, string>();
  const points = [];
  for (let i = 0; i < 400; i++) {
    const id = `p${i}`;
    const g = ['a', 'b', 'c'][prng.int(3)];
    const payload: Record<string, unknown> = { group: g };
    if (i % 5 === 0) {
      const indices = [...new Set(Array.from({ length: 1 + prng.int(6) }, () => prng.int(40)))];
      const values = indices.map(() => Math.round((prng.next() * 2 + 0.01) * 1000) / 1000);
      payload.__svc_sparse__ = { indices, values };
      docs.set(id, sparseDoc(indices, values));
    } else {
      const words = Array.from({ length: 3 + prng.int(12) }, () => VOCAB[prng.int(VOCAB.length)]);
      if (prng.int(4) === 0) words.push('the'); // a stop word counts for nothing
      const text = words.join(' ');
      payload.__svc_text__ = text;
      docs.set(id, textDoc(text));
    }
    order.push(id);
    group.set(id, g);
    points.push({ id, vector: Array.from({ length: 8 }, () => prng.gaussian()), payload });
  }
  for (let i = 0; i < points.length; i += 100) await db.upsert(name, { points: points.slice(i, i + 100) });
  return { order, docs, group };
}

describe('the tie rule in the sparse and BM25 rankings', () => {
  it('orders equal scores by id across the cut, wherever the cut falls, with and without a filter', async () => {
    const db = await open();
    await db.createCollection({ name: 't', dim: 2, metric: 'l2', filterable: [{ path: 'g', field_type: 'keyword' }] });
    const prng = new Prng(5);
    // Documents of one length over three words: a handful of distinct scores, long runs of equal ones.
    const words = ['wing', 'flow', 'shock'];
    const texts = new Map<string, string>();
    const sparse = new Map<string, { indices: number[]; values: number[] }>();
    const groups = new Map<string, string>();
    const points = Array.from({ length: 300 }, (_, i) => {
      // Ids whose slot order is not their id order.
      const id = `d${(i * 7919) % 1000}`;
      const g = ['a', 'b'][prng.int(2)];
      groups.set(id, g);
      if (i % 3 === 0) {
        const v = { indices: [prng.int(3)], values: [1 + prng.int(2)] };
        sparse.set(id, v);
        return { id, vector: [0, 0], payload: { g, __svc_sparse__: v } };
      }
      const text = Array.from({ length: 2 }, () => words[prng.int(3)]).join(' ');
      texts.set(id, text);
      return { id, vector: [0, 0], payload: { g, __svc_text__: text } };
    });
    await db.upsert('t', { points });
    const byScoreThenId = (a: { id: string; score: number }, b: { id: string; score: number }) => b.score - a.score || Buffer.compare(Buffer.from(a.id), Buffer.from(b.id));
    for (const filter of [undefined, { eq: { field: 'g', value: 'b' } }]) {
      const all = await db.rankings('t', { query_text: 'wing flow', sparse_indices: [0, 1], sparse_values: [1, 1], depth: 1000, filter });
      for (const list of [all.text!, all.sparse!]) {
        expect(list.length).toBeGreaterThan(20);
        // Few distinct scores: the cuts below fall inside runs of equal ones.
        expect(new Set(list.map((e) => e.score)).size).toBeLessThan(12);
        expect(list).toEqual([...list].sort(byScoreThenId));
        if (filter !== undefined) for (const e of list) expect(groups.get(e.id)).toBe('b');
      }
      for (const depth of [1, 7, 20, 33, 64]) {
        const r = await db.rankings('t', { query_text: 'wing flow', sparse_indices: [0, 1], sparse_values: [1, 1], depth, filter });
        expect(r.text).toEqual(all.text!.slice(0, depth));
        expect(r.sparse).toEqual(all.sparse!.slice(0, depth));
      }
    }
  });
});

describe('hybrid search: RRF of independently produced rankings', () => {
  const cases = [
    { label: 'without a filter', filter: undefined, keep: () => true },
    { label: 'with a filter', filter: { eq: { field: 'group', value: 'b' } }, keep: (g: string) => g === 'b' },
  ];
  for (const c of cases) {
    it(`vector + sparse + query_text, ${c.label}`, async () => {
      const db = await open();
      const corpus = await loadCorpus(db, 'h', 11);
      const prng = new Prng(99);
      const keep = (id: string): boolean => c.keep(corpus.group.get(id)!);
      for (let trial = 0; trial < 6; trial++) {
        const k = [5, 10, 30][trial % 3];
        const k0 = trial % 2 === 0 ? 60 : 7.5;
        const vector = Array.from({ length: 8 }, () => prng.gaussian());
        const indices = [prng.int(40), 40 + prng.int(5), prng.int(40)].filter((x, i, a) => a.indexOf(x) === i);
        const values = indices.map(() => prng.next() + 0.1);
        const words = [VOCAB[prng.int(VOCAB.length)], VOCAB[prng.int(VOCAB.length)], VOCAB[prng.int(VOCAB.length)]];
        const depth = depthOf(k);
        const dense = (await db.search('h', { vector, k: depth, filter: c.filter, consistency: 'strong' })).hits.map((h) => h.id);
        const sparse = rank(dotScores(corpus.docs, indices, values), corpus.order, depth, keep);
        const text = rank(bm25Scores(corpus.docs, words), corpus.order, depth, keep);
        expect(sparse.length).toBeGreaterThan(0);
        expect(text.length).toBeGreaterThan(0);

        const all = await db.hybridSearch('h', {
          vector, sparse_indices: indices, sparse_values: values, query_text: words.join(' '), k, filter: c.filter, rrf_k0: k0,
          consistency: 'strong',
        });
        expectFused(all.hits, rrfOracle([dense, sparse, text], k0), k);
        for (const h of all.hits) expect(keep(h.id)).toBe(true);

        const denseSparse = await db.hybridSearch('h', { vector, sparse_indices: indices, sparse_values: values, k, filter: c.filter, rrf_k0: k0 });
        expectFused(denseSparse.hits, rrfOracle([dense, sparse], k0), k);
        const denseText = await db.hybridSearch('h', { vector, query_text: words.join(' '), k, filter: c.filter });
        expectFused(denseText.hits, rrfOracle([dense, text], 60), k);
      }
      await db.close();
    });
  }

  it('either side may be absent: pure dense, pure sparse and pure BM25 keep the ranking order', async () => {
    const db = await open();
    const corpus = await loadCorpus(db, 'h', 5);
    const vector = [1, 0, 0, 0, 0, 0, 0, 1];
    const dense = (await db.search('h', { vector, k: 20, consistency: 'strong' })).hits.map((h) => h.id);
    const onlyDense = await db.hybridSearch('h', { vector, k: 20 });
    expect(onlyDense.hits.map((h) => h.id)).toEqual(dense);
    expect(onlyDense.hits.map((h) => h.score)).toEqual(dense.map((_, r) => 1 / (60 + r + 1)));

    const onlySparse = await db.hybridSearch('h', { sparse_indices: [3, 7, 12], sparse_values: [0.5, 1, 2], k: 20 });
    const sparse = rank(dotScores(corpus.docs, [3, 7, 12], [0.5, 1, 2]), corpus.order, 20, () => true);
    expect(onlySparse.hits.map((h) => h.id)).toEqual(sparse);

    const onlyText = await db.hybridSearch('h', { query_text: 'Kilo, LIMA and the kilo!', k: 20, rrf_k0: 0 });
    const text = rank(bm25Scores(corpus.docs, ['kilo', 'lima', 'kilo']), corpus.order, 20, () => true);
    expect(onlyText.hits.map((h) => h.id)).toEqual(text);
    expect(onlyText.hits.map((h) => h.score)).toEqual(text.map((_, r) => 1 / (r + 1)));
    await db.close();
  });

  it('refuses a query with no side, and caps sparse and text terms by SVC_MAX_SPARSE_TERMS', async () => {
    const db = await open({ limits: { maxSparseTerms: 4 } });
    await db.createCollection({ name: 'h', dim: 2, metric: 'l2' });
    await db.upsert('h', { points: [{ id: 'a', vector: [0, 0], payload: { __svc_text__: 'alpha bravo' } }] });
    expect(await codeOf(db.hybridSearch('h', { k: 3 }))).toBe('invalid_argument');
    expect(await codeOf(db.hybridSearch('h', { sparse_indices: [1, 2, 3, 4], sparse_values: [1, 1, 1, 1] }))).toBe('ok');
    expect(await codeOf(db.hybridSearch('h', { sparse_indices: [1, 2, 3, 4, 5], sparse_values: [1, 1, 1, 1, 1] }))).toBe('limit_exceeded');
    expect(await codeOf(db.hybridSearch('h', { sparse_indices: [1, 2], sparse_values: [1] }))).toBe('invalid_argument');
    // Distinct analysed terms count; stop words and repeats do not.
    expect(await codeOf(db.hybridSearch('h', { query_text: 'alpha bravo delta echo echo the of and' }))).toBe('ok');
    expect(await codeOf(db.hybridSearch('h', { query_text: 'alpha bravo delta echo golf' }))).toBe('limit_exceeded');
    await db.close();
  });
});

describe('BM25 on one node matches the formula, before and after deletes and updates', () => {
  /** The BM25-only hybrid ranking carries the BM25 order; the oracle's scores of its ids must be the top scores. */
  async function expectBm25(db: NodeEngine<Database>, docs: Map<string, Doc>, words: string[], k: number): Promise<void> {
    const hits = (await db.hybridSearch('t', { query_text: words.join(' '), k, with_payload: false })).hits;
    const scores = bm25Scores(docs, words);
    const best = [...scores.values()].sort((a, b) => b - a).slice(0, k);
    expect(hits.length).toBe(best.length);
    hits.forEach((h, i) => {
      expect(scores.has(h.id), `${h.id} matches no query term`).toBe(true);
      expect(scores.get(h.id)!).toBeCloseTo(best[i], 9);
    });
  }

  it('on a small corpus, after deleting documents that change N, df and avgdl', async () => {
    const db = await open();
    await db.createCollection({ name: 't', dim: 2, metric: 'l2' });
    const texts: Record<string, string> = {
      d1: 'alpha alpha bravo', d2: 'alpha delta delta delta echo', d3: 'bravo echo', d4: 'golf hotel india juliet kilo alpha',
      d5: 'the', d6: 'echo echo echo echo echo echo bravo',
    };
    await db.upsert('t', { points: Object.entries(texts).map(([id, t]) => ({ id, vector: [0, 0], payload: { __svc_text__: t } })) });
    const docs = new Map(Object.entries(texts).map(([id, t]) => [id, textDoc(t)]));
    for (const q of [['alpha'], ['bravo', 'echo'], ['alpha', 'alpha', 'india'], ['delta', 'zulu']]) await expectBm25(db, docs, q, 10);
    await db.delete('t', 'd2');
    await db.delete('t', 'd6');
    docs.delete('d2');
    docs.delete('d6');
    for (const q of [['alpha'], ['bravo', 'echo'], ['alpha', 'alpha', 'india'], ['delta', 'zulu']]) await expectBm25(db, docs, q, 10);
    const hits = (await db.hybridSearch('t', { query_text: 'delta' })).hits;
    expect(hits).toEqual([]);
    await db.close();
  });

  it('property: random upserts, text updates and deletes keep the statistics exact', async () => {
    const db = await open();
    let run = 0;
    const op = fc.oneof(
      fc.record({ t: fc.constant('put' as const), id: fc.integer({ min: 0, max: 14 }), words: fc.array(fc.constantFrom(...VOCAB.slice(0, 8), 'the'), { maxLength: 9 }) }),
      fc.record({ t: fc.constant('del' as const), id: fc.integer({ min: 0, max: 14 }) }),
    );
    await fc.assert(
      fc.asyncProperty(fc.array(op, { minLength: 1, maxLength: 25 }), fc.array(fc.constantFrom(...VOCAB.slice(0, 8)), { minLength: 1, maxLength: 4 }), async (ops, query) => {
        const name = `t${run++}`;
        await db.createCollection({ name, dim: 2, metric: 'l2' });
        const docs = new Map<string, Doc>();
        for (const o of ops) {
          if (o.t === 'put') {
            const text = o.words.join(' ');
            await db.upsert(name, { points: [{ id: `d${o.id}`, vector: [o.id, 1], payload: { __svc_text__: text } }] });
            docs.set(`d${o.id}`, textDoc(text));
          } else {
            await db.delete(name, `d${o.id}`);
            docs.delete(`d${o.id}`);
          }
        }
        const hits = (await db.hybridSearch(name, { query_text: query.join(' '), k: 20 })).hits;
        const scores = bm25Scores(docs, query);
        const best = [...scores.values()].sort((a, b) => b - a);
        expect(hits.map((h) => scores.get(h.id))).toEqual(best.map((s) => expect.closeTo(s, 9)));
        await db.deleteCollection(name);
      }),
      { numRuns: 40, seed: 4242 },
    );
    await db.close();
  });
});

/** An embedder that records its calls and can be told to fail. */
class ScriptedEmbedder implements Embedder {
  readonly calls: string[][] = [];
  fail = false;
  private readonly inner: FakeEmbedder;
  constructor(readonly dim: number) {
    this.inner = new FakeEmbedder(dim);
  }
  async embed(texts: string[], kind: 'document' | 'query'): Promise<Float32Array[]> {
    this.calls.push(texts);
    if (this.fail) throw new SvcError('provider_error', 'embedding provider http: request failed after 3 attempts: HTTP 503');
    return this.inner.embed(texts, kind);
  }
}

class RecordingReranker implements Reranker {
  readonly calls: { query: string; documents: string[]; topN: number }[] = [];
  async rerank(query: string, documents: string[], topN: number): Promise<{ index: number; score: number }[]> {
    this.calls.push({ query, documents, topN });
    // Reverse the candidates' order, with scores the caller cannot derive from its own ranking.
    return documents.map((_, index) => ({ index, score: 1000 + index })).reverse().slice(0, topN);
  }
}

const SENTENCES = [
  'the cat sat on the warm mat', 'dogs chase cats in the park', 'vector databases index embeddings',
  'hybrid search fuses dense and sparse rankings', 'the quick brown fox jumps over the lazy dog',
  'reciprocal rank fusion sums reciprocal ranks', 'okapi bm25 scores words by frequency',
  'cats and dogs are popular pets', 'a mat for the cat', 'search engines rank documents',
];

describe('text points and text queries', () => {
  async function textDb(opts: { maxK?: number } = {}): Promise<{ db: NodeEngine<Database>; emb: ScriptedEmbedder; rr: RecordingReranker }> {
    const emb = new ScriptedEmbedder(16);
    const rr = new RecordingReranker();
    const db = await open({
      embedders: new Map([['docs', emb]]), rerankers: new Map([['docs', rr]]),
      ...(opts.maxK !== undefined ? { limits: { maxK: opts.maxK } } : {}),
    });
    await db.createCollection({ name: 'docs', dim: 16, metric: 'cosine', filterable: [{ path: 'lang', field_type: 'keyword' }] });
    return { db, emb, rr };
  }

  it('points:text embeds each text for the dense side and stores it under __svc_text__', async () => {
    const { db, emb } = await textDb();
    const r = await db.upsertText('docs', { points: SENTENCES.map((text, i) => ({ id: `s${i}`, text, payload: { lang: i % 2 ? 'en' : 'fr' } })) });
    expect(r).toEqual({ upserted: SENTENCES.length });
    expect(emb.calls).toEqual([SENTENCES]);
    const p = await db.get('docs', 's3', { with_vector: true });
    expect(p.payload).toEqual({ lang: 'en', __svc_text__: SENTENCES[3] });
    const [expected] = await new FakeEmbedder(16).embed([SENTENCES[3]], 'document');
    p.vector!.forEach((x, i) => expect(x).toBeCloseTo(expected[i], 6));
    await db.close();
  });

  it('a provider failure is provider_error and stores nothing of the batch', async () => {
    const { db, emb } = await textDb();
    await db.upsertText('docs', { points: [{ id: 'keep', text: 'already here' }] });
    emb.fail = true;
    expect(await codeOf(db.upsertText('docs', { points: [{ id: 'keep', text: 'replaced?' }, { id: 'new', text: 'new one' }] }))).toBe('provider_error');
    expect((await db.collectionInfo('docs')).count).toBe(1);
    expect((await db.get('docs', 'keep')).payload).toEqual({ __svc_text__: 'already here' });
    expect(await codeOf(db.get('docs', 'new'))).toBe('not_found');
    expect(await codeOf(db.searchText('docs', { text: 'here' }))).toBe('provider_error');
    await db.close();
  });

  it('a collection without a provider refuses points:text and query/text with a 400 naming the table', async () => {
    const db = await open();
    await db.createCollection({ name: 'plain', dim: 4, metric: 'cosine' });
    const e = await db.upsertText('plain', { points: [{ id: 'a', text: 'hello' }] }).catch((x: unknown) => x as SvcError);
    expect(e).toBeInstanceOf(SvcError);
    expect((e as SvcError).code).toBe('invalid_argument');
    expect((e as SvcError).message).toContain('[embedding.plain]');
    expect(await codeOf(db.searchText('plain', { text: 'hello' }))).toBe('invalid_argument');
    await db.close();
  });

  it('query/text is the dense ranking of the embedded query fused with BM25', async () => {
    const { db } = await textDb();
    await db.upsertText('docs', { points: SENTENCES.map((text, i) => ({ id: `s${i}`, text, payload: { lang: i % 2 ? 'en' : 'fr' } })) });
    for (const [text, filter] of [['cat on a mat', undefined], ['dogs and cats', { eq: { field: 'lang', value: 'en' } }]] as const) {
      const [qv] = await new FakeEmbedder(16).embed([text], 'query');
      const byText = await db.searchText('docs', { text, k: 4, filter });
      const byHybrid = await db.hybridSearch('docs', { vector: Array.from(qv), query_text: text, k: 4, filter });
      expect(byText.hits).toEqual(byHybrid.hits);
      expect(byText.hits.length).toBe(4);
    }
    await db.close();
  });

  it('rerank: over-fetches max(4k, 50) capped by SVC_MAX_K, one reranker call, the reranker order and scores', async () => {
    const { db, rr } = await textDb({ maxK: 60 });
    const points = Array.from({ length: 80 }, (_, i) => ({ id: `x${i}`, text: `${SENTENCES[i % SENTENCES.length]} number ${i}` }));
    await db.upsertText('docs', { points });
    const plain = await db.searchText('docs', { text: 'cats and dogs', k: 60 });
    const r = await db.searchText('docs', { text: 'cats and dogs', k: 5, rerank: true });
    expect(rr.calls.length).toBe(1);
    const call = rr.calls[0];
    expect(call.query).toBe('cats and dogs');
    expect(call.topN).toBe(5);
    // default pool max(4*5, 50) = 50, the first 50 of the fused ranking, as texts
    const pool = plain.hits.slice(0, 50);
    expect(call.documents).toEqual(pool.map((h) => h.payload!.__svc_text__));
    expect(r.hits.map((h) => h.id)).toEqual(pool.slice(-5).reverse().map((h) => h.id));
    expect(r.hits.map((h) => h.score)).toEqual([1049, 1048, 1047, 1046, 1045]);
    expect(r.hits.map((h) => h.rank)).toEqual([0, 1, 2, 3, 4]);

    await db.searchText('docs', { text: 'cats and dogs', k: 20, rerank: true }); // max(80, 50) capped at 60
    expect(rr.calls[1].documents.length).toBe(60);
    await db.searchText('docs', { text: 'cats and dogs', k: 5, rerank: true, rerank_pool: 7 });
    expect(rr.calls[2].documents.length).toBe(7);
    await db.searchText('docs', { text: 'cats and dogs', k: 5, rerank: true, rerank_pool: 2 }); // never below k
    expect(rr.calls[3].documents.length).toBe(5);
    expect(await codeOf(db.searchText('docs', { text: 'cats', rerank: true, rerank_pool: 61 }))).toBe('limit_exceeded');
    expect(rr.calls.length).toBe(4);
    await db.close();
  });

  it('rerank without a rerank provider is a 400; the tokenized query is capped by SVC_MAX_SPARSE_TERMS', async () => {
    const emb = new ScriptedEmbedder(4);
    const db = await open({ embedders: new Map([['docs', emb]]), limits: { maxSparseTerms: 3 } });
    await db.createCollection({ name: 'docs', dim: 4, metric: 'cosine' });
    await db.upsertText('docs', { points: [{ id: 'a', text: 'alpha' }] });
    expect(await codeOf(db.searchText('docs', { text: 'alpha', rerank: true }))).toBe('invalid_argument');
    expect(await codeOf(db.searchText('docs', { text: 'alpha bravo delta' }))).toBe('ok');
    emb.calls.length = 0;
    expect(await codeOf(db.searchText('docs', { text: 'alpha bravo delta echo' }))).toBe('limit_exceeded');
    expect(emb.calls).toEqual([]); // refused before the provider is called
    await db.close();
  });
});

describe('openDatabase with providers', () => {
  it('builds embedders from the tables, refuses a create of another dim and an existing collection of another dim', async () => {
    const dataDir = tempDir();
    const db = await openDatabase({
      dataDir, insecure: true,
      providers: { embedding: { docs: { provider: 'fake', model: 'x', dim: 8 } }, rerank: { docs: { provider: 'fake', model: 'r' } } },
    });
    const bad = await db.createCollection({ name: 'docs', dim: 4, metric: 'cosine' }).catch((e: unknown) => e as SvcError);
    expect((bad as SvcError).code).toBe('invalid_argument');
    expect((bad as SvcError).message).toMatch(/dim 4.*8/);
    await db.createCollection({ name: 'docs', dim: 8, metric: 'cosine' });
    await db.upsertText('docs', { points: [{ id: 'a', text: 'cats on mats' }, { id: 'b', text: 'dogs in parks' }] });
    const r = await db.searchText('docs', { text: 'cats', k: 1, rerank: true });
    expect(r.hits.map((h) => [h.id, h.score])).toEqual([['a', 1]]);
    await db.close();

    const refused = await openDatabase({ dataDir, insecure: true, providers: { embedding: { docs: { provider: 'fake', model: 'x', dim: 16 } } } })
      .catch((e: unknown) => e as SvcError);
    expect(refused).toBeInstanceOf(SvcError);
    expect((refused as SvcError).message).toContain("[embedding.docs] has dim 16 but collection 'docs' has dim 8");
    // The refusal closed the directory: it opens again with a matching table.
    const again = await openDatabase({ dataDir, insecure: true, providers: { embedding: { docs: { provider: 'fake', model: 'x', dim: 8 } } } });
    expect((await again.collectionInfo('docs')).count).toBe(2);
    await again.close();
  });

  it('a bad table is refused naming it', async () => {
    const err = await openDatabase({ dataDir: tempDir(), insecure: true, providers: { embedding: { docs: { provider: 'http', model: 'm', dim: 4 } } } })
      .catch((e: unknown) => e as SvcError);
    expect((err as SvcError).code).toBe('invalid_argument');
    expect((err as SvcError).message).toBe('[embedding.docs]: provider http: endpoint is required');
  });
});
