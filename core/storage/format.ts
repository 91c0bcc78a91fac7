import { crc32 } from 'node:zlib';
import type { FileHandle } from './fs.js';

/** On-disk format version, bound into every AAD: bump it when any layout changes. */
export const FORMAT_VERSION = 1;

export function crc(...parts: Uint8Array[]): number {
  let c = 0;
  for (const p of parts) c = crc32(p, c);
  return c >>> 0;
}

/** Every storage file starts with these bytes: an 8-byte magic naming its kind, the format version, a CRC. */
export const FILE_HEADER_BYTES = 16;

/** The header of a file of the kind `magic` names (8 bytes, e.g. 'SVCWAL\0\x01'). */
export function fileHeader(magic: Buffer): Buffer {
  const b = Buffer.alloc(FILE_HEADER_BYTES);
  magic.copy(b, 0, 0, 8);
  b.writeUInt32LE(FORMAT_VERSION, 8);
  b.writeUInt32LE(crc(b.subarray(0, 12)), 12);
  return b;
}

/** Builds an AAD from tagged fields so no two different positions can produce the same bytes. */
export function aad(kind: string, fields: (string | number)[]): Uint8Array {
  const parts: Buffer[] = [Buffer.from(`svc/${kind}/v${FORMAT_VERSION}`)];
  for (const f of fields) {
    if (typeof f === 'number') {
      const b = Buffer.alloc(9);
      b[0] = 0x6e; // 'n'
      b.writeBigUInt64LE(BigInt(f), 1);
      parts.push(b);
    } else {
      const s = Buffer.from(f, 'utf8');
      const b = Buffer.alloc(5);
      b[0] = 0x73; // 's'
      b.writeUInt32LE(s.length, 1);
      parts.push(b, s);
    }
  }
  return Buffer.concat(parts);
}

/** A sequential reader over a file that serves small ranges from one large buffered read. */
export class ChunkReader {
  private window: Uint8Array = new Uint8Array(0);
  private windowStart = 0;

  constructor(
    private readonly read: (position: number, length: number) => Promise<Uint8Array>,
    readonly fileBytes: number,
    private readonly chunkBytes = 1 << 20,
  ) {}

  /** Bytes [offset, offset + length) when the chunk read last holds them all (no read, no await), else null. */
  peek(offset: number, length: number): Uint8Array | null {
    if (offset >= this.windowStart && offset + length <= this.windowStart + this.window.length) {
      return this.window.subarray(offset - this.windowStart, offset + length - this.windowStart);
    }
    return null;
  }

  /** Bytes [offset, offset + length), shorter only at end of file. */
  async get(offset: number, length: number): Promise<Uint8Array> {
    const end = Math.min(offset + length, this.fileBytes);
    if (offset >= this.windowStart && end <= this.windowStart + this.window.length) {
      return this.window.subarray(offset - this.windowStart, end - this.windowStart);
    }
    this.window = await this.read(offset, Math.max(length, this.chunkBytes));
    this.windowStart = offset;
    return this.window.subarray(0, Math.min(length, this.window.length));
  }
}

/** Frame kinds of the block files (segments, graph files). */
export const KIND_BLOCK = 1;
export const KIND_FOOTER = 2;

/**
 * The writing end of a block file (segments, graph files): records gathered into blocks of about
 * `blockBytesMax`, each sealed under its index and written as one frame (each file kind has its own
 * frame layout); at the end a sealed footer frame, a u32 trailer giving that frame's length (readers
 * read it first), and an fsync of the file.
 */
export class BlockFileWriter {
  private parts: Buffer[] = [];
  private partBytes = 0;
  /** Blocks written so far. */
  blocks = 0;
  /** Where the next frame goes: after finish, the file's length. */
  offset: number;

  constructor(
    private readonly h: FileHandle, start: number,
    private readonly frame: (kind: number, sealed: Uint8Array) => Buffer,
    private readonly sealBlock: (plain: Buffer, index: number) => Uint8Array,
    private readonly blockBytesMax: number,
  ) {
    this.offset = start;
  }

  /** Adds bytes to the block being gathered; writes it once it holds `blockBytesMax`. */
  async push(...chunks: Buffer[]): Promise<void> {
    for (const c of chunks) {
      this.parts.push(c);
      this.partBytes += c.length;
    }
    if (this.partBytes >= this.blockBytesMax) await this.flush();
  }

  private async flush(): Promise<void> {
    if (this.partBytes === 0) return;
    const plain = Buffer.concat(this.parts, this.partBytes);
    this.parts = [];
    this.partBytes = 0;
    await this.write(this.frame(KIND_BLOCK, this.sealBlock(plain, this.blocks)));
    this.blocks++;
  }

  private async write(b: Buffer): Promise<void> {
    await this.h.write(b, this.offset);
    this.offset += b.length;
  }

  /**
   * The last block, then the footer `sealFooter` makes (called once every block is written: `blocks`
   * and `offset`, the footer's own offset, are final), the trailer, and fsync. Closing is the caller's.
   */
  async finish(sealFooter: () => Uint8Array): Promise<void> {
    await this.flush();
    const f = this.frame(KIND_FOOTER, sealFooter());
    await this.write(f);
    const trailer = Buffer.alloc(4);
    trailer.writeUInt32LE(f.length, 0);
    await this.write(trailer);
    await this.h.sync();
  }
}
