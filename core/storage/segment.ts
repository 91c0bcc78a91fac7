import { assert } from '../base/assert.js';
import type { Sealer } from '../crypto/sealer.js';
import { CodecError, decodeOp, encodeOp, isDbOp, type Op } from './codec.js';
import { StorageCorruption } from './errors.js';
import { BlockFileWriter, ChunkReader, FILE_HEADER_BYTES, KIND_BLOCK, KIND_FOOTER, aad, fileHeader } from './format.js';
import { dirName, type FileHandle, type FileSystem } from './fs.js';

/**
 * An immutable segment file: a 16-byte header, sealed blocks of ~64 KiB of records, a sealed footer
 * (block count, record count, footer offset) and a 4-byte trailer giving the footer frame's length.
 * Block AAD = (format version, collection uid, 'segment', segment id, block index): a truncated file, a
 * reordered block or a block moved from another segment or collection fails to open.
 */

export const SEGMENT_BLOCK_BYTES = 64 << 10;
const MAGIC = Buffer.from('SVCSEG\0\x01', 'latin1');
const HEADER_BYTES = FILE_HEADER_BYTES;
const FRAME_PREFIX_BYTES = 5;
const FOOTER_PLAIN_BYTES = 20;
const FRAME_BYTES_MAX = 1 << 30;

const header = (): Buffer => fileHeader(MAGIC);

const blockAad = (uid: string, segId: number, index: number) => aad('segment', [uid, segId, index]);
const footerAad = (uid: string, segId: number) => aad('segment-footer', [uid, segId]);

function frame(kind: number, sealed: Uint8Array): Buffer {
  const b = Buffer.allocUnsafe(FRAME_PREFIX_BYTES + sealed.length);
  b[0] = kind;
  b.writeUInt32LE(sealed.length, 1);
  b.set(sealed, FRAME_PREFIX_BYTES);
  return b;
}

export interface SegmentInfo {
  bytes: number;
  records: number;
  blocks: number;
}

export class SegmentWriter {
  private records = 0;
  private readonly out: BlockFileWriter;

  private constructor(
    private readonly fs: FileSystem, private readonly path: string, private readonly h: FileHandle,
    private readonly sealer: Sealer, private readonly uid: string, private readonly segId: number,
    blockBytesMax: number,
  ) {
    this.out = new BlockFileWriter(h, HEADER_BYTES, frame, (plain, i) => sealer.seal(plain, blockAad(uid, segId, i)), blockBytesMax);
  }

  static async create(fs: FileSystem, path: string, sealer: Sealer, uid: string, segId: number, blockBytesMax = SEGMENT_BLOCK_BYTES): Promise<SegmentWriter> {
    if (await fs.stat(path)) await fs.unlink(path);
    const h = await fs.open(path, 'create');
    await h.write(header(), 0);
    return new SegmentWriter(fs, path, h, sealer, uid, segId, blockBytesMax);
  }

  async add(op: Op): Promise<void> {
    const body = encodeOp(op);
    const len = Buffer.alloc(4);
    len.writeUInt32LE(body.length, 0);
    this.records++;
    await this.out.push(len, Buffer.from(body.buffer, body.byteOffset, body.byteLength));
  }

  /** Writes the footer, fsyncs the file and its directory. */
  async finish(): Promise<SegmentInfo> {
    const out = this.out;
    await out.finish(() => {
      const footer = Buffer.alloc(FOOTER_PLAIN_BYTES);
      footer.writeUInt32LE(out.blocks, 0);
      footer.writeBigUInt64LE(BigInt(this.records), 4);
      footer.writeBigUInt64LE(BigInt(out.offset), 12);
      return this.sealer.seal(footer, footerAad(this.uid, this.segId));
    });
    await this.h.close();
    await this.fs.fsyncDir(dirName(this.path));
    return { bytes: out.offset, records: this.records, blocks: out.blocks };
  }

  async abort(): Promise<void> {
    await this.h.close().catch(() => {});
    await this.fs.unlink(this.path).catch(() => {});
  }
}

/** Streams the ops of a segment back, one block in memory at a time; any damage throws StorageCorruption. */
export async function* readSegment(fs: FileSystem, path: string, sealer: Sealer, uid: string, segId: number): AsyncIterable<Op> {
  const h = await fs.open(path, 'read');
  try {
    const size = await h.size();
    const bad = (offset: number, what: string) => new StorageCorruption(path, offset, what);
    if (size < HEADER_BYTES + FRAME_PREFIX_BYTES + 4) throw bad(0, 'segment file too short');
    const head = await h.read(0, HEADER_BYTES);
    if (!Buffer.from(head).equals(header())) throw bad(0, 'bad segment header');
    const footerFrameLen = Buffer.from(await h.read(size - 4, 4)).readUInt32LE(0);
    const footerOffset = size - 4 - footerFrameLen;
    if (footerFrameLen < FRAME_PREFIX_BYTES || footerOffset < HEADER_BYTES) throw bad(size - 4, 'bad segment trailer');
    const ff = Buffer.from(await h.read(footerOffset, footerFrameLen));
    if (ff[0] !== KIND_FOOTER || ff.readUInt32LE(1) !== footerFrameLen - FRAME_PREFIX_BYTES) throw bad(footerOffset, 'bad footer frame');
    let footer: Buffer;
    try {
      footer = Buffer.from(sealer.open(ff.subarray(FRAME_PREFIX_BYTES), footerAad(uid, segId)));
    } catch {
      throw bad(footerOffset, 'segment footer failed authentication');
    }
    assert(footer.length === FOOTER_PLAIN_BYTES, 'an authenticated footer has the footer layout');
    const blockCount = footer.readUInt32LE(0);
    const recordCount = Number(footer.readBigUInt64LE(4));
    if (Number(footer.readBigUInt64LE(12)) !== footerOffset) throw bad(footerOffset, 'segment footer at the wrong offset (truncated or extended)');

    const reader = new ChunkReader((p, l) => h.read(p, l), footerOffset);
    let offset = HEADER_BYTES;
    let records = 0;
    for (let i = 0; i < blockCount; i++) {
      const prefix = Buffer.from(await reader.get(offset, FRAME_PREFIX_BYTES));
      if (prefix.length < FRAME_PREFIX_BYTES || prefix[0] !== KIND_BLOCK) throw bad(offset, `bad block frame ${i}`);
      const len = prefix.readUInt32LE(1);
      if (len > FRAME_BYTES_MAX || offset + FRAME_PREFIX_BYTES + len > footerOffset) throw bad(offset, `block ${i} runs past the footer`);
      const sealed = await reader.get(offset + FRAME_PREFIX_BYTES, len);
      let plain: Buffer;
      try {
        plain = Buffer.from(sealer.open(sealed, blockAad(uid, segId, i)));
      } catch {
        throw bad(offset, `block ${i} failed authentication`);
      }
      let at = 0;
      while (at < plain.length) {
        if (at + 4 > plain.length) throw bad(offset, `block ${i} has a cut record`);
        const n = plain.readUInt32LE(at);
        if (at + 4 + n > plain.length) throw bad(offset, `block ${i} has a cut record`);
        let op;
        try {
          op = decodeOp(plain.subarray(at + 4, at + 4 + n));
        } catch (e) {
          if (e instanceof CodecError) throw bad(offset, `block ${i}: ${e.message}`);
          throw e;
        }
        if (isDbOp(op)) throw bad(offset, `block ${i} holds a database record`);
        at += 4 + n;
        records++;
        yield op;
      }
      offset += FRAME_PREFIX_BYTES + len;
    }
    if (offset !== footerOffset) throw bad(offset, 'bytes between the last block and the footer');
    if (records !== recordCount) throw bad(footerOffset, `footer says ${recordCount} records, found ${records}`);
  } finally {
    await h.close();
  }
}
