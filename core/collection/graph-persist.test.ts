import { copyFileSync, existsSync, mkdtempSync, readdirSync, readFileSync, rmSync, statSync, truncateSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { Prng } from '../base/prng.js';
import { InsecureSealer } from '../crypto/sealer.js';
import { FaultyFileSystem } from '../testing/faulty-fs.js';
import { NodeFileSystem } from '../storage/fs.js';
import { GraphFileWriter, readGraphFile, type GraphContents } from '../storage/graph-file.js';
import { VectorStore } from '../index/vector-store.js';
import type { Hnsw } from '../index/hnsw/hnsw.js';
import { systemClock } from '../base/clock.js';
import type { Collection } from './collection.js';
import { Database, type DatabaseOptions } from './database.js';
import { GRAPH_LOAD_DROPPED_SHARE_MAX, loadGraph, vectorFingerprint } from './graph-persist.js';
import { buildIndexInline } from './rebuild.js';

/**
 * Graphs survive a restart: the graph file is written after a build and at close, read back at open
 * onto the recovered slots (by point id and vector fingerprint), and any file that does not fit (damaged,
 * of other parameters, too far from the points now) is ignored with a warning and the graph rebuilt.
 */

const KEY = new Uint8Array(32).fill(9);
const DIM = 24;
const N = 3000;
const roots: string[] = [];
afterEach(() => {
  for (const d of roots.splice(0)) rmSync(d, { recursive: true, force: true });
});

function tempDir(): string {
  const d = mkdtempSync(join(tmpdir(), 'svc-graph-'));
  roots.push(d);
  return join(d, 'data');
}

interface Logged { level: string; message: string; detail?: Record<string, unknown> }

function opener(dataDir: string, extra: Partial<DatabaseOptions> = {}) {
  const logged: Logged[] = [];
  const open = async () => {
    const db = await Database.open({
      dataDir, masterKey: KEY, buildIndex: buildIndexInline, log: (level, message, detail) => logged.push({ level, message, detail }), ...extra,
    });
    await db.whenIndexed();
    return db;
  };
  return { open, logged };
}

const vec = (prng: Prng): number[] => Array.from({ length: DIM }, () => prng.gaussian());

function graphFile(dataDir: string): string {
  const uids = readdirSync(join(dataDir, 'collections'));
  expect(uids).toHaveLength(1);
  return join(dataDir, 'collections', uids[0], 'graph');
}

/**
 * 1,200 seeded points written and closed (the graph file written), then opened again: 40 deleted and
 * p1 moved far from everything. Resolves to the database, still open, with what changed.
 */
async function builtThenChanged(open: () => Promise<Database>, seed: number): Promise<{ db: Database; deleted: string[]; moved: { id: string; vector: number[] } }> {
  const prng = new Prng(seed);
  let db = await open();
  await db.createCollection({ name: 'c', dim: 8, metric: 'l2' });
  for (let b = 0; b < 1200; b += 600) {
    await db.upsert('c', { points: Array.from({ length: 600 }, (_, i) => ({ id: `p${b + i}`, vector: Array.from({ length: 8 }, () => prng.gaussian()) })) });
  }
  await db.whenIndexed();
  await db.close();
  db = await open();
  const deleted = Array.from({ length: 40 }, (_, i) => `p${i * 29}`);
  await db.deletePoints('c', { ids: deleted });
  const moved = { id: 'p1', vector: Array.from({ length: 8 }, () => 50) };
  await db.upsert('c', { points: [moved] });
  return { db, deleted, moved };
}

function states(db: Database) {
  return db.indexStates()[0];
}

function collectionOf(db: Database, name: string): Collection {
  return (db as unknown as { byName: Map<string, Collection> }).byName.get(name)!;
}

async function load(db: Database, prng: Prng, n = N): Promise<Map<string, number[]>> {
  await db.createCollection({ name: 'c', dim: DIM, metric: 'l2' });
  const all = new Map<string, number[]>();
  for (let b = 0; b < n; b += 500) {
    const points = Array.from({ length: Math.min(500, n - b) }, (_, i) => ({ id: `p${b + i}`, vector: vec(prng) }));
    for (const p of points) all.set(p.id, p.vector);
    await db.upsert('c', { points });
  }
  await db.whenIndexed();
  return all;
}

async function answers(db: Database, queries: number[][]): Promise<string[][]> {
  const out: string[][] = [];
  for (const q of queries) out.push((await db.search('c', { vector: q, k: 10, ef_search: 200, with_payload: false })).hits.map((h) => h.id));
  return out;
}

function exactTop(all: Map<string, number[]>, q: number[], k: number): string[] {
  const d = [...all].map(([id, v]) => [id, v.reduce((s, x, i) => s + (x - q[i]) ** 2, 0)] as const);
  return d.sort((a, b) => a[1] - b[1]).slice(0, k).map((x) => x[0]);
}

describe('the graph file', () => {
  it('is read back at open instead of a rebuild, and searches answer as before the restart (worker builds)', async () => {
    const dir = tempDir();
    const prng = new Prng(41);
    const { open, logged } = opener(dir, { buildIndex: undefined });
    let db = await open();
    await load(db, prng);
    const queries = Array.from({ length: 25 }, () => vec(prng));
    const before = await answers(db, queries);
    await db.close();
    const file = graphFile(dir);
    expect(statSync(file).size).toBeGreaterThan(N * 20);
    const bytes = readFileSync(file);

    db = await open();
    expect(states(db)).toMatchObject({ rebuilds: 0, graphLoads: 1, stale: false });
    expect(await answers(db, queries)).toEqual(before);
    await db.close();
    // Nothing changed: the open kept the file, and the close did not write it again.
    expect(readFileSync(file).equals(bytes)).toBe(true);
    expect(logged.filter((l) => l.level === 'warn')).toEqual([]);
  });

  it('after deletes and updates the file did not see (a crash before the next write): no deleted point, updated points by their new vectors', async () => {
    const dir = tempDir();
    const prng = new Prng(42);
    const { open, logged } = opener(dir);
    let db = await open();
    const all = await load(db, prng);
    await db.close();
    const file = graphFile(dir);
    // Outside the data directory: an open removes files no manifest lists.
    const old = join(dir, '..', 'graph.old');
    copyFileSync(file, old);

    db = await open();
    expect(states(db).graphLoads).toBe(1);
    const ids = [...all.keys()];
    const deleted = ids.filter((_, i) => i % 40 === 0); // 75
    const updated = ids.filter((_, i) => i % 40 === 7); // 75
    for (const id of deleted) {
      await db.delete('c', id);
      all.delete(id);
    }
    for (const id of updated) {
      const v = vec(prng).map((x) => x + 3);
      await db.upsert('c', { points: [{ id, vector: v }] });
      all.set(id, v);
    }
    const fresh = Array.from({ length: 100 }, (_, i) => ({ id: `n${i}`, vector: vec(prng) }));
    await db.upsert('c', { points: fresh });
    for (const p of fresh) all.set(p.id, p.vector);
    await db.close();
    // As if the process died before the graph was written again: the old file with the new data.
    copyFileSync(old, file);
    rmSync(old);

    db = await open();
    expect(states(db)).toMatchObject({ rebuilds: 0, graphLoads: 1, stale: false });
    const gone = new Set(deleted);
    let hit = 0;
    const queries = Array.from({ length: 40 }, () => vec(prng));
    for (const q of queries) {
      const got = (await db.search('c', { vector: q, k: 10, ef_search: 128, with_payload: false })).hits.map((h) => h.id);
      for (const id of got) expect(gone.has(id), `${id} was deleted`).toBe(false);
      const want = exactTop(all, q, 10);
      hit += got.filter((id) => want.includes(id)).length;
    }
    expect(hit / (queries.length * 10)).toBeGreaterThanOrEqual(0.95);
    for (const id of [...updated.slice(0, 20), ...fresh.slice(0, 20).map((p) => p.id)]) {
      const got = (await db.search('c', { vector: all.get(id)!, k: 1, with_payload: false })).hits;
      expect(got[0]?.id).toBe(id);
    }
    for (const id of deleted.slice(0, 20)) expect(await db.count('c', {}).then(() => db.get('c', id)).then(() => 'found', () => 'gone')).toBe('gone');
    await db.close();
    expect(logged.filter((l) => l.level === 'warn')).toEqual([]);
  });

  it(`is not used when more than ${GRAPH_LOAD_DROPPED_SHARE_MAX * 100}% of its nodes have no point now: a rebuild, with a warning`, async () => {
    const dir = tempDir();
    const prng = new Prng(43);
    const { open, logged } = opener(dir);
    let db = await open();
    const all = await load(db, prng);
    await db.close();
    const file = graphFile(dir);
    const old = readFileSync(file);
    db = await open();
    const ids = [...all.keys()].filter((_, i) => i % 5 === 0); // a fifth
    await db.deletePoints('c', { ids });
    await db.close();
    writeFileSync(file, old);
    db = await open();
    expect(states(db)).toMatchObject({ rebuilds: 1, graphLoads: 0 });
    expect(logged.some((l) => l.level === 'warn' && /graph file not used/.test(l.message) && /have no point now/.test(String(l.detail?.reason)))).toBe(true);
    expect((await db.collectionInfo('c')).count).toBe(N - ids.length);
    await db.close();
  });

  for (const damage of ['a flipped byte', 'cut short', 'of another collection', 'of another version'] as const) {
    it(`${damage}: the open works, rebuilds the graph, warns, and writes a good file again`, async () => {
      const dir = tempDir();
      const prng = new Prng(44);
      const { open, logged } = opener(dir);
      let db = await open();
      await load(db, prng);
      const queries = Array.from({ length: 10 }, () => vec(prng));
      const before = await answers(db, queries);
      if (damage === 'of another collection') {
        await db.createCollection({ name: 'other', dim: DIM, metric: 'l2' });
        for (let i = 0; i < 1500; i += 500) await db.upsert('other', { points: Array.from({ length: 500 }, (_, j) => ({ id: `p${i + j}`, vector: vec(prng) })) });
        await db.whenIndexed();
      }
      await db.close();
      const uids = readdirSync(join(dir, 'collections'));
      const info = uids.map((u) => ({ u, size: statSync(join(dir, 'collections', u, 'graph')).size }));
      // The larger one is 'c' (3,000 points against 1,500).
      const file = join(dir, 'collections', info.sort((a, b) => b.size - a.size)[0].u, 'graph');
      const b = readFileSync(file);
      if (damage === 'a flipped byte') {
        b[Math.floor(b.length / 2)] ^= 0x10;
        writeFileSync(file, b);
      } else if (damage === 'cut short') {
        truncateSync(file, b.length - 1000);
      } else if (damage === 'of another version') {
        b[7] = 0x02;
        writeFileSync(file, b);
      } else {
        copyFileSync(join(dir, 'collections', info[1].u, 'graph'), file);
      }
      db = await open();
      expect(db.indexStates().find((s) => s.name === 'c')).toMatchObject({ rebuilds: 1, graphLoads: 0 });
      expect(logged.some((l) => l.level === 'warn' && /graph file unreadable; rebuilding the graph/.test(l.message))).toBe(true);
      expect(await answers(db, queries)).toEqual(before);
      await db.close();
      // The rebuilt graph was written over the bad file: the next open reads it.
      db = await open();
      expect(db.indexStates().find((s) => s.name === 'c')).toMatchObject({ rebuilds: 0, graphLoads: 1 });
      await db.close();
    });
  }

  it('of other parameters (m): not used, with a warning', async () => {
    const dir = tempDir();
    const prng = new Prng(45);
    const logged: Logged[] = [];
    const open = async () => {
      const db = await Database.open({ dataDir: dir, masterKey: null, buildIndex: buildIndexInline, log: (level, message, detail) => logged.push({ level, message, detail }) });
      await db.whenIndexed();
      return db;
    };
    let db = await open();
    await load(db, prng, 1500);
    await db.close();
    const file = graphFile(dir);
    const uid = file.split('/').at(-2)!;
    // The same nodes under m 8 (insecure mode: the file can be made again without a key).
    const fs = new NodeFileSystem();
    const g = (await readGraphFile(fs, file, new InsecureSealer(), uid))!;
    const w = await GraphFileWriter.create(fs, `${file}.tmp`, new InsecureSealer(), uid, async () => fs.rename(`${file}.tmp`, file));
    for (let i = 0; i < g.meta.nodes; i++) {
      const links: number[][] = [];
      let at = g.offsets[i];
      for (let l = 0; l <= g.levels[i]; l++) {
        const cnt = g.links[at];
        links.push(Array.from(g.links.subarray(at + 1, at + 1 + cnt)).slice(0, l === 0 ? 16 : 8));
        at += 1 + cnt;
      }
      await w.addNode(g.ids[i], g.toks[i], g.fingerprints[2 * i], g.fingerprints[2 * i + 1], links);
    }
    await w.finish({ entry: g.meta.entry, m: 8, ef_construction: g.meta.ef_construction, kind: g.meta.kind, dim: g.meta.dim, quantization: g.meta.quantization });
    db = await open();
    expect(states(db)).toMatchObject({ rebuilds: 1, graphLoads: 0 });
    expect(logged.some((l) => l.level === 'warn' && /graph file not used/.test(l.message) && /other parameters/.test(String(l.detail?.reason)))).toBe(true);
    await db.close();
  });

  it('is kept by an open and a checkpoint, and goes with its collection', async () => {
    const dir = tempDir();
    const prng = new Prng(46);
    const { open } = opener(dir, { checkpointPoints: 200 });
    let db = await open();
    await load(db, prng, 1200);
    await db.close();
    const file = graphFile(dir);
    const bytes = readFileSync(file);
    db = await open();
    expect(readFileSync(file).equals(bytes)).toBe(true);
    // Checkpoints delete what the manifest does not list, but for the graph file.
    await db.upsert('c', { points: Array.from({ length: 300 }, (_, i) => ({ id: `q${i}`, vector: vec(prng) })) });
    await db.whenIndexed();
    expect(existsSync(file)).toBe(true);
    await db.deleteCollection('c');
    expect(existsSync(file)).toBe(false);
    await db.close();
    expect(readdirSync(join(dir, 'collections'))).toEqual([]);
  });

  it('scalar quantization: a graph read back traverses the codes as a built one does', async () => {
    const dir = tempDir();
    const prng = new Prng(47);
    const { open } = opener(dir);
    let db = await open();
    await db.createCollection({ name: 'c', dim: DIM, metric: 'l2', quantization: 'scalar' });
    for (let b = 0; b < 2000; b += 500) {
      await db.upsert('c', { points: Array.from({ length: 500 }, (_, i) => ({ id: `p${b + i}`, vector: vec(prng) })) });
    }
    await db.whenIndexed();
    expect(collectionOf(db, 'c').searchGraph!.scalarCodes).not.toBeNull();
    const queries = Array.from({ length: 15 }, () => vec(prng));
    const before = await answers(db, queries);
    await db.close();
    db = await open();
    expect(states(db)).toMatchObject({ rebuilds: 0, graphLoads: 1 });
    expect(collectionOf(db, 'c').searchGraph!.scalarCodes).not.toBeNull();
    expect(await answers(db, queries)).toEqual(before);
    await db.close();
  });

  it('multi-vector documents: each token is found again by its document and position, across updates the file did not see', async () => {
    const dir = tempDir();
    const prng = new Prng(49);
    const { open, logged } = opener(dir);
    let db = await open();
    await db.createCollection({ name: 'mv', dim: DIM, metric: 'l2', multivector: true });
    const docs = new Map<string, number[][]>();
    for (let b = 0; b < 800; b += 200) {
      const documents = Array.from({ length: 200 }, (_, i) => ({ id: `d${b + i}`, vectors: Array.from({ length: 2 + prng.int(3) }, () => vec(prng)) }));
      for (const d of documents) docs.set(d.id, d.vectors);
      await db.upsertDocuments('mv', { documents });
    }
    await db.whenIndexed();
    const queries = Array.from({ length: 10 }, () => [vec(prng), vec(prng)]);
    const ask = async () => {
      const out: string[][] = [];
      for (const q of queries) out.push((await db.searchMultiVector('mv', { vectors: q, k: 5, with_payload: false })).hits.map((h) => h.id));
      return out;
    };
    const before = await ask();
    await db.close();
    const file = graphFile(dir);
    const old = readFileSync(file);
    db = await open();
    expect(states(db)).toMatchObject({ rebuilds: 0, graphLoads: 1 });
    expect(await ask()).toEqual(before);
    // Ten documents replaced by others of as many tokens: their old tokens are dropped at the next load.
    const moved = [...docs.keys()].slice(0, 10);
    await db.upsertDocuments('mv', { documents: moved.map((id) => ({ id, vectors: docs.get(id)!.map(() => vec(prng)) })) });
    await db.close();
    writeFileSync(file, old);
    db = await open();
    expect(states(db)).toMatchObject({ rebuilds: 0, graphLoads: 1 });
    for (const id of moved) {
      const got = await db.get('mv', id, { with_vector: true });
      const hit = (await db.searchMultiVector('mv', { vectors: got.vectors!, k: 1, with_payload: false })).hits;
      expect(hit[0].id).toBe(id);
    }
    await db.close();
    expect(logged.filter((l) => l.level === 'warn')).toEqual([]);
  });

  it('a power loss at any point of a close that writes the graph: the open works, and reads the old file or the new one', async () => {
    let sawNew = 0;
    let sawOld = 0;
    for (let crashAt = 1; crashAt <= 36; crashAt += 1) {
      const fs = new FaultyFileSystem(500 + crashAt);
      const logged: Logged[] = [];
      const open = async () => {
        const db = await Database.open({ dataDir: '/data', masterKey: KEY, fs: fs.processView(), buildIndex: buildIndexInline, log: (level, message, detail) => logged.push({ level, message, detail }) });
        await db.whenIndexed();
        return db;
      };
      const changed = await builtThenChanged(open, crashAt);
      const { deleted, moved } = changed;
      let db = changed.db;
      fs.crashAfter(crashAt);
      await db.close().catch(() => undefined);
      fs.crash();
      fs.restart();
      // What the crashed close said (a write that failed) is not the open's.
      logged.length = 0;
      db = await open();
      expect(states(db), `crash at ${crashAt}`).toMatchObject({ graphLoads: 1, rebuilds: 0 });
      expect(logged.filter((l) => l.level === 'warn'), `crash at ${crashAt}`).toEqual([]);
      const count = (await db.collectionInfo('c')).count;
      if (count === 1200 - 40) {
        // Every write survived (made durable before the close), so the graph file may be either.
        const hits = (await db.search('c', { vector: moved.vector, k: 5, with_payload: false })).hits.map((h) => h.id);
        expect(hits[0]).toBe('p1');
        for (const id of hits) expect(deleted).not.toContain(id);
      }
      const files = fs.listFiles().filter((f) => f.endsWith('/graph'));
      expect(files).toHaveLength(1);
      // Whether the close's new file made it: the old one holds the 40 deleted points' nodes.
      const col = collectionOf(db, 'c');
      if ((col as unknown as { graphChanges: number }).graphChanges === 0) sawNew++;
      else sawOld++;
      await db.close();
    }
    expect(sawNew).toBeGreaterThan(0);
    expect(sawOld).toBeGreaterThan(0);
  }, 120_000);

  it('a point whose every link went to a deleted point\'s node is inserted again at open, not left unreachable', async () => {
    // Seed 37's vectors: p1, moved far from everything, links only to a deleted point's node (kept in the
    // graph in memory); the file holds live nodes only, so p1 was written with no link in or out, and
    // every open after loaded it so: a search for its own vector missed it.
    const fs = new FaultyFileSystem(37);
    const open = async () => {
      const db = await Database.open({ dataDir: '/data', masterKey: KEY, fs: fs.processView(), buildIndex: buildIndexInline });
      await db.whenIndexed();
      return db;
    };
    const changed = await builtThenChanged(open, 37);
    const { moved } = changed;
    let db = changed.db;
    await db.close();
    for (let reopen = 0; reopen < 2; reopen++) {
      db = await open();
      expect(states(db)).toMatchObject({ graphLoads: 1, rebuilds: 0 });
      const hits = (await db.search('c', { vector: moved.vector, k: 5, with_payload: false })).hits.map((h) => h.id);
      expect(hits[0], `open ${reopen + 1}`).toBe('p1');
      await db.close();
    }
  });

  it('a graph of a small m (some of its nodes unreachable as built) still loads: those are inserted again', async () => {
    const dir = tempDir();
    const { open } = opener(dir);
    const prng = new Prng(61);
    let db = await open();
    await db.createCollection({ name: 'c', dim: 64, metric: 'l2', index_params: { m: 3, ef_construction: 16 } });
    const vectors = Array.from({ length: 1500 }, () => Array.from({ length: 64 }, () => prng.gaussian()));
    for (let b = 0; b < vectors.length; b += 500) await db.upsert('c', { points: vectors.slice(b, b + 500).map((vector, i) => ({ id: `p${b + i}`, vector })) });
    await db.whenIndexed();
    // How many points a search for their own vector finds first: the loaded graph, its unreachable nodes
    // inserted again, finds at least as many as the graph built.
    const found = async () => {
      let n = 0;
      for (let i = 0; i < vectors.length; i += 5) if ((await db.search('c', { vector: vectors[i], k: 1, ef_search: 32 })).hits[0]?.id === `p${i}`) n++;
      return n;
    };
    const built = await found();
    await db.close();
    db = await open();
    // Loaded, not rebuilt (a first version counted the unreachable nodes as the file's holes: refused).
    expect(states(db)).toMatchObject({ graphLoads: 1, rebuilds: 0 });
    expect(await found()).toBeGreaterThanOrEqual(built);
    await db.close();
  });

  it('is neither written nor read with persistGraphs false', async () => {
    const dir = tempDir();
    const { open } = opener(dir, { persistGraphs: false });
    const db = await open();
    await load(db, new Prng(48), 1500);
    await db.close();
    expect(existsSync(graphFile(dir))).toBe(false);
  });
});

describe('loadGraph over a hand-made file', () => {
  it('leaves out the nodes no walk from the entry reaches (an island linked only to itself too), for the caller to insert', async () => {
    // Six points on a line; nodes 0-1-2-3 a chain from the entry (0), 4 and 5 link only to each other:
    // each has an in-link and an out-link, and no search from the entry ever gets there.
    const store = VectorStore.create({ dim: 2 });
    for (let i = 0; i < 6; i++) store.add([i, 0]);
    const ids = ['a', 'b', 'c', 'd', 'e', 'f'];
    const points = {
      store,
      slotOfPoint: (id: string) => { const i = ids.indexOf(id); return i < 0 ? undefined : i; },
      pointOfSlot: (s: number) => ({ id: ids[s], tok: 0 }),
      isLive: () => true,
    };
    const links: number[][] = [[1], [0, 2], [1, 3], [2], [5], [4]];
    const flat: number[] = [];
    const offsets: number[] = [];
    for (const l of links) {
      offsets.push(flat.length);
      flat.push(l.length, ...l);
    }
    offsets.push(flat.length);
    const fingerprints = new Uint32Array(12);
    const fp = new Uint32Array(2);
    for (let i = 0; i < 6; i++) {
      vectorFingerprint(store.view(i), fp);
      fingerprints.set(fp, 2 * i);
    }
    const params = { m: 4, efConstruction: 16, kind: 'l2' as const, dim: 2, quantization: 'none' };
    const file = {
      meta: { nodes: 6, entry: 0, m: 4, ef_construction: 16, kind: 'l2', dim: 2, quantization: 'none' },
      ids, toks: new Uint32Array(6), fingerprints, levels: new Uint8Array(6), offsets: Int32Array.from(offsets), links: Int32Array.from(flat),
    } as unknown as GraphContents;
    const r = await loadGraph(file, points, params, { m: 4, efConstruction: 16, kind: 'l2', seed: 1 }, Int32Array.from([0, 1, 2, 3, 4, 5]), systemClock, 4, () => false);
    expect(r).toMatchObject({ ok: true, nodes: 6, dropped: 0, unreachable: 2 });
    const g = (r as { graph: Hnsw }).graph;
    expect([0, 1, 2, 3, 4, 5].map((s) => g.has(s))).toEqual([true, true, true, true, false, false]);
  });
});
