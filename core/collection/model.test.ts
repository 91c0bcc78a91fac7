import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { SvcError } from '../base/errors.js';
import type { Filter, Hit, Payload, PointOutput } from '../base/model.js';
import { FaultyFileSystem, type WriteFate } from '../testing/faulty-fs.js';
import { Database } from './database.js';
import { NodeEngine } from '../engine/node.js';
import { buildIndexInline } from './rebuild.js';

/*
 * A model-based test of the engine: random sequences of collection and point operations, reopens and
 * simulated power losses (core/testing/faulty-fs.ts), compared after every step with a plain Map model.
 * After a power loss, writes that had not resolved may or may not be there; the WAL makes what survives
 * a prefix (in call order, which is seq order) of the writes in flight, and every acknowledged one must
 * be in it. Reproduce a failure with SVC_MODEL_SEED=<seed printed below>.
 */

const NAMES = ['a', 'b', 'c'] as const;
const IDS = ['p0', 'p1', 'p2', 'p3', 'p4', 'p5', 'p6', 'p7', 'p8', 'p10', 'é', '😀', '\uFB00'] as const;
const METRICS = ['l2', 'cosine', 'dot'] as const;
const KEY = new Uint8Array(32).fill(9);
const FILTERABLE = [{ path: 'k', field_type: 'keyword' }, { path: 'n', field_type: 'numeric' }];

type Metric = (typeof METRICS)[number];
interface Spec { name: string; dim: number; metric: Metric; index: 'hnsw' | 'flat' }
interface MPoint { vector: number[]; payload: Payload }
interface MCol { spec: Spec; points: Map<string, MPoint> }
type Model = Map<string, MCol>;

// ------------------------------------------------------------------ operations

interface PointGen { id: string; vec: number[]; payload: Payload | undefined }
type WriteOp =
  | { t: 'upsert' | 'bulk'; name: string; points: PointGen[] }
  | { t: 'delete'; name: string; id: string };
type DbOp = { t: 'create'; spec: Spec } | { t: 'drop'; name: string };
type Step =
  | WriteOp
  | DbOp
  | { t: 'reopen' }
  | {
    t: 'crash'; batch: WriteOp[]; tail: DbOp | null; crashAt: number; writes: WriteFate; namespace: 'keep' | 'drop' | 'random';
    /** A second power loss this many file operations into the recovery (null: none). */
    recoveryCrashAt: number | null;
  };

const name = fc.constantFrom(...NAMES);
const id = fc.constantFrom(...IDS);
const payload: fc.Arbitrary<Payload | undefined> = fc.option(
  fc.record({
    k: fc.constantFrom('x', 'y'),
    n: fc.integer({ min: 0, max: 3 }),
    note: fc.string({ maxLength: 4 }),
    __svc_text__: fc.constantFrom('red fox', 'blue whale', 'the quick fox jumps'),
    __svc_sparse__: fc.record({
      indices: fc.uniqueArray(fc.integer({ min: 0, max: 50 }), { minLength: 1, maxLength: 3 }),
      values: fc.constant([]),
    }).map((s) => ({ indices: s.indices, values: s.indices.map((i) => (i % 4) + 0.5) })),
  }, { requiredKeys: [] }),
  { nil: undefined },
);
const vec = fc.array(fc.integer({ min: -3, max: 3 }), { minLength: 4, maxLength: 4 });
const point = fc.record({ id, vec, payload });
const spec: fc.Arbitrary<Spec> = fc.record({
  name, dim: fc.integer({ min: 1, max: 4 }), metric: fc.constantFrom(...METRICS), index: fc.constantFrom('hnsw' as const, 'flat' as const),
});
const upsertOp: fc.Arbitrary<WriteOp> = fc.record({ t: fc.constant('upsert' as const), name, points: fc.array(point, { minLength: 1, maxLength: 4 }) });
const bulkOp: fc.Arbitrary<WriteOp> = fc.record({ t: fc.constant('bulk' as const), name, points: fc.array(point, { minLength: 1, maxLength: 7 }) });
const deleteOp: fc.Arbitrary<WriteOp> = fc.record({ t: fc.constant('delete' as const), name, id });
const writeOp = fc.oneof({ arbitrary: upsertOp, weight: 4 }, { arbitrary: bulkOp, weight: 1 }, { arbitrary: deleteOp, weight: 2 });
const createOp: fc.Arbitrary<DbOp> = fc.record({ t: fc.constant('create' as const), spec });
const dropOp: fc.Arbitrary<DbOp> = fc.record({ t: fc.constant('drop' as const), name });
const step: fc.Arbitrary<Step> = fc.oneof(
  { arbitrary: writeOp, weight: 10 },
  { arbitrary: createOp, weight: 3 },
  { arbitrary: dropOp, weight: 2 },
  { arbitrary: fc.constant({ t: 'reopen' as const }), weight: 1 },
  {
    arbitrary: fc.record({
      t: fc.constant('crash' as const),
      batch: fc.array(writeOp, { minLength: 1, maxLength: 5 }),
      tail: fc.option(fc.oneof(createOp, dropOp), { nil: null }),
      crashAt: fc.integer({ min: 0, max: 40 }),
      writes: fc.constantFrom<WriteFate>('keep', 'drop', 'tear', 'random'),
      namespace: fc.constantFrom('keep' as const, 'drop' as const, 'random' as const),
      recoveryCrashAt: fc.option(fc.integer({ min: 0, max: 60 }), { nil: null }),
    }),
    weight: 2,
  },
);

// ------------------------------------------------------------------ the model

/** The stored form of a vector: float32, unit length for cosine (the engine's rule, computed here). */
function stored(v: number[], metric: Metric): number[] {
  const f = Float32Array.from(v);
  if (metric === 'cosine') {
    let s = 0;
    for (let i = 0; i < f.length; i++) s += f[i] * f[i];
    const inv = 1 / Math.sqrt(s);
    for (let i = 0; i < f.length; i++) f[i] *= inv;
  }
  return Array.from(f);
}

/** Vectors the engine accepts: cosine refuses all-zero vectors, so the generator's zero becomes a unit. */
function vectorFor(v: number[], dim: number): number[] {
  const x = v.slice(0, dim);
  if (x.every((e) => e === 0)) x[0] = 1;
  return x;
}

function clone(m: Model): Model {
  return new Map([...m].map(([n, c]) => [n, { spec: c.spec, points: new Map(c.points) }]));
}

/** What a write does to the model, or null when the engine writes nothing (unknown collection or id). */
type Effect = { t: 'put'; name: string; points: { id: string; vector: number[]; payload: Payload }[] }
  | { t: 'del'; name: string; id: string } | { t: 'create'; spec: Spec } | { t: 'drop'; name: string };

function applyEffect(m: Model, e: Effect): void {
  if (e.t === 'create') m.set(e.spec.name, { spec: e.spec, points: new Map() });
  else if (e.t === 'drop') m.delete(e.name);
  else if (e.t === 'del') m.get(e.name)?.points.delete(e.id);
  else {
    const c = m.get(e.name);
    if (c !== undefined) for (const p of e.points) c.points.set(p.id, { vector: p.vector, payload: p.payload });
  }
}

// ------------------------------------------------------------------ running an op

interface Issued { effect: Effect | null; promise: Promise<unknown>; expect: (r: unknown) => void }

/** Starts one op against the db; `m` is the state the engine has applied at the call. */
function issue(db: Database, m: Model, op: WriteOp | DbOp): Issued {
  if (op.t === 'create') {
    const s = op.spec;
    const exists = m.has(s.name);
    return {
      effect: exists ? null : { t: 'create', spec: s },
      promise: db.createCollection({ ...s, filterable: FILTERABLE }),
      expect: (r) => expect(exists ? r : (r as { name: string }).name).toBe(exists ? 'already_exists' : s.name),
    };
  }
  if (op.t === 'drop') {
    const exists = m.has(op.name);
    return { effect: exists ? { t: 'drop', name: op.name } : null, promise: db.deleteCollection(op.name), expect: (r) => expect(r).toEqual({ existed: exists }) };
  }
  const c = m.get(op.name);
  if (op.t === 'delete') {
    const has = c?.points.has(op.id) === true;
    return {
      effect: has ? { t: 'del', name: op.name, id: op.id } : null,
      promise: db.delete(op.name, op.id),
      expect: (r) => expect(r).toEqual(c === undefined ? 'not_found' : { deleted: has }),
    };
  }
  const dim = c?.spec.dim ?? 4;
  const points = op.points.map((p) => ({ id: p.id, vector: vectorFor(p.vec, dim), payload: p.payload }));
  const body = { points: points.map((p) => (p.payload === undefined ? { id: p.id, vector: p.vector } : p)) };
  return {
    effect: c === undefined ? null : {
      t: 'put', name: op.name, points: points.map((p) => ({ id: p.id, vector: stored(p.vector, c.spec.metric), payload: p.payload ?? {} })),
    },
    promise: op.t === 'upsert' ? db.upsert(op.name, body) : db.bulkUpsert(op.name, body),
    expect: (r) => expect(r).toEqual(c === undefined ? 'not_found' : { upserted: new Set(points.map((p) => p.id)).size }),
  };
}

/** A resolved value, or the SvcError code of a rejection (other errors propagate). */
async function outcome(p: Promise<unknown>): Promise<unknown> {
  try {
    return await p;
  } catch (e) {
    if (e instanceof SvcError) return e.code;
    throw e;
  }
}

// ------------------------------------------------------------------ comparing

function score(metric: Metric, q: number[], v: number[]): number {
  if (metric === 'l2') return Math.sqrt(q.reduce((s, x, i) => s + (x - v[i]) ** 2, 0));
  return q.reduce((s, x, i) => s + x * v[i], 0);
}

function matches(p: MPoint, f: Filter | undefined): boolean {
  if (f === undefined) return true;
  if ('eq' in f) return p.payload.k === f.eq.value;
  if ('gte' in f) return typeof p.payload.n === 'number' && p.payload.n >= f.gte.value;
  throw new Error('filter the model does not know');
}

/** Everything a user can read, against the model: list, info, get of every id, fetch pages, searches. */
async function checkAll(db: Database, m: Model, rnd: () => number): Promise<void> {
  const list = (await db.listCollections()).collections;
  expect(list.map((c) => [c.name, c.dim, c.metric, c.index, c.count])).toEqual(
    [...m.values()].sort((a, b) => (a.spec.name < b.spec.name ? -1 : 1)).map((c) => [c.spec.name, c.spec.dim, c.spec.metric, c.spec.index, c.points.size]),
  );
  for (const n of NAMES) if (!m.has(n)) expect(await outcome(db.get(n, 'p0'))).toBe('not_found');
  for (const c of m.values()) {
    const n = c.spec.name;
    for (const pid of IDS) {
      const want = c.points.get(pid);
      const got = await outcome(db.get(n, pid, { with_vector: true }));
      expect(got, `get ${n}/${pid}`).toEqual(want === undefined ? 'not_found' : { id: pid, payload: want.payload, vector: want.vector });
    }
    // Fetch pages in id order, optionally filtered.
    const filter: Filter | undefined = rnd() < 0.3 ? { eq: { field: 'k', value: 'x' } } : undefined;
    const limit = 1 + Math.floor(rnd() * 4);
    const seen: PointOutput[] = [];
    let cursor: string | null = null;
    for (let page = 0; page < 20; page++) {
      const r = await db.fetch(n, { limit, cursor, with_vector: true, ...(filter ? { filter } : {}) });
      expect(r.points.length).toBeLessThanOrEqual(limit);
      seen.push(...r.points);
      cursor = r.next_cursor;
      if (cursor === null) break;
    }
    expect(cursor).toBeNull();
    const ids = [...c.points.keys()].filter((i) => matches(c.points.get(i)!, filter)).sort();
    expect(seen, `fetch ${n}`).toEqual(ids.map((i) => ({ id: i, payload: c.points.get(i)!.payload, vector: c.points.get(i)!.vector })));
    for (let s = 0; s < 2; s++) await checkSearch(db, c, rnd);
    await checkSparse(db, c, rnd);
  }
}

/** The sparse and BM25 rankings hold exactly the live points whose current payload has a query term. */
async function checkSparse(db: Database, c: MCol, rnd: () => number): Promise<void> {
  const n = c.spec.name;
  // The database ranks; the node's engine fuses (core/engine/node.ts).
  const engine = new NodeEngine(db);
  const first = Math.floor(rnd() * 51);
  const idx = [first, (first + 1 + Math.floor(rnd() * 50)) % 51];
  const sparse = (await engine.hybridSearch(n, { sparse_indices: idx, sparse_values: [1, 1], k: IDS.length })).hits.map((h) => h.id);
  const wantSparse = [...c.points].filter(([, p]) => {
    const sp = p.payload.__svc_sparse__ as { indices: number[] } | undefined;
    return sp !== undefined && sp.indices.some((i) => idx.includes(i));
  }).map(([i]) => i);
  expect(sparse.sort(), `sparse ${n} ${JSON.stringify(idx)}`).toEqual(wantSparse.sort());
  const text = (await engine.hybridSearch(n, { query_text: 'fox', k: IDS.length })).hits.map((h) => h.id);
  const wantText = [...c.points].filter(([, p]) => p.payload.__svc_sparse__ === undefined
    && typeof p.payload.__svc_text__ === 'string' && p.payload.__svc_text__.includes('fox')).map(([i]) => i);
  expect(text.sort(), `text ${n}`).toEqual(wantText.sort());
}

async function checkSearch(db: Database, c: MCol, rnd: () => number): Promise<void> {
  const { name: n, dim, metric, index } = c.spec;
  const raw = vectorFor(Array.from({ length: dim }, () => Math.floor(rnd() * 7) - 3), dim);
  const q = stored(raw, metric);
  const k = 1 + Math.floor(rnd() * 8);
  const r = rnd();
  const filter: Filter | undefined = r < 0.2 ? { eq: { field: 'k', value: 'y' } } : r < 0.35 ? { gte: { field: 'n', value: 2 } } : undefined;
  const ef = 1 + Math.floor(rnd() * 4); // a small beam, so that hnsw collections of a few points use the graph
  const { hits } = await db.search(n, { vector: raw, k, ef_search: ef, ...(filter ? { filter } : {}) });
  const better = (a: number, b: number): number => (metric === 'l2' ? a - b : b - a);
  const pool = [...c.points].filter(([, p]) => matches(p, filter)).map(([i, p]) => ({ id: i, s: score(metric, q, p.vector), p }));
  pool.sort((a, b) => better(a.s, b.s));
  const eps = metric === 'cosine' ? 1e-5 : 0;
  const close = (a: number, b: number): boolean => Math.abs(a - b) <= eps;
  const where = `search ${n} (${metric}, ${index}) k=${k} ef=${ef} filter=${JSON.stringify(filter)} q=${JSON.stringify(raw)}: ${JSON.stringify(hits.map((h: Hit) => [h.id, h.score]))}`;
  expect(hits.length, where).toBe(Math.min(k, pool.length));
  const byId = new Map(pool.map((x) => [x.id, x]));
  hits.forEach((h, i) => {
    const m = byId.get(h.id);
    expect(m, `${where}: hit ${h.id} is not a live matching point`).toBeDefined();
    expect(h.rank).toBe(i);
    expect(close(h.score, m!.s), `${where}: score of ${h.id} is ${h.score}, its current vector gives ${m!.s}`).toBe(true);
    expect(h.payload).toEqual(m!.p.payload);
    // Exact search: the i-th hit scores as the i-th best point (ties may come in any order).
    if (index === 'flat') expect(close(h.score, pool[i].s), `${where}: rank ${i} should score ${pool[i].s}`).toBe(true);
  });
  expect(new Set(hits.map((h) => h.id)).size, where).toBe(hits.length);
}

/** The first state in `candidates` the db matches, by list and every point; null when none does. */
async function whichState(db: Database, candidates: Model[]): Promise<number | null> {
  outer: for (let j = candidates.length - 1; j >= 0; j--) {
    const m = candidates[j];
    const list = (await db.listCollections()).collections;
    if (JSON.stringify(list.map((c) => [c.name, c.dim, c.count])) !== JSON.stringify([...m.values()]
      .sort((a, b) => (a.spec.name < b.spec.name ? -1 : 1)).map((c) => [c.spec.name, c.spec.dim, c.points.size]))) continue;
    for (const c of m.values()) {
      for (const [pid, p] of c.points) {
        const got = await outcome(db.get(c.spec.name, pid, { with_vector: true }));
        if (JSON.stringify(got) !== JSON.stringify({ id: pid, payload: p.payload, vector: p.vector })) continue outer;
      }
    }
    return j;
  }
  return null;
}

async function drainEventLoop(rounds: number): Promise<void> {
  for (let i = 0; i < rounds; i++) await new Promise<void>((r) => setImmediate(r));
}

// ------------------------------------------------------------------ the property

const run = fc.record({
  fsSeed: fc.integer({ min: 1, max: 2 ** 30 }),
  checkpointPoints: fc.integer({ min: 1, max: 6 }),
  segmentsMax: fc.integer({ min: 1, max: 3 }),
  insecure: fc.boolean(),
  walFileBytesMax: fc.constantFrom(256, 1024, 4096, 1 << 20),
  steps: fc.array(step, { minLength: 10, maxLength: 30, size: 'max' }),
});

async function runSteps(r: { fsSeed: number; checkpointPoints: number; segmentsMax: number; insecure: boolean; walFileBytesMax: number; steps: Step[] }): Promise<void> {
  const fs = new FaultyFileSystem(r.fsSeed);
  const open = (): Promise<Database> => Database.open({
    dataDir: '/data', masterKey: r.insecure ? null : KEY, fs, buildIndex: buildIndexInline,
    checkpointPoints: r.checkpointPoints, segmentsMax: r.segmentsMax, walFileBytesMax: r.walFileBytesMax, seed: r.fsSeed,
  });
  let rndState = r.fsSeed;
  const rnd = (): number => {
    rndState = (Math.imul(rndState, 1103515245) + 12345) >>> 0;
    return rndState / 2 ** 32;
  };
  let db = await open();
  let model: Model = new Map();
  try {
    for (const [i, s] of r.steps.entries()) {
      const at = `step ${i} ${JSON.stringify(s)}`;
      if (s.t === 'reopen') {
        await db.close();
        db = await open();
      } else if (s.t === 'crash') {
        const pre = clone(model);
        fs.crashAfter(s.crashAt, { writes: s.writes, namespace: s.namespace });
        const issued = [...s.batch, ...(s.tail ? [s.tail] : [])].map((op) => issue(db, pre, op));
        const settled = await Promise.allSettled(issued.map((x) => outcome(x.promise)));
        if (!fs.crashed) {
          fs.crashAfter(0, { writes: s.writes, namespace: s.namespace });
          await fs.stat('/').catch(() => undefined);
        }
        expect(fs.crashed).toBe(true);
        await drainEventLoop(50); // the dead process's background work fails out before the machine restarts
        fs.restart();
        // Writes that did something, in seq order; every acknowledged one must survive.
        const effects: Effect[] = [];
        let acked = 0;
        issued.forEach((x, k) => {
          const o = settled[k];
          if (o.status === 'fulfilled' && typeof o.value === 'object') x.expect(o.value);
          if (x.effect === null) return;
          effects.push(x.effect);
          if (o.status === 'fulfilled' && typeof o.value === 'object') acked = effects.length;
        });
        const candidates: Model[] = [clone(pre)];
        for (const e of effects) {
          const next = clone(candidates[candidates.length - 1]);
          applyEffect(next, e);
          candidates.push(next);
        }
        if (s.recoveryCrashAt !== null) {
          fs.crashAfter(s.recoveryCrashAt, { writes: s.writes, namespace: s.namespace });
          const first = await open().catch((e: unknown) => e);
          if (first instanceof Database) await first.close().catch(() => undefined);
          else expect(fs.crashed, `${at}: the open failed without a crash: ${String(first)}`).toBe(true);
          await drainEventLoop(50);
          fs.restart();
        }
        db = await open();
        const j = await whichState(db, candidates);
        expect(j, `${at}: the state after the crash is no prefix of the writes in flight`).not.toBeNull();
        expect(j!, `${at}: an acknowledged write was lost`).toBeGreaterThanOrEqual(acked);
        model = candidates[j!];
      } else {
        const x = issue(db, model, s);
        const o = await outcome(x.promise);
        x.expect(o);
        if (x.effect !== null) applyEffect(model, x.effect);
      }
      try {
        await checkAll(db, model, rnd);
      } catch (e) {
        throw new Error(`${at}: ${(e as Error).message}`, { cause: e });
      }
    }
    await db.close();
  } finally {
    if (fs.crashed) fs.restart();
  }
}

describe('the engine against a Map model', () => {
  it('agrees after every step of random writes, reopens and power losses', async () => {
    const seed = Number(process.env.SVC_MODEL_SEED ?? 20240611);
    const numRuns = Number(process.env.SVC_MODEL_RUNS ?? 40);
    try {
      await fc.assert(fc.asyncProperty(run, runSteps), { seed, numRuns, endOnFailure: true });
    } catch (e) {
      throw new Error(`model test failed with SVC_MODEL_SEED=${seed}: ${(e as Error).message}`, { cause: e });
    }
  }, 120_000);
});
