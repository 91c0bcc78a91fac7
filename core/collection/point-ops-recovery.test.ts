import { describe, expect, it } from 'vitest';
import type { Payload } from '../base/model.js';
import { FaultyFileSystem } from '../testing/faulty-fs.js';
import { Database } from './database.js';
import { buildIndexInline } from './rebuild.js';

/**
 * Payload updates and deletes by filter under power loss: each is one WAL record, made durable before it
 * is acknowledged, so after any crash it is there whole or not at all, and whole once acknowledged. The
 * payload index is rebuilt from what survived.
 */

const KEY = new Uint8Array(32).fill(11);
const N = 60;

/** Each open is a process with its own view of the disk: a crash ends what the one before still had under way. */
function openOn(fs: FaultyFileSystem, extra: Partial<Parameters<typeof Database.open>[0]> = {}): Promise<Database> {
  return Database.open({ dataDir: '/data', masterKey: KEY, fs: fs.processView(), buildIndex: buildIndexInline, ...extra });
}

async function seeded(fs: FaultyFileSystem): Promise<Database> {
  const db = await openOn(fs);
  await db.createCollection({ name: 'c', dim: 4, metric: 'l2', filterable: [{ path: 'group', field_type: 'keyword' }, { path: 'v', field_type: 'numeric' }] });
  await db.upsert('c', {
    points: Array.from({ length: N }, (_, i) => ({ id: `p${i}`, vector: [i, 1, 2, 3], payload: { group: i % 3 === 0 ? 'x' : 'y', v: 0, i } })),
  });
  return db;
}

async function payloads(db: Database): Promise<Map<string, Payload>> {
  return new Map((await db.fetch('c', { limit: 1000 })).points.map((p) => [p.id, p.payload]));
}

/** Runs `op` with a crash armed `crashAt` file-system operations ahead; then power loss and a reopen. */
async function crashDuring(crashAt: number, op: (db: Database) => Promise<unknown>): Promise<{ acked: boolean; db: Database }> {
  const fs = new FaultyFileSystem(7000 + crashAt);
  let db = await seeded(fs);
  fs.crashAfter(crashAt);
  let acked = false;
  try {
    await op(db);
    acked = true;
  } catch {
    // the simulated power loss
  }
  fs.crash();
  fs.restart();
  db = await openOn(fs);
  return { acked, db };
}

describe('payload updates under power loss', () => {
  it('are there whole or not at all at every crash point, and whole once acknowledged', async () => {
    const outcomes = { updated: 0, untouched: 0 };
    for (let crashAt = 1; crashAt <= 24; crashAt++) {
      const { acked, db } = await crashDuring(crashAt, (d) => d.setPayload('c', {
        points: Array.from({ length: N }, (_, i) => ({ id: `p${i}`, payload: { v: 1, group: 'z' } })),
      }));
      const all = [...(await payloads(db)).values()];
      expect(all).toHaveLength(N);
      const done = all.filter((p) => p.v === 1).length;
      if (acked) expect(done, `crash at ${crashAt}`).toBe(N);
      else expect([0, N], `crash at ${crashAt}`).toContain(done);
      // The payload index holds what survived, not what was asked.
      const z = (await db.count('c', { filter: { eq: { field: 'group', value: 'z' } } })).count;
      expect(z).toBe(done);
      if (done === N) {
        outcomes.updated++;
        expect((await db.get('c', 'p7')).payload).toEqual({ group: 'z', v: 1, i: 7 });
      } else outcomes.untouched++;
      await db.close();
    }
    // The sweep covered both outcomes, or it proved nothing.
    expect(outcomes.updated).toBeGreaterThan(0);
    expect(outcomes.untouched).toBeGreaterThan(0);
  }, 120_000);
});

describe('deletes by filter under power loss', () => {
  it('delete every match or none at every crash point, and every match once acknowledged', async () => {
    const outcomes = { deleted: 0, kept: 0 };
    const xs = Array.from({ length: N }, (_, i) => i).filter((i) => i % 3 === 0).length;
    for (let crashAt = 1; crashAt <= 24; crashAt++) {
      const { acked, db } = await crashDuring(crashAt, (d) => d.deletePoints('c', { filter: { eq: { field: 'group', value: 'x' } } }));
      const left = await payloads(db);
      const xLeft = [...left.values()].filter((p) => p.group === 'x').length;
      if (acked) expect(xLeft, `crash at ${crashAt}`).toBe(0);
      else expect([0, xs], `crash at ${crashAt}`).toContain(xLeft);
      expect(left.size).toBe(N - xs + xLeft);
      expect((await db.count('c', { filter: { eq: { field: 'group', value: 'x' } } })).count).toBe(xLeft);
      if (xLeft === 0) outcomes.deleted++;
      else outcomes.kept++;
      await db.close();
    }
    expect(outcomes.deleted).toBeGreaterThan(0);
    expect(outcomes.kept).toBeGreaterThan(0);
  }, 120_000);
});

/** Waits (boundedly) for the background checkpoints to finish. */
async function checkpointsDone(db: Database): Promise<void> {
  const running = (db as unknown as { checkpoints: Map<string, Promise<void>> }).checkpoints;
  for (let i = 0; i < 1000 && running.size > 0; i++) await Promise.all([...running.values()]);
}

describe('payload updates and deletes across reopens and checkpoints', () => {
  it('survive a checkpoint into a delta segment, a replay of the WAL tail and a clean reopen', async () => {
    const fs = new FaultyFileSystem(3);
    fs.yieldEachOp = false;
    const open = () => openOn(fs, { checkpointPoints: 10 });
    let db = await open();
    await db.createCollection({ name: 'c', dim: 4, metric: 'l2', filterable: [{ path: 'group', field_type: 'keyword' }] });
    await db.upsert('c', { points: Array.from({ length: 200 }, (_, i) => ({ id: `p${i}`, vector: [i, 0, 0, 1], payload: { group: i < 188 ? 'a' : 'd', i } })) });
    await checkpointsDone(db);
    // Fewer updates than a checkpoint's worth, then a delete that starts one: a delta segment (not a
    // compaction) must carry the updated payloads, since the WAL before it goes.
    await db.setPayload('c', { points: Array.from({ length: 8 }, (_, i) => ({ id: `p${i}`, payload: { group: 'b' } })) });
    await db.setPayload('c', { mode: 'replace', points: [{ id: 'p9', payload: { group: 'c' } }] });
    expect(await db.deletePoints('c', { filter: { eq: { field: 'group', value: 'd' } } })).toEqual({ deleted: 12 });
    await checkpointsDone(db);
    // In the WAL tail only.
    await db.setPayload('c', { points: [{ id: 'p4', payload: { late: true } }] });
    expect(await db.deletePoints('c', { ids: ['p100', 'p101'] })).toEqual({ deleted: 2 });
    const want = await payloads(db);
    expect(want.size).toBe(186);
    // A crash (not a close): what the last checkpoint left in the WAL is replayed.
    fs.crash();
    fs.restart();
    db = await open();
    expect(await payloads(db)).toEqual(want);
    expect((await db.count('c', { filter: { eq: { field: 'group', value: 'b' } } })).count).toBe(8);
    expect((await db.count('c', { filter: { eq: { field: 'group', value: 'd' } } })).count).toBe(0);
    expect((await db.get('c', 'p9')).payload).toEqual({ group: 'c' });
    expect((await db.get('c', 'p4', { with_vector: true }))).toEqual({ id: 'p4', vector: [4, 0, 0, 1], payload: { group: 'b', i: 4, late: true } });
    await db.close();
    db = await open();
    expect(await payloads(db)).toEqual(want);
    await db.close();
  });
});
