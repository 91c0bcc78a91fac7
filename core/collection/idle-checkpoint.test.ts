import { describe, expect, it, vi } from 'vitest';
import { XChaChaSealer } from '../crypto/sealer.js';
import { FaultyFileSystem } from '../testing/faulty-fs.js';
import { Database } from './database.js';
import { buildIndexInline } from './rebuild.js';

/**
 * A collection nobody writes to must not pin the WAL: its checkpoint moves with the others' (a manifest
 * update: its segments hold all of it already), so WAL files are deleted as the busy collections are
 * checkpointed, and an open replays only what follows. Before, every WAL file since the idle
 * collection's last checkpoint was kept and replayed at every open.
 */

const KEY = new Uint8Array(32).fill(13);
const WAL_FILE = 64 << 10;

function openOn(fs: FaultyFileSystem): Promise<Database> {
  return Database.open({ dataDir: '/data', masterKey: KEY, fs: fs.processView(), buildIndex: buildIndexInline, walFileBytesMax: WAL_FILE, checkpointPoints: 100 });
}

const walFiles = (fs: FaultyFileSystem) => fs.listFiles().filter((f) => f.startsWith('/data/wal/'));
const ids = async (db: Database, name: string) => (await db.fetch(name, { limit: 10_000 })).points.map((p) => p.id).sort();
const busyBatch = (b: number) => ({ points: Array.from({ length: 20 }, (_, i) => ({ id: `b${(b * 20 + i) % 400}`, vector: [b, i, 1, 2], payload: { b, pad: 'x'.repeat(300) } })) });

async function seeded(fs: FaultyFileSystem): Promise<Database> {
  const db = await openOn(fs);
  await db.createCollection({ name: 'idle', dim: 4, metric: 'l2', index: 'flat' });
  await db.upsert('idle', { points: Array.from({ length: 10 }, (_, i) => ({ id: `i${i}`, vector: [i, 0, 0, 1] })) });
  await db.createCollection({ name: 'busy', dim: 4, metric: 'l2', index: 'flat' });
  return db;
}

const settle = () => new Promise((r) => setTimeout(r, 50));

/**
 * Power loss: the process dies at its next file operation (its work in flight ends there, as a killed
 * process's would, rather than go on against the restarted machine's files), then the machine restarts.
 */
async function powerLoss(fs: FaultyFileSystem, db: Database): Promise<void> {
  fs.crashAfter(0);
  await db.close().catch(() => undefined);
  fs.crash();
  fs.restart();
}

/** A quiet collection (one point, `first`) and an empty busy one, on a database checkpointing every 100 points. */
async function quietAndBusy(fs: FaultyFileSystem, quiet: string, first: string) {
  const open = () => Database.open({ dataDir: '/data', masterKey: KEY, fs: fs.processView(), buildIndex: buildIndexInline, checkpointPoints: 100 });
  const db = await open();
  await db.createCollection({ name: quiet, dim: 4, metric: 'l2', index: 'flat' });
  await db.upsert(quiet, { points: [{ id: first, vector: [0, 0, 0, 1] }] });
  await db.createCollection({ name: 'busy', dim: 4, metric: 'l2', index: 'flat' });
  return { open, db };
}

describe('an idle collection beside a busy one', () => {
  it('does not keep the WAL: its files are deleted as the busy collection is checkpointed, and everything is there after a reopen', async () => {
    const fs = new FaultyFileSystem(31);
    let db = await seeded(fs);
    for (let b = 0; b < 300; b++) await db.upsert('busy', busyBatch(b));
    // Checkpoints run behind the writes: given a while to catch up.
    for (let t = 0; t < 100 && walFiles(fs).length > 3; t++) await settle();
    // About 2 MiB of records went through 64 KiB files (30 of them): only the last two or three are kept.
    expect(walFiles(fs).length).toBeLessThanOrEqual(3);
    // A write to the idle collection after its checkpoint moved, then power loss (no close).
    await db.upsert('idle', { points: [{ id: 'late', vector: [9, 9, 9, 9] }] });
    await powerLoss(fs, db);
    db = await openOn(fs);
    expect(await ids(db, 'idle')).toEqual([...Array.from({ length: 10 }, (_, i) => `i${i}`), 'late'].sort());
    expect((await db.collectionInfo('busy')).count).toBe(400);
    await db.close();
  });

  it('loses nothing acknowledged at a power loss anywhere while checkpoints move (its own and the busy one\'s)', async () => {
    for (let crashAt = 5; crashAt <= 400; crashAt += 13) {
      const fs = new FaultyFileSystem(4000 + crashAt);
      let db = await seeded(fs);
      fs.crashAfter(crashAt);
      let acked = -1;
      const idleAcked: string[] = [];
      try {
        for (let b = 0; b < 60; b++) {
          // Now and then a write to the quiet collection too, beside the busy one's (so while its checkpoint may be moving).
          if (b % 7 === 3) {
            // Both awaited together: a crash rejects both, and neither rejection goes unhandled.
            await Promise.all([db.upsert('idle', { points: [{ id: `late${b}`, vector: [b, 1, 1, 1] }] }), db.upsert('busy', busyBatch(b))]);
            idleAcked.push(`late${b}`);
          } else {
            await db.upsert('busy', busyBatch(b));
          }
          acked = b;
        }
        await settle();
      } catch {
        // the simulated power loss
      }
      await powerLoss(fs, db);
      db = await openOn(fs);
      // Every acknowledged write to the quiet collection is there (its checkpoint moved meanwhile).
      const idle = await ids(db, 'idle');
      for (const id of [...Array.from({ length: 10 }, (_, i) => `i${i}`), ...idleAcked]) expect(idle, `crash after ${crashAt} operations`).toContain(id);
      const busy = new Map((await db.fetch('busy', { limit: 10_000 })).points.map((p) => [p.id, (p.payload as { b: number }).b]));
      // Every acknowledged batch is there (or overwritten by a later one).
      for (let b = 0; b <= acked; b++) {
        for (let i = 0; i < 20; i++) expect(busy.get(`b${(b * 20 + i) % 400}`), `crash after ${crashAt}: batch ${b}`).toBeGreaterThanOrEqual(b);
      }
      await db.close();
    }
  });

  it('costs an open no decryption of what the segments hold: the busy collection\'s records before its checkpoint are skipped unopened', async () => {
    const fs = new FaultyFileSystem(32);
    // One WAL file (the default size): the idle collection's one write is in no segment yet, so its
    // checkpoint stays before it (its changes go into a segment only once it keeps an older WAL file),
    // and the replay starts there and reads every record of the busy collection since.
    const { open, db: first } = await quietAndBusy(fs, 'idle', 'i0');
    let db = first;
    for (let b = 0; b < 200; b++) await db.upsert('busy', { points: [{ id: `b${b}`, vector: [b, 1, 1, 1] }] });
    await settle();
    await powerLoss(fs, db);
    const opens = vi.spyOn(XChaChaSealer.prototype, 'open');
    try {
      db = await open();
      // The records after each collection's own last checkpoint (the busy one's at 100 and 200 points:
      // few or none; the idle one's write), the two creates, and a few files' own (manifest, segments):
      // 12 here. Not the 200 records the replay reads, nor the 100 after the busy one's first checkpoint.
      expect(opens.mock.calls.length).toBeLessThan(50);
      expect(opens.mock.calls.length).toBeGreaterThan(0);
    } finally {
      opens.mockRestore();
    }
    expect((await db.collectionInfo('busy')).count).toBe(200);
    expect(await ids(db, 'idle')).toEqual(['i0']);
    await db.close();
  });

  it('moves a quiet collection\'s checkpoint only through what it held when chosen: a write to it while the move waits survives a power loss', async () => {
    const fs = new FaultyFileSystem(33);
    const { open, db: first } = await quietAndBusy(fs, 'quiet', 'q0');
    await first.close();
    // Reopened: the close put the quiet collection's point in a segment, so it is quiet (nothing outside them).
    let db = await open();
    /**
     * A one-shot gate on one operation of the faulty fs, for the first call whose path (`to` of a rename)
     * matches: `reachedP` resolves once it is called, and it goes on at `release()`.
     */
    const gate = (op: 'rename' | 'mkdir', match: string) => {
      let release!: () => void;
      let reached!: () => void;
      const held = new Promise<void>((r) => { release = r; });
      const reachedP = new Promise<void>((r) => { reached = r; });
      let armed = true;
      const real = fs[op].bind(fs) as (...a: unknown[]) => Promise<void>;
      (fs as unknown as Record<string, unknown>)[op] = async (...args: unknown[]) => {
        if (armed && args[op === 'rename' ? 1 : 0] === match) {
          armed = false;
          reached();
          await held;
        }
        return real(...args);
      };
      return { reachedP, release: () => release() };
    };
    const manifest = gate('rename', '/data/manifest');
    const snapshotDir = gate('mkdir', '/data-snapshots/s1');
    // The busy collection's checkpoint starts at its 100th point and waits at its manifest save.
    for (let i = 0; i < 100; i++) await db.upsert('busy', { points: [{ id: `b${i}`, vector: [i, 1, 1, 1] }] });
    await manifest.reachedP;
    // A snapshot queues behind it (the directory's operations run one at a time), and waits in turn; the
    // quiet collection's move, chosen when the busy checkpoint ends, queues behind the snapshot.
    const snap = db.snapshot({ name: 's1' });
    manifest.release();
    await snapshotDir.reachedP;
    // Now a write to the quiet collection: acknowledged, after the move chose the seq it moves to.
    await db.upsert('quiet', { points: [{ id: 'late', vector: [9, 9, 9, 9] }] });
    snapshotDir.release();
    await snap;
    await settle();
    await powerLoss(fs, db);
    db = await open();
    // Had the move taken the WAL's last seq when it ran, it would be past 'late', which no segment holds.
    expect(await ids(db, 'quiet')).toEqual(['late', 'q0']);
    await db.close();
  });
});
