import { StorageCorruption } from './errors.js';
import type { Sealer } from '../crypto/sealer.js';
import type { FileHandle, FileSystem } from './fs.js';

/**
 * A file of sealed chunks, written once front to back and read back in order: what a consensus member
 * keeps of a database image streamed to it (roles/raft/member-host.ts) until it has restored it.
 *
 *   record*: `length u32 LE | sealed(chunk)`, chunk i sealed with the additional data `<tag>:<i>`
 *
 * The tag names the file's content (a stream id), so a chunk of another file, or one moved within this
 * one, fails to open. A file cut short is found by the reader's expected chunk count.
 *
 * Chunks are not synced one by one (finish() syncs the file): a writer killed mid-file leaves its whole
 * chunks and perhaps a torn one; a power loss may also lose or garble a tail of chunks appended before
 * it. SealedChunkWriter.resume keeps the longest prefix of whole chunks that open, and appends after it.
 */

/** One sealed record may hold this much (a chunk of an image stream is at most a few MiB). */
const RECORD_BYTES_MAX = 64 << 20;

const aad = (tag: string, i: number): Uint8Array => Buffer.from(`${tag}:${i}`, 'utf8');

export class SealedChunkWriter {
  private count = 0;

  private constructor(private readonly h: FileHandle, private readonly sealer: Sealer, private readonly tag: string) {}

  /** A new file at `path` (which must not exist). */
  static async create(fs: FileSystem, path: string, sealer: Sealer, tag: string): Promise<SealedChunkWriter> {
    return new SealedChunkWriter(await fs.open(path, 'create'), sealer, tag);
  }

  /**
   * The file at `path` (which must exist), opened for appending after its last whole chunk: every record
   * is read and opened with its additional data in order; from the first one that is torn (cut short, a
   * length past the end) or does not open (garbled, another tag, moved), the rest is cut off. The file is
   * then synced (cut or not): the chunks it reports held stay held across a power loss. `cutBytes`: what
   * was cut.
   */
  static async resume(fs: FileSystem, path: string, sealer: Sealer, tag: string): Promise<{ writer: SealedChunkWriter; cutBytes: number }> {
    const h = await fs.open(path, 'readwrite');
    try {
      const size = await h.size();
      let at = 0;
      let count = 0;
      while (at + 4 <= size) {
        const n = Buffer.from(await h.read(at, 4)).readUInt32LE(0);
        if (n > RECORD_BYTES_MAX || at + 4 + n > size) break;
        try {
          sealer.open(await h.read(at + 4, n), aad(tag, count));
        } catch {
          break;
        }
        at += 4 + n;
        count++;
      }
      if (at < size) await h.truncate(at);
      await h.sync();
      const w = new SealedChunkWriter(h, sealer, tag);
      w.count = count;
      return { writer: w, cutBytes: size - at };
    } catch (e) {
      await h.close().catch(() => undefined);
      throw e;
    }
  }

  get chunks(): number {
    return this.count;
  }

  async append(chunk: Uint8Array): Promise<void> {
    const sealed = this.sealer.seal(chunk, aad(this.tag, this.count));
    const rec = Buffer.allocUnsafe(4 + sealed.length);
    rec.writeUInt32LE(sealed.length, 0);
    rec.set(sealed, 4);
    await this.h.append(rec);
    this.count++;
  }

  /** Durable, then closed. */
  async finish(): Promise<void> {
    await this.h.sync();
    await this.h.close();
  }

  /** Closed, not synced (the caller removes the file). */
  async abort(): Promise<void> {
    await this.h.close().catch(() => undefined);
  }
}

/**
 * The chunks of a file SealedChunkWriter wrote, in order. Throws StorageCorruption (with the offset) if
 * it holds other than `chunks` of them, or one fails to open (damaged, or another file's).
 */
export async function* readSealedChunks(fs: FileSystem, path: string, sealer: Sealer, tag: string, chunks: number): AsyncGenerator<Uint8Array> {
  const h = await fs.open(path, 'read');
  try {
    const size = await h.size();
    let at = 0;
    for (let i = 0; i < chunks; i++) {
      const head = await h.read(at, 4);
      if (head.length < 4) throw new StorageCorruption(path, at, `the file ends after ${i} of its ${chunks} chunks`);
      const n = Buffer.from(head.buffer, head.byteOffset, 4).readUInt32LE(0);
      if (n > RECORD_BYTES_MAX || at + 4 + n > size) throw new StorageCorruption(path, at, `chunk ${i} runs past the end of the file`);
      const sealed = await h.read(at + 4, n);
      let chunk: Uint8Array;
      try {
        chunk = sealer.open(sealed, aad(tag, i));
      } catch {
        throw new StorageCorruption(path, at, `chunk ${i} fails authentication (damaged, or not this stream's)`);
      }
      at += 4 + n;
      yield chunk;
    }
    if (at !== size) throw new StorageCorruption(path, at, `${size - at} bytes after its ${chunks} chunks`);
  } finally {
    await h.close();
  }
}
