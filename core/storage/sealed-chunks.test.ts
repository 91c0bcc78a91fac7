import { mkdtempSync, readFileSync, rmSync, truncateSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { XChaChaSealer } from '../crypto/sealer.js';
import { NodeFileSystem } from './fs.js';
import { readSealedChunks, SealedChunkWriter } from './sealed-chunks.js';

/** A streamed image's file: chunks read back as written, and any damage, cut or swap refused. */
const dirs: string[] = [];
afterEach(() => {
  for (const d of dirs.splice(0)) rmSync(d, { recursive: true, force: true });
});

const fs = new NodeFileSystem();
const sealer = new XChaChaSealer(new Uint8Array(32).fill(4));

async function write(chunks: Buffer[], tag = 't1'): Promise<string> {
  const d = mkdtempSync(join(tmpdir(), 'svc-sealed-chunks-'));
  dirs.push(d);
  const path = join(d, 'image.img');
  const w = await SealedChunkWriter.create(fs, path, sealer, tag);
  for (const c of chunks) await w.append(c);
  await w.finish();
  return path;
}

async function read(path: string, count: number, tag = 't1'): Promise<Buffer[]> {
  const out: Buffer[] = [];
  for await (const c of readSealedChunks(fs, path, sealer, tag, count)) out.push(Buffer.from(c));
  return out;
}

describe('sealed chunk files', () => {
  const chunks = [Buffer.from('first'), Buffer.alloc(70_000, 7), Buffer.alloc(0), Buffer.from('last')];

  it('reads back what was written, sealed (no plaintext in the file)', async () => {
    const path = await write(chunks);
    expect(await read(path, 4)).toEqual(chunks);
    expect(readFileSync(path).includes(Buffer.from('first'))).toBe(false);
  });

  it('refuses a flipped byte, another tag, a wrong count and a file cut short', async () => {
    const path = await write(chunks);
    await expect(read(path, 4, 'other')).rejects.toThrow();
    await expect(read(path, 3)).rejects.toThrow(/after its 3 chunks/);
    await expect(read(path, 5)).rejects.toThrow(/ends after 4/);
    const b = readFileSync(path);
    b[20] ^= 1;
    writeFileSync(path, b);
    // Storage corruption, with the file and the chunk's offset.
    await expect(read(path, 4)).rejects.toMatchObject({ name: 'StorageCorruption', file: path, offset: 0, what: 'chunk 0 fails authentication (damaged, or not this stream\'s)' });
    const cut = await write(chunks);
    truncateSync(cut, readFileSync(cut).length - 3);
    await expect(read(cut, 4)).rejects.toThrow(/past the end/);
  });

  describe('resume after a restart', () => {
    /** The file as SealedChunkWriter leaves it after `n` of `chunks` (not finished: a writer killed). */
    async function partial(n: number, tag = 't1'): Promise<string> {
      const d = mkdtempSync(join(tmpdir(), 'svc-sealed-chunks-'));
      dirs.push(d);
      const path = join(d, 'image.img');
      const w = await SealedChunkWriter.create(fs, path, sealer, tag);
      for (const c of chunks.slice(0, n)) await w.append(c);
      await w.abort();
      return path;
    }
    /** Resumes `path`, appends the chunks after those held and finishes; what it held and cut. */
    async function resumeAndFinish(path: string, tag = 't1'): Promise<{ held: number; cutBytes: number }> {
      const { writer, cutBytes } = await SealedChunkWriter.resume(fs, path, sealer, tag);
      const held = writer.chunks;
      for (const c of chunks.slice(held)) await writer.append(c);
      await writer.finish();
      return { held, cutBytes };
    }

    it('appends after the chunks held: the file is byte for byte the one an uninterrupted writer makes', async () => {
      const whole = readFileSync(await write(chunks));
      for (const n of [0, 1, 2, 4]) {
        const path = await partial(n);
        expect(await resumeAndFinish(path)).toEqual({ held: n, cutBytes: 0 });
        expect(await read(path, 4)).toEqual(chunks);
        // Sealing takes a fresh nonce each time: the same framing and size, not the same bytes.
        expect(readFileSync(path).length).toBe(whole.length);
      }
    });

    it('keeps the chunks held as they were (not rewritten)', async () => {
      const path = await partial(2);
      const before = readFileSync(path);
      await resumeAndFinish(path);
      expect(readFileSync(path).subarray(0, before.length).equals(before)).toBe(true);
    });

    it('cuts a torn last chunk (cut mid-header or mid-record) back to the last whole one', async () => {
      const one = readFileSync(await partial(1)).length;
      for (const extra of [1, 3, 4, 20, 50_000]) {
        const path = await partial(2);
        truncateSync(path, one + extra);
        expect(await resumeAndFinish(path)).toEqual({ held: 1, cutBytes: extra });
        expect(await read(path, 4)).toEqual(chunks);
      }
    });

    it('cuts a garbled chunk and everything after it, a length past the end, and a chunk of another tag', async () => {
      const one = readFileSync(await partial(1)).length;
      const path = await partial(3);
      const b = readFileSync(path);
      b[one + 40] ^= 1; // inside chunk 1's sealed bytes
      writeFileSync(path, b);
      expect(await resumeAndFinish(path)).toEqual({ held: 1, cutBytes: b.length - one });
      expect(await read(path, 4)).toEqual(chunks);

      const long = await partial(2);
      const l = readFileSync(long);
      l.writeUInt32LE(0xfffffff0, one); // chunk 1's length: past the end
      writeFileSync(long, l);
      expect((await resumeAndFinish(long)).held).toBe(1);
      expect(await read(long, 4)).toEqual(chunks);

      // Zeros where chunks were (a power loss): a zero length opens nothing.
      const zeros = await partial(2);
      const z = readFileSync(zeros);
      z.fill(0, one);
      writeFileSync(zeros, z);
      expect((await resumeAndFinish(zeros)).held).toBe(1);

      // Another stream's file: nothing of it is held for this one.
      const other = await partial(3, 't2');
      expect(await resumeAndFinish(other)).toEqual({ held: 0, cutBytes: readFileSync(await partial(3, 't2')).length });
      expect(await read(other, 4)).toEqual(chunks);
    });
  });
});
