import { describe, expect, it } from 'vitest';
import { FaultyFileSystem, SimulatedCrash } from './faulty-fs.js';

const b = (s: string) => new Uint8Array(Buffer.from(s));
const s = (u: Uint8Array) => Buffer.from(u).toString();

describe('FaultyFileSystem', () => {
  it('keeps synced data and directory entries, drops the unsynced on crash', async () => {
    const fs = new FaultyFileSystem(1);
    await fs.mkdir('/d');
    await fs.fsyncDir('/');
    const h = await fs.open('/d/f', 'create');
    await h.write(b('durable'), 0);
    await h.sync();
    await fs.fsyncDir('/d');
    await h.append(b('+lost'));
    const g = await fs.open('/d/g', 'create');
    await g.write(b('x'), 0);
    await g.sync();
    fs.crash({ writes: 'drop', namespace: 'drop' });
    expect(s(await fs.readFile('/d/f'))).toBe('durable');
    expect(await fs.stat('/d/g')).toBeNull();
    await expect(h.read(0, 1)).rejects.toThrow(SimulatedCrash);
  });

  it('tears the last unsynced write to a prefix and can lose an unsynced rename', async () => {
    const fs = new FaultyFileSystem(2);
    const h = await fs.open('/f', 'create');
    await fs.fsyncDir('/');
    await h.write(b('aaaa'), 0);
    await h.write(b('bbbbbbbb'), 4);
    await fs.rename('/f', '/g');
    fs.crash({ writes: 'tear', namespace: 'drop' });
    const got = s(await fs.readFile('/f'));
    expect(got.startsWith('aaaa')).toBe(true);
    expect(got.length).toBeLessThan(12);
    expect(await fs.stat('/g')).toBeNull();
  });

  it('dies at an armed crash point until restart', async () => {
    const fs = new FaultyFileSystem(3);
    fs.crashAfter(2, { namespace: 'drop' });
    await fs.mkdir('/a');
    await expect(fs.mkdir('/b')).rejects.toThrow(SimulatedCrash);
    await expect(fs.stat('/')).rejects.toThrow(SimulatedCrash);
    fs.restart();
    expect(await fs.readdir('/')).toEqual([]);
  });

  it('flips one bit', async () => {
    const fs = new FaultyFileSystem(4);
    const h = await fs.open('/f', 'create');
    await h.write(b('A'), 0);
    await h.sync();
    fs.flipBit('/f', 0);
    expect(s(await fs.readFile('/f'))).toBe('@');
  });

  it('a process a crash ended writes nothing after it: neither an operation under way then, nor a later call through its view', async () => {
    const fs = new FaultyFileSystem(2);
    fs.yieldEachOp = false;
    const before = fs.processView();
    // Begun before the crash, done after it (the crash comes while it waits its turn).
    const underWay = fs.mkdir('/old');
    fs.crash({ writes: 'drop', namespace: 'drop' });
    fs.restart();
    await expect(underWay).rejects.toThrow(SimulatedCrash);
    await expect(before.mkdir('/later')).rejects.toThrow(SimulatedCrash);
    // The next process's view works, and sees neither directory.
    const after = fs.processView();
    await after.mkdir('/new');
    expect(await after.stat('/old')).toBeNull();
    expect(await after.stat('/later')).toBeNull();
    expect(await after.stat('/new')).not.toBeNull();
  });
});
