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
    await expect(read(path, 4)).rejects.toThrow();
    const cut = await write(chunks);
    truncateSync(cut, readFileSync(cut).length - 3);
    await expect(read(cut, 4)).rejects.toThrow(/past the end/);
  });
});
