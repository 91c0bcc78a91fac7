import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { Prng } from '../base/prng.js';
import type { FetchQuery, HybridQuery } from '../base/model.js';
import { NodeEngine } from '../engine/node.js';
import { readerThread } from '../testing/reader-thread.js';
import type { RankingsBody } from '../query/ranking.js';
import { Database } from './database.js';
import { buildIndexInline } from './rebuild.js';
import { ReadView } from './shared-reads.js';

/**
 * A request loop's hybrid searches and shard rankings over shared memory (issue 20): dense, sparse and
 * BM25 rankings read from the collection's shared arrays, answered exactly as the engine thread answers.
 */

const KEY = Buffer.alloc(32, 9);
const dirs: string[] = [];
const dbs: Database[] = [];

afterEach(async () => {
  for (const db of dbs.splice(0)) await db.close().catch(() => undefined);
  for (const d of dirs.splice(0)) rmSync(d, { recursive: true, force: true });
});

async function openDb(): Promise<Database> {
  const dir = mkdtempSync(join(tmpdir(), 'svc-shared-rankings-'));
  dirs.push(dir);
  const db = await Database.open({ dataDir: dir, masterKey: KEY, buildIndex: buildIndexInline, sharedReads: true, absorbMax: 64 });
  dbs.push(db);
  return db;
}

const WORDS = ['wing', 'flow', 'shock', 'layer', 'boundary', 'heat', 'plate', 'mach', 'jet', 'drag', 'the', 'of'];

/** The view's answer, after it took what a loop would ask the engine thread for (the graph epoch, match bits). */
function viewAnswer<T>(db: Database, v: ReadView, ask: () => T | null, filter: unknown): T | null {
  for (let tries = 0; tries < 3; tries++) {
    const r = ask();
    if (r !== null) return r;
    if (v.declined === 'epoch') v.adoptGraph(db.readGraph(v.uid)!);
    else if (v.declined === 'filter') v.adoptBits(v.wantBits!, db.matchBits(v.uid, filter)!);
    else return null;
  }
  return null;
}

/**
 * Pages through collection `name` (or those of its points matching a filter) from the view and from the
 * engine, a random page size each time, and expects the same pages and cursors; the pages compared.
 */
async function samePages(db: Database, name: string, v: ReadView, prng: Prng, filters: unknown[]): Promise<number> {
  const filter = prng.int(3) === 0 ? filters[prng.int(filters.length)] : undefined;
  const base = { limit: 1 + prng.int(prng.int(4) === 0 ? 400 : 40), ...(filter === undefined ? {} : { filter }), ...(prng.int(4) === 0 ? { with_vector: true } : {}) };
  let cursor: string | null = null;
  let n = 0;
  do {
    const q: FetchQuery = cursor === null ? base : { ...base, cursor };
    const theirs = await db.fetch(name, q);
    expect(viewAnswer(db, v, () => v.fetch(q), filter), `page ${n} of ${JSON.stringify(q)}`).toEqual(theirs);
    cursor = theirs.next_cursor;
    n++;
  } while (cursor !== null);
  return n;
}

describe('hybrid searches and rankings read from shared memory (request loops, issue 20)', () => {
  it('answers every hybrid search and shard ranking exactly as the engine thread does, through upserts, updates, deletes and payload changes', async () => {
    const db = await openDb();
    const engine = new NodeEngine(db);
    const dim = 6;
    const filterable = [{ path: 'tag', field_type: 'keyword' as const }];
    await db.createCollection({ name: 'c', dim, metric: 'l2', filterable });
    await db.createCollection({ name: 'f', dim, metric: 'cosine', index: 'flat', filterable });
    const prng = new Prng(20261128);
    // Few distinct values and words: equal scores (ties by id) in every ranking.
    const vec = (): number[] => Array.from({ length: dim }, () => prng.int(4) - 1.5);
    const text = (): string => Array.from({ length: 1 + prng.int(6) }, () => WORDS[prng.int(WORDS.length)]).join(' ');
    const sparse = () => {
      const indices = [...new Set(Array.from({ length: 1 + prng.int(4) }, () => prng.int(12)))];
      return { indices, values: indices.map(() => prng.int(3) + 0.5) };
    };
    const payload = (id: string, round: number) => {
      const r = prng.int(8);
      if (r === 0) return null;
      const base = { id, round, tag: ['a', 'b', 'c'][prng.int(3)] };
      if (r === 1) return { ...base, __svc_sparse__: sparse() };
      if (r === 2) return base;
      return { ...base, __svc_text__: text() };
    };
    const filters = [{ eq: { field: 'tag', value: 'a' } }, { not: { eq: { field: 'tag', value: 'b' } } }];
    const views = new Map<string, ReadView>();
    let hybrids = 0;
    let rankings = 0;
    let pages = 0;
    for (let round = 0; round < 24; round++) {
      for (const name of ['c', 'f']) {
        const points = Array.from({ length: 20 + prng.int(100) }, () => {
          const id = `p${prng.int(1200)}`;
          return { id, vector: vec(), payload: payload(id, round) };
        });
        await db.upsert(name, { points });
        if (prng.int(3) === 0) await db.deletePoints(name, { ids: Array.from({ length: 10 }, () => `p${prng.int(1200)}`) });
        if (prng.int(3) === 0) {
          await db.setPayload(name, { points: [{ id: points[0].id, payload: { __svc_text__: text(), tag: 'a' } }], mode: prng.int(2) === 0 ? 'merge' : 'replace' });
        }
        let v = views.get(name);
        if (v === undefined) views.set(name, v = new ReadView(db.readView(name)!, { patchBudgetMs: Infinity }));
        for (let i = 0; i < 6; i++) {
          const q: Record<string, unknown> = {};
          const parts = 1 + prng.int(7);
          if (parts & 1) q.vector = vec();
          if (parts & 2) Object.assign(q, (({ indices, values }) => ({ sparse_indices: indices, sparse_values: values }))(sparse()));
          if (parts & 4) q.query_text = text();
          if (prng.int(3) === 0) q.filter = filters[prng.int(filters.length)];
          if (prng.int(4) === 0) q.with_vector = true;
          if (prng.int(5) === 0) q.with_payload = false;
          if (prng.int(4) === 0) q.ef_search = 8 + prng.int(100);
          const before = v.epoch;
          const view = v;
          if (i % 2 === 0) {
            const h: HybridQuery = { ...q, k: 1 + prng.int(20), ...(prng.int(3) === 0 ? { rrf_k0: prng.int(100) } : {}) } as HybridQuery;
            const theirs = await engine.hybridSearch(name, h);
            const mine = viewAnswer(db, view, () => view.hybrid(h), q.filter);
            expect(mine, `declined: ${v.declined}`).not.toBeNull();
            // A graph swapped in between the two answers may change an approximate dense ranking.
            if (v.epoch !== before) continue;
            expect(mine).toEqual(theirs);
            hybrids++;
          } else {
            const b: RankingsBody = { ...q, depth: 1 + prng.int(150) } as RankingsBody;
            // A router's whole-collection statistics now and then: BM25 scores against them.
            if (q.query_text !== undefined && prng.int(2) === 0) b.text_stats = { docs: 5000, total_length: 20000, df: { [String(prng.int(2 ** 32))]: 7 } };
            if (q.query_text !== undefined && prng.int(3) === 0) b.text_stats = await db.textStats(name, { text: q.query_text as string });
            const theirs = await db.rankings(name, b);
            const mine = viewAnswer(db, view, () => view.rankings(b), q.filter);
            expect(mine, `declined: ${v.declined}`).not.toBeNull();
            if (v.epoch !== before) continue;
            expect(mine).toEqual(theirs);
            rankings++;
          }
        }
      }
      // Counts, with and without a filter, as the engine counts; point reads, present and absent.
      for (const name of ['c', 'f']) {
        const view = views.get(name)!;
        for (let i = 0; i < 20; i++) {
          const id = `p${prng.int(1200)}`;
          const opts = prng.int(3) === 0 ? { with_vector: true } : prng.int(2) === 0 ? {} : undefined;
          const theirs = await db.get(name, id, opts).catch((e: { code: string }) => e.code);
          const mine = view.get(id, opts);
          if (theirs === 'not_found') expect([mine, view.declined]).toEqual([null, 'absent']);
          else expect(mine).toEqual(theirs);
        }
        for (const q of [undefined, {}, { filter: filters[round % 2] }]) {
          expect(viewAnswer(db, view, () => view.count(q as never), q?.filter), `count ${JSON.stringify(q)}`).toEqual(await db.count(name, q));
        }
        pages += await samePages(db, name, view, prng, filters);
      }
      if (round % 7 === 6) for (const name of ['c', 'f']) await db.search(name, { vector: vec(), consistency: 'strong' });
    }
    expect(hybrids).toBeGreaterThan(100);
    expect(rankings).toBeGreaterThan(100);
    // Every round pages through both collections whole: the view's order brought up through the writes.
    expect(pages).toBeGreaterThan(2000);
    for (const v of views.values()) v.close();
  });

  it('hands on what only the engine thread answers, and anything read while a write ran', async () => {
    const db = await openDb();
    await db.createCollection({ name: 'c', dim: 2, metric: 'l2', filterable: [{ path: 'r', field_type: 'numeric' }] });
    await db.upsert('c', { points: [
      { id: 'a', vector: [0, 0], payload: { r: 1, __svc_text__: 'shock wave' } },
      { id: 'b', vector: [1, 0], payload: { r: 2, __svc_text__: 'boundary layer shock' } },
    ] });
    const v = new ReadView(db.readView('c')!, { patchBudgetMs: Infinity });
    expect(v.hybrid({ query_text: 'boundary' })?.hits.map((h) => h.id)).toEqual(['b']);
    for (const q of [
      { query_text: 'shock', consistency: 'strong' }, {}, { query_text: 7 }, { vector: [0, 0, 0] }, { query_text: 'x', k: 0 }, { query_text: 'x', rrf_k0: -1 },
      { query_text: 'x', surprise: 1 }, { sparse_indices: [1, 1], sparse_values: [1, 2] }, { query_text: 'x', filter: { eq: { field: 'nope', value: 1 } } }, null,
    ]) {
      expect(v.hybrid(q as HybridQuery), JSON.stringify(q)).toBeNull();
      expect(v.declined).toBe('shape');
    }
    for (const b of [{ query_text: 'x', depth: 0 }, { query_text: 'x', text_stats: { docs: -1, total_length: 0, df: {} } }, { query_text: 'x', k: 3 }]) {
      expect(v.rankings(b as RankingsBody), JSON.stringify(b)).toBeNull();
      expect(v.declined).toBe('shape');
    }
    for (const q of [null, [], { filter: 7 }, { filter: { eq: { field: 'nope', value: 1 } } }, { extra: 1 }]) {
      expect(v.count(q as never), JSON.stringify(q)).toBeNull();
      expect(v.declined).toBe('shape');
    }
    for (const [id, opts] of [['', undefined], [7, undefined], ['a', null], ['a', { with_vector: 'yes' }]] as const) {
      expect(v.get(id, opts as never), JSON.stringify([id, opts])).toBeNull();
      expect(v.declined).toBe('shape');
    }
    expect(v.get('a', { with_vector: true })).toEqual({ id: 'a', payload: { r: 1, __svc_text__: 'shock wave' }, vector: [0, 0] });
    for (const q of [null, [], { limit: 0 }, { limit: 1e9 }, { cursor: '***' }, { cursor: 7 }, { with_vector: 'yes' }, { consistency: 'strong' }, { filter: { eq: { field: 'nope', value: 1 } } }, { extra: 1 }]) {
      expect(v.fetch(q as never), JSON.stringify(q)).toBeNull();
      expect(v.declined).toBe('shape');
    }
    expect(v.fetch({ limit: 1 })).toEqual({ points: [{ id: 'a', payload: { r: 1, __svc_text__: 'shock wave' } }], next_cursor: 'YQ' });
    expect(v.fetch({ cursor: 'YQ', with_vector: true, consistency: 'eventual' })).toEqual({ points: [{ id: 'b', payload: { r: 2, __svc_text__: 'boundary layer shock' }, vector: [1, 0] }], next_cursor: null });
    const filter = { gte: { field: 'r', value: 2 } };
    expect(v.hybrid({ query_text: 'shock', filter })).toBeNull();
    expect([v.declined, v.wantBits?.filter]).toEqual(['filter', filter]);
    v.adoptBits(v.wantBits!, db.matchBits(v.uid, filter)!);
    expect(v.hybrid({ query_text: 'shock', filter })?.hits.map((h) => h.id)).toEqual(['b']);
    // A write in progress, as another thread sees the engine thread inside Collection.apply.
    const reads = (db as unknown as { byName: Map<string, { reads: { writeBegin(): void; writeEnd(): void } }> }).byName.get('c')!.reads;
    reads.writeBegin();
    expect(v.hybrid({ query_text: 'shock' })).toBeNull();
    expect(v.declined).toBe('moved');
    expect(v.rankings({ query_text: 'shock', filter })).toBeNull();
    expect(v.declined).toBe('moved');
    expect(v.count({})).toBeNull();
    expect(v.declined).toBe('moved');
    expect(v.fetch({})).toBeNull();
    expect(v.declined).toBe('moved');
    reads.writeEnd();
    expect(v.fetch({})?.points.map((p) => p.id)).toEqual(['a', 'b']);
    expect(v.count({})).toEqual({ count: 2 });
    expect(v.hybrid({ query_text: 'shock' })?.hits.map((h) => h.id)).toEqual(['a', 'b']);
    // A dropped collection answers nothing from its view.
    await db.deleteCollection('c');
    expect(v.hybrid({ query_text: 'shock' })).toBeNull();
    expect(v.declined).toBe('retired');
    v.close();
  });

  it('never shows another thread a text ranking that does not hold the query term, or one point twice, while the writer rewrites texts', async () => {
    const db = await openDb();
    await db.createCollection({ name: 'c', dim: 3, metric: 'l2' });
    const prng = new Prng(5);
    const vec = (): number[] => Array.from({ length: 3 }, () => prng.gaussian());
    // Half the points hold 'shock'; the writer moves points in and out of it, and adds terms all along
    // (the term table grows, posting blocks move, the arena is compacted).
    const doc = (id: string, on: boolean, v: number) => ({ id, vector: vec(), payload: { id, __svc_text__: `${on ? 'shock' : 'calm'} term${v} word${prng.int(50)} ${id}` } });
    await db.upsert('c', { points: Array.from({ length: 300 }, (_, i) => doc(`p${i}`, i % 2 === 0, 0)) });
    const { worker, next, stop } = readerThread(RANKING_READER, db.readView('c')!);
    expect(await next()).toBe('ready');
    const result = next() as Promise<{ answered: number; declined: number; bad: string[] }>;
    for (let v = 1; v <= 500; v++) {
      const ids = Array.from({ length: 6 }, () => `p${prng.int(300)}`);
      await db.upsert('c', { points: ids.map((id) => doc(id, prng.int(2) === 0, v)) });
      if (v % 5 === 0) await db.setPayload('c', { points: [{ id: ids[0], payload: { id: ids[0], __svc_text__: `calm ${ids[0]}` } }] });
      if (v % 7 === 0) await db.deletePoints('c', { ids: [ids[1]] });
      if (v % 3 === 0) await new Promise((r) => setTimeout(r, 1));
    }
    stop();
    const r = await result;
    await worker.terminate();
    expect(r.bad).toEqual([]);
    expect(r.answered).toBeGreaterThan(20);
  });
});

describe('multi-vector searches read from shared memory (request loops, issue 20)', () => {
  it('pages: keeps its order through a write that raced bringing it up, hands on past its bound, lets it go when idle', async () => {
    const db = await openDb();
    await db.createCollection({ name: 'c', dim: 2, metric: 'l2', index: 'flat' });
    for (let b = 0; b < 2; b++) await db.upsert('c', { points: Array.from({ length: 1000 }, (_, i) => ({ id: `p${b * 1000 + i}`, vector: [i, 1], payload: { i } })) });
    const v = new ReadView(db.readView('c')!, { fetchOrderMax: 2302 });
    const view = v as unknown as { idOf(s: number): string };
    const idOf = view.idOf.bind(v);
    let read = 0;
    let race: (() => void) | null = null;
    view.idOf = (s: number) => {
      read++;
      race?.();
      race = null;
      return idOf(s);
    };
    expect(v.fetch({ limit: 3 })?.points.map((p) => p.id)).toEqual(['p0', 'p1', 'p10']);
    expect(read).toBe(2000);
    // A write, then another that begins and ends while the loop brings its order up (the first id it reads).
    const reads = (db as unknown as { byName: Map<string, { reads: { writeBegin(): void; writeEnd(): void } }> }).byName.get('c')!.reads;
    await db.upsert('c', { points: [{ id: 'new', vector: [0, 0], payload: null }] });
    race = () => {
      reads.writeBegin();
      reads.writeEnd();
    };
    expect(v.fetch({ limit: 3 })).toBeNull();
    expect(v.declined).toBe('moved');
    // The next page brings the order it kept up: the two slots written since, not every id again.
    await db.upsert('c', { points: [{ id: 'new2', vector: [0, 0], payload: null }] });
    read = 0;
    expect(v.fetch({ limit: 3 })?.points.map((p) => p.id)).toEqual(['new', 'new2', 'p0']);
    expect(read).toBeLessThan(10);
    // More slots written than are spliced in one by one (SPLICE_MAX): merged in one pass, the same pages.
    await db.upsert('c', { points: Array.from({ length: 300 }, (_, i) => ({ id: `q${(i * 7) % 300}`, vector: [i, 2], payload: { q: i } })) });
    for (let cursor: string | null = null, n = 0; n === 0 || cursor !== null; n++) {
      const q: FetchQuery = { limit: 97, ...(cursor === null ? {} : { cursor }) };
      const theirs = await db.fetch('c', q);
      expect(v.fetch(q), `page ${n}`).toEqual(theirs);
      cursor = theirs.next_cursor;
    }
    // Idle for 30 sweeps: still kept (a client paging slowly); past them, let go.
    for (let i = 0; i < 30; i++) v.sweep();
    read = 0;
    expect(v.fetch({ limit: 1, cursor: 'cDA' })?.points.map((p) => p.id)).toEqual(['p1']);
    expect(read).toBe(0);
    for (let i = 0; i < 31; i++) v.sweep();
    expect(v.fetch({ limit: 1 })?.points.map((p) => p.id)).toEqual(['new']);
    expect(read).toBe(2302);
    // Past the bound: the engine thread's pages.
    await db.upsert('c', { points: [{ id: 'one-too-many', vector: [0, 0], payload: null }] });
    expect(v.fetch({ limit: 1 })).toBeNull();
    expect(v.declined).toBe('scan');
    v.close();
  });

  it('answers every multi-vector search exactly as the engine thread does, graph and exact, through writes', async () => {
    const db = await openDb();
    const dim = 4;
    const filterable = [{ path: 'tag', field_type: 'keyword' as const }];
    await db.createCollection({ name: 'm', dim, metric: 'cosine', multivector: true, filterable });
    await db.createCollection({ name: 'l', dim, metric: 'l2', multivector: true, index: 'flat', filterable });
    const prng = new Prng(20261129);
    // Coarse values: equal MaxSim scores (ties by id) come up.
    const vec = (): number[] => Array.from({ length: dim }, () => prng.int(3) - 1 || 0.5);
    const doc = (id: string) => ({ id, vectors: Array.from({ length: 1 + prng.int(3) }, vec), ...(prng.int(4) === 0 ? {} : { payload: { tag: ['a', 'b'][prng.int(2)], id } }) });
    const filters = [{ eq: { field: 'tag', value: 'a' } }, { not: { eq: { field: 'tag', value: 'b' } } }];
    // Past 2,000 documents the HNSW collection takes its candidates from the token graph.
    for (let i = 0; i < 2400; i += 400) await db.upsertDocuments('m', { documents: Array.from({ length: 400 }, (_, j) => doc(`d${i + j}`)) });
    await db.searchMultiVector('m', { vectors: [vec()], consistency: 'strong' });
    const views = new Map<string, ReadView>();
    let answered = 0;
    let pages = 0;
    for (let round = 0; round < 12; round++) {
      for (const name of ['m', 'l']) {
        await db.upsertDocuments(name, { documents: Array.from({ length: 10 + prng.int(40) }, () => doc(`d${prng.int(name === 'm' ? 2600 : 300)}`)) });
        if (prng.int(3) === 0) for (let i = 0; i < 3; i++) await db.deleteDocument(name, `d${prng.int(300)}`);
        if (prng.int(3) === 0) await db.setPayload(name, { points: [{ id: `d${prng.int(300)}`, payload: { tag: 'a' } }], mode: 'merge' }).catch(() => undefined);
        let v = views.get(name);
        if (v === undefined) views.set(name, v = new ReadView(db.readView(name)!, { patchBudgetMs: Infinity }));
        for (let i = 0; i < 5; i++) {
          const q = {
            vectors: Array.from({ length: 1 + prng.int(3) }, vec), k: 1 + prng.int(20),
            ...(prng.int(3) === 0 ? { filter: filters[prng.int(2)] } : {}), ...(prng.int(4) === 0 ? { with_vector: true } : {}), ...(prng.int(5) === 0 ? { with_payload: false } : {}),
          };
          const before = v.epoch;
          const theirs = await db.searchMultiVector(name, q);
          const view = v;
          const mine = viewAnswer(db, view, () => view.searchMultiVector(q), q.filter);
          expect(mine, `declined: ${v.declined}`).not.toBeNull();
          if (v.epoch !== before) continue;
          expect(mine).toEqual(theirs);
          answered++;
        }
        pages += await samePages(db, name, v, prng, filters);
        // A document read by id, its token vectors too.
        for (let i = 0; i < 5; i++) {
          const id = `d${prng.int(300)}`;
          const theirs = await db.get(name, id, { with_vector: true }).catch((e: { code: string }) => e.code);
          if (theirs === 'not_found') expect(v.get(id, { with_vector: true })).toBeNull();
          else expect(v.get(id, { with_vector: true })).toEqual(theirs);
        }
      }
      if (round % 5 === 4) await db.searchMultiVector('m', { vectors: [vec()], consistency: 'strong' });
    }
    expect(answered).toBeGreaterThan(80);
    expect(pages).toBeGreaterThan(2000);
    // Strong reads, a point collection's view, input the engine refuses: handed on.
    const v = views.get('m')!;
    for (const q of [{ vectors: [vec()], consistency: 'strong' }, { vectors: [[1, 2]] }, { vectors: [] }, { vectors: [vec()], k: 0 }, { vectors: [vec()], extra: 1 }]) {
      expect(v.searchMultiVector(q as never), JSON.stringify(q)).toBeNull();
      expect(v.declined).toBe('shape');
    }
    await db.createCollection({ name: 'p', dim, metric: 'l2' });
    const p = new ReadView(db.readView('p')!);
    expect(p.searchMultiVector({ vectors: [vec()] })).toBeNull();
    expect(p.declined).toBe('shape');
    p.close();
    for (const view of views.values()) view.close();
  });
});

/** A reader thread: asks for the 'shock' ranking until told to stop, and reports any entry inconsistent in itself. */
const RANKING_READER = `const { parentPort, workerData } = require('node:worker_threads');
(async () => {
  const { tsImport } = await import(workerData.tsx);
  const { ReadView } = await tsImport(workerData.url, workerData.url);
  const stop = new Int32Array(workerData.stop);
  const v = new ReadView(workerData.handle);
  let answered = 0, declined = 0;
  const bad = [];
  parentPort.postMessage('ready');
  for (let n = 0; Atomics.load(stop, 0) === 0; n++) {
    if (n % 8 === 0) await new Promise((resolve) => setImmediate(resolve));
    const r = v.rankings({ query_text: n % 3 === 0 ? 'shock calm' : 'shock', depth: 400 });
    if (r === null) { declined++; if (v.declined !== 'moved') bad.push('declined ' + v.declined); continue; }
    answered++;
    const seen = new Set();
    for (const e of r.text) {
      if (seen.has(e.id)) bad.push('twice ' + e.id);
      seen.add(e.id);
      if (e.payload.id !== e.id) bad.push('payload of ' + e.payload.id + ' on ' + e.id);
      const words = e.payload.__svc_text__.split(' ');
      if (!words.includes('shock') && !(n % 3 === 0 && words.includes('calm'))) bad.push(e.id + ' without the term: ' + e.payload.__svc_text__);
      if (!(e.score > 0)) bad.push(e.id + ' scored ' + e.score);
    }
    for (let i = 1; i < r.text.length; i++) if (r.text[i].score > r.text[i - 1].score) bad.push('out of order at ' + i);
  }
  v.close();
  parentPort.postMessage({ answered, declined, bad: bad.slice(0, 20) });
})();
`;
