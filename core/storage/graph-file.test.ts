import { describe, expect, it } from 'vitest';
import { FaultyFileSystem } from '../testing/faulty-fs.js';
import { InsecureSealer, XChaChaSealer, type Sealer } from '../crypto/sealer.js';
import { randomDataKey } from '../crypto/keys.js';
import { StorageCorruption } from './errors.js';
import { GraphFileWriter, readGraphFile } from './graph-file.js';

const META = { entry: 2, m: 4, ef_construction: 16, kind: 'l2', dim: 3, quantization: 'none' };

/** Node i: id `n<i>`, token i % 3, links to the next nodes (more on level 0), level i % 3 === 2 ? 1 : 0. */
async function write(fs: FaultyFileSystem, sealer: Sealer, uid: string, nodes: number): Promise<void> {
  await fs.mkdir('/c');
  const w = await GraphFileWriter.create(fs, '/c/graph.tmp', sealer, uid, () => fs.rename('/c/graph.tmp', '/c/graph'));
  for (let i = 0; i < nodes; i++) {
    const links = [[(i + 1) % nodes, (i + 2) % nodes]];
    if (i % 3 === 2) links.push([(i + 3) % nodes]);
    await w.addNode(`n${i}`, i % 3, i * 7, 0xffffffff - i, links);
  }
  await w.finish(META);
}

describe.each<[string, () => Sealer]>([
  ['encrypted', () => new XChaChaSealer(randomDataKey())],
  ['insecure', () => new InsecureSealer()],
])('graph files (%s)', (_name, makeSealer) => {
  it('read back every node, fingerprint and link as written', async () => {
    const fs = new FaultyFileSystem(1);
    const sealer = makeSealer();
    await write(fs, sealer, 'uidA', 20);
    expect(await fs.stat('/c/graph.tmp')).toBeNull();
    const g = (await readGraphFile(fs, '/c/graph', sealer, 'uidA'))!;
    expect(g.meta).toMatchObject({ ...META, nodes: 20, blocks: 1 });
    expect(g.ids).toEqual(Array.from({ length: 20 }, (_, i) => `n${i}`));
    expect([...g.toks]).toEqual(Array.from({ length: 20 }, (_, i) => i % 3));
    expect(g.fingerprints[2 * 5]).toBe(35);
    expect(g.fingerprints[2 * 5 + 1]).toBe(0xffffffff - 5);
    expect(g.levels[5]).toBe(1);
    expect([...g.links.subarray(g.offsets[5], g.offsets[6])]).toEqual([2, 6, 7, 1, 8]);
    expect(await readGraphFile(fs, '/c/none', sealer, 'uidA')).toBeNull();
  });

  it('detect every single-bit flip, and a file of another collection', async () => {
    const fs = new FaultyFileSystem(2);
    fs.yieldEachOp = false;
    const sealer = makeSealer();
    await write(fs, sealer, 'uidA', 4);
    await expect(readGraphFile(fs, '/c/graph', sealer, 'uidB')).rejects.toThrow(StorageCorruption);
    const bits = fs.peek('/c/graph').length * 8;
    let detected = 0;
    for (let bit = 0; bit < bits; bit++) {
      fs.flipBit('/c/graph', bit);
      const e = await readGraphFile(fs, '/c/graph', sealer, 'uidA').catch((x) => x);
      if (e instanceof StorageCorruption) detected++;
      fs.flipBit('/c/graph', bit);
    }
    expect(detected).toBe(bits);
  });

  it('refuse a file cut short or extended', async () => {
    const fs = new FaultyFileSystem(3);
    const sealer = makeSealer();
    await write(fs, sealer, 'uidA', 10);
    const bytes = Buffer.from(fs.peek('/c/graph'));
    await fs.truncate('/c/graph', bytes.length - 1);
    await expect(readGraphFile(fs, '/c/graph', sealer, 'uidA')).rejects.toThrow(StorageCorruption);
    fs.poke('/c/graph', 0, Buffer.concat([bytes, Buffer.alloc(8)]));
    await expect(readGraphFile(fs, '/c/graph', sealer, 'uidA')).rejects.toThrow(StorageCorruption);
  });
});
