import { assert } from '../base/assert.js';
import { SvcError } from '../base/errors.js';
import type { Sealer } from '../crypto/sealer.js';
import { LogHold, type CommitLog, type LogRecord, type RetentionHold } from './commit-log.js';
import { StorageCorruption } from './errors.js';
import { ChunkReader, FILE_HEADER_BYTES, aad, crc, fileHeader } from './format.js';
import { joinPath, mkdirDurable, type FileHandle, type FileSystem } from './fs.js';

/**
 * The write-ahead log: one sequenced commit log for the whole database. A record is a plaintext frame
 * header (checksums, length, seq, key id) and a body sealed with the key of `keyId` (a collection uid,
 * or 'db'), AAD = (format version, 'wal', keyId, seq), so a record copied elsewhere fails to open.
 *
 * Files: `<dir>/<first seq, 20 digits>.wal`, each a 16-byte header then frames; the next file starts at
 * segmentBytesMax, or at once by roll(), and each is fsynced before the next begins. Appends are group
 * committed: those issued in one synchronous run go out together, and whatever arrives while an fsync
 * is in flight goes out in the next single write + fsync.
 *
 * An append may be unsynced (`{ sync: false }`: a consensus member's applied writes, whose durable record
 * is the consensus log): written with its group but not fsynced, it resolves once written. It becomes
 * durable with the next fsync, of a synced append's group or of `sync()`; until then a power loss may
 * take it, and with it every record after it (the file is a prefix after any crash: recovery cuts at the
 * first frame that does not check). A process crash (kill -9) loses nothing written. Readers (`readFrom`,
 * `waitFor`, `lastSeq`) see durable records only; while a reader holds the log every group is fsynced.
 *
 * Damage at open: a record cut short by the end of the last file, or a zero-filled end of it, is a torn
 * write and cut off (the last group's write, never acknowledged as durable). Any other damage refuses to
 * open: where every record was fsynced before it was acknowledged, it is a lost acknowledged write.
 * A consensus member's log (`damagedTailAfterSeq`) instead cuts damage of any kind (garbage, a hole of
 * zeros before more records) in its last file past the last seq its data directory knows durable: a power
 * loss leaves such damage in an unsynced tail, and every record there is in the consensus log, which the
 * member replays after the position its database kept.
 *
 * Readers (replication) see it as a CommitLog (commit-log.ts): `readFrom` finds the file by its name and
 * the position in it from a sparse in-memory index (one mark every WAL_INDEX_STRIDE_BYTES, made as
 * records are appended and as files are scanned at open); `waitFor` is woken by the group commit; a
 * RetentionHold keeps files that truncation would delete, within `retainBytesMax`.
 */

export interface Keyring {
  sealerFor(keyId: string): Sealer | undefined;
}

export type StorageLog = (message: string, detail?: Record<string, unknown>) => void;

export interface WalOptions {
  keyring: Keyring;
  log: StorageLog;
  /** A file is rolled (a new one started) once it reaches this size; whole files are the unit of truncation. */
  segmentBytesMax?: number;
  /**
   * Most bytes of files kept only for retention holds (files every checkpoint is past, which a connected
   * follower has not read yet). Past it the oldest go and their holds are lost. Default 1 GiB.
   */
  retainBytesMax?: number;
  /**
   * Most bytes of the last durable records' bodies kept in memory for readers holding the log (default
   * 64 MiB; 0 turns it off). Nothing is kept while no reader holds the log.
   */
  tailCacheBytes?: number;
  /**
   * A consensus member's (issue 17): damage of any kind in the last file at a record past this seq is cut
   * off at open, with every record after it, instead of refused (a warning names the bytes and the first
   * seq cut). The caller passes the last seq it knows durable (its manifest names only fsynced seqs) and
   * holds every record past it elsewhere (the consensus log). Files before the last are always whole:
   * each was fsynced before the next began, so damage there still refuses. Default: refuse (a single node).
   */
  damagedTailAfterSeq?: number;
}

export type WalRecord = LogRecord;

/**
 * A file rolls past this. Every open checks every retained file (the active one is always kept, and older
 * ones until every checkpoint is past them), so this bounds what an open scans beyond the checkpoints:
 * 16 MiB: a few tenths of a second of checksums here.
 */
export const WAL_SEGMENT_BYTES_DEFAULT = 16 << 20;
/** Default of WalOptions.tailCacheBytes. */
export const WAL_TAIL_CACHE_BYTES_DEFAULT = 64 << 20;
/** Default of WalOptions.retainBytesMax (SVC_REPLICATION_RETAIN_BYTES). */
export const WAL_RETAIN_BYTES_DEFAULT = 1 << 30;
/** A resume reads at most about this much of a file before its first wanted record (plus one read chunk). */
export const WAL_INDEX_STRIDE_BYTES = 256 << 10;
/** Pending waitFor calls; each follower stream has at most one. */
const WAITERS_MAX = 1 << 16;
/** Retention holds; each follower stream has one. */
const HOLDS_MAX = 1 << 12;
const FILE_MAGIC = Buffer.from('SVCWAL\0\x01', 'latin1');
const FRAME_HEADER_BYTES = 24;
const GROUP_RECORDS_MAX = 8192;
const GROUP_BYTES_MAX = 16 << 20;
const RECORD_BYTES_MAX = 1 << 30;

const fileName = (firstSeq: number): string => `${String(firstSeq).padStart(20, '0')}.wal`;
const FILE_RE = /^(\d{20})\.wal$/;

const walHeader = (): Buffer => fileHeader(FILE_MAGIC);

function recordAad(keyId: string, seq: number): Uint8Array {
  return aad('wal', [keyId, seq]);
}

/** Frame: headerCrc u32 | sealedLen u32 | seq u64 | bodyCrc u32 | keyIdLen u16 | 0 u16 | keyId | sealed. */
function encodeFrame(seq: number, keyId: string, sealed: Uint8Array): Buffer {
  const key = Buffer.from(keyId, 'utf8');
  assert(key.length <= 0xffff, 'key id fits a u16');
  const b = Buffer.allocUnsafe(FRAME_HEADER_BYTES + key.length + sealed.length);
  b.writeUInt32LE(sealed.length, 4);
  b.writeBigUInt64LE(BigInt(seq), 8);
  key.copy(b, FRAME_HEADER_BYTES);
  b.set(sealed, FRAME_HEADER_BYTES + key.length);
  b.writeUInt32LE(crc(b.subarray(FRAME_HEADER_BYTES)), 16);
  b.writeUInt16LE(key.length, 20);
  b.writeUInt16LE(0, 22);
  b.writeUInt32LE(crc(b.subarray(4, FRAME_HEADER_BYTES)), 0);
  return b;
}

interface FrameHeader {
  sealedLen: number;
  seq: number;
  bodyCrc: number;
  keyIdLen: number;
}

function decodeFrameHeader(h: Uint8Array): FrameHeader | null {
  const b = Buffer.isBuffer(h) ? h : Buffer.from(h.buffer, h.byteOffset, h.byteLength);
  if (b.readUInt32LE(0) !== crc(b.subarray(4, FRAME_HEADER_BYTES)) || b.readUInt16LE(22) !== 0) return null;
  return { sealedLen: b.readUInt32LE(4), seq: Number(b.readBigUInt64LE(8)), bodyCrc: b.readUInt32LE(16), keyIdLen: b.readUInt16LE(20) };
}

interface ScannedRecord {
  seq: number;
  keyId: string;
  sealed: Uint8Array;
  offset: number;
}

type ScanEnd = { kind: 'clean'; end: number } | { kind: 'torn' | 'damaged'; end: number; reason: string };

/**
 * Walks the frames of one file, checking both checksums and the seq chain. A frame cut short by the end
 * of the last file is a torn write (returned); any other damage throws StorageCorruption, except in the
 * last file at a record past `cutAfterSeq` (WalOptions.damagedTailAfterSeq), where it is returned too.
 */
async function* scanFrames(
  handle: FileHandle, path: string, firstSeq: number, isLast: boolean, limitBytes?: number, from?: IndexMark, cutAfterSeq?: number,
): AsyncGenerator<ScannedRecord, ScanEnd & { nextSeq: number }> {
  const bytes = limitBytes ?? (await handle.size());
  const reader = new ChunkReader((p, l) => handle.read(p, l), bytes);
  // Starting inside the file (an index mark): the header alone, not a read chunk from 0.
  const head = from === undefined ? await reader.get(0, FILE_HEADER_BYTES) : await handle.read(0, FILE_HEADER_BYTES);
  if (head.length < FILE_HEADER_BYTES) {
    if (isLast) return { kind: 'torn', end: 0, reason: 'file header incomplete', nextSeq: firstSeq };
    throw new StorageCorruption(path, 0, 'file header incomplete');
  }
  if (!Buffer.from(head).equals(walHeader())) throw new StorageCorruption(path, 0, 'bad file header');
  let offset = from?.offset ?? FILE_HEADER_BYTES;
  let seq = from?.seq ?? firstSeq;
  const torn = (reason: string): ScanEnd & { nextSeq: number } => {
    if (!isLast) throw new StorageCorruption(path, offset, `${reason} before the end of a finished log file`);
    return { kind: 'torn', end: offset, reason, nextSeq: seq };
  };
  /** Damage other than a torn write: refused, but in a consensus member's unsynced tail (cutAfterSeq). */
  const damaged = (reason: string): ScanEnd & { nextSeq: number } => {
    if (!isLast || cutAfterSeq === undefined || seq <= cutAfterSeq) throw new StorageCorruption(path, offset, reason);
    return { kind: 'damaged', end: offset, reason, nextSeq: seq };
  };
  // Key ids repeat (a collection's uid, 'db'): the last one's string is reused while its bytes match.
  let lastKey: { bytes: Buffer; id: string } | null = null;
  while (offset < bytes) {
    // Within the chunk read last (nearly every frame), no await.
    const h = reader.peek(offset, FRAME_HEADER_BYTES) ?? await reader.get(offset, FRAME_HEADER_BYTES);
    if (h.length < FRAME_HEADER_BYTES) return torn('frame header cut short');
    const fh = decodeFrameHeader(h);
    if (fh === null) {
      const rest = await reader.get(offset, bytes - offset);
      if (isLast && rest.length === bytes - offset && rest.every((x) => x === 0)) return torn('zero-filled tail');
      return damaged('frame header checksum mismatch');
    }
    if (fh.sealedLen > RECORD_BYTES_MAX) return damaged('frame length out of range');
    if (fh.seq !== seq) return damaged(`expected seq ${seq}, found ${fh.seq}`);
    const restLen = fh.keyIdLen + fh.sealedLen;
    const rest = reader.peek(offset + FRAME_HEADER_BYTES, restLen) ?? await reader.get(offset + FRAME_HEADER_BYTES, restLen);
    if (rest.length < restLen) return torn('frame body cut short');
    if (crc(rest) !== fh.bodyCrc) return damaged('frame body checksum mismatch');
    const keyBytes = Buffer.from(rest.buffer, rest.byteOffset, fh.keyIdLen);
    if (lastKey === null || !keyBytes.equals(lastKey.bytes)) lastKey = { bytes: Buffer.from(keyBytes), id: keyBytes.toString('utf8') };
    const keyId = lastKey.id;
    yield { seq, keyId, sealed: rest.subarray(fh.keyIdLen), offset };
    offset += FRAME_HEADER_BYTES + restLen;
    seq++;
  }
  return { kind: 'clean', end: offset, nextSeq: seq };
}

interface IndexMark {
  seq: number;
  offset: number;
}

interface LogFile {
  name: string;
  firstSeq: number;
  /** Bytes written (durable, except the active file's unsynced tail: Wal.unsynced). */
  bytes: number;
  /**
   * Sparse index, in seq order: the frame offsets of some records, at least WAL_INDEX_STRIDE_BYTES apart
   * (the first record's offset is implied). At most bytes / stride entries.
   */
  marks: IndexMark[];
}

/** Records a mark for the frame of `seq` at `offset` when it is a stride past the last one. */
function indexFrame(f: LogFile, seq: number, offset: number): void {
  const last = f.marks.length > 0 ? f.marks[f.marks.length - 1].offset : FILE_HEADER_BYTES;
  if (offset - last >= WAL_INDEX_STRIDE_BYTES) f.marks.push({ seq, offset });
}

/** The last mark at or before `seq` in `f` (its start when none). */
function markFor(f: LogFile, seq: number): IndexMark {
  let lo = 0;
  let hi = f.marks.length;
  while (lo < hi) {
    const mid = (lo + hi) >>> 1;
    if (f.marks[mid].seq <= seq) lo = mid + 1;
    else hi = mid;
  }
  return lo === 0 ? { seq: f.firstSeq, offset: FILE_HEADER_BYTES } : f.marks[lo - 1];
}

interface Waiter {
  seq: number;
  settle: (error?: unknown) => void;
}

interface Pending {
  seq: number;
  keyId: string;
  /** The record's plaintext, kept for the tail a connected reader is about to read (see `recent`). */
  body: Uint8Array;
  frame: Uint8Array;
  /** Durable before it resolves (false: written, fsynced by a later group or sync()). */
  sync: boolean;
  resolve: (seq: number) => void;
  reject: (e: unknown) => void;
}

export class Wal implements CommitLog {
  private readonly files: LogFile[] = [];
  private active!: FileHandle;
  private nextSeq = 1;
  private durableSeq = 0;
  /** The last seq written to the active file (durableSeq, or past it while `unsynced`). */
  private writtenSeq = 0;
  /** The active file holds written records not yet fsynced. */
  private unsynced = false;
  /** sync() calls, each waiting for an fsync once every record through `seq` (the last issued before it) is written. */
  private syncWaiters: { seq: number; resolve: () => void; reject: (e: unknown) => void }[] = [];
  private queue: Pending[] = [];
  private flushing = false;
  private idleWaiters: (() => void)[] = [];
  private failed: unknown = null;
  private closed = false;
  private readonly segmentBytesMax: number;
  private readonly retainBytesMax: number;
  private readonly waiters = new Set<Waiter>();
  private readonly holds = new Set<LogHold>();
  /**
   * The last durable records, in seq order and without gaps, while some reader holds the log (a
   * follower's stream): a caught-up reader takes them from here instead of reopening, reading and
   * decrypting the file, so a record reaches it within one turn of the event loop of its fsync rather
   * than after a file read queued behind the fsyncs of a busy disk. At most `tailCacheBytes` of bodies;
   * empty (and nothing kept) while no reader holds the log.
   */
  private readonly recent: { seq: number; keyId: string; body: Uint8Array }[] = [];
  private recentHead = 0;
  private recentBytes = 0;

  private constructor(private readonly fs: FileSystem, private readonly dir: string, private readonly opts: WalOptions) {
    this.segmentBytesMax = opts.segmentBytesMax ?? WAL_SEGMENT_BYTES_DEFAULT;
    this.retainBytesMax = opts.retainBytesMax ?? WAL_RETAIN_BYTES_DEFAULT;
    assert(Number.isSafeInteger(this.retainBytesMax) && this.retainBytesMax >= 0, 'retainBytesMax is a non-negative integer');
  }

  /**
   * Opens (creating when empty) and recovers: a torn final record is cut off and logged; other damage
   * refuses, but a consensus member's in its unsynced tail (WalOptions.damagedTailAfterSeq) is cut too.
   */
  static async open(fs: FileSystem, dir: string, opts: WalOptions): Promise<Wal> {
    const wal = new Wal(fs, dir, opts);
    await wal.recover();
    return wal;
  }

  /** The last durable (acknowledged) seq; 0 when nothing was ever written. */
  get lastSeq(): number {
    return this.durableSeq;
  }

  get firstRetainedSeq(): number {
    return this.files[0].firstSeq;
  }

  /** The first seq of the file being appended to: a checkpoint before it keeps older files. */
  get activeFirstSeq(): number {
    return this.files[this.files.length - 1].firstSeq;
  }

  /** Bytes of all retained log files (durable part). */
  get diskBytes(): number {
    return this.files.reduce((s, f) => s + f.bytes, 0);
  }

  /** The retained files and their durable sizes, for a consistent copy (snapshot). */
  retainedFiles(): { path: string; name: string; bytes: number }[] {
    return this.files.map((f) => ({ path: joinPath(this.dir, f.name), name: f.name, bytes: f.bytes }));
  }

  private async recover(): Promise<void> {
    await mkdirDurable(this.fs, this.dir);
    const names = (await this.fs.readdir(this.dir)).filter((n) => FILE_RE.test(n));
    if (names.length === 0) {
      await this.createFile(1);
      this.nextSeq = 1;
      return;
    }
    for (let i = 0; i < names.length; i++) {
      const name = names[i];
      const path = joinPath(this.dir, name);
      const firstSeq = Number(FILE_RE.exec(name)![1]);
      if (i > 0 && firstSeq !== this.nextSeq) {
        throw new StorageCorruption(path, 0, `log file starts at seq ${firstSeq}, expected ${this.nextSeq}`);
      }
      const isLast = i === names.length - 1;
      const h = await this.fs.open(path, isLast ? 'readwrite' : 'read');
      const file: LogFile = { name, firstSeq, bytes: 0, marks: [] };
      let end: ScanEnd & { nextSeq: number };
      try {
        const it = scanFrames(h, path, firstSeq, isLast, undefined, undefined, this.opts.damagedTailAfterSeq);
        for (;;) {
          const r = await it.next();
          if (r.done) {
            end = r.value;
            break;
          }
          indexFrame(file, r.value.seq, r.value.offset);
        }
      } catch (e) {
        await h.close();
        throw e;
      }
      this.nextSeq = end.nextSeq;
      if (end.kind === 'damaged') {
        const size = await h.size();
        this.opts.log('wal: cutting a damaged unsynced tail (a consensus member\'s: its consensus log holds these records and replays them)', {
          file: path, offset: end.end, bytes: size - end.end, from_seq: end.nextSeq, reason: end.reason,
        });
      } else if (end.kind === 'torn') {
        this.opts.log('wal: truncating a torn final record', { file: path, offset: end.end, reason: end.reason });
      }
      if (end.kind !== 'clean') {
        if (end.end < FILE_HEADER_BYTES) {
          await h.truncate(0);
          await h.write(walHeader(), 0);
          end.end = FILE_HEADER_BYTES;
        } else {
          await h.truncate(end.end);
        }
        await h.sync();
      }
      file.bytes = end.end;
      this.files.push(file);
      if (isLast) this.active = h;
      else await h.close();
    }
    this.durableSeq = this.nextSeq - 1;
    this.writtenSeq = this.durableSeq;
  }

  private async createFile(firstSeq: number): Promise<void> {
    const name = fileName(firstSeq);
    const path = joinPath(this.dir, name);
    if (await this.fs.stat(path)) await this.fs.unlink(path);
    const h = await this.fs.open(path, 'create');
    await h.write(walHeader(), 0);
    await h.sync();
    await this.fs.fsyncDir(this.dir);
    this.files.push({ name, firstSeq, bytes: FILE_HEADER_BYTES, marks: [] });
    this.active = h;
  }

  /**
   * Seals and appends one record; resolves with its seq once it is durable (`sync: false`: once it is
   * written; see the class comment). Seqs follow call order and promises resolve in seq order. After a
   * failed write or fsync the log refuses further appends (the state on disk is unknown; reopen to recover).
   */
  append(keyId: string, body: Uint8Array, opts: { sync?: boolean } = {}): Promise<number> {
    if (this.closed) return Promise.reject(new SvcError('not_ready', 'the write-ahead log is closed'));
    if (this.failed !== null) return Promise.reject(this.failed);
    const sealer = this.opts.keyring.sealerFor(keyId);
    if (sealer === undefined) return Promise.reject(new SvcError('not_found', `no key for '${keyId}'`));
    const seq = this.nextSeq++;
    const frame = encodeFrame(seq, keyId, sealer.seal(body, recordAad(keyId, seq)));
    return new Promise<number>((resolve, reject) => {
      this.queue.push({ seq, keyId, body, frame, sync: opts.sync ?? true, resolve, reject });
      this.kick();
    });
  }

  /** Resolves once every record appended before the call is durable (one fsync, none when it already is). */
  sync(): Promise<void> {
    if (this.closed) return Promise.reject(new SvcError('not_ready', 'the write-ahead log is closed'));
    if (this.failed !== null) return Promise.reject(this.failed);
    const seq = this.nextSeq - 1;
    if (seq <= this.durableSeq) return Promise.resolve();
    return new Promise<void>((resolve, reject) => {
      this.syncWaiters.push({ seq, resolve, reject });
      this.kick();
    });
  }

  /**
   * Starts the flush a microtask later, so appends issued back to back in one synchronous run share its
   * first write + fsync. `flushing` is set now: later appends only queue, and close() waits for it.
   */
  private kick(): void {
    if (this.flushing) return;
    this.flushing = true;
    queueMicrotask(() => void this.flushLoop());
  }

  private async flushLoop(): Promise<void> {
    try {
      while ((this.queue.length > 0 || this.syncWaiters.length > 0) && this.failed === null) {
        let n = 0;
        let bytes = 0;
        while (n < this.queue.length && n < GROUP_RECORDS_MAX && (n === 0 || bytes + this.queue[n].frame.length <= GROUP_BYTES_MAX)) {
          bytes += this.queue[n].frame.length;
          n++;
        }
        const group = this.queue.splice(0, n);
        const through = group.length > 0 ? group[group.length - 1].seq : this.writtenSeq;
        // A sync() is served by the first group that writes the last record issued before it (or by an
        // fsync alone when that is written already), however many appends keep arriving behind it.
        const covered = this.syncWaiters.some((w) => w.seq <= through);
        // While a reader holds the log every group is fsynced: readers see durable records only.
        const mustSync = covered || this.holds.size > 0 || group.some((p) => p.sync);
        try {
          if (group.length > 0) await this.writeGroup(group, bytes, mustSync);
          else if (this.unsynced) await this.syncActive();
          this.settleSyncs();
        } catch (e) {
          for (const p of group) p.reject(e);
          this.fail(e);
        }
      }
    } finally {
      this.flushing = false;
      for (const w of this.idleWaiters.splice(0)) w();
    }
  }

  /** After a failed write, fsync or roll: the log refuses from now on, and everything waiting on it is told. */
  private fail(e: unknown): void {
    this.failed = e;
    for (const p of this.queue.splice(0)) p.reject(e);
    for (const w of this.syncWaiters.splice(0)) w.reject(e);
    for (const w of this.waiters) w.settle(e);
  }

  /**
   * Starts the next file now rather than at segmentBytesMax, so that truncateBefore can delete every
   * record written so far (it never deletes the active file): once no group is being written, the
   * active file is fsynced, the next file is created (its header fsynced, and the directory), named by
   * the next seq exactly as the roll by size names it, and the old file is closed. Nothing is done when
   * the active file holds no record. Appends issued meanwhile wait and go into the new file. A crash
   * at any point leaves a log that opens with every record: the new file is either absent, or holds a
   * header, whole or torn (rewritten at open), and its name is the seq the next append gets. A failure
   * fails the log as a failed write does (reopen to recover).
   */
  async roll(): Promise<void> {
    while (this.flushing) await new Promise<void>((r) => this.idleWaiters.push(r));
    if (this.closed) throw new SvcError('not_ready', 'the write-ahead log is closed');
    if (this.failed !== null) throw this.failed;
    if (this.files[this.files.length - 1].bytes <= FILE_HEADER_BYTES) return;
    // Appends issued from here on only queue (kick() sees `flushing`); the loop starts once this is done.
    this.flushing = true;
    try {
      assert(this.queue.length === 0 && this.writtenSeq === this.nextSeq - 1, 'no append is being written during a roll');
      if (this.unsynced) await this.syncActive();
      this.settleSyncs();
      const old = this.active;
      await this.createFile(this.writtenSeq + 1);
      await old.close();
    } catch (e) {
      this.fail(e);
      throw e;
    } finally {
      this.flushing = false;
      for (const w of this.idleWaiters.splice(0)) w();
      if (this.queue.length > 0 || this.syncWaiters.length > 0) this.kick();
    }
  }

  private async writeGroup(group: Pending[], bytes: number, mustSync: boolean): Promise<void> {
    let file = this.files[this.files.length - 1];
    if (file.bytes >= this.segmentBytesMax && file.bytes > FILE_HEADER_BYTES) {
      // The file being left is durable before the next starts: a hole in the middle is never possible.
      if (this.unsynced) await this.syncActive();
      const old = this.active;
      await this.createFile(group[0].seq);
      await old.close();
      file = this.files[this.files.length - 1];
    }
    const buf = Buffer.allocUnsafe(bytes);
    let at = 0;
    for (const p of group) {
      buf.set(p.frame, at);
      at += p.frame.length;
    }
    await this.active.write(buf, file.bytes);
    if (mustSync) await this.active.sync();
    let offset = file.bytes;
    for (const p of group) {
      indexFrame(file, p.seq, offset);
      offset += p.frame.length;
    }
    file.bytes += bytes;
    this.writtenSeq = group[group.length - 1].seq;
    if (mustSync) {
      this.unsynced = false;
      this.durableSeq = this.writtenSeq;
      this.remember(group);
    } else {
      // No reader holds the log (else the group is fsynced): nothing is kept for one (`recent` stays gapless).
      this.unsynced = true;
      this.forgetRecent();
    }
    for (const p of group) p.resolve(p.seq);
    if (mustSync) for (const w of this.waiters) if (w.seq <= this.durableSeq) w.settle();
  }

  /** Resolves the sync() calls whose records are durable now. */
  private settleSyncs(): void {
    if (this.syncWaiters.length === 0) return;
    const done = this.syncWaiters.filter((w) => w.seq <= this.durableSeq);
    if (done.length === 0) return;
    this.syncWaiters = this.syncWaiters.filter((w) => w.seq > this.durableSeq);
    for (const w of done) w.resolve();
  }

  /** Fsyncs the active file's unsynced records: durable from now on, and readers may see them. */
  private async syncActive(): Promise<void> {
    await this.active.sync();
    this.unsynced = false;
    this.durableSeq = this.writtenSeq;
    for (const w of this.waiters) if (w.seq <= this.durableSeq) w.settle();
  }

  /** Keeps a durable group's bodies for the readers holding the log (see `recent`). */
  private remember(group: Pending[]): void {
    const max = this.opts.tailCacheBytes ?? WAL_TAIL_CACHE_BYTES_DEFAULT;
    if (this.holds.size === 0 || max <= 0) {
      this.forgetRecent();
      return;
    }
    for (const p of group) {
      this.recent.push({ seq: p.seq, keyId: p.keyId, body: p.body });
      this.recentBytes += p.body.length;
    }
    while (this.recentBytes > max && this.recentHead < this.recent.length) {
      this.recentBytes -= this.recent[this.recentHead].body.length;
      this.recentHead++;
    }
    // Compacted now and then, so the array does not grow with every record ever kept.
    if (this.recentHead > 1024 && this.recentHead * 2 > this.recent.length) {
      this.recent.splice(0, this.recentHead);
      this.recentHead = 0;
    }
  }

  private forgetRecent(): void {
    if (this.recent.length === 0) return;
    this.recent.length = 0;
    this.recentHead = 0;
    this.recentBytes = 0;
  }

  /** The first seq `recent` holds, or null when empty. */
  private get recentFirst(): number | null {
    return this.recentHead < this.recent.length ? this.recent[this.recentHead].seq : null;
  }

  waitFor(seq: number, signal?: AbortSignal): Promise<void> {
    if (this.durableSeq >= seq || this.closed || signal?.aborted === true) return Promise.resolve();
    if (this.failed !== null) return Promise.reject(this.failed);
    if (this.waiters.size >= WAITERS_MAX) return Promise.reject(new SvcError('unavailable', `too many waits on the commit log (${WAITERS_MAX})`));
    return new Promise<void>((resolve, reject) => {
      const onAbort = (): void => w.settle();
      const w: Waiter = {
        seq,
        settle: (error?: unknown) => {
          this.waiters.delete(w);
          signal?.removeEventListener('abort', onAbort);
          if (error === undefined) resolve();
          else reject(error);
        },
      };
      this.waiters.add(w);
      signal?.addEventListener('abort', onAbort, { once: true });
    });
  }

  /** Pending waitFor calls (tests: none are left behind). */
  get waiting(): number {
    return this.waiters.size;
  }

  hold(floorSeq: number, onLost?: (reason: SvcError) => void): RetentionHold {
    const first = this.firstRetainedSeq;
    if (floorSeq < first) {
      throw new SvcError('not_found', `seq ${floorSeq} is no longer retained (first retained seq is ${first})`, { firstRetainedSeq: first });
    }
    if (this.holds.size >= HOLDS_MAX) throw new SvcError('unavailable', `too many readers hold the commit log (${HOLDS_MAX})`);
    const h = new LogHold(this.holds, floorSeq, onLost);
    this.holds.add(h);
    return h;
  }

  /** Live retention holds (tests, metrics). */
  get holdCount(): number {
    return this.holds.size;
  }

  /**
   * Every retained record from `seq` up to the last durable one at the time of the call, in order.
   * Bodies are opened with the keyring; a body whose key is gone comes back null. A record `want`
   * returns false for is skipped, asked just before it would be opened (an open's replay skips what the
   * segments hold without decrypting it).
   */
  async *readFrom(seq: number, opts: { want?: (keyId: string, seq: number) => boolean } = {}): AsyncIterable<WalRecord> {
    const first = this.firstRetainedSeq;
    if (seq < first) {
      throw new SvcError('not_found', `seq ${seq} is no longer retained (first retained seq is ${first})`, { firstRetainedSeq: first });
    }
    const limit = this.durableSeq;
    const cached = this.recentFirst;
    if (cached !== null && seq >= cached) {
      // The tail from memory: the same records the files hold (a body whose key is gone is null there too).
      for (let i = this.recentHead + (seq - cached); i < this.recent.length; i++) {
        const r = this.recent[i];
        if (r.seq > limit) break;
        if (opts.want !== undefined && !opts.want(r.keyId, r.seq)) continue;
        const open = this.opts.keyring.sealerFor(r.keyId) !== undefined;
        yield { seq: r.seq, keyId: r.keyId, body: open ? r.body : null };
        // The array may have been compacted while this reader was suspended at the yield.
        if (this.recentFirst === null || this.recentFirst > r.seq + 1) return;
        i = this.recentHead + (r.seq + 1 - this.recentFirst) - 1;
      }
      return;
    }
    // The file holding `seq` by its first seq (the file name), then the index mark before it in that file.
    const files = this.files.slice(this.fileIndexOf(seq)).map((f) => ({ ...f }));
    for (let i = 0; i < files.length; i++) {
      const f = files[i];
      const nextFirst = i + 1 < files.length ? files[i + 1].firstSeq : limit + 1;
      if (nextFirst <= seq) continue;
      if (f.firstSeq > limit) break;
      const path = joinPath(this.dir, f.name);
      const from = markFor(f, seq);
      const h = await this.fs.open(path, 'read');
      try {
        for await (const r of scanFrames(h, path, f.firstSeq, false, f.bytes, from.offset > FILE_HEADER_BYTES ? from : undefined)) {
          if (r.seq < seq) continue;
          if (r.seq > limit) break;
          if (opts.want !== undefined && !opts.want(r.keyId, r.seq)) continue;
          yield { seq: r.seq, keyId: r.keyId, body: this.openBody(r, path) };
        }
      } finally {
        await h.close();
      }
      seq = nextFirst;
    }
  }

  /** The last file whose first seq is at or before `seq` (0 when none is). */
  private fileIndexOf(seq: number): number {
    let lo = 0;
    let hi = this.files.length;
    while (lo < hi) {
      const mid = (lo + hi) >>> 1;
      if (this.files[mid].firstSeq <= seq) lo = mid + 1;
      else hi = mid;
    }
    return Math.max(0, lo - 1);
  }

  private openBody(r: ScannedRecord, path: string): Uint8Array | null {
    const sealer = this.opts.keyring.sealerFor(r.keyId);
    if (sealer === undefined) return null;
    try {
      return sealer.open(r.sealed, recordAad(r.keyId, r.seq));
    } catch {
      throw new StorageCorruption(path, r.offset, `record seq ${r.seq} failed authentication`);
    }
  }

  /**
   * Deletes whole log files whose records are all below `seq`; the active file always stays (roll()
   * first to have every record written so far go). A file a
   * retention hold still needs stays too, while the files kept that way total at most retainBytesMax;
   * past that the oldest goes and the holds that needed it are lost (told before it is deleted).
   */
  async truncateBefore(seq: number): Promise<void> {
    while (this.files.length > 1 && this.files[1].firstSeq <= seq) {
      const end = this.files[1].firstSeq;
      const needed = [...this.holds].filter((h) => h.floorSeq < end);
      if (needed.length > 0) {
        // Every deletable file from here on is needed by these holds too (they need all after their floor).
        let keptBytes = 0;
        for (let i = 0; i + 1 < this.files.length && this.files[i + 1].firstSeq <= seq; i++) keptBytes += this.files[i].bytes;
        if (keptBytes <= this.retainBytesMax) break;
        const reason = new SvcError('unavailable',
          `the reader fell behind the commit log's retention: seqs below ${end} are deleted (more than ${this.retainBytesMax} bytes of log were kept for it); start over from a snapshot`,
          { reason: 'retention_exceeded', firstRetainedSeq: end, retainBytesMax: this.retainBytesMax });
        for (const h of needed) h.lose(reason);
      }
      const f = this.files.shift()!;
      await this.fs.unlink(joinPath(this.dir, f.name));
      // One at a time: a crash must never leave a hole in the middle of the log.
      await this.fs.fsyncDir(this.dir);
    }
  }

  /** Waits for queued appends, then closes the file. */
  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    while (this.flushing) await new Promise<void>((r) => this.idleWaiters.push(r));
    // A clean close leaves every record durable.
    if (this.unsynced && this.failed === null) await this.syncActive();
    for (const w of this.waiters) w.settle();
    await this.active.close();
  }
}
