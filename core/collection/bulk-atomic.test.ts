import { describe, expect, it } from 'vitest';
import { FaultyFileSystem } from '../testing/faulty-fs.js';
import { Database } from './database.js';
import { buildIndexInline } from './rebuild.js';

const KEY = new Uint8Array(32).fill(9);

describe('bulk upsert under power loss', () => {
  it('is applied whole or not at all, at every crash point, and whole once acknowledged', async () => {
    let acknowledgedWhole = 0;
    let lostWhole = 0;
    for (let crashAt = 1; crashAt <= 40; crashAt += 1) {
      const fs = new FaultyFileSystem(1000 + crashAt);
      // Each process its own view of the disk: the crashed one's work still under way (the index build of
      // an acknowledged bulk and the graph file it writes) fails from the crash on, as a killed process's would.
      const open = () => Database.open({ dataDir: '/data', masterKey: KEY, fs: fs.processView(), buildIndex: buildIndexInline });
      let db = await open();
      await db.createCollection({ name: 'c', dim: 4, metric: 'l2' });
      const points = Array.from({ length: 2500 }, (_, i) => ({ id: `p${i}`, vector: [i, 1, 2, 3], payload: { i } }));
      fs.crashAfter(crashAt);
      let acked = false;
      try {
        await db.bulkUpsert('c', { points });
        acked = true;
      } catch {
        // the simulated power loss
      }
      fs.crash();
      fs.restart();
      db = await open();
      const count = (await db.collectionInfo('c')).count;
      if (acked) expect(count).toBe(2500);
      else expect([0, 2500]).toContain(count);
      if (count === 2500) {
        acknowledgedWhole++;
        expect((await db.get('c', 'p2499')).payload).toEqual({ i: 2499 });
      } else lostWhole++;
      await db.close();
    }
    // The sweep must cover both outcomes, or it proved nothing.
    expect(acknowledgedWhole).toBeGreaterThan(0);
    expect(lostWhole).toBeGreaterThan(0);
  }, 120_000);
});
