import { describe, expect, it } from 'vitest';
import { FaultyFileSystem } from '../testing/faulty-fs.js';
import { InsecureSealer, XChaChaSealer, type Sealer } from '../crypto/sealer.js';
import { randomDataKey } from '../crypto/keys.js';
import { StorageCorruption } from './errors.js';
import { SegmentWriter, readSegment } from './segment.js';
import type { Op } from './codec.js';

const op = (i: number): Op => ({ t: 'upsert', points: [{ id: `p${i}`, vector: new Float32Array([i, i + 0.5]), payload: i % 2 ? { i } : null }] });

async function readAll(it: AsyncIterable<Op>): Promise<Op[]> {
  const out: Op[] = [];
  for await (const o of it) out.push(o);
  return out;
}

async function write(fs: FaultyFileSystem, path: string, sealer: Sealer, uid: string, segId: number, n: number, blockBytes: number) {
  await fs.mkdir('/c');
  const w = await SegmentWriter.create(fs, path, sealer, uid, segId, blockBytes);
  for (let i = 0; i < n; i++) await w.add(op(i));
  return w.finish();
}

describe.each<[string, () => Sealer]>([
  ['encrypted', () => new XChaChaSealer(randomDataKey())],
  ['insecure', () => new InsecureSealer()],
])('segments (%s)', (_name, makeSealer) => {
  it('stream records back in order across blocks', async () => {
    const fs = new FaultyFileSystem(1);
    const sealer = makeSealer();
    const info = await write(fs, '/c/seg-1', sealer, 'uidA', 1, 50, 200);
    expect(info.blocks).toBeGreaterThan(3);
    expect(info.records).toBe(50);
    const back = await readAll(readSegment(fs, '/c/seg-1', sealer, 'uidA', 1));
    expect(back).toEqual(Array.from({ length: 50 }, (_, i) => op(i)));
  });

  it('detect every single-bit flip', async () => {
    const fs = new FaultyFileSystem(2);
    fs.yieldEachOp = false;
    const sealer = makeSealer();
    await write(fs, '/c/seg-1', sealer, 'uidA', 1, 3, 40);
    const bits = fs.peek('/c/seg-1').length * 8;
    let detected = 0;
    for (let bit = 0; bit < bits; bit++) {
      fs.flipBit('/c/seg-1', bit);
      const e = await readAll(readSegment(fs, '/c/seg-1', sealer, 'uidA', 1)).catch((x) => x);
      if (e instanceof StorageCorruption) detected++;
      fs.flipBit('/c/seg-1', bit);
    }
    expect(detected).toBe(bits);
  });

  it('refuse a truncated file, swapped blocks, and blocks read as another collection or segment', async () => {
    const fs = new FaultyFileSystem(3);
    const sealer = makeSealer();
    await write(fs, '/c/seg-1', sealer, 'uidA', 1, 4, 1);
    const bytes = Buffer.from(fs.peek('/c/seg-1'));
    await expect(readAll(readSegment(fs, '/c/seg-1', sealer, 'uidB', 1))).rejects.toThrow(StorageCorruption);
    await expect(readAll(readSegment(fs, '/c/seg-1', sealer, 'uidA', 2))).rejects.toThrow(StorageCorruption);
    // Blocks 0 and 1 have the same length (same-sized records): swap them.
    const frameLen = 5 + bytes.readUInt32LE(17);
    const swapped = Buffer.from(bytes);
    bytes.copy(swapped, 16, 16 + frameLen, 16 + 2 * frameLen);
    bytes.copy(swapped, 16 + frameLen, 16, 16 + frameLen);
    expect(swapped.equals(bytes)).toBe(false);
    fs.poke('/c/seg-1', 0, swapped);
    await expect(readAll(readSegment(fs, '/c/seg-1', sealer, 'uidA', 1))).rejects.toThrow(/block 0 failed authentication/);
    fs.poke('/c/seg-1', 0, bytes);
    await fs.truncate('/c/seg-1', bytes.length - 1);
    await expect(readAll(readSegment(fs, '/c/seg-1', sealer, 'uidA', 1))).rejects.toThrow(StorageCorruption);
  });
});
