import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { Prng } from '../base/prng.js';
import { SvcError } from '../base/errors.js';
import type { ShardCommand } from '../cluster/consensus/command.js';
import type { FileSystem } from '../storage/fs.js';
import { FaultyFileSystem, SimulatedCrash } from '../testing/faulty-fs.js';
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

async function collect(it: AsyncIterable<Uint8Array>): Promise<Buffer[]> {
  const out: Buffer[] = [];
  for await (const c of it) out.push(Buffer.from(c));
  return out;
}

async function* pieces(b: Buffer, n: number): AsyncGenerator<Uint8Array> {
  for (let i = 0; i < b.length; i += n) yield b.subarray(i, i + n);
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
    // The drop resolves to 1 (it dropped the collection); the upsert after it to 0 (its collection is gone).
    expect(await Promise.all(results)).toEqual([0, 5, 1, 1, 0, 0, "collection 'c' already exists", 4]);
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
    // Read whole, then handed over in 7-byte pieces: records cross the pieces' edges.
    const image = Buffer.concat(await collect(again.consensusImage()));
    const other = await open(tmp());
    await other.consensusApplied();
    await other.applyCommand({ uid: '', bulk: false, op: { t: 'create_collection', uid: UID_A, name: 'old', params: { ...params, name: 'old' } } }, 1);
    await other.applyCommand({ uid: UID_B.replace(/b/g, 'd'), bulk: false, op: { t: 'delete', ids: ['x'] } }, 2);
    await other.restoreConsensusImage(pieces(image, 7), 40);
    expect((await other.listCollections()).collections.map((c) => c.name)).toEqual(['c']);
    expect(await other.fetch('c', { limit: 10, with_vector: true })).toEqual(await again.fetch('c', { limit: 10, with_vector: true }));
    expect(await other.consensusApplied()).toBe(40);
    await again.close();
    await other.close();
  });

  it('an image read while commands go on, restored and followed by the log from its index, ends equal to the member it came from (seeded)', async () => {
    for (let seed = 1; seed <= 6; seed++) {
      const rnd = new Prng(seed);
      const dim = 3;
      let uidNo = 0;
      const uid = (): string => (uidNo++).toString(16).padStart(16, '0');
      const live = new Map<string, string>(); // name -> uid
      const vec = (): Float32Array => new Float32Array([rnd.next(), rnd.next(), rnd.next()]);
      const id = (): string => `p${Math.floor(rnd.next() * 2600)}`;
      const create = (name: string): ShardCommand => {
        const u = uid();
        live.set(name, u);
        return { uid: '', bulk: false, op: { t: 'create_collection', uid: u, name, params: { name, dim, metric: 'l2' } } };
      };
      const randomCommand = (): ShardCommand => {
        const names = [...live.keys()];
        const name = names[Math.floor(rnd.next() * names.length)];
        const u = live.get(name)!;
        const r = rnd.next();
        if (r < 0.03) return { uid: '', bulk: false, op: { t: 'drop_collection', uid: u } };
        if (r < 0.06) return create(name); // after its drop a new uid; else refused (taken) on both alike
        if (r < 0.4) return { uid: u, bulk: false, op: { t: 'upsert', points: Array.from({ length: 5 }, () => ({ id: id(), vector: vec(), payload: { a: Math.floor(rnd.next() * 9) } })) } };
        if (r < 0.6) return { uid: u, bulk: false, op: { t: 'delete', ids: Array.from({ length: 8 }, id) } };
        const mode = r < 0.8 ? 'merge' as const : 'replace' as const;
        return { uid: u, bulk: false, op: { t: 'set_payload', mode, points: Array.from({ length: 6 }, () => ({ id: id(), payload: { [rnd.next() < 0.5 ? 'a' : 'b']: Math.floor(rnd.next() * 9) } })) } };
      };
      const log: ShardCommand[] = [create('x'), create('y')];
      for (const name of ['x', 'y']) {
        for (let i = 0; i < 2600; i += 1300) {
          log.push({ uid: live.get(name)!, bulk: true, op: { t: 'upsert', points: Array.from({ length: 1300 }, (_, j) => ({ id: `p${i + j}`, vector: vec(), payload: { a: j % 7 } })) } });
        }
      }
      const apply = async (db: Database, c: ShardCommand, index: number): Promise<void> => {
        await db.applyCommand(c, index).catch((e: Error) => expect(e.message).toMatch(/already exists|not found/));
      };
      const a = await open(tmp());
      await a.consensusApplied();
      for (let i = 0; i < log.length; i++) await apply(a, log[i], i + 1);
      const base = log.length;
      // The image is read a piece at a time, with a command applied between pieces.
      const image: Buffer[] = [];
      for await (const piece of a.consensusImage()) {
        image.push(Buffer.from(piece));
        const c = randomCommand();
        log.push(c);
        await apply(a, c, log.length);
      }
      for (let k = 0; k < 20; k++) {
        const c = randomCommand();
        log.push(c);
        await apply(a, c, log.length);
      }
      const b = await open(tmp());
      await b.consensusApplied();
      await b.restoreConsensusImage(pieces(Buffer.concat(image), 65_536), base);
      for (let i = base; i < log.length; i++) await apply(b, log[i], i + 1);
      await a.appliedThrough(log.length);
      await b.appliedThrough(log.length);
      const names = (db: Database): Promise<string[]> => db.listCollections().then((l) => l.collections.map((c) => c.name).sort());
      expect(await names(b)).toEqual(await names(a));
      for (const name of await names(a)) {
        const all = (db: Database) => db.fetch(name, { limit: 10_000, with_vector: true });
        const [pa, pb] = [await all(a), await all(b)];
        expect(pb.points.length, `seed ${seed}, ${name}`).toBe(pa.points.length);
        expect(pb, `seed ${seed}, ${name}`).toEqual(pa);
      }
      await a.close();
      await b.close();
    }
  }, 120_000);

  it('a restore cut short by a close (its signal) stops between records; the directory then asks for it again, and a second restore ends whole', async () => {
    const rnd = new Prng(40);
    const a = await open(tmp());
    await a.consensusApplied();
    await a.applyCommand({ uid: '', bulk: false, op: { t: 'create_collection', uid: UID_A, name: 'x', params: { name: 'x', dim: 3, metric: 'l2' } } }, 1);
    for (let i = 0; i < 6; i++) await a.applyCommand({ uid: UID_A, bulk: true, op: { t: 'upsert', points: points(`p${i}-`, 200, rnd) } }, 2 + i);
    const image = Buffer.concat(await collect(a.consensusImage()));
    const dir = tmp();
    const b = await open(dir);
    expect(await b.consensusApplied()).toBe(0);
    await b.appliedThrough(3);
    const stop = new AbortController();
    let read = 0;
    async function* slow(): AsyncGenerator<Uint8Array> {
      for await (const piece of pieces(image, 4096)) {
        // The member closes a few records in.
        if (++read === 3) stop.abort();
        yield piece;
      }
    }
    await expect(b.restoreConsensusImage(slow(), 7, stop.signal)).rejects.toMatchObject({ code: 'unavailable' });
    expect(read).toBeLessThan(image.length / 4096);
    await b.close();
    // As after a kill -9 mid-restore: no position holds (not 3, not 7), so the member restores again.
    const again = await open(dir);
    expect(await again.consensusApplied()).toBe(0);
    await again.restoreConsensusImage(pieces(image, 65_536), 7);
    expect(await again.consensusApplied()).toBe(7);
    expect(await ids(again, 'x')).toEqual(await ids(a, 'x'));
    await again.close();
    await a.close();
  }, 60_000);

  it('point commands are kept in memory until syncApplied puts them in segments and the position after them: a kill -9 before it loses them from the directory (the log has them), one after it keeps them', async () => {
    const fs = new FaultyFileSystem(7);
    fs.yieldEachOp = false;
    const opts = { dataDir: '/m/data', masterKey: KEY, fs, buildIndex: buildIndexInline, persistGraphs: false };
    const rnd = new Prng(8);
    const db = await Database.open(opts);
    expect(await db.consensusApplied()).toBe(0);
    await db.applyCommand({ uid: '', bulk: false, op: { t: 'create_collection', uid: UID_A, name: 'c', params: { name: 'c', dim: 3, metric: 'l2' } } }, 1);
    await db.applyCommand({ uid: UID_A, bulk: false, op: { t: 'upsert', points: points('a', 3, rnd) } }, 2);
    db.appliedThrough(2);
    const writes = fs.stats.writes;
    await db.applyCommand({ uid: UID_A, bulk: false, op: { t: 'upsert', points: points('b', 3, rnd) } }, 3);
    db.appliedThrough(3);
    expect(fs.stats.writes, 'a point command writes nothing').toBe(writes);
    // A kill -9 (every write kept): the create is there, the points are not, and the position is 0.
    fs.crash({ writes: 'keep' });
    fs.restart();
    const killed = await Database.open(opts);
    expect(await killed.consensusApplied()).toBe(0);
    expect(await ids(killed, 'c')).toEqual([]);
    // The member applies its log again from there; then syncApplied makes it durable.
    for (const [i, prefix] of ['a', 'b'].entries()) await killed.applyCommand({ uid: UID_A, bulk: false, op: { t: 'upsert', points: points(prefix, 3, new Prng(8 + i)) } }, 2 + i);
    killed.appliedThrough(3);
    await killed.syncApplied();
    fs.crash({ writes: 'drop' });
    fs.restart();
    const synced = await Database.open(opts);
    expect(await synced.consensusApplied()).toBe(3);
    expect(await ids(synced, 'c')).toEqual(['a0', 'a1', 'a2', 'b0', 'b1', 'b2']);
    await synced.close();
  });

  it('a restore over a member whose delete was in memory only: after a kill -9 the deleted point does not come back from its segment', async () => {
    const fs = new FaultyFileSystem(9);
    fs.yieldEachOp = false;
    const opts = { dataDir: '/m/data', masterKey: KEY, fs, buildIndex: buildIndexInline, persistGraphs: false };
    const rnd = new Prng(10);
    const create: ShardCommand = { uid: '', bulk: false, op: { t: 'create_collection', uid: UID_A, name: 'c', params: { name: 'c', dim: 3, metric: 'l2' } } };
    const pts = points('x', 4, rnd);
    const db = await Database.open(opts);
    await db.consensusApplied();
    await db.applyCommand(create, 1);
    await db.applyCommand({ uid: UID_A, bulk: false, op: { t: 'upsert', points: pts } }, 2);
    db.appliedThrough(2);
    await db.syncApplied(); // x0..x3 in a segment
    await db.applyCommand({ uid: UID_A, bulk: false, op: { t: 'delete', ids: ['x0'] } }, 3);
    db.appliedThrough(3);
    // The leader's image at 10: the same collection without x0.
    const src = await open(tmp());
    await src.consensusApplied();
    await src.applyCommand(create, 1);
    await src.applyCommand({ uid: UID_A, bulk: false, op: { t: 'upsert', points: pts.slice(1) } }, 2);
    const image = Buffer.concat(await collect(src.consensusImage()));
    await src.close();
    await db.restoreConsensusImage(pieces(image, 1000), 10);
    expect(await ids(db, 'c')).toEqual(['x1', 'x2', 'x3']);
    fs.crash({ writes: 'keep' });
    fs.restart();
    const again = await Database.open(opts);
    expect(await again.consensusApplied()).toBe(10);
    expect(await ids(again, 'c')).toEqual(['x1', 'x2', 'x3']);
    await again.close();
  });

  it('a member\'s snapshot holds the points applied in memory only; its close writes the position; it serves no replication stream', async () => {
    const dir = tmp();
    const db = await Database.open({ dataDir: dir, masterKey: KEY, buildIndex: buildIndexInline, snapshotDir: `${dir}-snaps` });
    await db.consensusApplied();
    await db.applyCommand({ uid: '', bulk: false, op: { t: 'create_collection', uid: UID_A, name: 'c', params: { name: 'c', dim: 3, metric: 'l2' } } }, 1);
    await db.applyCommand({ uid: UID_A, bulk: false, op: { t: 'upsert', points: points('s', 5, new Prng(4)) } }, 2);
    db.appliedThrough(2);
    expect(() => db.replicate()).toThrow(/serves no read replicas/);
    const snap = await db.snapshot({ name: 's1' });
    const copy = await open(snap.path);
    expect(await ids(copy, 'c')).toEqual(['s0', 's1', 's2', 's3', 's4']);
    await copy.close();
    await db.close();
    const again = await open(dir);
    expect(await again.consensusApplied()).toBe(2);
    expect(await ids(again, 'c')).toEqual(['s0', 's1', 's2', 's3', 's4']);
    await again.close();
  });

  it('a drop makes the position pass it: a create refused because the dropped collection held its name is not applied again after a kill -9 (where it would now succeed)', async () => {
    const fs = new FaultyFileSystem(3);
    fs.yieldEachOp = false;
    const opts = { dataDir: '/m/data', masterKey: KEY, fs, buildIndex: buildIndexInline, persistGraphs: false };
    const create = (uid: string): ShardCommand => ({ uid: '', bulk: false, op: { t: 'create_collection', uid, name: 'c', params: { name: 'c', dim: 3, metric: 'l2' } } });
    const log: ShardCommand[] = [
      create(UID_A),
      create(UID_B), // refused on every member: 'c' is UID_A's
      { uid: '', bulk: false, op: { t: 'drop_collection', uid: UID_A } },
      // The leader saw 'c' free after the drop, and proposed a create of it and points in it.
      create('cccccccccccccccc'),
      { uid: 'cccccccccccccccc', bulk: false, op: { t: 'upsert', points: points('p', 3, new Prng(1)) } },
    ];
    const db = await Database.open(opts);
    await db.consensusApplied();
    const first = await Promise.all(log.slice(0, 3).map((c, i) => db.applyCommand(c, i + 1).then(() => 'ok', (e: { code?: string }) => e.code)));
    db.appliedThrough(3);
    expect(first).toEqual(['ok', 'already_exists', 'ok']);
    // A kill -9 right after the drop (the drop's record was fsynced, nothing else synced since).
    fs.crash({ writes: 'keep' });
    fs.restart();
    const again = await Database.open(opts);
    const p = await again.consensusApplied();
    // The position reached the drop's index less one before the drop reached the directory.
    expect(p).toBe(2);
    // The member applies the log after its position, as every other member applied it.
    for (let i = p; i < log.length; i++) await again.applyCommand(log[i], i + 1);
    expect((await again.listCollections()).collections.map((c) => [c.name, c.count])).toEqual([['c', 3]]);
    await again.close();
  });

  it('a kill -9 inside a drop\'s apply, before the drop reached the directory: a create refused before the drop is still refused when the log is applied again', async () => {
    const disk = new FaultyFileSystem(3);
    disk.yieldEachOp = false;
    const opts = (fs: FileSystem) => ({ dataDir: '/m/data', masterKey: KEY, fs, buildIndex: buildIndexInline, persistGraphs: false });
    const create = (uid: string): ShardCommand => ({ uid: '', bulk: false, op: { t: 'create_collection', uid, name: 'c', params: { name: 'c', dim: 3, metric: 'l2' } } });
    const log: ShardCommand[] = [create(UID_A), create(UID_B), { uid: '', bulk: false, op: { t: 'drop_collection', uid: UID_A } }, create('cccccccccccccccc')];
    const db = await Database.open(opts(disk.processView()));
    await db.consensusApplied();
    await db.applyCommand(log[0], 1);
    db.appliedThrough(1);
    await db.syncApplied();
    await expect(db.applyCommand(log[1], 2)).rejects.toThrow(/already exists/);
    // The process dies while the drop's checkpoints run.
    (db as unknown as { checkpointAll: () => Promise<void> }).checkpointAll = () => {
      disk.crash({ writes: 'keep' });
      return Promise.reject(new SimulatedCrash());
    };
    await expect(db.applyCommand(log[2], 3)).rejects.toThrow(SimulatedCrash);
    disk.restart();
    const again = await Database.open(opts(disk.processView()));
    const p = await again.consensusApplied();
    const outcome: string[] = [];
    for (let i = p; i < log.length; i++) outcome.push(await again.applyCommand(log[i], i + 1).then(() => 'ok', (e: { code?: string }) => String(e.code)));
    // As every other member: the create at 2 refused, the drop, the create at 4 made.
    expect({ p, outcome }).toEqual({ p: 1, outcome: ['already_exists', 'ok', 'ok'] });
    await again.close();
  });

  it('a command that failed to apply here (a disk error, not a refusal every member makes) stops positions: a close after it writes none past it', async () => {
    const dir = tmp();
    const create: ShardCommand = { uid: '', bulk: false, op: { t: 'create_collection', uid: UID_A, name: 'c', params: { name: 'c', dim: 3, metric: 'l2' } } };
    const db = await open(dir);
    await db.consensusApplied();
    await db.applyCommand(create, 1);
    await db.applyCommand({ uid: UID_A, bulk: false, op: { t: 'upsert', points: points('x', 2, new Prng(2)) } }, 2);
    db.appliedThrough(2);
    await db.syncApplied();
    await db.applyCommand({ uid: UID_A, bulk: false, op: { t: 'delete', ids: ['x0'] } }, 3);
    // The drop's directory write fails (EIO): the member stops on it.
    const dd = (db as unknown as { dir: { dropCollection: (uid: string) => Promise<number> } }).dir;
    dd.dropCollection = () => Promise.reject(Object.assign(new Error('EIO: write'), { code: 'EIO' }));
    await expect(db.applyCommand({ uid: '', bulk: false, op: { t: 'drop_collection', uid: UID_A } }, 4)).rejects.toThrow(/EIO/);
    db.appliedThrough(4);
    await expect(db.syncApplied()).rejects.toThrow(/failed to apply on this node/);
    await db.close();
    // The position stayed at 3 (the drop wrote it before its own write failed): the restart applies the
    // drop again.
    const again = await open(dir);
    expect(await again.consensusApplied()).toBe(3);
    expect(await ids(again, 'c')).toEqual(['x1']);
    await again.applyCommand({ uid: '', bulk: false, op: { t: 'drop_collection', uid: UID_A } }, 4);
    expect((await again.listCollections()).collections).toEqual([]);
    await again.close();
  });

  it('seeded: applying a suffix of the log again over a later state ends in the state applying it once gives (upserts, deletes, payload merges and replaces)', async () => {
    const rnd = new Prng(77);
    const pick = <T>(a: readonly T[]): T => a[rnd.int(a.length)];
    const mk = (): ShardCommand => {
      const r = rnd.next();
      const id = pick(['a', 'b', 'c', 'd']);
      const payload = { [pick(['k1', 'k2', 'k3'])]: rnd.int(5) };
      if (r < 0.3) return { uid: '', bulk: false, op: { t: 'upsert', points: [{ id, vector: new Float32Array([rnd.next(), rnd.next(), rnd.next()]), payload }] } };
      if (r < 0.5) return { uid: '', bulk: false, op: { t: 'delete', ids: [id] } };
      return { uid: '', bulk: false, op: { t: 'set_payload', mode: rnd.next() < 0.5 ? 'merge' : 'replace', points: [{ id, payload }] } } as ShardCommand;
    };
    const state = async (db: Database) => (await db.fetch('c', { limit: 100, with_vector: true })).points.map((p) => JSON.stringify(p)).sort();
    const a = await open(tmp());
    const b = await open(tmp());
    for (let round = 0; round < 30; round++) {
      // A uid is never created again once dropped: each round's collection has its own.
      const uid = (round + 1).toString(16).padStart(16, '0');
      const create: ShardCommand = { uid: '', bulk: false, op: { t: 'create_collection', uid, name: 'c', params: { name: 'c', dim: 3, metric: 'l2' } } };
      const log = Array.from({ length: 12 }, () => ({ ...mk(), uid }));
      for (const db of [a, b]) {
        await db.applyCommand(create, 1);
        db.appliedThrough(1);
      }
      for (const [i, c] of log.entries()) await a.applyCommand(c, i + 2);
      // `b` holds the state after q commands, then applies the log again from p <= q.
      const p = rnd.int(log.length);
      const q = p + rnd.int(log.length - p + 1);
      for (let i = 0; i < q; i++) await b.applyCommand(log[i], i + 2);
      for (let i = p; i < log.length; i++) await b.applyCommand(log[i], i + 2);
      expect(await state(b), `round ${round}: again from ${p} over ${q}`).toEqual(await state(a));
      for (const db of [a, b]) await db.applyCommand({ uid: '', bulk: false, op: { t: 'drop_collection', uid } }, 100);
    }
    await a.close();
    await b.close();
  }, 60_000);

  it('refuses to become a member over a single node\'s data', async () => {
    const dir = tmp();
    const db = await open(dir);
    await db.createCollection({ name: 'mine', dim: 2 });
    await expect(db.consensusApplied()).rejects.toThrow(/not a consensus member's/);
    await db.close();
  });
});

describe('a consensus leader answering a write from its state without a proposal', () => {
  /**
   * A leader's writes that find nothing to do (a delete of a point not here, a delete whose ids or filter
   * match nothing, an exist_ok create of a collection here) answered from its state at once: a leader
   * cut off from its group, not yet stepped down, answered "nothing deleted" for a point the group had
   * written meanwhile (seen by the linearizability run: a delete acknowledged, then a strong read still
   * saw the point). Such an answer now waits for confirm() (a ReadIndex round), then looks again.
   */
  it('looks again after confirming its state current: the writes committed meanwhile count', async () => {
    const db = await open(tmp());
    await db.consensusApplied();
    let index = 0;
    const rnd = new Prng(11);
    /** Commands the group committed that this member has not applied yet (it applies them at confirm). */
    const behind: ShardCommand[] = [];
    let confirms = 0;
    db.useProposer({
      propose: async (cmd) => db.applyCommand(cmd, ++index),
      confirm: async () => {
        confirms++;
        for (const c of behind.splice(0)) await db.applyCommand(c, ++index);
      },
    });
    await db.createCollection({ name: 'c', dim: 3, metric: 'l2', filterable: [{ path: 'i', field_type: 'numeric' }] });
    const uid = [...(db as unknown as { byUid: Map<string, unknown> }).byUid.keys()][0];
    const put = (id: string): ShardCommand => ({ uid, bulk: false, op: { t: 'upsert', points: [{ id, vector: new Float32Array([rnd.next(), rnd.next(), 1]), payload: { i: 1 } }] } });
    // A point the group wrote that this leader has not applied: its delete finds it after confirming.
    behind.push(put('k'));
    expect(await db.delete('c', 'k')).toEqual({ deleted: true });
    expect(await ids(db, 'c')).toEqual([]);
    // The same for deletes by ids and by filter.
    behind.push(put('a'), put('b'));
    expect(await db.deletePoints('c', { ids: ['a', 'b', 'zz'] })).toEqual({ deleted: 2 });
    behind.push(put('f'));
    expect(await db.deletePoints('c', { filter: { eq: { field: 'i', value: 1 } } })).toEqual({ deleted: 1 });
    // Nothing there even then: nothing deleted, after one confirm each.
    const before = confirms;
    expect(await db.delete('c', 'k')).toEqual({ deleted: false });
    expect(await db.deletePoints('c', { ids: ['k'] })).toEqual({ deleted: 0 });
    expect(confirms).toBe(before + 2);
    // A write that finds what it deletes proposes without a confirm (its commit shows the leadership).
    await db.upsert('c', { points: [{ id: 'p', vector: [1, 2, 3] }] });
    const n = confirms;
    expect(await db.delete('c', 'p')).toEqual({ deleted: true });
    expect(confirms).toBe(n);
    // An exist_ok create of a collection this leader holds: confirmed; dropped by the group meanwhile,
    // it is created anew (another uid) rather than answered from the old one.
    behind.push({ uid: '', bulk: false, op: { t: 'drop_collection', uid } });
    const again = await db.createCollection({ name: 'c', dim: 3, metric: 'l2', filterable: [{ path: 'i', field_type: 'numeric' }], exist_ok: true } as never);
    expect(again.count).toBe(0);
    expect((db as unknown as { byUid: Map<string, unknown> }).byUid.has(uid)).toBe(false);
    // A move's batch of deletes alone (a rebalance's target): the points the group wrote count.
    const uid2 = [...(db as unknown as { byUid: Map<string, unknown> }).byUid.keys()][0];
    const put2 = (id: string): ShardCommand => ({ uid: uid2, bulk: false, op: { t: 'upsert', points: [{ id, vector: new Float32Array([1, 1, 1]), payload: null }] } });
    behind.push(put2('m'));
    const params = { name: 'c', dim: 3, metric: 'l2', filterable: [{ path: 'i', field_type: 'numeric' }] };
    expect(await db.moveApply({ collection: 'c', params, records: [], deletes: ['m'] })).toEqual({ applied: 0, deleted: 1 });
    // A drop of a collection the group made meanwhile: it existed.
    behind.push({ uid: '', bulk: false, op: { t: 'create_collection', uid: 'e'.repeat(16), name: 'made', params: { name: 'made', dim: 2, metric: 'l2' } } });
    expect(await db.deleteCollection('made')).toEqual({ existed: true });
    expect((await db.listCollections()).collections.map((c) => c.name)).toEqual(['c']);
    // An empty batch says the collection is there: confirmed first. Still there: the empty answer; dropped
    // by the group meanwhile (the confirmation applies the drop): not taken, never an answer from the old one.
    const c = confirms;
    expect(await db.upsert('c', { points: [] })).toEqual({ upserted: 0 });
    expect(await db.bulkUpsert('c', { points: [] })).toEqual({ upserted: 0 });
    expect(await db.setPayload('c', { points: [] } as never)).toEqual({ updated: 0 });
    expect(confirms).toBe(c + 3);
    behind.push({ uid: '', bulk: false, op: { t: 'drop_collection', uid: uid2 } });
    await expect(db.upsert('c', { points: [] })).rejects.toMatchObject({ code: 'unavailable' });
    await expect(db.upsert('c', { points: [] })).rejects.toMatchObject({ code: 'not_found' });
    await db.createCollection({ name: 'c', dim: 3, metric: 'l2' });
    // A confirm that fails (a leader that cannot reach its quorum) fails the write: no answer from its state.
    db.useProposer({ propose: async (cmd) => db.applyCommand(cmd, ++index), confirm: () => Promise.reject(new SvcError('unavailable', 'the leader did not confirm the strong read in time')) });
    await expect(db.delete('c', 'nothing')).rejects.toMatchObject({ code: 'unavailable' });
    await expect(db.upsert('c', { points: [] })).rejects.toMatchObject({ code: 'unavailable' });
    await db.close();
  });
});

describe('a consensus member answering a write from what its commit did', () => {
  /**
   * Two callers at once may each find a point (or a collection) here and each propose its delete: the
   * second entry, applied after the first, deletes nothing, and its answer says so (a review found both
   * answered "deleted"; no order of the two makes that true). A write whose collection a drop committed
   * first wrote nothing: not_found, never a count from the collection it looked at.
   */
  it('two deletes of one point: one deleted it, the other found it gone; two drops: one existed', async () => {
    const db = await open(tmp());
    await db.consensusApplied();
    let index = 0;
    // Proposals commit in order, each after a turn of the loop (as a quorum's round trip), so that
    // callers at once all look at the state before any of theirs is applied.
    let tail: Promise<unknown> = Promise.resolve();
    db.useProposer({
      propose: (cmd) => {
        const run = tail.then(() => new Promise((r) => setImmediate(r))).then(() => db.applyCommand(cmd, ++index));
        tail = run.catch(() => undefined);
        return run;
      },
      confirm: async () => undefined,
    });
    await db.createCollection({ name: 'c', dim: 3, metric: 'l2' });
    await db.upsert('c', { points: [{ id: 'p', vector: [1, 2, 3] }, { id: 'q', vector: [1, 2, 4] }] });
    const dels = await Promise.all([db.delete('c', 'p'), db.delete('c', 'p')]);
    expect(dels.map((d) => d.deleted).sort()).toEqual([false, true]);
    const byIds = await Promise.all([db.deletePoints('c', { ids: ['q'] }), db.deletePoints('c', { ids: ['q'] })]);
    expect(byIds.map((d) => d.deleted).sort()).toEqual([0, 1]);
    await db.upsert('c', { points: [{ id: 'r', vector: [1, 2, 3] }] });
    // Writes made against c while a drop of it commits first: not_found, nothing answered from c.
    const [drop1, drop2, put, del, patch] = await Promise.allSettled([
      db.deleteCollection('c'), db.deleteCollection('c'),
      db.upsert('c', { points: [{ id: 's', vector: [1, 1, 1] }] }),
      db.delete('c', 'r'),
      db.setPayload('c', { points: [{ id: 'r', payload: { a: 1 } }] } as never),
    ]);
    const existed = [drop1, drop2].map((d) => (d.status === 'fulfilled' ? d.value.existed : d.reason));
    expect(existed.sort()).toEqual([false, true]);
    for (const w of [put, del, patch]) expect(w).toMatchObject({ status: 'rejected', reason: { code: 'not_found' } });
    expect((await db.listCollections()).collections).toEqual([]);
    await db.close();
  });
});
