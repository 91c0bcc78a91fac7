import { createHash } from 'node:crypto';
import { mkdtempSync, readdirSync, readFileSync, rmSync, statSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { Prng } from '../base/prng.js';
import { buildWorkerCounts } from '../index/hnsw/build-worker.js';
import { Database, type DatabaseOptions } from './database.js';
import { buildIndexInline } from './rebuild.js';

/**
 * Restarts cost nothing on disk (issue 19): recovery does not mark what the segments already hold as
 * changed, so an open and a close with no write between them leave the directory as it was, and
 * compaction bounds the segments whatever the history of writes and restarts.
 */

const KEY = new Uint8Array(32).fill(5);
const DIM = 16;
const roots: string[] = [];
afterEach(() => {
  for (const d of roots.splice(0)) rmSync(d, { recursive: true, force: true });
});

function tempDir(): string {
  const d = mkdtempSync(join(tmpdir(), 'svc-reopen-'));
  roots.push(d);
  return join(d, 'data');
}

const open = (dataDir: string, extra: Partial<DatabaseOptions> = {}) =>
  Database.open({ dataDir, masterKey: KEY, buildIndex: buildIndexInline, ...extra });

/** Every file but the lock, with its size and a hash of its bytes. */
function files(dir: string): Record<string, string> {
  const out: Record<string, string> = {};
  const walk = (d: string) => {
    for (const name of readdirSync(d)) {
      const p = join(d, name);
      if (statSync(p).isDirectory()) walk(p);
      else if (name !== 'svc.lock') out[p.slice(dir.length)] = `${statSync(p).size}:${createHash('sha256').update(readFileSync(p)).digest('hex')}`;
    }
  };
  walk(dir);
  return out;
}

function segments(dir: string): { count: number; bytes: number } {
  let count = 0;
  let bytes = 0;
  for (const uid of readdirSync(join(dir, 'collections'))) {
    for (const f of readdirSync(join(dir, 'collections', uid))) {
      count++;
      bytes += statSync(join(dir, 'collections', uid, f)).size;
    }
  }
  return { count, bytes };
}

function vector(prng: Prng): number[] {
  return Array.from({ length: DIM }, () => prng.next() * 2 - 1);
}

describe('reopening a data directory', () => {
  it('writes nothing when nothing was written: ten reopens leave every file as it was', async () => {
    const dir = tempDir();
    const prng = new Prng(7);
    let db = await open(dir);
    await db.createCollection({ name: 'c', dim: DIM, metric: 'cosine', index: 'flat' });
    for (let b = 0; b < 3; b++) {
      await db.upsert('c', { points: Array.from({ length: 1000 }, (_, i) => ({ id: `${b}-${i}`, vector: vector(prng), payload: { b, i } })) });
    }
    await db.close();
    const before = files(dir);
    const version = JSON.stringify((await (db = await open(dir)).stats()).snapshot_status);
    await db.close();
    for (let i = 0; i < 10; i++) {
      db = await open(dir);
      expect((await db.collectionInfo('c')).count).toBe(3000);
      await db.listCollections();
      await db.close();
    }
    expect(files(dir)).toEqual(before);
    db = await open(dir);
    expect(JSON.stringify((await db.stats()).snapshot_status)).toBe(version);
    await db.close();
  });

  it('keeps the segments within twice the live points and the segment count bound, over 30 restarts with writes', async () => {
    const dir = tempDir();
    const prng = new Prng(11);
    const model = new Map<string, number[]>();
    const opts = { checkpointPoints: 400, segmentsMax: 6 };
    let db = await open(dir, opts);
    await db.createCollection({ name: 'c', dim: DIM, metric: 'l2', index: 'flat' });
    const put = async (ids: string[]) => {
      const points = ids.map((id) => ({ id, vector: vector(prng) }));
      await db.upsert('c', { points });
      for (const p of points) model.set(p.id, p.vector);
    };
    let next = 0;
    for (let b = 0; b < 2; b++) await put(Array.from({ length: 1000 }, () => `p${next++}`));
    await db.close();
    const perPoint = segments(dir).bytes / 2000;

    for (let round = 0; round < 30; round++) {
      db = await open(dir, opts);
      const live = [...model.keys()];
      // Updates of existing ids, deletes and new ids: every kind of record that piles up in deltas.
      await put(Array.from({ length: 150 }, () => live[prng.int(live.length)]));
      for (let d = 0; d < 40; d++) {
        const id = live[prng.int(live.length)];
        if (model.delete(id)) await db.delete('c', id);
      }
      await put(Array.from({ length: 30 }, () => `p${next++}`));
      await db.close();
      const s = segments(dir);
      expect(s.count, `round ${round}`).toBeLessThanOrEqual(opts.segmentsMax);
      // Twice the live points plus one checkpoint's worth, in bytes, with a tenth for headers and payloads.
      expect(s.bytes, `round ${round}`).toBeLessThanOrEqual((2 * model.size + opts.checkpointPoints) * perPoint * 1.1);
    }

    db = await open(dir, opts);
    expect((await db.collectionInfo('c')).count).toBe(model.size);
    for (const id of [...model.keys()].filter((_, i) => i % 37 === 0)) {
      const p = await db.get('c', id, { with_vector: true });
      expect(p.vector).toEqual(model.get(id)!.map((x) => Math.fround(x)));
    }
    await db.close();
  });

  it('stops the graph build of a closed database: reopening in one process does not pile builds up', async () => {
    const dir = tempDir();
    const prng = new Prng(3);
    let db = await open(dir);
    await db.createCollection({ name: 'c', dim: 32, metric: 'l2' });
    for (let b = 0; b < 20; b++) {
      await db.upsert('c', { points: Array.from({ length: 1000 }, (_, i) => ({ id: `${b}-${i}`, vector: Array.from({ length: 32 }, () => prng.next()) })) });
    }
    await db.close();
    for (let i = 0; i < 3; i++) {
      // The default builder: worker threads, started by the open for the 20,000 points read back (the
      // graph file is off: a graph read back from it needs no build).
      db = await Database.open({ dataDir: dir, masterKey: KEY, persistGraphs: false });
      expect(buildWorkerCounts().busy).toBeGreaterThanOrEqual(1);
      await db.close();
      expect(buildWorkerCounts().busy).toBe(0);
    }
  });
});
