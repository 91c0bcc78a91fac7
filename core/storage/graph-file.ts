import { randomBytes } from 'node:crypto';
import type { Sealer } from '../crypto/sealer.js';
import { StorageCorruption } from './errors.js';
import { BlockFileWriter, ChunkReader, FILE_HEADER_BYTES, KIND_BLOCK, KIND_FOOTER, aad, crc, fileHeader } from './format.js';
import type { FileHandle, FileSystem } from './fs.js';

/**
 * A collection's HNSW graph as it was when written (collections/<uid>/graph): derived data, kept so an
 * open need not rebuild it. Every node names the point it indexed (id, token index, a 64-bit fingerprint
 * of the vector) rather than a slot, since slots are renumbered by every recovery; links are by node
 * index. The reader (the collection layer) maps nodes onto the slots it recovered, and any damage here
 * only ever costs a rebuild.
 *
 *   header     16 bytes: magic 'SVCGRF\0\x01' (last byte: this file's layout version), u32 format, u32 crc
 *   write id   u64: random per write, bound into every AAD (no frame of another write of this file fits)
 *   frames     `kind u8 (1 block, 2 footer) | len u32 | crc32(sealed) u32 | sealed`
 *   trailer    u32: the footer frame's length (the footer is read first)
 *
 * Block AAD ('graph', uid, write id, block index); footer AAD ('graph-footer', uid, write id). The CRC of
 * each frame's sealed bytes finds damage without the key. A block holds whole node records:
 * `tok u32 | fp u32 u32 | level u8 | idLen u16 | id utf8 | per level 0..level: count u16, count x node u32`.
 * The footer is JSON (GraphMeta).
 */

/** The layout version, the magic's last byte: a file of another version is not read. */
export const GRAPH_FILE_VERSION = 1;
export const GRAPH_FILE = 'graph';
export const GRAPH_TMP = 'graph.tmp';
const MAGIC = Buffer.from(`SVCGRF\0${String.fromCharCode(GRAPH_FILE_VERSION)}`, 'latin1');
const WRITE_ID_BYTES = 8;
const BODY_START = FILE_HEADER_BYTES + WRITE_ID_BYTES;
const FRAME_PREFIX_BYTES = 9;
const BLOCK_BYTES = 1 << 20;
const FRAME_BYTES_MAX = 64 << 20;
const ID_BYTES_MAX = 0xffff;
const LEVEL_MAX = 30;

/** What a graph was built with and how it is laid out: a graph of other parameters is not used. */
export interface GraphMeta {
  nodes: number;
  /** Words of `links` (per node per level: a count, then that many node indices). */
  link_words: number;
  blocks: number;
  /** Entry node index (-1: empty). */
  entry: number;
  m: number;
  ef_construction: number;
  kind: string;
  dim: number;
  quantization: string;
  /** Where the footer frame starts (a file cut short or extended does not match). */
  footer_offset: number;
}

/** A graph file read back: per node its point, fingerprint, level and links (node indices). */
export interface GraphContents {
  meta: GraphMeta;
  ids: string[];
  toks: Uint32Array;
  /** Two words per node. */
  fingerprints: Uint32Array;
  levels: Uint8Array;
  /** Start of each node's links in `links`; one more entry at the end. */
  offsets: Int32Array;
  links: Int32Array;
}

const blockAad = (uid: string, writeId: number, i: number) => aad('graph', [uid, writeId, i]);
const footerAad = (uid: string, writeId: number) => aad('graph-footer', [uid, writeId]);

function frame(kind: number, sealed: Uint8Array): Buffer {
  const b = Buffer.allocUnsafe(FRAME_PREFIX_BYTES + sealed.length);
  b[0] = kind;
  b.writeUInt32LE(sealed.length, 1);
  b.writeUInt32LE(crc(sealed), 5);
  b.set(sealed, FRAME_PREFIX_BYTES);
  return b;
}

/**
 * Writes a graph to a temp file node by node, sealing ~1 MiB blocks as they fill (each write awaited,
 * so a caller adding nodes in a loop yields between blocks). `finish` fsyncs it and hands it to
 * `commit`, which puts it in place (rename, fsync of the directory); `abort` removes it.
 */
export class GraphFileWriter {
  private nodes = 0;
  private linkWords = 0;
  private done = false;
  private readonly out: BlockFileWriter;

  private constructor(
    private readonly fs: FileSystem, private readonly tmp: string, private readonly h: FileHandle,
    private readonly sealer: Sealer, private readonly uid: string, private readonly writeId: number,
    private readonly commit: () => Promise<void>,
  ) {
    this.out = new BlockFileWriter(h, BODY_START, frame, (plain, i) => sealer.seal(plain, blockAad(uid, writeId, i)), BLOCK_BYTES);
  }

  static async create(fs: FileSystem, tmp: string, sealer: Sealer, uid: string, commit: () => Promise<void>): Promise<GraphFileWriter> {
    if (await fs.stat(tmp)) await fs.unlink(tmp);
    const h = await fs.open(tmp, 'create');
    // 48 bits: an AAD number is a safe integer.
    const writeId = randomBytes(6).readUIntLE(0, 6);
    const head = Buffer.alloc(BODY_START);
    fileHeader(MAGIC).copy(head, 0);
    head.writeBigUInt64LE(BigInt(writeId), FILE_HEADER_BYTES);
    try {
      await h.write(head, 0);
    } catch (e) {
      await h.close().catch(() => undefined);
      throw e;
    }
    return new GraphFileWriter(fs, tmp, h, sealer, uid, writeId, commit);
  }

  /**
   * One node: its point (id, token index), its vector's fingerprint, and for each level 0..level its
   * links as node indices (`links[l]`). Resolves at once unless a block was written.
   */
  async addNode(id: string, tok: number, fpLo: number, fpHi: number, links: ArrayLike<number>[]): Promise<void> {
    const idBytes = Buffer.from(id, 'utf8');
    if (idBytes.length > ID_BYTES_MAX) throw new Error(`graph file: an id of ${idBytes.length} bytes`);
    const level = links.length - 1;
    if (level < 0 || level > LEVEL_MAX) throw new Error(`graph file: level ${level}`);
    let words = 0;
    for (const l of links) words += 1 + l.length;
    const rec = Buffer.allocUnsafe(15 + idBytes.length + words * 4);
    rec.writeUInt32LE(tok >>> 0, 0);
    rec.writeUInt32LE(fpLo >>> 0, 4);
    rec.writeUInt32LE(fpHi >>> 0, 8);
    rec[12] = level;
    rec.writeUInt16LE(idBytes.length, 13);
    idBytes.copy(rec, 15);
    let at = 15 + idBytes.length;
    for (const l of links) {
      rec.writeUInt16LE(l.length, at);
      at += 2;
      for (let j = 0; j < l.length; j++) {
        rec.writeUInt32LE(l[j], at);
        at += 4;
      }
    }
    this.nodes++;
    this.linkWords += words;
    await this.out.push(rec.subarray(0, at));
  }

  /** The footer, fsync, then `commit` (which renames the file into place). Returns the file's bytes. */
  async finish(meta: Omit<GraphMeta, 'nodes' | 'link_words' | 'blocks' | 'footer_offset'>): Promise<number> {
    const out = this.out;
    await out.finish(() => {
      const footer: GraphMeta = { ...meta, nodes: this.nodes, link_words: this.linkWords, blocks: out.blocks, footer_offset: out.offset };
      return this.sealer.seal(Buffer.from(JSON.stringify(footer)), footerAad(this.uid, this.writeId));
    });
    await this.h.close();
    this.done = true;
    await this.commit();
    return out.offset;
  }

  async abort(): Promise<void> {
    if (!this.done) await this.h.close().catch(() => undefined);
    await this.fs.unlink(this.tmp).catch(() => undefined);
  }
}

/** An authenticated footer is still checked: its numbers bound what the reader allocates. */
function checkMeta(m: GraphMeta, bad: (offset: number, what: string) => StorageCorruption, footerOffset: number): void {
  const ints = [m.nodes, m.link_words, m.blocks, m.entry, m.m, m.ef_construction, m.dim, m.footer_offset];
  if (!ints.every((x) => Number.isSafeInteger(x)) || typeof m.kind !== 'string' || typeof m.quantization !== 'string') {
    throw bad(footerOffset, 'graph footer has the wrong fields');
  }
  if (m.footer_offset !== footerOffset) throw bad(footerOffset, 'graph footer at the wrong offset (truncated or extended)');
  if (m.nodes < 0 || m.nodes > 0x7fffffff || m.link_words < m.nodes || m.link_words > 0x7fffffff || m.entry < -1 || m.entry >= m.nodes) {
    throw bad(footerOffset, 'graph footer counts out of range');
  }
}

/**
 * Reads a graph file back; null when there is none. Any damage (a checksum, a seal, the layout, another
 * version) throws StorageCorruption: the caller rebuilds the graph instead.
 */
export async function readGraphFile(fs: FileSystem, path: string, sealer: Sealer, uid: string): Promise<GraphContents | null> {
  if ((await fs.stat(path)) === null) return null;
  const h = await fs.open(path, 'read');
  try {
    const size = await h.size();
    const bad = (offset: number, what: string) => new StorageCorruption(path, offset, what);
    if (size < BODY_START + FRAME_PREFIX_BYTES + 4) throw bad(0, 'graph file too short');
    const head = Buffer.from(await h.read(0, BODY_START));
    if (!head.subarray(0, FILE_HEADER_BYTES).equals(fileHeader(MAGIC))) throw bad(0, 'not a graph file of this version');
    const writeId = Number(head.readBigUInt64LE(FILE_HEADER_BYTES));
    const footerFrameLen = Buffer.from(await h.read(size - 4, 4)).readUInt32LE(0);
    const footerOffset = size - 4 - footerFrameLen;
    if (footerFrameLen < FRAME_PREFIX_BYTES || footerOffset < BODY_START) throw bad(size - 4, 'bad graph trailer');
    const ff = Buffer.from(await h.read(footerOffset, footerFrameLen));
    const footerSealed = ff.subarray(FRAME_PREFIX_BYTES);
    if (ff[0] !== KIND_FOOTER || ff.readUInt32LE(1) !== footerSealed.length) throw bad(footerOffset, 'bad graph footer frame');
    if (ff.readUInt32LE(5) !== crc(footerSealed)) throw bad(footerOffset, 'graph footer checksum mismatch');
    let meta: GraphMeta;
    try {
      meta = JSON.parse(Buffer.from(sealer.open(footerSealed, footerAad(uid, writeId))).toString('utf8')) as GraphMeta;
    } catch {
      throw bad(footerOffset, 'graph footer failed authentication');
    }
    checkMeta(meta, bad, footerOffset);
    const n = meta.nodes;
    const out: GraphContents = {
      meta,
      ids: new Array<string>(n),
      toks: new Uint32Array(n),
      fingerprints: new Uint32Array(2 * n),
      levels: new Uint8Array(n),
      offsets: new Int32Array(n + 1),
      links: new Int32Array(meta.link_words),
    };
    const reader = new ChunkReader((p, l) => h.read(p, l), footerOffset);
    let offset = BODY_START;
    let node = 0;
    let word = 0;
    for (let i = 0; i < meta.blocks; i++) {
      const prefix = Buffer.from(await reader.get(offset, FRAME_PREFIX_BYTES));
      if (prefix.length < FRAME_PREFIX_BYTES || prefix[0] !== KIND_BLOCK) throw bad(offset, `bad graph block frame ${i}`);
      const len = prefix.readUInt32LE(1);
      if (len > FRAME_BYTES_MAX || offset + FRAME_PREFIX_BYTES + len > footerOffset) throw bad(offset, `graph block ${i} runs past the footer`);
      const sealed = await reader.get(offset + FRAME_PREFIX_BYTES, len);
      if (prefix.readUInt32LE(5) !== crc(sealed)) throw bad(offset, `graph block ${i} checksum mismatch`);
      let b: Buffer;
      try {
        b = Buffer.from(sealer.open(sealed, blockAad(uid, writeId, i)));
      } catch {
        throw bad(offset, `graph block ${i} failed authentication`);
      }
      let at = 0;
      const cut = () => bad(offset, `graph block ${i} has a cut or oversized record`);
      while (at < b.length) {
        if (node >= n || at + 15 > b.length) throw cut();
        out.toks[node] = b.readUInt32LE(at);
        out.fingerprints[2 * node] = b.readUInt32LE(at + 4);
        out.fingerprints[2 * node + 1] = b.readUInt32LE(at + 8);
        const level = b[at + 12];
        const idLen = b.readUInt16LE(at + 13);
        if (level > LEVEL_MAX || at + 15 + idLen > b.length) throw cut();
        out.levels[node] = level;
        out.ids[node] = b.toString('utf8', at + 15, at + 15 + idLen);
        at += 15 + idLen;
        out.offsets[node] = word;
        for (let l = 0; l <= level; l++) {
          if (at + 2 > b.length) throw cut();
          const cnt = b.readUInt16LE(at);
          at += 2;
          if (at + 4 * cnt > b.length || word + 1 + cnt > meta.link_words) throw cut();
          out.links[word++] = cnt;
          for (let j = 0; j < cnt; j++, at += 4) {
            const to = b.readUInt32LE(at);
            if (to >= n) throw bad(offset, `graph block ${i} links to node ${to} of ${n}`);
            out.links[word++] = to;
          }
        }
        node++;
      }
      offset += FRAME_PREFIX_BYTES + len;
    }
    if (offset !== footerOffset) throw bad(offset, 'bytes between the last graph block and the footer');
    if (node !== n || word !== meta.link_words) throw bad(footerOffset, `graph footer says ${n} nodes, found ${node}`);
    out.offsets[n] = word;
    return out;
  } finally {
    await h.close();
  }
}
