import { existsSync, mkdirSync, mkdtempSync, readdirSync, rmSync, statSync, symlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { SvcError } from '../base/errors.js';
import { Prng } from '../base/prng.js';
import { Database } from './database.js';
import { buildIndexInline } from './rebuild.js';

/**
 * Snapshots (CONTRACT.md section 6) under concurrent writes: the copy, opened as a data directory with
 * the same master key, holds exactly the acknowledged state at one point of the commit order. Every
 * write acknowledged before the snapshot call started is in it, nothing half-applied is, and each
 * writer's writes appear as a prefix of what it issued.
 */

const KEY = new Uint8Array(32).fill(9);
const roots: string[] = [];
function tempRoot(): string {
  const d = mkdtempSync(join(tmpdir(), 'svc-snap-'));
  roots.push(d);
  return d;
}
afterEach(() => {
  for (const d of roots.splice(0)) rmSync(d, { recursive: true, force: true });
});

type State = Map<string, { v: number[]; payload: Record<string, unknown> }>;
type Op =
  | { t: 'upsert'; points: { id: string; vector: number[]; payload: Record<string, unknown> }[]; bulk: boolean }
  | { t: 'delete'; id: string };

const IDS_PER_WRITER = 8;
const DIM = 4;

/** A writer's seeded script: single upserts, bulk upserts that span several WAL records, deletes. */
function script(writer: number, n: number, seed: number): Op[] {
  const prng = new Prng(seed + writer);
  const id = () => `w${writer}-${prng.int(IDS_PER_WRITER)}`;
  const point = (i: number, j: number) => ({ id: id(), vector: [writer, i, j, 1], payload: { writer, step: i, part: j } });
  return Array.from({ length: n }, (_, i): Op => {
    const r = prng.int(10);
    if (r < 2) return { t: 'delete', id: id() };
    if (r < 4) {
      // Distinct ids within one bulk, so the model needs no rule for duplicates.
      const pts = [0, 1, 2].map((j) => point(i, j));
      const seen = new Set<string>();
      return { t: 'upsert', points: pts.filter((p) => !seen.has(p.id) && seen.add(p.id)), bulk: true };
    }
    return { t: 'upsert', points: [point(i, 0)], bulk: false };
  });
}

/** States after 0, 1, ... n ops of one writer. */
function prefixStates(ops: Op[]): State[] {
  const states: State[] = [new Map()];
  for (const op of ops) {
    const s: State = new Map(states[states.length - 1]);
    if (op.t === 'delete') s.delete(op.id);
    else for (const p of op.points) s.set(p.id, { v: p.vector, payload: p.payload });
    states.push(s);
  }
  return states;
}

function apply(db: Database, name: string, op: Op): Promise<unknown> {
  if (op.t === 'delete') return db.delete(name, op.id);
  return op.bulk ? db.bulkUpsert(name, { points: op.points }) : db.upsert(name, { points: op.points });
}

async function readAll(db: Database, name: string): Promise<State> {
  const out: State = new Map();
  let cursor: string | null = null;
  for (let page = 0; page < 1000; page++) {
    const r = await db.fetch(name, { limit: 500, with_vector: true, ...(cursor === null ? {} : { cursor }) });
    for (const p of r.points) out.set(p.id, { v: p.vector!, payload: p.payload });
    cursor = r.next_cursor;
    if (cursor === null) return out;
  }
  throw new Error('fetch did not end');
}

/** Bytes of every file under a directory. */
function treeBytes(dir: string): number {
  return readdirSync(dir, { withFileTypes: true })
    .reduce((n, e) => n + (e.isDirectory() ? treeBytes(join(dir, e.name)) : statSync(join(dir, e.name)).size), 0);
}

const restrict = (s: State, writer: number): State => new Map([...s].filter(([id]) => id.startsWith(`w${writer}-`)));

function sameState(a: State, b: State): boolean {
  if (a.size !== b.size) return false;
  for (const [id, x] of a) {
    const y = b.get(id);
    if (y === undefined || JSON.stringify(x) !== JSON.stringify(y)) return false;
  }
  return true;
}

describe('snapshot under concurrent writes', () => {
  it('restores exactly an acknowledged prefix of every writer, including every write acknowledged before the call', async () => {
    const root = tempRoot();
    const dataDir = join(root, 'data');
    // Small batches and checkpoints: bulk upserts span several WAL records, and segments are written
    // (and compacted) while the snapshot copies.
    const db = await Database.open({
      dataDir, masterKey: KEY, buildIndex: buildIndexInline, limits: { maxBatchSize: 2 }, checkpointPoints: 15, segmentsMax: 3,
    });
    await db.createCollection({ name: 'c', dim: DIM, metric: 'l2' });

    const WRITERS = 4;
    const OPS = 160;
    const scripts = Array.from({ length: WRITERS }, (_, w) => script(w, OPS, 0x5a17));
    const acked = new Array<number>(WRITERS).fill(0);
    const issued = new Array<number>(WRITERS).fill(0);
    let snapshotCalled = false;
    let snapshotDone = false;
    const ackedAtCall: number[] = [];
    const issuedAtDone: number[] = [];

    const writer = async (w: number) => {
      for (const op of scripts[w]) {
        issued[w]++;
        await apply(db, 'c', op);
        acked[w]++;
      }
    };
    const snapshotter = async () => {
      while (Math.min(...acked) < OPS / 3) await new Promise((r) => setImmediate(r));
      ackedAtCall.push(...acked);
      snapshotCalled = true;
      const r = await db.snapshot({ name: 'mid' });
      issuedAtDone.push(...issued);
      snapshotDone = true;
      return r;
    };
    const [snap] = await Promise.all([snapshotter(), ...scripts.map((_, w) => writer(w))]);
    expect(snapshotCalled && snapshotDone).toBe(true);
    // Writes really continued around the snapshot: some were issued after the call began.
    expect(issuedAtDone.some((n, w) => n > ackedAtCall[w])).toBe(true);
    expect(Math.min(...acked)).toBe(OPS);

    expect(snap.name).toBe('mid');
    expect(snap.path).toBe(join(`${dataDir}-snapshots`, 'mid'));
    // The result describes the copy, not the live directory that kept growing.
    expect(snap.disk_bytes).toBe(treeBytes(snap.path));
    const liveFinal = await readAll(db, 'c');
    await db.close();

    const restored = await Database.open({ dataDir: snap.path, masterKey: KEY, buildIndex: buildIndexInline });
    try {
      const got = await readAll(restored, 'c');
      for (let w = 0; w < WRITERS; w++) {
        const states = prefixStates(scripts[w]);
        const mine = restrict(got, w);
        const matches = states.map((s, i) => (sameState(s, mine) ? i : -1)).filter((i) => i >= 0);
        expect(matches.length, `writer ${w}: the snapshot is no prefix of its writes`).toBeGreaterThan(0);
        // Acknowledged before the call => present; issued after the snapshot returned => absent.
        expect(matches.some((i) => i >= ackedAtCall[w] && i <= issuedAtDone[w]),
          `writer ${w}: prefixes ${matches.join(',')} outside [${ackedAtCall[w]}, ${issuedAtDone[w]}]`).toBe(true);
      }
      const stats = await restored.stats();
      expect(stats.total_points).toBe(got.size);
      expect(stats.snapshot_status.manifest_version).toBe(snap.manifest_version);
      // The restored collection answers queries from its rebuilt index.
      const [someId, some] = [...got][0];
      const hit = await restored.search('c', { vector: some.v, k: 1, consistency: 'strong' });
      expect(hit.hits[0]).toMatchObject({ id: someId, score: 0 });
    } finally {
      await restored.close();
    }

    // The live directory kept every write, including those after the snapshot.
    const reopened = await Database.open({ dataDir, masterKey: KEY, buildIndex: buildIndexInline });
    try {
      const all = await readAll(reopened, 'c');
      expect(sameState(all, liveFinal)).toBe(true);
      for (let w = 0; w < WRITERS; w++) expect(sameState(restrict(all, w), prefixStates(scripts[w])[OPS])).toBe(true);
    } finally {
      await reopened.close();
    }
  });

  it('takes a snapshot of every collection, and a dropped collection stays in a snapshot taken before the drop', async () => {
    const root = tempRoot();
    const db = await Database.open({ dataDir: join(root, 'data'), masterKey: KEY, buildIndex: buildIndexInline, snapshotDir: join(root, 'snaps') });
    await db.createCollection({ name: 'a', dim: 2, metric: 'dot' });
    await db.createCollection({ name: 'b', dim: 3, metric: 'cosine' });
    await db.upsert('a', { points: [{ id: '1', vector: [1, 2], payload: { k: 'x' } }] });
    await db.upsert('b', { points: [{ id: '2', vector: [0, 0, 1] }] });
    const s = await db.snapshot({ name: 'both' });
    expect(s.path).toBe(join(root, 'snaps', 'both'));
    await db.deleteCollection('a');
    expect((await db.snapshot({ name: 'after' })).name).toBe('after');
    await expect(db.snapshot({ name: 'both' })).rejects.toMatchObject({ code: 'already_exists' });
    await db.close();

    const r = await Database.open({ dataDir: s.path, masterKey: KEY, buildIndex: buildIndexInline });
    expect((await r.listCollections()).collections.map((c) => [c.name, c.count])).toEqual([['a', 1], ['b', 1]]);
    expect(await r.get('a', '1')).toEqual({ id: '1', payload: { k: 'x' } });
    await r.close();
    const after = await Database.open({ dataDir: join(root, 'snaps', 'after'), masterKey: KEY, buildIndex: buildIndexInline });
    expect((await after.listCollections()).collections.map((c) => c.name)).toEqual(['b']);
    await after.close();

    // The same master key is needed: a snapshot is as sealed as its source.
    await expect(Database.open({ dataDir: s.path, masterKey: new Uint8Array(32).fill(1) })).rejects.toMatchObject({ code: 'invalid_argument' });
  });

  it('accepts only names: a path from the caller never reaches the file system', async () => {
    const root = tempRoot();
    const snaps = join(root, 'snaps');
    const db = await Database.open({ dataDir: join(root, 'data'), masterKey: KEY, buildIndex: buildIndexInline, snapshotDir: snaps });
    try {
      const bad: unknown[] = ['../x', '/abs', 'a/b', '..', '.', '', 'a\\b', '.hidden', 'x'.repeat(129), 'a..b', 42, null, undefined];
      for (const name of bad) {
        const err = await db.snapshot({ name } as { name: string }).then(() => null, (e: unknown) => e);
        expect(err, JSON.stringify(name)).toBeInstanceOf(SvcError);
        expect((err as SvcError).code, JSON.stringify(name)).toBe('invalid_argument');
      }
      await expect(db.snapshot({ name: 'ok', path: '/tmp/elsewhere' } as { name: string })).rejects.toMatchObject({ code: 'invalid_argument' });
      expect(existsSync(snaps) ? readdirSync(snaps) : []).toEqual([]);
      expect(readdirSync(root).sort()).toEqual(['data']);
      expect(existsSync('/abs')).toBe(false);
    } finally {
      await db.close();
    }
  });

  it('creates each snapshot directory fresh: an entry already there, a link (dangling or not) included, is refused and left alone', async () => {
    const root = tempRoot();
    const snaps = join(root, 'snaps');
    const elsewhere = join(root, 'elsewhere');
    mkdirSync(snaps);
    mkdirSync(elsewhere);
    mkdirSync(join(snaps, 'empty-dir'));
    writeFileSync(join(snaps, 'a-file'), 'x');
    symlinkSync(elsewhere, join(snaps, 'link'));
    symlinkSync(join(root, 'nowhere'), join(snaps, 'dangling'));
    const db = await Database.open({ dataDir: join(root, 'data'), masterKey: KEY, buildIndex: buildIndexInline, snapshotDir: snaps });
    try {
      await db.createCollection({ name: 'c', dim: 2, metric: 'l2' });
      await db.upsert('c', { points: [{ id: '1', vector: [1, 2] }] });
      for (const name of ['empty-dir', 'a-file', 'link', 'dangling']) {
        await expect(db.snapshot({ name }), name).rejects.toMatchObject({ code: 'already_exists' });
      }
      expect(readdirSync(elsewhere)).toEqual([]);
      expect(readdirSync(join(snaps, 'empty-dir'))).toEqual([]);
      expect(existsSync(join(root, 'nowhere'))).toBe(false);
      expect((await db.snapshot({ name: 'fresh' })).path).toBe(join(snaps, 'fresh'));
    } finally {
      await db.close();
    }
    // A snapshot root that is not a directory is a clear error, not a 500.
    const fileRoot = join(root, 'root-file');
    writeFileSync(fileRoot, 'x');
    const db2 = await Database.open({ dataDir: join(root, 'data'), masterKey: KEY, buildIndex: buildIndexInline, snapshotDir: fileRoot });
    try {
      await expect(db2.snapshot({ name: 's' })).rejects.toMatchObject({ code: 'invalid_argument' });
    } finally {
      await db2.close();
    }
  });

  it('reports stats: collections, total points, a per-collection summary, manifest version and disk bytes', async () => {
    const root = tempRoot();
    const db = await Database.open({ dataDir: join(root, 'data'), masterKey: KEY, buildIndex: buildIndexInline });
    try {
      const empty = await db.stats();
      expect(empty).toMatchObject({ collections: 0, total_points: 0, per_collection: [] });
      await db.createCollection({ name: 'z', dim: 2, metric: 'l2' });
      await db.createCollection({ name: 'y', dim: 2, metric: 'l2', index: 'flat' });
      await db.upsert('z', { points: [{ id: '1', vector: [0, 1] }, { id: '2', vector: [1, 1] }] });
      await db.upsert('y', { points: [{ id: '1', vector: [0, 1] }] });
      const s = await db.stats();
      expect(s).toMatchObject({
        collections: 2, total_points: 3,
        per_collection: [{ name: 'y', count: 1, index: 'flat' }, { name: 'z', count: 2, index: 'hnsw' }],
      });
      expect(s.snapshot_status.manifest_version).toBeGreaterThan(empty.snapshot_status.manifest_version);
      expect(s.snapshot_status.disk_bytes).toBeGreaterThan(empty.snapshot_status.disk_bytes);
      await db.whenIndexed();
      const [y, z] = (await db.stats()).per_collection;
      // 2-d vectors are padded to 4 floats: 16 bytes a slot.
      expect([y.vector_bytes, z.vector_bytes]).toEqual([16, 32]);
      expect(y.graph_bytes).toBe(0);
      expect(z.graph_bytes).toBeGreaterThan(0);
      await db.delete('z', '1');
      const after = await db.stats();
      expect(after.total_points).toBe(2);
      expect(after.per_collection[1].vector_bytes).toBe(32); // a deleted point's slot stays until compaction
    } finally {
      await db.close();
    }
  });
});
