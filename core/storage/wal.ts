import { assert } from '../base/assert.js';
import { SvcError } from '../base/errors.js';
import type { Sealer } from '../crypto/sealer.js';
import { StorageCorruption } from './errors.js';
import { ChunkReader, FILE_HEADER_BYTES, aad, crc, fileHeader } from './format.js';
import { joinPath, mkdirDurable, type FileHandle, type FileSystem } from './fs.js';

/**
 * The write-ahead log: one sequenced commit log for the whole database. A record is a plaintext frame
 * header (checksums, length, seq, key id) and a body sealed with the key of `keyId` (a collection uid,
 * or 'db'), AAD = (format version, 'wal', keyId, seq), so a record copied elsewhere fails to open.
 *
 * Files: `<dir>/<first seq, 20 digits>.wal`, each a 16-byte header then frames. Appends are group
 * committed: whatever arrives while an fsync is in flight goes out in the next single write + fsync.
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
}

export interface WalRecord {
  seq: number;
  keyId: string;
  /** null when the keyring has no key for `keyId` any more (a dropped, crypto-shredded collection). */
  body: Uint8Array | null;
}

export const WAL_SEGMENT_BYTES_DEFAULT = 64 << 20;
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
  const b = Buffer.from(h.buffer, h.byteOffset, h.byteLength);
  if (b.readUInt32LE(0) !== crc(b.subarray(4, FRAME_HEADER_BYTES)) || b.readUInt16LE(22) !== 0) return null;
  return { sealedLen: b.readUInt32LE(4), seq: Number(b.readBigUInt64LE(8)), bodyCrc: b.readUInt32LE(16), keyIdLen: b.readUInt16LE(20) };
}

interface ScannedRecord {
  seq: number;
  keyId: string;
  sealed: Uint8Array;
  offset: number;
}

type ScanEnd = { kind: 'clean'; end: number } | { kind: 'torn'; end: number; reason: string };

/**
 * Walks the frames of one file, checking both checksums and the seq chain. A frame cut short by the end
 * of the last file is a torn write (returned); any other damage throws StorageCorruption.
 */
async function* scanFrames(
  handle: FileHandle, path: string, firstSeq: number, isLast: boolean, limitBytes?: number,
): AsyncGenerator<ScannedRecord, ScanEnd & { nextSeq: number }> {
  const bytes = limitBytes ?? (await handle.size());
  const reader = new ChunkReader((p, l) => handle.read(p, l), bytes);
  const head = await reader.get(0, FILE_HEADER_BYTES);
  if (head.length < FILE_HEADER_BYTES) {
    if (isLast) return { kind: 'torn', end: 0, reason: 'file header incomplete', nextSeq: firstSeq };
    throw new StorageCorruption(path, 0, 'file header incomplete');
  }
  if (!Buffer.from(head).equals(walHeader())) throw new StorageCorruption(path, 0, 'bad file header');
  let offset = FILE_HEADER_BYTES;
  let seq = firstSeq;
  const torn = (reason: string): ScanEnd & { nextSeq: number } => {
    if (!isLast) throw new StorageCorruption(path, offset, `${reason} before the end of a finished log file`);
    return { kind: 'torn', end: offset, reason, nextSeq: seq };
  };
  while (offset < bytes) {
    const h = await reader.get(offset, FRAME_HEADER_BYTES);
    if (h.length < FRAME_HEADER_BYTES) return torn('frame header cut short');
    const fh = decodeFrameHeader(h);
    if (fh === null) {
      const rest = await reader.get(offset, bytes - offset);
      if (isLast && rest.length === bytes - offset && rest.every((x) => x === 0)) return torn('zero-filled tail');
      throw new StorageCorruption(path, offset, 'frame header checksum mismatch');
    }
    if (fh.sealedLen > RECORD_BYTES_MAX) throw new StorageCorruption(path, offset, 'frame length out of range');
    if (fh.seq !== seq) throw new StorageCorruption(path, offset, `expected seq ${seq}, found ${fh.seq}`);
    const restLen = fh.keyIdLen + fh.sealedLen;
    const rest = await reader.get(offset + FRAME_HEADER_BYTES, restLen);
    if (rest.length < restLen) return torn('frame body cut short');
    if (crc(rest) !== fh.bodyCrc) throw new StorageCorruption(path, offset, 'frame body checksum mismatch');
    const keyId = Buffer.from(rest.subarray(0, fh.keyIdLen)).toString('utf8');
    yield { seq, keyId, sealed: rest.subarray(fh.keyIdLen), offset };
    offset += FRAME_HEADER_BYTES + restLen;
    seq++;
  }
  return { kind: 'clean', end: offset, nextSeq: seq };
}

async function drain<T, R>(it: AsyncGenerator<T, R>): Promise<R> {
  for (;;) {
    const r = await it.next();
    if (r.done) return r.value;
  }
}

interface LogFile {
  name: string;
  firstSeq: number;
  /** Durable bytes (fsynced). */
  bytes: number;
}

interface Pending {
  seq: number;
  frame: Uint8Array;
  resolve: (seq: number) => void;
  reject: (e: unknown) => void;
}

export class Wal {
  private readonly files: LogFile[] = [];
  private active!: FileHandle;
  private nextSeq = 1;
  private durableSeq = 0;
  private queue: Pending[] = [];
  private flushing = false;
  private idleWaiters: (() => void)[] = [];
  private failed: unknown = null;
  private closed = false;
  private readonly segmentBytesMax: number;

  private constructor(private readonly fs: FileSystem, private readonly dir: string, private readonly opts: WalOptions) {
    this.segmentBytesMax = opts.segmentBytesMax ?? WAL_SEGMENT_BYTES_DEFAULT;
  }

  /** Opens (creating when empty) and recovers: a torn final record is cut off and logged; damage refuses. */
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
      let end: ScanEnd & { nextSeq: number };
      try {
        end = await drain(scanFrames(h, path, firstSeq, isLast));
      } catch (e) {
        await h.close();
        throw e;
      }
      this.nextSeq = end.nextSeq;
      if (end.kind === 'torn') {
        this.opts.log('wal: truncating a torn final record', { file: path, offset: end.end, reason: end.reason });
        if (end.end < FILE_HEADER_BYTES) {
          await h.truncate(0);
          await h.write(walHeader(), 0);
          end.end = FILE_HEADER_BYTES;
        } else {
          await h.truncate(end.end);
        }
        await h.sync();
      }
      this.files.push({ name, firstSeq, bytes: end.end });
      if (isLast) this.active = h;
      else await h.close();
    }
    this.durableSeq = this.nextSeq - 1;
  }

  private async createFile(firstSeq: number): Promise<void> {
    const name = fileName(firstSeq);
    const path = joinPath(this.dir, name);
    if (await this.fs.stat(path)) await this.fs.unlink(path);
    const h = await this.fs.open(path, 'create');
    await h.write(walHeader(), 0);
    await h.sync();
    await this.fs.fsyncDir(this.dir);
    this.files.push({ name, firstSeq, bytes: FILE_HEADER_BYTES });
    this.active = h;
  }

  /**
   * Seals and appends one record; resolves with its seq once it is durable. Seqs follow call order and
   * promises resolve in seq order. After a failed write or fsync the log refuses further appends (the
   * state on disk is unknown; reopen to recover).
   */
  append(keyId: string, body: Uint8Array): Promise<number> {
    if (this.closed) return Promise.reject(new SvcError('not_ready', 'the write-ahead log is closed'));
    if (this.failed !== null) return Promise.reject(this.failed);
    const sealer = this.opts.keyring.sealerFor(keyId);
    if (sealer === undefined) return Promise.reject(new SvcError('not_found', `no key for '${keyId}'`));
    const seq = this.nextSeq++;
    const frame = encodeFrame(seq, keyId, sealer.seal(body, recordAad(keyId, seq)));
    return new Promise<number>((resolve, reject) => {
      this.queue.push({ seq, frame, resolve, reject });
      this.kick();
    });
  }

  private kick(): void {
    if (this.flushing) return;
    this.flushing = true;
    void this.flushLoop();
  }

  private async flushLoop(): Promise<void> {
    try {
      while (this.queue.length > 0 && this.failed === null) {
        let n = 0;
        let bytes = 0;
        while (n < this.queue.length && n < GROUP_RECORDS_MAX && (n === 0 || bytes + this.queue[n].frame.length <= GROUP_BYTES_MAX)) {
          bytes += this.queue[n].frame.length;
          n++;
        }
        const group = this.queue.splice(0, n);
        try {
          await this.writeGroup(group, bytes);
        } catch (e) {
          this.failed = e;
          for (const p of [...group, ...this.queue.splice(0)]) p.reject(e);
        }
      }
    } finally {
      this.flushing = false;
      for (const w of this.idleWaiters.splice(0)) w();
    }
  }

  private async writeGroup(group: Pending[], bytes: number): Promise<void> {
    let file = this.files[this.files.length - 1];
    if (file.bytes >= this.segmentBytesMax && file.bytes > FILE_HEADER_BYTES) {
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
    await this.active.sync();
    file.bytes += bytes;
    this.durableSeq = group[group.length - 1].seq;
    for (const p of group) p.resolve(p.seq);
  }

  /**
   * Every retained record from `seq` up to the last durable one at the time of the call, in order.
   * Bodies are opened with the keyring; a body whose key is gone comes back null. `keyIds` skips others.
   */
  async *readFrom(seq: number, opts: { keyIds?: ReadonlySet<string> } = {}): AsyncIterable<WalRecord> {
    const first = this.firstRetainedSeq;
    if (seq < first) {
      throw new SvcError('not_found', `seq ${seq} is no longer retained (first retained seq is ${first})`, { firstRetainedSeq: first });
    }
    const limit = this.durableSeq;
    const files = this.files.map((f) => ({ ...f }));
    for (let i = 0; i < files.length; i++) {
      const f = files[i];
      const nextFirst = i + 1 < files.length ? files[i + 1].firstSeq : limit + 1;
      if (nextFirst <= seq) continue;
      if (f.firstSeq > limit) break;
      const path = joinPath(this.dir, f.name);
      const h = await this.fs.open(path, 'read');
      try {
        for await (const r of scanFrames(h, path, f.firstSeq, false, f.bytes)) {
          if (r.seq < seq) continue;
          if (r.seq > limit) break;
          if (opts.keyIds !== undefined && !opts.keyIds.has(r.keyId)) continue;
          yield { seq: r.seq, keyId: r.keyId, body: this.openBody(r, path) };
        }
      } finally {
        await h.close();
      }
      seq = nextFirst;
    }
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

  /** Deletes whole log files whose records are all below `seq`; the active file always stays. */
  async truncateBefore(seq: number): Promise<void> {
    while (this.files.length > 1 && this.files[1].firstSeq <= seq) {
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
    await this.active.close();
  }
}
