import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { Prng } from '../base/prng.js';
import type { ShardCommand } from '../cluster/consensus/command.js';
import { Database } from './database.js';
import { buildIndexInline } from './rebuild.js';

/**
 * A consensus member's side of the database (issue 17): committed commands applied in order, their
 * writes issued together (one group commit), a create or drop holding back what follows it; the
 * applied index durable behind them; the snapshot image and its restore.
 */
const KEY = new Uint8Array(32).fill(9);
const dirs: string[] = [];
afterEach(() => {
  for (const d of dirs.splice(0)) rmSync(d, { recursive: true, force: true });
});

function tmp(): string {
  const d = mkdtempSync(join(tmpdir(), 'svc-consensus-apply-'));
  dirs.push(d);
  return join(d, 'data');
}

const open = (dataDir: string) => Database.open({ dataDir, masterKey: KEY, buildIndex: buildIndexInline });
const UID_A = 'aaaaaaaaaaaaaaaa';
const UID_B = 'bbbbbbbbbbbbbbbb';

function points(prefix: string, n: number, rnd: Prng) {
  return Array.from({ length: n }, (_, i) => ({ id: `${prefix}${i}`, vector: new Float32Array([rnd.next(), rnd.next(), rnd.next()]), payload: { i } }));
}

async function ids(db: Database, name: string): Promise<string[]> {
  return (await db.fetch(name, { limit: 1000 })).points.map((p) => p.id).sort();
}

describe('Database as a consensus state machine', () => {
  it('applies a batch issued at once in order: creates and drops hold back what follows; results come back; the index is durable', async () => {
    const dir = tmp();
    const db = await open(dir);
    expect(await db.consensusApplied()).toBe(0);
    const rnd = new Prng(3);
    const params = { name: 'c', dim: 3, metric: 'l2' };
    const cmds: ShardCommand[] = [
      { uid: '', bulk: false, op: { t: 'create_collection', uid: UID_A, name: 'c', params } },
      { uid: UID_A, bulk: false, op: { t: 'upsert', points: points('a', 5, rnd) } },
      { uid: UID_A, bulk: false, op: { t: 'delete', ids: ['a0', 'zz'] } },
      { uid: '', bulk: false, op: { t: 'drop_collection', uid: UID_A } },
      { uid: UID_A, bulk: false, op: { t: 'upsert', points: points('late', 2, rnd) } },
      { uid: '', bulk: false, op: { t: 'create_collection', uid: UID_B, name: 'c', params } },
      // The name is taken now: refused on every member alike.
      { uid: '', bulk: false, op: { t: 'create_collection', uid: 'cccccccccccccccc', name: 'c', params } },
      { uid: UID_B, bulk: true, op: { t: 'upsert', points: points('b', 4, rnd) } },
    ];
    // All issued before any is awaited, as the member does with one Ready's entries.
    const results = cmds.map((c, i) => db.applyCommand(c, i + 1).then((v) => v, (e: Error) => e.message));
    const through = db.appliedThrough(cmds.length);
    expect(await Promise.all(results)).toEqual([0, 5, 1, 0, 0, 0, "collection 'c' already exists", 4]);
    await through;
    expect(await ids(db, 'c')).toEqual(['b0', 'b1', 'b2', 'b3']);
    await db.close();
    // Reopened: the position and the data are there; a command applied again changes nothing.
    const again = await open(dir);
    expect(await again.consensusApplied()).toBe(cmds.length);
    expect(await ids(again, 'c')).toEqual(['b0', 'b1', 'b2', 'b3']);
    await again.applyCommand(cmds[5], 6);
    await again.applyCommand(cmds[7], 8);
    expect(await ids(again, 'c')).toEqual(['b0', 'b1', 'b2', 'b3']);

    // The image, restored over another member's different state, gives the same points and position.
    const image = again.consensusImage();
    const other = await open(tmp());
    await other.consensusApplied();
    await other.applyCommand({ uid: '', bulk: false, op: { t: 'create_collection', uid: UID_A, name: 'old', params: { ...params, name: 'old' } } }, 1);
    await other.applyCommand({ uid: UID_B.replace(/b/g, 'd'), bulk: false, op: { t: 'delete', ids: ['x'] } }, 2);
    await other.restoreConsensusImage(image, 40);
    expect((await other.listCollections()).collections.map((c) => c.name)).toEqual(['c']);
    expect(await other.fetch('c', { limit: 10, with_vector: true })).toEqual(await again.fetch('c', { limit: 10, with_vector: true }));
    expect(await other.consensusApplied()).toBe(40);
    await again.close();
    await other.close();
  });

  it('refuses to become a member over a single node\'s data', async () => {
    const dir = tmp();
    const db = await open(dir);
    await db.createCollection({ name: 'mine', dim: 2 });
    await expect(db.consensusApplied()).rejects.toThrow(/not a consensus member's/);
    await db.close();
  });
});
