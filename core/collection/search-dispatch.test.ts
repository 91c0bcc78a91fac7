import { setImmediate as nextTurn } from 'node:timers/promises';
import { describe, expect, it } from 'vitest';
import { loopIdleMs, SearchDispatch } from './search-dispatch.js';

describe('SearchDispatch', () => {
  /** An idle clock the test moves: `wait(ms)` is the loop having waited that long for I/O. */
  const clock = () => {
    let idle = 0;
    return { idleMs: () => idle, wait: (ms: number) => { idle += ms; } };
  };

  it('keeps a search on the calling thread only when the loop waited since the last one, in a turn of its own, with no worker busy', async () => {
    const c = clock();
    const d = new SearchDispatch({ idleMs: c.idleMs });
    expect(d.runHere(0, 1)).toBe(true); // the first search after start
    await nextTurn();
    c.wait(0.001); // the loop only passed through its poll phase: requests were queued
    expect(d.runHere(0, 2)).toBe(false);
    await nextTurn();
    c.wait(0.5); // it waited half a millisecond for the next request: a lone client
    expect(d.runHere(0, 3)).toBe(true);
    await nextTurn();
    c.wait(0.5);
    expect(d.runHere(1, 4)).toBe(false); // a search is already in a worker
    c.wait(0.5);
    expect(d.runHere(0, 4)).toBe(false); // another search started in this same turn
  });

  it('sends every search to the pool when quietMs is Infinity', async () => {
    const c = clock();
    const d = new SearchDispatch({ idleMs: c.idleMs, quietMs: Infinity });
    for (let i = 0; i < 5; i++) {
      c.wait(10);
      expect(d.runHere(0, i * 100)).toBe(false);
      await nextTurn();
    }
  });

  it("reads the real loop's idle time: it grows while the loop waits on a timer, not while code runs", async () => {
    const before = loopIdleMs();
    const until = performance.now() + 20;
    while (performance.now() < until); // busy: no poll wait
    const busy = loopIdleMs() - before;
    await new Promise((r) => setTimeout(r, 30));
    const waited = loopIdleMs() - before - busy;
    expect(busy).toBeLessThan(1);
    expect(waited).toBeGreaterThan(10);
  });
});
