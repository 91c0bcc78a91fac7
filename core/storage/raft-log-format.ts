import { assert } from '../base/assert.js';
import type { Sealer } from '../crypto/sealer.js';
import { StorageCorruption } from './errors.js';
import { FILE_HEADER_BYTES, aad, crc, fileHeader } from './format.js';

/**
 * The bytes of a consensus member's log (raft-log.ts): files of frames, each frame one record, every
 * body sealed like the WAL's. Pure: encoding, and scanning a file's bytes back into records. The layout
 * is in README.md ("The consensus log").
 *
 * Frame: headerCrc u32 | sealedLen u32 | kind u8 | flags u8 | 0 u16 | index u64 | term u64 | bodyCrc u32 |
 * sealed. AAD = ('rlog', kind, index, term): the header fields are authenticated with the body,
 * so a record moved to another index or term fails to open.
 */

const LOG_MAGIC = Buffer.from('SVCRLOG\x01', 'latin1');
const SNAP_MAGIC = Buffer.from('SVCRSNP\x01', 'latin1');
export const RAFT_FRAME_HEADER_BYTES = 32;
/** A larger frame is damage, not data (the same bound as a WAL record). */
export const RAFT_RECORD_BYTES_MAX = 1 << 30;
/** flags bit 0: the last record of one durable batch (one write + fsync). Records after the last are torn. */
const FLAG_BATCH_END = 1;

export const raftLogHeader = (): Buffer => fileHeader(LOG_MAGIC);

/**
 * One record. `entry` appends (dropping any entry at or after its index: a conflicting tail);
 * `state` is the hard state; `install` replaces the whole log with a received snapshot; `snapshot`
 * records this member's own snapshot at (index, term), the log kept; `compact` drops entries at or
 * before index (index becomes firstIndex - 1, its term kept).
 */
export type RaftRecord =
  | { readonly kind: 'entry'; readonly index: number; readonly term: number; readonly data: Uint8Array }
  | { readonly kind: 'state'; readonly term: number; readonly vote: string | null; readonly commit: number }
  | { readonly kind: 'install' | 'snapshot' | 'compact'; readonly index: number; readonly term: number };

const KIND_CODE = { entry: 1, state: 2, install: 3, snapshot: 4, compact: 5 } as const;
const KIND_OF: Record<number, RaftRecord['kind']> = { 1: 'entry', 2: 'state', 3: 'install', 4: 'snapshot', 5: 'compact' };

const EMPTY = new Uint8Array(0);

function recordAad(kind: number, index: number, term: number): Uint8Array {
  return aad('rlog', [kind, index, term]);
}

/** (index, term, body) as framed: a hard state puts commit in index and the vote (utf8, '' for none) in the body. */
function fields(r: RaftRecord): { index: number; term: number; body: Uint8Array } {
  switch (r.kind) {
    case 'entry':
      return { index: r.index, term: r.term, body: r.data };
    case 'state':
      return { index: r.commit, term: r.term, body: r.vote === null ? EMPTY : Buffer.from(r.vote, 'utf8') };
    default:
      return { index: r.index, term: r.term, body: EMPTY };
  }
}

/** The frames of one durable batch: the last carries the batch-end flag. */
export function encodeBatch(sealer: Sealer, records: readonly RaftRecord[]): Buffer {
  assert(records.length > 0, 'a batch holds at least one record');
  return Buffer.concat(records.map((r, k) => encodeFrame(sealer, r, k === records.length - 1)));
}

function encodeFrame(sealer: Sealer, r: RaftRecord, end: boolean): Buffer {
  const kind = KIND_CODE[r.kind];
  const { index, term, body } = fields(r);
  assert(Number.isSafeInteger(index) && index >= 0 && Number.isSafeInteger(term) && term >= 0, 'index and term are non-negative integers');
  const sealed = sealer.seal(body, recordAad(kind, index, term));
  assert(sealed.length <= RAFT_RECORD_BYTES_MAX, `a raft record is at most ${RAFT_RECORD_BYTES_MAX} bytes`);
  const b = Buffer.allocUnsafe(RAFT_FRAME_HEADER_BYTES + sealed.length);
  b.writeUInt32LE(sealed.length, 4);
  b[8] = kind;
  b[9] = end ? FLAG_BATCH_END : 0;
  b.writeUInt16LE(0, 10);
  b.writeBigUInt64LE(BigInt(index), 12);
  b.writeBigUInt64LE(BigInt(term), 20);
  b.set(sealed, RAFT_FRAME_HEADER_BYTES);
  b.writeUInt32LE(crc(sealed), 28);
  b.writeUInt32LE(crc(b.subarray(4, RAFT_FRAME_HEADER_BYTES)), 0);
  return b;
}

function decodeRecord(kind: Exclude<RaftRecord['kind'], 'entry'>, index: number, term: number, body: Uint8Array): RaftRecord {
  switch (kind) {
    case 'state':
      return { kind, term, commit: index, vote: body.length === 0 ? null : Buffer.from(body).toString('utf8') };
    default:
      return { kind, index, term };
  }
}

/** An entry read but not yet opened: its data is authenticated only if the log still holds it at the end. */
export interface UnopenedEntry {
  readonly sealed: Uint8Array;
  readonly offset: number;
}

export interface ScannedFile {
  /** Entries come back with empty data, their sealed bodies in `unopened` (openEntry opens one). */
  readonly records: RaftRecord[];
  readonly unopened: Map<object, UnopenedEntry>;
  /** Bytes of whole batches (the file header included): where the file is cut when `torn` is set. */
  readonly end: number;
  /** Why bytes after `end` were dropped (only ever in the last file). */
  readonly torn: string | null;
}

/** The data of an entry scanRaftLogFile left unopened; a failed seal throws StorageCorruption. */
export function openEntry(sealer: Sealer, path: string, r: { readonly index: number; readonly term: number }, u: UnopenedEntry): Uint8Array {
  try {
    return sealer.open(u.sealed, recordAad(KIND_CODE.entry, r.index, r.term)).slice();
  } catch {
    throw new StorageCorruption(path, u.offset, `entry record ${r.index}/${r.term} failed authentication`);
  }
}

/**
 * Reads one log file's bytes back into records, checking both checksums and every seal but an entry's:
 * an entry's body is opened only once recovery knows the log still holds it (openEntry), since most
 * entries a file keeps lie below a later compaction record and are dropped unread. Bytes after
 * the last complete batch of the last file are a torn write (dropped, `torn` says why); any other
 * damage, or a finished file that does not end with a whole batch, throws StorageCorruption.
 */
export function scanRaftLogFile(sealer: Sealer, path: string, bytes: Uint8Array, isLast: boolean): ScannedFile {
  const records: RaftRecord[] = [];
  const unopened = new Map<object, UnopenedEntry>();
  const torn = (end: number, offset: number, reason: string): ScannedFile => {
    if (!isLast) throw new StorageCorruption(path, offset, `${reason} in a finished consensus log file`);
    return { records, unopened, end, torn: reason };
  };
  if (bytes.length < FILE_HEADER_BYTES) return torn(0, 0, 'file header incomplete');
  if (!Buffer.from(bytes.subarray(0, FILE_HEADER_BYTES)).equals(raftLogHeader())) throw new StorageCorruption(path, 0, 'bad file header');
  const view = Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  let offset = FILE_HEADER_BYTES;
  let batchEnd = FILE_HEADER_BYTES;
  let batchRecords = 0;
  // A write torn by a crash may leave the end of the file zero-filled (space allocated, data never
  // written): damage reaching into such a tail of the last file is the torn write, not corruption.
  let zeroTail = bytes.length;
  while (zeroTail > offset && bytes[zeroTail - 1] === 0) zeroTail--;
  while (offset < bytes.length) {
    if (bytes.length - offset < RAFT_FRAME_HEADER_BYTES) break;
    const h = view.subarray(offset, offset + RAFT_FRAME_HEADER_BYTES);
    if (h.readUInt32LE(0) !== crc(h.subarray(4)) || h.readUInt16LE(10) !== 0) {
      if (isLast && zeroTail < offset + RAFT_FRAME_HEADER_BYTES) break;
      throw new StorageCorruption(path, offset, 'frame header checksum mismatch');
    }
    const sealedLen = h.readUInt32LE(4);
    const kind = KIND_OF[h[8]];
    if (kind === undefined || (h[9] & ~FLAG_BATCH_END) !== 0) throw new StorageCorruption(path, offset, `unknown record kind ${h[8]} or flags ${h[9]}`);
    if (sealedLen > RAFT_RECORD_BYTES_MAX) throw new StorageCorruption(path, offset, 'frame length out of range');
    const index = Number(h.readBigUInt64LE(12));
    const term = Number(h.readBigUInt64LE(20));
    const start = offset + RAFT_FRAME_HEADER_BYTES;
    if (bytes.length - start < sealedLen) break;
    const sealed = bytes.subarray(start, start + sealedLen);
    if (crc(sealed) !== h.readUInt32LE(28)) {
      if (isLast && zeroTail < start + sealedLen) break;
      throw new StorageCorruption(path, offset, 'frame body checksum mismatch');
    }
    if (kind === 'entry') {
      const r: RaftRecord = { kind, index, term, data: EMPTY };
      records.push(r);
      unopened.set(r, { sealed, offset });
    } else {
      let body: Uint8Array;
      try {
        body = sealer.open(sealed, recordAad(h[8], index, term));
      } catch {
        throw new StorageCorruption(path, offset, `${kind} record ${index}/${term} failed authentication`);
      }
      records.push(decodeRecord(kind, index, term, body));
    }
    batchRecords++;
    offset = start + sealedLen;
    if ((h[9] & FLAG_BATCH_END) !== 0) {
      batchEnd = offset;
      batchRecords = 0;
    }
  }
  if (batchEnd === bytes.length) return { records, unopened, end: batchEnd, torn: null };
  for (const r of records.splice(records.length - batchRecords)) unopened.delete(r);
  return torn(batchEnd, batchEnd, offset < bytes.length ? 'a frame cut short' : 'a batch without its end');
}

// ---- snapshot files ----

/** A snapshot file: header | sealedLen u32 | bodyCrc u32 | sealed(data), AAD = ('rsnap', index, term). */
export function encodeSnapshotFile(sealer: Sealer, index: number, term: number, data: Uint8Array): Buffer {
  const sealed = sealer.seal(data, aad('rsnap', [index, term]));
  const b = Buffer.allocUnsafe(FILE_HEADER_BYTES + 8 + sealed.length);
  fileHeader(SNAP_MAGIC).copy(b, 0);
  b.writeUInt32LE(sealed.length, FILE_HEADER_BYTES);
  b.writeUInt32LE(crc(sealed), FILE_HEADER_BYTES + 4);
  b.set(sealed, FILE_HEADER_BYTES + 8);
  return b;
}

/** The data of a snapshot file; any damage throws (a snapshot file is complete before any record names it). */
export function decodeSnapshotFile(sealer: Sealer, path: string, index: number, term: number, bytes: Uint8Array): Uint8Array {
  const view = Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  if (view.length < FILE_HEADER_BYTES + 8 || !view.subarray(0, FILE_HEADER_BYTES).equals(fileHeader(SNAP_MAGIC))) {
    throw new StorageCorruption(path, 0, 'bad snapshot file header');
  }
  const len = view.readUInt32LE(FILE_HEADER_BYTES);
  const sealed = view.subarray(FILE_HEADER_BYTES + 8);
  if (sealed.length !== len || crc(sealed) !== view.readUInt32LE(FILE_HEADER_BYTES + 4)) {
    throw new StorageCorruption(path, FILE_HEADER_BYTES, 'snapshot body length or checksum mismatch');
  }
  try {
    return sealer.open(sealed, aad('rsnap', [index, term])).slice();
  } catch {
    throw new StorageCorruption(path, FILE_HEADER_BYTES, `snapshot ${index}/${term} failed authentication`);
  }
}

const LOG_RE = /^(\d{20})\.rlog$/;
const SNAP_RE = /^(\d{20})-(\d{20})\.rsnap$/;

export const raftLogFileName = (fileNo: number): string => `${String(fileNo).padStart(20, '0')}.rlog`;
export const raftSnapshotFileName = (index: number, term: number): string =>
  `${String(index).padStart(20, '0')}-${String(term).padStart(20, '0')}.rsnap`;
export const raftLogFileNo = (name: string): number | null => {
  const m = LOG_RE.exec(name);
  return m === null ? null : Number(m[1]);
};
export const isRaftSnapshotFile = (name: string): boolean => SNAP_RE.test(name);
