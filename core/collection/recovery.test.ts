import { describe, expect, it } from 'vitest';
import { FaultyFileSystem } from '../testing/faulty-fs.js';
import { Database } from './database.js';
import { buildIndexInline } from './rebuild.js';

const KEY = new Uint8Array(32).fill(3);

function openOn(fs: FaultyFileSystem): Promise<Database> {
  return Database.open({ dataDir: '/data', masterKey: KEY, fs, buildIndex: buildIndexInline });
}

describe('recovery replays collection creates and drops', () => {
  it('a name created, dropped and created again survives a reopen while an older collection holds the WAL back', async () => {
    const fs = new FaultyFileSystem(1);
    fs.yieldEachOp = false;
    let db = await openOn(fs);
    // 'old' keeps its checkpoint at its create, so the WAL after it (and the first 'n') is replayed at open.
    await db.createCollection({ name: 'old', dim: 2, metric: 'l2', index: 'flat' });
    await db.createCollection({ name: 'n', dim: 2, metric: 'l2', index: 'flat' });
    await db.upsert('n', { points: [{ id: 'a', vector: [1, 2] }] });
    expect(await db.deleteCollection('n')).toEqual({ existed: true });
    await db.createCollection({ name: 'n', dim: 3, metric: 'dot', index: 'flat' });
    await db.upsert('n', { points: [{ id: 'b', vector: [1, 2, 3], payload: { x: 1 } }] });
    await db.close();

    db = await openOn(fs);
    const names = (await db.listCollections()).collections.map((c) => [c.name, c.dim, c.count]);
    expect(names).toEqual([['n', 3, 1], ['old', 2, 0]]);
    expect(await db.get('n', 'b', { with_vector: true })).toEqual({ id: 'b', payload: { x: 1 }, vector: [1, 2, 3] });
    await db.close();
  });
});

describe('point ids survive a reopen unchanged', () => {
  it('an id the engine accepts is the same id after a reopen (or is refused up front)', async () => {
    const fs = new FaultyFileSystem(2);
    fs.yieldEachOp = false;
    let db = await openOn(fs);
    await db.createCollection({ name: 'c', dim: 2, metric: 'l2', index: 'flat' });
    const ids = ['é', '😀', 'a\uD800', '\uDC00b'];
    const accepted: string[] = [];
    for (const id of ids) {
      try {
        await db.upsert('c', { points: [{ id, vector: [1, 2] }] });
        accepted.push(id);
      } catch (e) {
        expect((e as { code?: string }).code).toBe('invalid_argument');
      }
    }
    expect(accepted).toContain('é');
    expect(accepted).toContain('😀');
    const before = (await db.fetch('c', { limit: 10 })).points.map((p) => p.id);
    await db.close();
    db = await openOn(fs);
    expect((await db.fetch('c', { limit: 10 })).points.map((p) => p.id)).toEqual(before);
    for (const id of accepted) expect((await db.get('c', id)).id).toBe(id);
    await db.close();
  });
});
