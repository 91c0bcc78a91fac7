import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Worker } from 'node:worker_threads';
import { afterEach, describe, expect, it } from 'vitest';
import { Prng } from '../base/prng.js';
import type { SearchQuery } from '../base/model.js';
import { Database } from './database.js';
import { ENGINE_LANES, LANES_PER_MEMORY } from '../index/vector-store.js';
import { buildIndexInline } from './rebuild.js';
import { readerThread } from '../testing/reader-thread.js';
import { ReadView, SharedReadState, SharedRecords } from './shared-reads.js';

const KEY = Buffer.alloc(32, 7);
const dirs: string[] = [];
const dbs: Database[] = [];

afterEach(async () => {
  for (const db of dbs.splice(0)) await db.close().catch(() => undefined);
  for (const d of dirs.splice(0)) rmSync(d, { recursive: true, force: true });
});

async function openDb(extra: Partial<Parameters<typeof Database.open>[0]> = {}): Promise<Database> {
  const dir = mkdtempSync(join(tmpdir(), 'svc-shared-reads-'));
  dirs.push(dir);
  const db = await Database.open({ dataDir: dir, masterKey: KEY, buildIndex: buildIndexInline, sharedReads: true, absorbMax: 64, ...extra });
  dbs.push(db);
  return db;
}

/** The view's answer, after it took the graph epoch it was missing (a loop asks for it the same way). */
function viewSearch(db: Database, v: ReadView, q: SearchQuery): ReturnType<ReadView['search']> {
  let r = v.search(q);
  if (r === null && v.declined === 'epoch') {
    v.adoptGraph(db.readGraph(v.uid)!);
    r = v.search(q);
  }
  return r;
}

describe('a collection read from shared memory (request loops, issue 20)', () => {
  it('answers every plain dense search exactly as the engine thread does, through upserts, updates, deletes and payload changes', async () => {
    const db = await openDb();
    const dim = 8;
    await db.createCollection({ name: 'c', dim, metric: 'l2' });
    await db.createCollection({ name: 'cos', dim, metric: 'cosine', quantization: 'scalar' });
    const prng = new Prng(20261127);
    // Few distinct values: equal distances (ties by id) come up often.
    const vec = (): number[] => Array.from({ length: dim }, () => prng.int(4) - 1.5);
    const views = new Map<string, ReadView>();
    let answered = 0;
    const names = ['c', 'cos'];
    for (let round = 0; round < 40; round++) {
      for (const name of names) {
        const n = 20 + prng.int(120);
        const points = Array.from({ length: n }, () => {
          const id = `p${prng.int(1500)}`;
          return { id, vector: vec(), payload: prng.int(3) === 0 ? null : { id, round, tag: ['a', 'b'][prng.int(2)], nested: { x: prng.int(9) } } };
        });
        await db.upsert(name, { points });
        if (prng.int(3) === 0) await db.deletePoints(name, { ids: Array.from({ length: 10 }, () => `p${prng.int(1500)}`) });
        if (prng.int(3) === 0) await db.setPayload(name, { points: [{ id: points[0].id, payload: { changed: round } }], mode: prng.int(2) === 0 ? 'merge' : 'replace' });
        let v = views.get(name);
        if (v === undefined) {
          v = new ReadView(db.readView(name)!);
          views.set(name, v);
        }
        for (let i = 0; i < 5; i++) {
          const q: SearchQuery = { vector: vec(), k: 1 + prng.int(30), ...(prng.int(4) === 0 ? { ef_search: 8 + prng.int(100) } : {}), ...(prng.int(3) === 0 ? { with_vector: true } : {}), ...(prng.int(5) === 0 ? { with_payload: false } : {}) };
          // The engine's search first: a read there may start an absorb or a rebuild (a new epoch),
          // which the view then takes, as a loop does when it finds its epoch old.
          const before = v.epoch;
          const theirs = await db.search(name, q);
          const mine = viewSearch(db, v, q);
          expect(mine, `declined: ${v.declined}`).not.toBeNull();
          // A graph swapped in between the two answers (a build finishing) may change an approximate
          // answer: compared only over one epoch (almost always).
          if (v.epoch !== before) continue;
          expect(mine).toEqual(theirs);
          answered++;
        }
      }
      // Now and then the graph catches up (absorbs, rebuilds) between rounds: new epochs.
      if (round % 7 === 6) for (const name of ['c', 'cos']) await db.search(name, { vector: vec(), consistency: 'strong' });
    }
    // About one query a round meets a rebuild its own read started.
    expect(answered).toBeGreaterThan(names.length * 150);
    for (const v of views.values()) v.close();
  });

  it('hands on what only the engine thread answers: strong reads, input it refuses, filters it has no current match bits for', async () => {
    const db = await openDb();
    await db.createCollection({ name: 'c', dim: 2, metric: 'l2', filterable: [{ path: 'r', field_type: 'numeric' }] });
    await db.upsert('c', { points: [{ id: 'a', vector: [0, 0], payload: { r: 1 } }, { id: 'b', vector: [1, 0], payload: { r: 2 } }] });
    const v = new ReadView(db.readView('c')!, { patchBudgetMs: Infinity });
    expect(v.search({ vector: [0, 0] })?.hits.map((h) => h.id)).toEqual(['a', 'b']);
    for (const q of [
      { vector: [0, 0], consistency: 'strong' }, { vector: [0, 0], filter: { eq: { field: 'nope', value: 1 } } }, { vector: [0, 0], filter: 7 },
      { vector: [0, 0, 0] }, { vector: [0, 0], k: 0 }, { vector: [0, 0], k: 1e9 }, { vector: [0, 0], surprise: 1 }, { vector: 'no' }, null,
    ]) {
      expect(v.search(q as SearchQuery)).toBeNull();
      expect(v.declined).toBe('shape');
    }
    const filter = { gte: { field: 'r', value: 2 } };
    expect(v.search({ vector: [0, 0], filter })).toBeNull();
    expect([v.declined, v.wantBits?.filter]).toEqual(['filter', filter]);
    const bits = db.matchBits(v.uid, filter)!;
    expect(bits.count).toBe(1);
    v.adoptBits(v.wantBits!, bits);
    expect(v.search({ vector: [0, 0], filter })?.hits.map((h) => h.id)).toEqual(['b']);
    // Another filter: handed on until its bits are asked for.
    const lte = { lte: { field: 'r', value: 1 } };
    expect(v.search({ vector: [0, 0], filter: lte })).toBeNull();
    expect(v.declined).toBe('filter');
    const wantLte = v.wantBits!;
    const lteBefore = db.matchBits(v.uid, lte)!;
    // A write: the bits held are brought up to it from the journal (a now matches r >= 2), not let go.
    await db.setPayload('c', { points: [{ id: 'a', payload: { r: 3 } }] });
    expect(viewSearch(db, v, { vector: [0, 0], filter })?.hits.map((h) => h.id), `declined ${v.declined}`).toEqual(['a', 'b']);
    expect(v.patched).toEqual({ times: 1, slots: 1 });
    // Bits computed before that write are brought up to it when they arrive (a no longer has r <= 1).
    expect(v.adoptBits(wantLte, lteBefore)).toBe(true);
    expect(viewSearch(db, v, { vector: [0, 0], filter: lte })).toEqual({ hits: [] });
    await db.upsert('c', { points: [{ id: 'c', vector: [0.5, 0], payload: { r: 0 } }] });
    await db.deletePoints('c', { ids: ['b'] });
    expect(viewSearch(db, v, { vector: [0, 0], filter: lte })?.hits.map((h) => h.id), `declined ${v.declined}`).toEqual(['c']);
    expect(viewSearch(db, v, { vector: [0, 0], filter })?.hits.map((h) => h.id), `declined ${v.declined}`).toEqual(['a']);
    expect(db.matchBits(v.uid, { eq: { field: 'nope', value: 1 } })).toBeNull();
    expect(db.matchBits('no-such-uid', filter)).toBeNull();
    // A write in progress (begun, not ended: the engine thread is inside Collection.apply, as another
    // thread sees it): current bits are not used, nor new ones taken; once it ends they are brought up
    // to it (here it wrote nothing).
    const reads = (db as unknown as { byName: Map<string, { reads: { writeBegin(): void; writeEnd(): void } }> }).byName.get('c')!.reads;
    reads.writeBegin();
    expect(v.search({ vector: [0, 0], filter })).toBeNull();
    expect(v.declined).toBe('moved');
    expect(v.adoptBits(wantLte, db.matchBits(v.uid, lte)!)).toBe(false);
    reads.writeEnd();
    expect(viewSearch(db, v, { vector: [0, 0], filter })?.hits.map((h) => h.id), `declined ${v.declined}`).toEqual(['a']);
    v.close();
  });

  it('plans a filtered search as the engine does: a graph traversal where it would take one, with its answer and not the exact one', async () => {
    const db = await openDb({ absorbMax: 100_000 });
    const dim = 16;
    await db.createCollection({ name: 'c', dim, metric: 'l2', index_params: { ef_search: 8 }, filterable: [{ path: 'g', field_type: 'numeric' }] });
    const prng = new Prng(5);
    const vectors = Array.from({ length: 3000 }, () => Array.from({ length: dim }, () => prng.gaussian()));
    for (let i = 0; i < vectors.length; i += 500) {
      await db.upsert('c', { points: vectors.slice(i, i + 500).map((vector, j) => ({ id: `p${i + j}`, vector, payload: { g: (i + j) % 3 } })) });
    }
    const v = new ReadView(db.readView('c')!);
    const filter = { eq: { field: 'g', value: 1 } };
    let differ = 0;
    for (let q = 0; q < 30; q++) {
      const query: SearchQuery = { vector: Array.from({ length: dim }, () => prng.gaussian()), k: 10, filter, with_payload: false };
      const theirs = await db.search('c', { ...query, consistency: 'strong' });
      let mine = viewSearch(db, v, query);
      if (mine === null && v.declined === 'filter') {
        v.adoptBits(v.wantBits!, db.matchBits(v.uid, filter)!);
        mine = viewSearch(db, v, query);
      }
      expect(mine, `declined: ${v.declined}`).toEqual(theirs);
      // The exact top 10 among the matches: the graph's (ef 8) misses some of them now and then.
      const exact = vectors.map((x, i) => ({ i, d: x.reduce((s, xi, j) => s + (xi - (query.vector as number[])[j]) ** 2, 0) }))
        .filter(({ i }) => i % 3 === 1).sort((a, b) => a.d - b.d).slice(0, 10).map(({ i }) => `p${i}`);
      if (JSON.stringify(mine!.hits.map((h) => h.id)) !== JSON.stringify(exact)) differ++;
    }
    expect(differ).toBeGreaterThan(0);
    v.close();
  });

  it('answers filtered dense searches exactly as the engine thread does once it holds their match bits, through writes', async () => {
    const db = await openDb();
    const dim = 6;
    const filterable = [{ path: 'tag', field_type: 'keyword' as const }, { path: 'x', field_type: 'numeric' as const }];
    await db.createCollection({ name: 'c', dim, metric: 'l2', filterable });
    await db.createCollection({ name: 'f', dim, metric: 'cosine', index: 'flat', filterable });
    const prng = new Prng(20261128);
    const vec = (): number[] => Array.from({ length: dim }, () => prng.int(4) - 1.5);
    const filters = [
      { eq: { field: 'tag', value: 'a' } }, { gte: { field: 'x', value: 6 } }, { lt: { field: 'x', value: 1 } },
      { and: [{ eq: { field: 'tag', value: 'b' } }, { lte: { field: 'x', value: 4 } }] }, { or: [{ eq: { field: 'tag', value: 'c' } }, { gt: { field: 'x', value: 7 } }] },
      { not: { eq: { field: 'tag', value: 'a' } } }, { eq: { field: 'tag', value: 'none' } },
    ];
    const views = new Map<string, ReadView>();
    let answered = 0;
    let asked = 0;
    for (let round = 0; round < 16; round++) {
      for (const name of ['c', 'f']) {
        const points = Array.from({ length: 30 + prng.int(150) }, () => {
          const id = `p${prng.int(2500)}`;
          return { id, vector: vec(), payload: prng.int(6) === 0 ? null : { tag: ['a', 'b', 'c'][prng.int(3)], x: prng.int(9) } };
        });
        await db.upsert(name, { points });
        if (prng.int(3) === 0) await db.deletePoints(name, { ids: Array.from({ length: 10 }, () => `p${prng.int(2500)}`) });
        if (prng.int(3) === 0) await db.setPayload(name, { points: [{ id: points[0].id, payload: { tag: 'a', x: prng.int(9) } }], mode: 'merge' });
        let v = views.get(name);
        // No time bound on patches: the counts below must not depend on the machine's speed.
        if (v === undefined) views.set(name, v = new ReadView(db.readView(name)!, { patchBudgetMs: Infinity }));
        for (let i = 0; i < 8; i++) {
          // A payload changed in place after the view patched this round's upserts: journaled by itself.
          if (i === 4) await db.setPayload(name, { points: [{ id: points[1].id, payload: { tag: ['a', 'b', 'c'][prng.int(3)], x: prng.int(9) } }], mode: 'replace' });
          // Every eighth asks for every match (k past the collection's size): equal answers then mean
          // equal match sets, so patched bits are checked slot for slot.
          const k = i === 7 ? 5000 : 1 + prng.int(30);
          const q: SearchQuery = { vector: vec(), k, filter: filters[prng.int(filters.length)], ...(prng.int(4) === 0 ? { ef_search: 8 + prng.int(100) } : {}) };
          const before = v.epoch;
          const theirs = await db.search(name, q);
          let mine = viewSearch(db, v, q);
          if (mine === null && v.declined === 'filter') {
            asked++;
            v.adoptBits(v.wantBits!, db.matchBits(v.uid, q.filter)!);
            mine = viewSearch(db, v, q);
          }
          expect(mine, `declined: ${v.declined}`).not.toBeNull();
          if (v.epoch !== before) continue;
          expect(mine).toEqual(theirs);
          answered++;
        }
      }
      if (round % 7 === 6) for (const name of ['c', 'f']) await db.search(name, { vector: vec(), consistency: 'strong' });
    }
    expect(answered).toBeGreaterThan(200);
    // Bits held across writes, patched from the journal: each filter asked for once per collection.
    expect(asked).toBeLessThanOrEqual(filters.length * 2);
    for (const v of views.values()) expect(v.patched.times).toBeGreaterThan(10);
    for (const v of views.values()) v.close();
  });

  it('takes no patch made while a write began: its first slots are journaled before it changes them', async () => {
    const db = await openDb();
    await db.createCollection({ name: 'c', dim: 2, metric: 'l2', index: 'flat', filterable: [{ path: 'tag', field_type: 'keyword' }] });
    await db.upsert('c', { points: [{ id: 'a', vector: [0, 0], payload: { tag: 'on' } }, { id: 'b', vector: [1, 0], payload: { tag: 'off' } }] });
    const filter = { eq: { field: 'tag', value: 'on' } };
    const v = new ReadView(db.readView('c')!, { patchBudgetMs: Infinity });
    expect(v.search({ vector: [0, 0], filter })).toBeNull();
    expect(v.adoptBits(v.wantBits!, db.matchBits(v.uid, filter)!)).toBe(true);
    // A write the view has not patched yet.
    await db.setPayload('c', { points: [{ id: 'b', payload: { tag: 'off' } }] });
    type Internals = { byName: Map<string, { reads: Record<string, unknown>; point(id: string): { slot: number }; apply(op: unknown, seq: number): number; matchBits(f: unknown): { count: number } }> };
    const col = (db as unknown as Internals).byName.get('c')!;
    const reads = col.reads as { writeBegin(): void; wrote(slot: number): void };
    const slotA = col.point('a').slot;
    const view = v as unknown as { writesSettled(): number | null };
    const settled = view.writesSettled.bind(v);
    let calls = 0;
    // Right after the view's first settled check, a write begins and journals a (the head the view then
    // reads holds it) but has not changed a yet: the view patches a from its old payload.
    view.writesSettled = () => {
      const r = settled();
      if (++calls === 1) {
        reads.writeBegin();
        reads.wrote(slotA);
      }
      return r;
    };
    v.bitsCurrent();
    delete (view as Partial<typeof view>).writesSettled;
    // The write goes on and ends: a's payload changes (journaled at its start, above).
    const own = col.reads as Record<string, unknown>;
    own.writeBegin = () => undefined;
    own.wrote = () => undefined;
    col.apply({ t: 'set_payload', mode: 'replace', points: [{ id: 'a', payload: { tag: 'off' } }] }, 0);
    delete own.writeBegin;
    delete own.wrote;
    expect(col.matchBits(filter).count).toBe(0);
    // The view never answers a from the bits it patched while that write ran.
    const theirs = await db.search('c', { vector: [0, 0], filter });
    expect(theirs.hits).toEqual([]);
    const mine = v.search({ vector: [0, 0], filter });
    expect(mine === null || mine.hits.length === 0, JSON.stringify(mine)).toBe(true);
    v.close();
  });

  it('lets bits go, rather than patch them, after more slot writes than the journal holds', async () => {
    const db = await openDb();
    await db.createCollection({ name: 'c', dim: 2, metric: 'l2', filterable: [{ path: 't', field_type: 'keyword' }] });
    const put = async (from: number, n: number) => {
      for (let at = from; at < from + n; at += 1000) {
        const m = Math.min(1000, from + n - at);
        await db.upsert('c', { points: Array.from({ length: m }, (_, i) => ({ id: `p${at + i}`, vector: [at + i, 1], payload: { t: (at + i) % 2 ? 'odd' : 'even' } })) });
      }
    };
    await put(0, 100);
    const v = new ReadView(db.readView('c')!, { patchBudgetMs: Infinity });
    const filter = { eq: { field: 't', value: 'odd' } };
    const q: SearchQuery = { vector: [0, 1], k: 3, filter };
    expect(viewSearch(db, v, q)).toBeNull();
    v.adoptBits(v.wantBits!, db.matchBits(v.uid, filter)!);
    expect(viewSearch(db, v, q)?.hits.map((h) => h.id)).toEqual(['p1', 'p3', 'p5']);
    // 4,000 slots written: patched (the new odd points are far away; the answer stays).
    await put(100, 4000);
    expect(viewSearch(db, v, q)?.hits.map((h) => h.id), `declined ${v.declined}`).toEqual(['p1', 'p3', 'p5']);
    expect(v.patched).toEqual({ times: 1, slots: 4000 });
    // 4,097 more: past the journal; the bits go and are asked for again.
    await put(4100, 4097);
    expect(viewSearch(db, v, q)).toBeNull();
    expect(v.declined).toBe('filter');
    expect(v.patched.times).toBe(1);
    v.close();
    // A patch past its time bound (here none at all) lets the bits go too.
    const quick = new ReadView(db.readView('c')!, { patchBudgetMs: 0 });
    expect(viewSearch(db, quick, q)).toBeNull();
    quick.adoptBits(quick.wantBits!, db.matchBits(quick.uid, filter)!);
    expect(viewSearch(db, quick, q)?.hits.map((h) => h.id)).toEqual(['p1', 'p3', 'p5']);
    await put(9000, 10);
    expect(viewSearch(db, quick, q)).toBeNull();
    expect([quick.declined, quick.patched.times]).toEqual(['filter', 0]);
    quick.close();
  });

  it('keeps the most recently used filters patched when a patch runs out of time, and lets only the others go', async () => {
    const db = await openDb();
    await db.createCollection({ name: 'c', dim: 2, metric: 'l2', filterable: [{ path: 't', field_type: 'keyword' }] });
    const put = (from: number, n: number) => db.upsert('c', {
      points: Array.from({ length: n }, (_, i) => ({ id: `p${from + i}`, vector: [from + i, 1], payload: { t: (from + i) % 2 ? 'odd' : 'even' } })),
    });
    await put(0, 100);
    // A clock one tick further at every reading: a patch's cost is the readings it takes.
    let tick = 0;
    const v = new ReadView(db.readView('c')!, { patchBudgetMs: 25, now: () => tick++ });
    const odd: SearchQuery = { vector: [0, 1], k: 3, filter: { eq: { field: 't', value: 'odd' } } };
    const even: SearchQuery = { vector: [0, 1], k: 3, filter: { eq: { field: 't', value: 'even' } } };
    for (const q of [odd, even]) {
      expect(viewSearch(db, v, q)).toBeNull();
      v.adoptBits(v.wantBits!, db.matchBits(v.uid, q.filter)!);
    }
    expect(viewSearch(db, v, odd)?.hits.map((h) => h.id)).toEqual(['p1', 'p3', 'p5']);
    // `even` used last: patched first. 10 new slots: 1 reading for the bound, 10 for the payloads,
    // 10 for even's tests (past 25? no), then odd's tests run past it: odd goes, even stays.
    expect(viewSearch(db, v, even)?.hits.map((h) => h.id)).toEqual(['p0', 'p2', 'p4']);
    await put(-10, 10);
    // p-2 is one of the slots written since: the view answers from bits patched through them.
    expect(viewSearch(db, v, even)?.hits.map((h) => h.id), `declined ${v.declined}`).toEqual(['p0', 'p-2', 'p2']);
    expect(v.patched).toEqual({ times: 1, slots: 10 });
    expect(viewSearch(db, v, odd)).toBeNull();
    expect(v.declined).toBe('filter');
    // Asked for again, odd's bits come patched up to now; the engine thread's answer and the view's agree.
    v.adoptBits(v.wantBits!, db.matchBits(v.uid, odd.filter)!);
    expect(viewSearch(db, v, odd)?.hits).toEqual((await db.search('c', odd)).hits);
    // Now `odd` was used last, but a search for `even` after a write patches its own filter first.
    await put(-20, 10);
    expect(viewSearch(db, v, even)?.hits, `declined ${v.declined}`).toEqual((await db.search('c', even)).hits);
    expect(v.patched).toEqual({ times: 2, slots: 20 });
    expect(viewSearch(db, v, odd)).toBeNull();
    expect(v.declined).toBe('filter');
    v.close();
    // A bound the payload reads alone run past: every filter's bits go.
    tick = 0;
    const quick = new ReadView(db.readView('c')!, { patchBudgetMs: 5, now: () => tick++ });
    for (const q of [odd, even]) {
      expect(viewSearch(db, quick, q)).toBeNull();
      quick.adoptBits(quick.wantBits!, db.matchBits(quick.uid, q.filter)!);
      expect(viewSearch(db, quick, q)?.hits).toEqual((await db.search('c', q)).hits);
    }
    await put(-30, 10);
    for (const q of [even, odd]) {
      expect(viewSearch(db, quick, q)).toBeNull();
      expect(quick.declined).toBe('filter');
    }
    expect(quick.patched.times).toBe(0);
    quick.close();
  });

  it('never shows another thread a filtered hit that does not match, while the writer moves points in and out of the filter', async () => {
    const db = await openDb();
    const dim = 4;
    await db.createCollection({ name: 'c', dim, metric: 'l2', filterable: [{ path: 'tag', field_type: 'keyword' }] });
    const prng = new Prng(11);
    const vec = (): number[] => Array.from({ length: dim }, () => prng.gaussian());
    await db.upsert('c', { points: Array.from({ length: 400 }, (_, i) => ({ id: `p${i}`, vector: vec(), payload: { tag: i % 2 === 0 ? 'on' : 'off' } })) });
    const handle = db.readView('c')!;
    const { worker, stop } = readerThread(FILTERED_READER, handle);
    const filter = { eq: { field: 'tag', value: 'on' } };
    let ready!: () => void;
    const started = new Promise<void>((r) => { ready = r; });
    type Result = { answered: number; declined: number; patched: number; bad: string[] };
    let done!: (r: Result) => void;
    const result = new Promise<Result>((r) => { done = r; });
    worker.on('message', (m: unknown) => {
      if (m === 'ready') ready();
      else if (m === 'want') worker.postMessage({ bits: db.matchBits(handle.uid, filter), graph: db.readGraph(handle.uid) });
      else done(m as Result);
    });
    await started;
    for (let v = 1; v <= 200; v++) {
      const ids = Array.from({ length: 6 }, () => `p${prng.int(400)}`);
      const flip = (id: string) => ({ id, payload: { tag: prng.int(2) === 0 ? 'on' : 'off' } });
      await db.setPayload('c', { points: ids.slice(0, 3).map(flip) });
      await db.upsert('c', { points: ids.slice(3).map((id) => ({ id, vector: vec(), payload: flip(id).payload })) });
      // Room for the reader to search between writes (its bits hold only then).
      if (v % 4 === 0) await new Promise((r) => setTimeout(r, 1));
    }
    stop();
    const r = await result;
    await worker.terminate();
    expect(r.bad).toEqual([]);
    expect(r.answered).toBeGreaterThan(20);
    // Its bits were brought up to the writes it searched between, not only asked for again.
    expect(r.patched).toBeGreaterThan(0);
  });

  it('hands on a search whose exact scan would pass the loop\'s bound only once it gets there: ties widened into an exact plan', async () => {
    const db = await openDb();
    await db.createCollection({ name: 'same', dim: 4, metric: 'l2' });
    // Every point at one place: every distance ties, so the answer widens until it is an exact scan of
    // all 300 (ties go by id), which the view below may scan and the one with a bound of 100 may not.
    await db.upsert('same', { points: Array.from({ length: 300 }, (_, i) => ({ id: `p${String(i).padStart(3, '0')}`, vector: [1, 2, 3, 4] })) });
    const q: SearchQuery = { vector: [1, 2, 3, 4], k: 10 };
    const theirs = await db.search('same', q);
    expect(theirs.hits.map((h) => h.id)).toEqual(Array.from({ length: 10 }, (_, i) => `p00${i}`));
    const wide = new ReadView(db.readView('same')!);
    const bounded = new ReadView(db.readView('same')!, { scanMax: 100 });
    try {
      expect(viewSearch(db, wide, q)).toEqual(theirs);
      // Its first plan is a graph traversal over 300 live points (no scan): taken, then refused where
      // the widening turns it into a scan of 300.
      expect(viewSearch(db, bounded, q)).toBeNull();
      expect(bounded.declined).toBe('scan');
    } finally {
      wide.close();
      bounded.close();
    }
  });

  it('retires a dropped collection, and a new one of the same name is a new view', async () => {
    const db = await openDb();
    await db.createCollection({ name: 'c', dim: 2, metric: 'l2' });
    await db.upsert('c', { points: [{ id: 'old', vector: [0, 0] }] });
    const v = new ReadView(db.readView('c')!);
    await db.deleteCollection('c');
    expect(v.search({ vector: [0, 0] })).toBeNull();
    expect(v.declined).toBe('retired');
    v.close();
    await db.createCollection({ name: 'c', dim: 2, metric: 'l2' });
    await db.upsert('c', { points: [{ id: 'new', vector: [0, 0] }] });
    const w = new ReadView(db.readView('c')!);
    expect(w.search({ vector: [0, 0] })?.hits.map((h) => h.id)).toEqual(['new']);
    w.close();
  });

  it('retires every view the moment its database starts closing (its reads answer not_ready from then on)', async () => {
    const db = await openDb();
    await db.createCollection({ name: 'c', dim: 2, metric: 'l2' });
    await db.upsert('c', { points: [{ id: 'p', vector: [0, 0] }] });
    const v = new ReadView(db.readView('c')!);
    expect(v.search({ vector: [0, 0] })?.hits.map((h) => h.id)).toEqual(['p']);
    const closing = db.close();
    // Before the close's checkpoints (awaited) end: the engine refuses, and the view answers nothing.
    await expect(db.search('c', { vector: [0, 0] })).rejects.toMatchObject({ code: 'not_ready' });
    expect(v.search({ vector: [0, 0] })).toBeNull();
    expect(v.declined).toBe('retired');
    expect(db.readView('c')).toBeNull();
    await closing;
    v.close();
  });

  it('gives no view without sharedReads; a multi-vector collection\'s view answers no dense search', async () => {
    const db = await openDb();
    await db.createCollection({ name: 'm', dim: 2, metric: 'cosine', multivector: true });
    const m = new ReadView(db.readView('m')!);
    expect(m.search({ vector: [1, 0] })).toBeNull();
    expect(m.declined).toBe('shape');
    m.close();
    expect(db.readView('absent')).toBeNull();
    const plain = await openDb({ sharedReads: false });
    await plain.createCollection({ name: 'c', dim: 2, metric: 'l2' });
    expect(plain.readView('c')).toBeNull();
  });

  it('never shows another thread a hit (or a page entry) whose id and payload disagree, one point twice or a page out of order, while the writer updates', async () => {
    const db = await openDb();
    const dim = 4;
    await db.createCollection({ name: 'c', dim, metric: 'l2' });
    const prng = new Prng(7);
    const vec = (): number[] => Array.from({ length: dim }, () => prng.gaussian());
    await db.upsert('c', { points: Array.from({ length: 400 }, (_, i) => ({ id: `p${i}`, vector: vec(), payload: { id: `p${i}`, v: 0 } })) });
    // X, far from the others, is rewritten all along: every answer near it must hold it (in its old slot
    // or its new one, never in neither).
    const far = [50, 50, 50, 50];
    await db.upsert('c', { points: [{ id: 'X', vector: far, payload: { id: 'X', v: 0 } }] });
    const handle = db.readView('c')!;
    const { worker, next, stop } = readerThread(READER, handle);
    expect(await next()).toBe('ready');
    const result = next() as Promise<{ answered: number; declined: number; pages: number; bad: string[] }>;
    for (let v = 1; v <= 600; v++) {
      const ids = Array.from({ length: 8 }, () => `p${prng.int(400)}`);
      await db.upsert('c', { points: [...ids.map((id) => ({ id, vector: vec(), payload: { id, v } })), { id: 'X', vector: far, payload: { id: 'X', v } }] });
      if (v % 5 === 0) await db.setPayload('c', { points: [{ id: ids[0], payload: { id: ids[0], v: -v } }] });
      if (v % 7 === 0) await db.deletePoints('c', { ids: [ids[1]] });
      if (v % 9 === 0) await db.upsert('c', { points: [{ id: ids[1], vector: vec(), payload: { id: ids[1], v } }] });
      // The graph the reader should take now (a loop asks for it when it finds its own old).
      worker.postMessage(db.readGraph(handle.uid));
    }
    stop();
    const r = await result;
    await worker.terminate();

    expect(r.bad).toEqual([]);
    expect(r.answered).toBeGreaterThan(50);
    expect(r.pages).toBeGreaterThan(10);
  });

  it('lets as many loop views as a store has loop lanes take a new graph epoch over the same scalar codes', async () => {
    const db = await openDb();
    await db.createCollection({ name: 'q', dim: 8, metric: 'l2', quantization: 'scalar' });
    const prng = new Prng(3);
    for (let b = 0; b < 3; b++) {
      await db.upsert('q', { points: Array.from({ length: 500 }, (_, i) => ({ id: `p${b * 500 + i}`, vector: Array.from({ length: 8 }, () => prng.gaussian()) })) });
    }
    await db.search('q', { vector: Array.from({ length: 8 }, () => 0), consistency: 'strong' });
    const h = db.readView('q')!;
    expect(h.graph.data?.codes).toBeTruthy();
    const views = Array.from({ length: LANES_PER_MEMORY - ENGINE_LANES }, () => new ReadView(h));
    // Every loop lane of the codes is held: each view gives its lane back before it takes the new one.
    for (const v of views) v.adoptGraph(db.readGraph(v.uid)!);
    for (const v of views) expect(v.search({ vector: Array.from({ length: 8 }, () => 0), k: 3 })?.hits).toHaveLength(3);
    for (const v of views) v.close();
  });

  it('gives back the lanes of a reader thread that ended without closing its views, in the store and the codes, and only its own', async () => {
    const db = await openDb();
    await db.createCollection({ name: 'q', dim: 8, metric: 'l2', quantization: 'scalar' });
    const prng = new Prng(4);
    for (let b = 0; b < 3; b++) {
      await db.upsert('q', { points: Array.from({ length: 500 }, (_, i) => ({ id: `p${b * 500 + i}`, vector: Array.from({ length: 8 }, () => prng.gaussian()) })) });
    }
    const query = { vector: Array.from({ length: 8 }, () => 0), k: 3 };
    await db.search('q', { ...query, consistency: 'strong' });
    const h = db.readView('q')!;
    expect(h.graph.data?.codes).toBeTruthy();
    const mine = new ReadView(h);
    // A reader thread takes every other loop lane of the store and of the codes, and ends holding them.
    const worker = new Worker(GREEDY, { eval: true, workerData: { handle: h, url: new URL('./shared-reads.ts', import.meta.url).href, tsx: import.meta.resolve('tsx/esm/api') } });
    const thread = worker.threadId;
    const took = new Promise((resolve, reject) => {
      worker.once('message', resolve);
      worker.once('error', reject);
    });
    const ended = new Promise((resolve) => worker.once('exit', resolve));
    const loopLanes = LANES_PER_MEMORY - ENGINE_LANES;
    expect(await took).toBe(loopLanes - 1);
    await ended;
    expect(() => new ReadView(h)).toThrow(/scratch lanes of the vector store for request loops/);
    // Its lanes go back (one of the store and one of the codes per view); this thread's stay.
    expect(db.releaseLanesOf(thread)).toBe(2 * (loopLanes - 1));
    expect(db.releaseLanesOf(thread)).toBe(0);
    const again = Array.from({ length: loopLanes - 1 }, () => new ReadView(h));
    expect(() => new ReadView(h)).toThrow(/in use/);
    for (const v of [mine, ...again]) expect(viewSearch(db, v, query)?.hits).toHaveLength(3);
    for (const v of [mine, ...again]) v.close();
  });

  it('keeps records readable across growth, from another thread', async () => {
    const recs = new SharedRecords();
    const big = new Uint8Array(100_000).fill(9);
    for (let s = 0; s < 5000; s++) recs.set(s, s % 1000 === 0 ? big : new TextEncoder().encode(`id-${s}`));
    recs.set(3, null);
    recs.set(4, new TextEncoder().encode('again'));
    const reader = new SharedRecords(recs.handle());
    expect(new TextDecoder().decode(reader.get(4999)!)).toBe('id-4999');
    expect(reader.get(1000)!.length).toBe(100_000);
    expect(reader.get(3)).toBeNull();
    expect(new TextDecoder().decode(reader.get(4)!)).toBe('again');
    expect(reader.get(5000)).toBeNull();
    expect(recs.garbageBytes).toBeGreaterThan(0);
  });
});

/** How a reader thread starts: the view of workerData.handle, and the stop flag. */
const READER_START = `const { parentPort, workerData } = require('node:worker_threads');
(async () => {
  const { tsImport } = await import(workerData.tsx);
  const { ReadView } = await tsImport(workerData.url, workerData.url);
  const stop = new Int32Array(workerData.stop);
  const v = new ReadView(workerData.handle);
`;

/** A reader thread: searches until told to stop, and reports any hit inconsistent in itself. */
const READER = `
${READER_START}  let answered = 0, declined = 0, pages = 0, seed = 1;
  const bad = [];
  parentPort.on('message', (g) => v.adoptGraph(g));
  parentPort.postMessage('ready');
  const rnd = () => ((seed = (seed * 1103515245 + 12345) >>> 0) / 2 ** 32) * 4 - 2;
  for (let n = 0; Atomics.load(stop, 0) === 0; n++) {
    if (n % 16 === 0) await new Promise((resolve) => setImmediate(resolve));
    if (n % 4 === 3) {
      // A page of points in id order after a cursor: X (sorting before every p) first on the first page.
      const cursor = n % 8 === 3 ? undefined : Buffer.from('p' + Math.floor((rnd() + 2) * 100)).toString('base64url');
      const r = v.fetch({ limit: 40, cursor });
      if (r === null) { declined++; if (v.declined !== 'moved') bad.push('page declined ' + v.declined); continue; }
      answered++;
      pages++;
      if (cursor === undefined && r.points[0]?.id !== 'X') bad.push('X missing from the first page: ' + r.points.slice(0, 3).map((p) => p.id).join(','));
      const after = cursor === undefined ? '' : Buffer.from(cursor, 'base64url').toString();
      let last = after;
      for (const p of r.points) {
        if (!(p.id > last)) bad.push('out of order: ' + p.id + ' after ' + last);
        last = p.id;
        if (p.payload.id !== p.id) bad.push('payload of ' + p.payload.id + ' on ' + p.id);
      }
      if (r.points.length < 40 && r.next_cursor !== null) bad.push('cursor ' + r.next_cursor + ' after ' + r.points.length);
      continue;
    }
    const nearX = n % 2 === 0;
    const r = v.search({ vector: nearX ? [50, 50, 50, 49.5] : [rnd(), rnd(), rnd(), rnd()], k: 20 });
    if (r === null) { declined++; if (v.declined !== 'moved' && v.declined !== 'epoch') bad.push('declined ' + v.declined); continue; }
    answered++;
    if (nearX && r.hits[0]?.id !== 'X') bad.push('X missing: ' + r.hits.slice(0, 3).map((h) => h.id).join(','));
    const seen = new Set();
    for (const h of r.hits) {
      if (seen.has(h.id)) bad.push('twice ' + h.id);
      seen.add(h.id);
      if (h.payload.id !== h.id) bad.push('payload of ' + h.payload.id + ' on ' + h.id);
    }
  }
  v.close();
  parentPort.postMessage({ answered, declined, pages, patched: v.patched.times, bad: bad.slice(0, 20) });
})();
`;

/**
 * A reader thread searching with a filter: asks the test's thread (the engine's) for the match bits and
 * the graph when it lacks them, and checks every hit against the filter and its own payload.
 */
const FILTERED_READER = `
${READER_START}  let answered = 0, declined = 0, seed = 3, asking = false, key = null;
  const bad = [];
  parentPort.on('message', (m) => {
    asking = false;
    if (m.graph) v.adoptGraph(m.graph);
    if (m.bits && key !== null) v.adoptBits(key, m.bits);
  });
  parentPort.postMessage('ready');
  const rnd = () => ((seed = (seed * 1103515245 + 12345) >>> 0) / 2 ** 32) * 4 - 2;
  for (let n = 0; Atomics.load(stop, 0) === 0; n++) {
    if (n % 8 === 0) await new Promise((resolve) => setImmediate(resolve));
    const r = v.search({ vector: [rnd(), rnd(), rnd(), rnd()], k: 15, filter: { eq: { field: 'tag', value: 'on' } } });
    if (r === null) {
      declined++;
      if (v.declined === 'filter' || v.declined === 'epoch') {
        if (v.wantBits) key = v.wantBits;
        if (!asking) { asking = true; parentPort.postMessage('want'); }
      } else if (v.declined !== 'moved') bad.push('declined ' + v.declined);
      continue;
    }
    answered++;
    const seen = new Set();
    for (const h of r.hits) {
      if (seen.has(h.id)) bad.push('twice ' + h.id);
      seen.add(h.id);
      if (h.payload.tag !== 'on') bad.push(h.id + ' does not match: ' + JSON.stringify(h.payload));
    }
  }
  v.close();
  parentPort.postMessage({ answered, declined, patched: v.patched.times, bad: bad.slice(0, 20) });
})();
`;

/** A reader thread that opens views until no lane is left, says how many, and ends without closing them. */
const GREEDY = `
const { parentPort, workerData } = require('node:worker_threads');
(async () => {
  const { tsImport } = await import(workerData.tsx);
  const { ReadView } = await tsImport(workerData.url, workerData.url);
  const views = [];
  try { for (;;) views.push(new ReadView(workerData.handle)); } catch {}
  parentPort.postMessage(views.length);
})();
`;

describe('the shared records of a collection', () => {
  it('are compacted once garbage outweighs what is live: the live slots copied, every old view retired', () => {
    const state = new SharedReadState(4096);
    const enc = (s: string) => new TextEncoder().encode(s);
    const live = new Set<number>();
    const latest = new Map<number, object>();
    for (let s = 0; s < 100; s++) {
      state.put(s, `id-${s}`, { fill: 'x'.repeat(40), s });
      latest.set(s, { fill: 'x'.repeat(40), s });
      live.add(s);
    }
    const liveSlots = () => Int32Array.from([...live].sort((a, b) => a - b));
    const fake = { memory: new WebAssembly.Memory({ initial: 1, maximum: 1, shared: true }) };
    const before = state.handle('u', {} as never, {} as never, fake, { words: new SharedArrayBuffer(4), count: new SharedArrayBuffer(4) })!;
    // Payloads replaced in place and slots tombstoned: garbage grows until it is half the arenas.
    for (let s = 0; s < 60; s++) {
      state.payload(s, { again: s }, liveSlots);
      latest.set(s, { again: s });
      if (s % 2 === 0) {
        live.delete(s);
        state.dead(s, liveSlots);
      }
      if (state.compactions > 0) break;
    }
    expect(state.compactions).toBe(1);
    expect(new Int32Array(before.header)[6]).toBe(1);
    const after = state.handle('u', {} as never, {} as never, fake, { words: new SharedArrayBuffer(4), count: new SharedArrayBuffer(4) })!;
    expect(new Int32Array(after.header)[6]).toBe(0);
    const ids = new SharedRecords(after.ids);
    const payloads = new SharedRecords(after.payloads);
    // Every live slot's records are there, with its latest payload (a dead one's may be, or not).
    for (const s of live) {
      expect(ids.get(s)).toEqual(enc(`id-${s}`));
      expect(JSON.parse(new TextDecoder().decode(payloads.get(s)!))).toEqual(latest.get(s));
    }
    expect(new SharedRecords(after.ids).arenaBytes).toBeLessThan(new SharedRecords(before.ids).arenaBytes);
  });
});
