import { getEventListeners } from 'node:events';
import { describe, expect, it } from 'vitest';
import type { SvcError } from '../base/errors.js';
import { FaultyFileSystem } from '../testing/faulty-fs.js';
import { TestKeyring } from '../testing/wal-fixtures.js';
import type { CommitLog, LogRecord } from './commit-log.js';
import { Wal, WAL_INDEX_STRIDE_BYTES, type WalOptions } from './wal.js';

// The WAL as its readers see it: waitFor, the seq -> position index, retention holds. On the seeded
// faulty file system (its stats count the bytes a reader read).

const quiet = () => {};
const body = (n: number, bytes = 100) => new Uint8Array(bytes).fill(n & 0xff);
const tick = () => new Promise<void>((r) => setImmediate(r));

async function collect(it: AsyncIterable<LogRecord>): Promise<LogRecord[]> {
  const out: LogRecord[] = [];
  for await (const r of it) out.push(r);
  return out;
}

async function openWal(seed: number, opts: Partial<WalOptions> = {}, keyring = new TestKeyring()): Promise<{ fs: FaultyFileSystem; wal: Wal; keyring: TestKeyring }> {
  const fs = new FaultyFileSystem(seed);
  fs.yieldEachOp = false;
  const wal = await Wal.open(fs, '/d/wal', { keyring, log: quiet, ...opts });
  return { fs, wal, keyring };
}

/** Appends `n` records in batches (group commits), keyed 'c1'. */
async function fill(wal: Wal, n: number, bytes = 100): Promise<void> {
  for (let i = 0; i < n; i += 500) {
    await Promise.all(Array.from({ length: Math.min(500, n - i) }, (_, j) => wal.append('c1', body(i + j, bytes))));
  }
}

describe('CommitLog.waitFor', () => {
  it('resolves when the group commit makes the seq durable, not before and without polling', async () => {
    const { wal } = await openWal(1);
    const log: CommitLog = wal;
    let woke = false;
    const waiting = log.waitFor(2).then(() => { woke = true; });
    await wal.append('c1', body(1));
    await tick();
    expect(woke).toBe(false);
    await wal.append('c1', body(2));
    // One turn of the event loop after the commit: a timer-driven check would not have run yet.
    await tick();
    expect(woke).toBe(true);
    await waiting;
    // Already durable: at once.
    await log.waitFor(1);
    expect(wal.waiting).toBe(0);
    await wal.close();
  });

  it('resolves at once on abort and on close', async () => {
    const { wal } = await openWal(2);
    const ac = new AbortController();
    const aborted = wal.waitFor(10, ac.signal);
    const closed = wal.waitFor(10);
    expect(wal.waiting).toBe(2);
    ac.abort();
    await aborted;
    expect(wal.waiting).toBe(1);
    await wal.close();
    await closed;
    expect(wal.waiting).toBe(0);
    await wal.waitFor(99); // after close: at once
  });

  it('leaves no waiter and no abort listener behind: 10,000 aborted waits, and 300 commits on one signal', async () => {
    const { wal } = await openWal(3);
    const controllers = Array.from({ length: 10_000 }, () => new AbortController());
    const waits = controllers.map((ac) => wal.waitFor(1_000_000, ac.signal));
    expect(wal.waiting).toBe(10_000);
    for (const ac of controllers) ac.abort();
    await Promise.all(waits);
    expect(wal.waiting).toBe(0);
    expect(controllers.every((ac) => getEventListeners(ac.signal, 'abort').length === 0)).toBe(true);

    // A stream's one long-lived signal, across many waits each ended by a commit.
    const stream = new AbortController();
    for (let seq = 1; seq <= 300; seq++) {
      const w = wal.waitFor(seq, stream.signal);
      await wal.append('c1', body(seq));
      await w;
    }
    expect(getEventListeners(stream.signal, 'abort')).toHaveLength(0);
    expect(wal.waiting).toBe(0);
    await wal.close();
  });
});

describe('CommitLog.readFrom index', () => {
  it('resumes from a late seq reading a bounded number of bytes, before and after a reopen', async () => {
    const { fs, wal, keyring } = await openWal(4, { segmentBytesMax: 2 << 20 });
    const n = 20_000;
    await fill(wal, n);
    expect(wal.retainedFiles().length).toBeGreaterThan(1);
    const check = async (w: Wal): Promise<void> => {
      const from = n - 10;
      const before = fs.stats.readBytes;
      const got = await collect(w.readFrom(from));
      const read = fs.stats.readBytes - before;
      expect(got.map((r) => r.seq)).toEqual(Array.from({ length: 11 }, (_, i) => from + i));
      expect(Buffer.from(got[0].body!).equals(Buffer.from(body(from - 1)))).toBe(true);
      // From the index mark before `from` to the end: within one stride (the last file is over 1 MiB).
      expect(read).toBeLessThan(WAL_INDEX_STRIDE_BYTES + 4096);
      // Reads from anywhere, marks or not, start at the right record.
      for (let seq = 1; seq <= n; seq += 997) {
        const first = (await w.readFrom(seq)[Symbol.asyncIterator]().next()).value as LogRecord;
        expect(first.seq).toBe(seq);
        expect(Buffer.from(first.body!).equals(Buffer.from(body(seq - 1)))).toBe(true);
      }
    };
    await check(wal);
    await wal.close();
    const again = await Wal.open(fs, '/d/wal', { keyring, log: quiet, segmentBytesMax: 2 << 20 });
    await check(again);
    await again.close();
  });
});

describe('CommitLog retention holds', () => {
  const FILE_BYTES = 4096;

  /** A log of 300 records of ~150 bytes over ~12 files. */
  async function filled(seed: number, retainBytesMax?: number): Promise<Wal> {
    const { wal } = await openWal(seed, { segmentBytesMax: FILE_BYTES, ...(retainBytesMax !== undefined ? { retainBytesMax } : {}) });
    for (let i = 0; i < 300; i++) await wal.append('c1', body(i));
    return wal;
  }

  it('without a hold, truncation is as before: every file wholly below the seq goes', async () => {
    const wal = await filled(5);
    await wal.truncateBefore(200);
    const files = wal.retainedFiles();
    expect(wal.firstRetainedSeq).toBeLessThanOrEqual(200);
    expect(Number(files[1].name.slice(0, 20))).toBeGreaterThan(200);
    await wal.close();
  });

  it('a hold keeps the files from its floor; advanced or released, they go at the next truncation', async () => {
    const wal = await filled(6);
    const lost: SvcError[] = [];
    const hold = wal.hold(20, (e) => lost.push(e));
    await wal.truncateBefore(200);
    expect(wal.firstRetainedSeq).toBeLessThanOrEqual(20);
    expect((await collect(wal.readFrom(20))).length).toBe(281);
    hold.advance(120);
    hold.advance(50); // never backwards
    expect(hold.floorSeq).toBe(120);
    await wal.truncateBefore(200);
    expect(wal.firstRetainedSeq).toBeGreaterThan(20);
    expect(wal.firstRetainedSeq).toBeLessThanOrEqual(120);
    hold.release();
    await wal.truncateBefore(200);
    expect(Number(wal.retainedFiles()[1].name.slice(0, 20))).toBeGreaterThan(200);
    expect(lost).toEqual([]);
    expect(hold.lost).toBeNull();
    await wal.close();
  });

  it('past retainBytesMax the oldest files go anyway and the holds that needed them are lost, with the reason', async () => {
    const wal = await filled(7, 3 * FILE_BYTES);
    const lost: SvcError[] = [];
    const slow = wal.hold(20, (e) => lost.push(e));
    const near = wal.hold(180);
    await wal.truncateBefore(200);
    expect(wal.firstRetainedSeq).toBeGreaterThan(20);
    expect(wal.firstRetainedSeq).toBeLessThanOrEqual(180);
    // What stays below the checkpoint's seq for the holds is within the bound.
    const kept = wal.retainedFiles().filter((f, i, all) => i + 1 < all.length && Number(all[i + 1].name.slice(0, 20)) <= 200);
    expect(kept.reduce((s, f) => s + f.bytes, 0)).toBeLessThanOrEqual(3 * FILE_BYTES);
    expect(lost).toHaveLength(1);
    expect(slow.lost).toBe(lost[0]);
    expect(lost[0]).toMatchObject({ code: 'unavailable', detail: { reason: 'retention_exceeded' } });
    expect(near.lost).toBeNull();
    // The lost hold is gone: it no longer keeps anything.
    slow.release();
    expect(wal.holdCount).toBe(1);
    await expect(collect(wal.readFrom(20))).rejects.toMatchObject({ code: 'not_found' });
    expect(() => wal.hold(20)).toThrow(/no longer retained/);
    await wal.close();
  });
});

describe('CommitLog tail cache (readers holding the log)', () => {
  it('a caught-up reader gets the records just made durable without reading the files, the same as from disk', async () => {
    const { fs, wal } = await openWal(21);
    await fill(wal, 50);
    const hold = wal.hold(wal.lastSeq + 1);
    await fill(wal, 120, 300);
    const before = fs.stats.readBytes;
    const cached = await collect(wal.readFrom(51));
    expect(fs.stats.readBytes).toBe(before); // memory only
    expect(cached.map((r) => r.seq)).toEqual(Array.from({ length: 120 }, (_, i) => 51 + i));
    hold.release();
    await wal.append('c1', body(1)); // no reader holds the log: the cache empties
    const disk = await collect(wal.readFrom(51));
    expect(fs.stats.readBytes).toBeGreaterThan(before);
    const plain = (rs: LogRecord[]) => rs.map((r) => ({ seq: r.seq, keyId: r.keyId, body: r.body === null ? null : Buffer.from(r.body).toString('hex') }));
    expect(plain(disk.slice(0, 120))).toEqual(plain(cached));
    await wal.close();
  });

  it('keeps at most tailCacheBytes; older records, and a reader suspended while they go, continue from disk', async () => {
    const { wal } = await openWal(22, { tailCacheBytes: 10_000 });
    const hold = wal.hold(1);
    await fill(wal, 20, 1000);
    const seen: number[] = [];
    // A reader in the cached part, suspended while many more records push its place out of the cache.
    for await (const r of wal.readFrom(12)) {
      seen.push(r.seq);
      if (r.seq === 13) await fill(wal, 40, 1000);
    }
    // It stopped where the cache no longer held its next record, without a gap or a repeat...
    expect(seen).toEqual(Array.from({ length: seen.length }, (_, i) => 12 + i));
    // ...and reading on from there (from disk, then memory) gives the rest, in order.
    const rest = await collect(wal.readFrom(seen[seen.length - 1] + 1));
    expect([...seen, ...rest.map((r) => r.seq)]).toEqual(Array.from({ length: 60 - 11 }, (_, i) => 12 + i));
    hold.release();
    await wal.close();
  });

  it('a record whose key is gone reads as null from memory too, and want filters', async () => {
    const keyring = new TestKeyring();
    const { wal } = await openWal(23, {}, keyring);
    const hold = wal.hold(1);
    await wal.append('c1', body(1));
    await wal.append('c2', body(2));
    keyring.drop('c2');
    const all = await collect(wal.readFrom(1));
    expect(all.map((r) => [r.seq, r.keyId, r.body === null])).toEqual([[1, 'c1', false], [2, 'c2', true]]);
    expect((await collect(wal.readFrom(1, { want: (keyId) => keyId === 'c2' }))).map((r) => r.seq)).toEqual([2]);
    hold.release();
    await wal.close();
  });
});
