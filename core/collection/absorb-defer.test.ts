import { describe, expect, it } from 'vitest';
import { systemClock } from '../base/clock.js';
import { resolveLimits } from '../base/limits.js';
import { Prng } from '../base/prng.js';
import { Collection } from './collection.js';
import { parseCollectionParams } from './params.js';
import { buildIndexInline } from './rebuild.js';

// A read replica's graphs take new points only while it is not applying its leader's records
// (Database.deferIndexingWhile): applying never queues behind index inserts, reads stay exact, and a
// read that waits on the index (strong, readiness) is never held back.

const limits = resolveLimits({});
const DIM = 8;
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

function collection(busy: () => boolean): Collection {
  const spec = parseCollectionParams({ name: 'c', dim: DIM, metric: 'l2' }, limits);
  return new Collection({ uid: 'u', spec, limits, clock: systemClock, seed: 7, buildIndex: buildIndexInline, deferAbsorb: busy });
}

function upsert(col: Collection, from: number, n: number, seq: number, prng: Prng): void {
  col.apply({ t: 'upsert', points: Array.from({ length: n }, (_, i) => ({ id: `p${from + i}`, vector: Float32Array.from({ length: DIM }, () => prng.gaussian()), payload: null })) }, seq);
}

describe('deferred absorb', () => {
  it('waits while busy, indexes once idle, and exact searches see every point meanwhile', async () => {
    let busy = true;
    const col = collection(() => busy);
    const prng = new Prng(3);
    upsert(col, 0, 200, 1, prng);
    await sleep(30);
    expect(col.indexState).toBe('stale'); // nothing absorbed while busy
    expect(col.count).toBe(200);
    busy = false;
    for (let i = 0; i < 200 && col.indexState !== 'current'; i++) await sleep(5);
    expect(col.indexState).toBe('current');
  });

  it('a read waiting on the index is not held back by a replica that stays busy', async () => {
    const col = collection(() => true);
    upsert(col, 0, 300, 1, new Prng(4));
    await Promise.race([col.settle(), sleep(5000).then(() => { throw new Error('settle waited for the replica to be idle'); })]);
    expect(col.indexState).toBe('current');
  });
});
