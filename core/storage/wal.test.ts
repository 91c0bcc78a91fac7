import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import fc from 'fast-check';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Prng } from '../base/prng.js';
import { FaultyFileSystem, SimulatedCrash } from '../testing/faulty-fs.js';
import { TestKeyring } from '../testing/wal-fixtures.js';
import { NodeFileSystem, type FileHandle, type FileSystem } from './fs.js';
import { StorageCorruption } from './errors.js';
import { crc } from './format.js';
import { Wal, type WalRecord } from './wal.js';

const enc = (s: string) => new Uint8Array(Buffer.from(s));
const dec = (b: Uint8Array | null) => (b === null ? null : Buffer.from(b).toString());
const quiet = () => {};

async function collect(it: AsyncIterable<WalRecord>): Promise<WalRecord[]> {
  const out: WalRecord[] = [];
  for await (const r of it) out.push(r);
  return out;
}

describe('Wal round trip', () => {
  it('reads back every record from any retained seq, across rolled files and a reopen', async () => {
    await fc.assert(fc.asyncProperty(
      fc.array(fc.array(fc.tuple(fc.constantFrom('db', 'c1', 'c2'), fc.uint8Array({ maxLength: 300 })), { minLength: 1, maxLength: 8 }), { minLength: 1, maxLength: 6 }),
      fc.integer({ min: 1, max: 1000 }),
      async (batches, from) => {
        const fs = new FaultyFileSystem(1);
        fs.yieldEachOp = false;
        const keyring = new TestKeyring();
        const wal = await Wal.open(fs, '/d/wal', { keyring, log: quiet, segmentBytesMax: 600 });
        const written: [string, Uint8Array][] = [];
        for (const batch of batches) {
          const seqs = await Promise.all(batch.map(([k, b]) => wal.append(k, b)));
          expect(seqs).toEqual(batch.map((_, i) => written.length + i + 1));
          written.push(...batch);
        }
        expect(wal.lastSeq).toBe(written.length);
        const start = 1 + (from % written.length);
        const check = (got: WalRecord[]) => {
          expect(got.map((r) => r.seq)).toEqual(written.slice(start - 1).map((_, i) => start + i));
          got.forEach((r) => {
            expect(r.keyId).toBe(written[r.seq - 1][0]);
            expect(Buffer.from(r.body!).equals(Buffer.from(written[r.seq - 1][1]))).toBe(true);
          });
        };
        check(await collect(wal.readFrom(start)));
        await wal.close();
        const again = await Wal.open(fs, '/d/wal', { keyring, log: quiet, segmentBytesMax: 600 });
        check(await collect(again.readFrom(start)));
        expect(again.lastSeq).toBe(written.length);
        expect(await again.append('c1', enc('more'))).toBe(written.length + 1);
        await again.close();
      }), { numRuns: 60 });
  });

  it('gives a null body for a key that is gone, and truncateBefore drops whole files only', async () => {
    const fs = new FaultyFileSystem(2);
    const keyring = new TestKeyring();
    const wal = await Wal.open(fs, '/wal', { keyring, log: quiet, segmentBytesMax: 200 });
    for (let i = 1; i <= 20; i++) await wal.append(i % 2 ? 'c1' : 'c2', enc(`record ${i} `.padEnd(60, '.')));
    keyring.drop('c2');
    const all = await collect(wal.readFrom(1));
    expect(all.map((r) => (r.keyId === 'c2' ? r.body : dec(r.body)?.slice(0, 9)))).toEqual(
      all.map((r) => (r.keyId === 'c2' ? null : `record ${r.seq} `.slice(0, 9))));
    expect(fs.listFiles().length).toBeGreaterThan(3);
    await wal.truncateBefore(11);
    expect(wal.firstRetainedSeq).toBeLessThanOrEqual(11);
    expect(wal.firstRetainedSeq).toBeGreaterThan(1);
    expect((await collect(wal.readFrom(11))).map((r) => r.seq)).toEqual([11, 12, 13, 14, 15, 16, 17, 18, 19, 20]);
    await expect(collect(wal.readFrom(1))).rejects.toThrow(/no longer retained/);
    await wal.close();
    const again = await Wal.open(fs, '/wal', { keyring, log: quiet, segmentBytesMax: 200 });
    expect(again.firstRetainedSeq).toBe(wal.firstRetainedSeq);
    expect(again.lastSeq).toBe(20);
    await again.close();
  });
});

/** Counts fsyncs of the real file system. */
class CountingFs extends NodeFileSystem {
  fsyncs = 0;
  override async open(path: string, mode: 'read' | 'readwrite' | 'create'): Promise<FileHandle> {
    const h = await super.open(path, mode);
    const sync = h.sync.bind(h);
    h.sync = async () => { this.fsyncs++; await sync(); };
    return h;
  }
}

describe('Wal group commit on the real file system', () => {
  let dir = '';
  beforeEach(async () => { dir = await mkdtemp(join(tmpdir(), 'svc-wal-')); });
  afterEach(async () => { await rm(dir, { recursive: true, force: true }); });

  it('writes 64 appends issued together with one fsync, in call order', async () => {
    const fs = new CountingFs();
    const wal = await Wal.open(fs, join(dir, 'wal'), { keyring: new TestKeyring(), log: quiet });
    const before = fs.fsyncs;
    const resolved: number[] = [];
    const seqs = await Promise.all(Array.from({ length: 64 }, (_, i) =>
      wal.append('c1', enc(`r${i}`)).then((s) => { resolved.push(s); return s; })));
    expect(seqs).toEqual(Array.from({ length: 64 }, (_, i) => i + 1));
    expect(resolved).toEqual(seqs);
    // Issued in one synchronous run, they share one write + fsync (the flush starts a microtask later).
    expect(fs.fsyncs - before).toBe(1);
    // One at a time, each append needs its own fsync: the counter is real.
    const one = fs.fsyncs;
    for (let i = 0; i < 5; i++) await wal.append('c1', enc('x'));
    expect(fs.fsyncs - one).toBe(5);
    await wal.close();
    const again = await Wal.open(fs, join(dir, 'wal'), { keyring: new TestKeyring(), log: quiet });
    expect(again.lastSeq).toBe(69);
    await again.close();
  });
});

async function smallWal(fs: FaultyFileSystem, keyring: TestKeyring, n = 3): Promise<string> {
  const wal = await Wal.open(fs, '/wal', { keyring, log: quiet });
  for (let i = 1; i <= n; i++) await wal.append('c1', enc(`body-${i}`));
  await wal.close();
  return fs.listFiles()[0];
}

describe('Wal recovery', () => {
  it('truncates a torn final record and logs it', async () => {
    const fs = new FaultyFileSystem(3);
    const keyring = new TestKeyring();
    const file = await smallWal(fs, keyring);
    const full = fs.peek(file).length;
    const logs: unknown[] = [];
    for (const cut of [1, 5, 23, 24, 30]) {
      const copy = new FaultyFileSystem(3);
      const h = await copy.open('/x', 'create');
      await h.close();
      await copy.mkdir('/wal');
      const w = await copy.open(file, 'create');
      await w.write(fs.peek(file).subarray(0, full - cut), 0);
      await w.close();
      const wal = await Wal.open(copy, '/wal', { keyring, log: (m, d) => logs.push([m, d]) });
      expect(wal.lastSeq).toBe(2);
      expect(await wal.append('c1', enc('after'))).toBe(3);
      expect((await collect(wal.readFrom(1))).map((r) => dec(r.body))).toEqual(['body-1', 'body-2', 'after']);
      await wal.close();
    }
    expect(logs).toHaveLength(5);
    expect(JSON.stringify(logs[0])).toMatch(/torn/);
  });

  it('refuses damage inside committed data, naming the file and the offset', async () => {
    const fs = new FaultyFileSystem(4);
    const file = await smallWal(fs, new TestKeyring());
    fs.flipBit(file, (16 + 30) * 8);
    const err = await Wal.open(fs, '/wal', { keyring: new TestKeyring(), log: quiet }).catch((e) => e);
    expect(err).toBeInstanceOf(StorageCorruption);
    expect(err.message).toContain(file);
    expect(err.file).toBe(file);
    expect(err.offset).toBe(16);
    expect(err.code).toBe('internal');
  });

  /** Records 1..n, all synced, then `tail` appended unsynced: the file and each record's frame offset. */
  async function unsyncedTail(fs: FaultyFileSystem, keyring: TestKeyring, n: number, tail: number): Promise<{ file: string; at: number[] }> {
    const wal = await Wal.open(fs, '/wal', { keyring, log: quiet });
    for (let i = 1; i <= n; i++) await wal.append('c1', enc(`body-${i}`));
    await Promise.all(Array.from({ length: tail }, (_, i) => wal.append('c1', enc(`body-${n + i + 1}`), { sync: false })));
    const file = fs.listFiles()[0];
    const bytes = Buffer.from(fs.peek(file));
    // Every frame is its 24-byte header, the key id and the sealed body (read from the length field).
    const at: number[] = [];
    for (let o = 16; o < bytes.length; o += 24 + bytes.readUInt16LE(o + 20) + bytes.readUInt32LE(o + 4)) at.push(o);
    expect(at).toHaveLength(n + tail);
    // A process crash: nothing closes the log, nothing more is fsynced.
    fs.crash({ writes: 'keep' });
    fs.restart();
    return { file, at };
  }

  /** The three shapes a power loss leaves in an unsynced tail, at the record `k` (0-based) of `at`. */
  const damages: [string, (fs: FaultyFileSystem, file: string, at: number[], k: number) => void][] = [
    ['bytes flipped in the middle of a record', (fs, file, at, k) => fs.poke(file, at[k] + 30, enc('garbage!'))],
    ['a hole of zeros before more records', (fs, file, at, k) => fs.poke(file, at[k], new Uint8Array(at[k + 1] - at[k]))],
    ['a record cut short before more records', (fs, file, at, k) => {
      // The record's header is kept, its body replaced from its middle on by the next record's bytes.
      const bytes = fs.peek(file);
      const mid = at[k] + Math.floor((at[k + 1] - at[k]) / 2);
      fs.poke(file, mid, bytes.slice(at[k + 1], at[k + 1] + (at[k + 1] - mid)));
    }],
  ];

  it('a consensus member\'s log (damagedTailAfterSeq) cuts damage past the durable seq, with every record after it, and logs what it cut', async () => {
    for (const [what, damage] of damages) {
      const fs = new FaultyFileSystem(40);
      const keyring = new TestKeyring();
      const { file, at } = await unsyncedTail(fs, keyring, 3, 4);
      const size = fs.peek(file).length;
      damage(fs, file, at, 4);
      const logs: [string, Record<string, unknown> | undefined][] = [];
      const wal = await Wal.open(fs, '/wal', { keyring, log: (m, d) => logs.push([m, d]), damagedTailAfterSeq: 3 });
      expect(wal.lastSeq, what).toBe(4);
      expect((await collect(wal.readFrom(1))).map((r) => dec(r.body)), what).toEqual(['body-1', 'body-2', 'body-3', 'body-4']);
      expect(logs, what).toHaveLength(1);
      expect(logs[0][0], what).toMatch(/cutting a damaged unsynced tail/);
      expect(logs[0][1], what).toMatchObject({ file, offset: at[4], bytes: size - at[4], from_seq: 5 });
      expect(await wal.append('c1', enc('after')), what).toBe(5);
      await wal.close();
      // The cut is durable: the next open finds a clean log.
      const again = await Wal.open(fs, '/wal', { keyring, log: (m) => { throw new Error(`logged ${m}`); }, damagedTailAfterSeq: 3 });
      expect((await collect(again.readFrom(1))).map((r) => dec(r.body)), what).toEqual(['body-1', 'body-2', 'body-3', 'body-4', 'after']);
      await again.close();
    }
  });

  it('a single node refuses the same damage (not a torn last record), and so does a consensus member\'s at or below its durable seq', async () => {
    for (const [what, damage] of damages) {
      for (const cutAfter of [undefined, 5, 8]) {
        const fs = new FaultyFileSystem(41);
        const keyring = new TestKeyring();
        const { file, at } = await unsyncedTail(fs, keyring, 3, 4);
        damage(fs, file, at, 4);
        const err = await Wal.open(fs, '/wal', { keyring, log: quiet, ...(cutAfter !== undefined ? { damagedTailAfterSeq: cutAfter } : {}) }).catch((e) => e);
        expect(err, `${what}, after ${cutAfter}`).toBeInstanceOf(StorageCorruption);
        expect(err.offset, `${what}, after ${cutAfter}`).toBe(at[4]);
      }
    }
  });

  it('a consensus member\'s log still refuses damage in a file before the last (fsynced whole before the next began)', async () => {
    const fs = new FaultyFileSystem(42);
    const keyring = new TestKeyring();
    const wal = await Wal.open(fs, '/wal', { keyring, log: quiet, segmentBytesMax: 200 });
    for (let i = 1; i <= 12; i++) await wal.append('c1', enc(`body-${i}`), { sync: false });
    await wal.close();
    const files = fs.listFiles();
    expect(files.length).toBeGreaterThan(2);
    const first = Buffer.from(fs.peek(files[0]));
    fs.poke(files[0], first.length - 10, enc('xx'));
    const err = await Wal.open(fs, '/wal', { keyring, log: quiet, segmentBytesMax: 200, damagedTailAfterSeq: 0 }).catch((e) => e);
    expect(err).toBeInstanceOf(StorageCorruption);
    expect(err.file).toBe(files[0]);
  });

  it('detects every single-bit flip of a small log file', async () => {
    const fs = new FaultyFileSystem(5);
    fs.yieldEachOp = false;
    const keyring = new TestKeyring();
    const file = await smallWal(fs, keyring, 2);
    const bits = fs.peek(file).length * 8;
    let detected = 0;
    for (let bit = 0; bit < bits; bit++) {
      fs.flipBit(file, bit);
      const outcome = await Wal.open(fs, '/wal', { keyring, log: quiet })
        .then(async (w) => { await collect(w.readFrom(1)); await w.close(); return 'opened'; }, (e) => e);
      if (outcome instanceof StorageCorruption) detected++;
      fs.flipBit(file, bit);
    }
    expect(detected).toBe(bits);
  });

  it('rejects a record copied to another position (checksums recomputed)', async () => {
    const fs = new FaultyFileSystem(6);
    const keyring = new TestKeyring();
    const file = await smallWal(fs, keyring, 3);
    const bytes = Buffer.from(fs.peek(file));
    const recLen = (bytes.length - 16) / 3;
    // Record 1 goes where record 3 was, with its seq rewritten to 3 and both checksums fixed.
    const moved = Buffer.from(bytes.subarray(16, 16 + recLen));
    moved.writeBigUInt64LE(3n, 8);
    moved.writeUInt32LE(crc(moved.subarray(4, 24)), 0);
    fs.poke(file, 16 + 2 * recLen, moved);
    const wal = await Wal.open(fs, '/wal', { keyring, log: quiet });
    const err = await collect(wal.readFrom(1)).catch((e) => e);
    expect(err).toBeInstanceOf(StorageCorruption);
    expect(err.message).toMatch(/seq 3 failed authentication/);
    await wal.close();
  });
});

describe('Wal under simulated power loss', () => {
  it('recovers every acknowledged append at 240 crash points', async () => {
    let crashedAfterAcks = 0;
    for (let point = 0; point < 240; point++) {
      const seed = 1000 + point;
      const fs = new FaultyFileSystem(seed);
      const prng = new Prng(seed);
      const keyring = new TestKeyring();
      const acked = new Map<number, string>();
      const opts = { keyring, log: quiet, segmentBytesMax: 400 };
      fs.crashAfter(1 + (point % 60), {});
      try {
        const wal = await Wal.open(fs, '/db/wal', opts);
        for (let round = 0; round < 20; round++) {
          const n = 1 + prng.int(6);
          await Promise.all(Array.from({ length: n }, (_, i) => {
            const body = `s${seed}r${round}i${i}`;
            return wal.append('c1', enc(body)).then((seq) => { acked.set(seq, body); });
          }));
        }
      } catch (e) {
        if (!(e instanceof SimulatedCrash)) throw new Error(`seed ${seed}: ${String(e)}`);
      }
      if (fs.crashed && acked.size > 0) crashedAfterAcks++;
      if (!fs.crashed) fs.crash();
      fs.restart();
      const wal = await Wal.open(fs, '/db/wal', opts).catch((e) => { throw new Error(`seed ${seed}: reopen failed: ${String(e)}`); });
      const got = new Map((await collect(wal.readFrom(1))).map((r) => [r.seq, dec(r.body)]));
      for (const [seq, body] of acked) expect(got.get(seq), `seed ${seed} seq ${seq}`).toBe(body);
      expect(wal.lastSeq).toBeGreaterThanOrEqual(acked.size);
      expect(await wal.append('c1', enc('next'))).toBe(wal.lastSeq);
      await wal.close();
    }
    // The crash points really land among acknowledged appends, not only before the first one.
    expect(crashedAfterAcks).toBeGreaterThan(150);
  });

  it('unsynced appends: written at once, durable with the next fsync (a synced group or sync()); a crash keeps a prefix, at 240 crash points', async () => {
    let lostUnsynced = 0;
    for (let point = 0; point < 240; point++) {
      const seed = 5000 + point;
      const fs = new FaultyFileSystem(seed);
      const prng = new Prng(seed);
      const keyring = new TestKeyring();
      const written = new Map<number, string>();
      /** Every seq at or below it is durable (a synced append or a sync() resolved after it). */
      let durableThrough = 0;
      const opts = { keyring, log: quiet, segmentBytesMax: 400 };
      fs.crashAfter(1 + (point % 80), {});
      try {
        const wal = await Wal.open(fs, '/db/wal', opts);
        for (let round = 0; round < 20; round++) {
          const n = 1 + prng.int(6);
          const syncedRound = prng.int(4) === 0;
          const before = wal.lastSeq;
          const seqs = await Promise.all(Array.from({ length: n }, (_, i) => {
            const body = `s${seed}r${round}i${i}`;
            const sync = syncedRound && i === n - 1;
            // Seqs follow call order; a record may reach the disk before the crash lets its promise resolve.
            written.set(written.size + 1, body);
            return wal.append('c1', enc(body), { sync });
          }));
          if (syncedRound) {
            durableThrough = seqs[seqs.length - 1];
            expect(wal.lastSeq).toBe(durableThrough);
          } else {
            // Readers see durable records only (a file rolled over is fsynced before the next starts).
            expect(wal.lastSeq).toBeGreaterThanOrEqual(before);
            expect(wal.lastSeq).toBeLessThan(seqs[0]);
            durableThrough = wal.lastSeq;
          }
          if (prng.int(5) === 0) {
            const last = written.size;
            await wal.sync();
            durableThrough = last;
            expect(wal.lastSeq).toBe(last);
          }
        }
      } catch (e) {
        if (!(e instanceof SimulatedCrash)) throw new Error(`seed ${seed}: ${String(e)}`);
      }
      if (!fs.crashed) fs.crash();
      fs.restart();
      const wal = await Wal.open(fs, '/db/wal', opts).catch((e) => { throw new Error(`seed ${seed}: reopen failed: ${String(e)}`); });
      const got = await collect(wal.readFrom(1));
      // A prefix of what was written: seqs 1..n, each with its own body, and at least every durable one.
      expect(got.map((r) => r.seq), `seed ${seed}`).toEqual(got.map((_, i) => i + 1));
      for (const r of got) expect(dec(r.body), `seed ${seed} seq ${r.seq}`).toBe(written.get(r.seq));
      expect(got.length, `seed ${seed}`).toBeGreaterThanOrEqual(durableThrough);
      if (got.length < written.size) lostUnsynced++;
      expect(await wal.append('c1', enc('next'))).toBe(got.length + 1);
      await wal.close();
    }
    // Some crashes really took unsynced records.
    expect(lostUnsynced).toBeGreaterThan(20);
  });

  it('sync() is served while unsynced appends keep arriving behind it (it never waits for a quiet log)', async () => {
    const fs = new FaultyFileSystem(8);
    const wal = await Wal.open(fs, '/db/wal', { keyring: new TestKeyring(), log: quiet });
    let stop = false;
    let n = 0;
    const pump = async (): Promise<void> => {
      while (!stop) await Promise.all([0, 1, 2].map(() => wal.append('c1', enc(`x${n++}`), { sync: false })));
    };
    const pumps = [pump(), pump(), pump(), pump()];
    await new Promise((r) => setTimeout(r, 20));
    const issued = n;
    const synced = await Promise.race([wal.sync().then(() => true), new Promise<boolean>((r) => setTimeout(() => r(false), 3000))]);
    const during = n;
    stop = true;
    await Promise.all(pumps);
    expect(synced).toBe(true);
    expect(wal.lastSeq).toBeGreaterThanOrEqual(issued);
    expect(n).toBeGreaterThan(issued);
    expect(during).toBeGreaterThan(issued);
    await wal.close();
  });

  it('a clean close makes unsynced appends durable', async () => {
    const fs = new FaultyFileSystem(7);
    const opts = { keyring: new TestKeyring(), log: quiet };
    let wal = await Wal.open(fs, '/db/wal', opts);
    await Promise.all([1, 2, 3].map((i) => wal.append('c1', enc(`u${i}`), { sync: false })));
    expect(wal.lastSeq).toBe(0);
    await wal.close();
    fs.crash({ writes: 'drop' });
    fs.restart();
    wal = await Wal.open(fs, '/db/wal', opts);
    expect((await collect(wal.readFrom(1))).map((r) => dec(r.body))).toEqual(['u1', 'u2', 'u3']);
    await wal.close();
  });
});

export type { FileSystem };

describe('Wal roll', () => {
  const walFiles = (fs: FaultyFileSystem) => fs.listFiles().filter((f) => f.startsWith('/r/wal/'));
  const named = (seq: number) => `/r/wal/${String(seq).padStart(20, '0')}.wal`;

  it('starts the next file at the next seq; truncation then deletes every record; a reopen and appends carry on', async () => {
    const fs = new FaultyFileSystem(71);
    const keyring = new TestKeyring();
    const opts = { keyring, log: quiet };
    const wal = await Wal.open(fs, '/r/wal', opts);
    // A roll of a file with no record does nothing.
    await wal.roll();
    expect(walFiles(fs)).toEqual([named(1)]);
    for (let i = 1; i <= 5; i++) await wal.append(i % 2 ? 'db' : 'c1', enc(`r${i}`));
    // An unsynced append is made durable by the roll (the file left is fsynced before the next starts).
    await wal.append('c1', enc('r6'), { sync: false });
    await wal.roll();
    expect(walFiles(fs)).toEqual([named(1), named(7)]);
    expect(wal.lastSeq).toBe(6);
    await wal.roll();
    expect(walFiles(fs)).toEqual([named(1), named(7)]);
    expect((await collect(wal.readFrom(1))).map((r) => dec(r.body))).toEqual(['r1', 'r2', 'r3', 'r4', 'r5', 'r6']);
    await wal.truncateBefore(7);
    expect(walFiles(fs)).toEqual([named(7)]);
    expect(wal.firstRetainedSeq).toBe(7);
    expect(await collect(wal.readFrom(7))).toEqual([]);
    // Appends issued while a roll runs wait for it and land in the new file, in order.
    await wal.append('c1', enc('r7'));
    const rolling = wal.roll();
    // Once the group of r7 is done (every file operation here yields to the event loop), the roll is under way.
    await new Promise((r) => setImmediate(r));
    const [, s8, s9] = await Promise.all([rolling, wal.append('db', enc('r8')), wal.append('c1', enc('r9'))]);
    expect([s8, s9]).toEqual([8, 9]);
    expect(walFiles(fs)).toEqual([named(7), named(8)]);
    await wal.roll();
    expect(walFiles(fs)).toEqual([named(7), named(8), named(10)]);
    await wal.close();

    // Reopened: the last file holds only its header, and its name is the next seq.
    const again = await Wal.open(fs, '/r/wal', opts);
    expect(again.firstRetainedSeq).toBe(7);
    expect(again.lastSeq).toBe(9);
    expect(await again.append('c1', enc('r10'))).toBe(10);
    expect((await collect(again.readFrom(7))).map((r) => [r.seq, dec(r.body)])).toEqual([[7, 'r7'], [8, 'r8'], [9, 'r9'], [10, 'r10']]);
    await again.truncateBefore(10);
    expect(walFiles(fs)).toEqual([named(10)]);
    await again.close();
    const third = await Wal.open(fs, '/r/wal', opts);
    expect([third.firstRetainedSeq, third.lastSeq]).toEqual([10, 10]);
    expect(await third.append('c1', enc('r11'))).toBe(11);
    await third.close();
  });

  it('refuses once closed', async () => {
    const fs = new FaultyFileSystem(72);
    const wal = await Wal.open(fs, '/r/wal', { keyring: new TestKeyring(), log: quiet });
    await wal.append('c1', enc('x'));
    await wal.close();
    await expect(wal.roll()).rejects.toMatchObject({ code: 'not_ready' });
  });

  it('a power loss at any point of a roll keeps every record written before it, and seqs carry on after the reopen', async () => {
    let rolled = 0;
    for (let point = 1; point <= 12; point++) {
      for (const writes of ['random', 'keep', 'drop'] as const) {
        const seed = 7000 + point;
        const fs = new FaultyFileSystem(seed);
        const keyring = new TestKeyring();
        const opts = { keyring, log: quiet };
        const wal = await Wal.open(fs, '/r/wal', opts);
        for (let i = 1; i <= 4; i++) await wal.append('c1', enc(`r${i}`));
        // The last one unsynced: the roll makes it durable before the next file starts.
        await wal.append('c1', enc('r5'), { sync: false });
        fs.crashAfter(point, { writes, namespace: 'random' });
        let done = false;
        try {
          await wal.roll();
          done = true;
        } catch (e) {
          if (!(e instanceof SimulatedCrash)) throw new Error(`seed ${seed}: ${String(e)}`);
        }
        if (done) rolled++;
        if (!fs.crashed) fs.crash({ writes, namespace: 'random' });
        fs.restart();
        const again = await Wal.open(fs, '/r/wal', opts).catch((e) => { throw new Error(`seed ${seed} ${writes}: reopen failed: ${String(e)}`); });
        const got = (await collect(again.readFrom(again.firstRetainedSeq))).map((r) => dec(r.body));
        // r5 may go with a crash before the roll's fsync; once the roll returned it is durable.
        expect(got.slice(0, 4), `seed ${seed} ${writes}`).toEqual(['r1', 'r2', 'r3', 'r4']);
        if (done) expect(got, `seed ${seed} ${writes}`).toEqual(['r1', 'r2', 'r3', 'r4', 'r5']);
        const last = again.lastSeq;
        expect(last).toBe(got.length);
        expect(await again.append('c1', enc('next'))).toBe(last + 1);
        await again.close();
        const third = await Wal.open(fs, '/r/wal', opts);
        expect(third.lastSeq, `seed ${seed} ${writes}`).toBe(last + 1);
        expect((await collect(third.readFrom(third.firstRetainedSeq))).map((r) => dec(r.body)).at(-1)).toBe('next');
        await third.close();
      }
    }
    // Some crash points land after the roll finished (a last file with its header only).
    expect(rolled).toBeGreaterThan(0);
  });
});
