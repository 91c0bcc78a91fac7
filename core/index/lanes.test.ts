import { threadId } from 'node:worker_threads';
import { describe, expect, it } from 'vitest';
import { claimLane, ENGINE_LANES, LANE_OWNER_WORDS, LANES_PER_MEMORY, releaseLane, releaseLanesOf } from './lanes.js';

/** A header with its owner words at `OWNERS` (the words before stand for a memory's other fields). */
const OWNERS = 5;
const header = (): Int32Array => new Int32Array(new SharedArrayBuffer((OWNERS + LANE_OWNER_WORDS) * 4));
const LOOP_LANES = LANES_PER_MEMORY - ENGINE_LANES;
const A = 101;
const B = 202;

describe('scratch lanes with owners', () => {
  it('lanes claimed for two threads: releasing one thread\'s frees exactly its lanes, which can be claimed again', () => {
    const h = header();
    const a = [claimLane(h, OWNERS, 'test', 'loop', A), claimLane(h, OWNERS, 'test', 'loop', A)];
    const b = [claimLane(h, OWNERS, 'test', 'loop', B)];
    const engine = claimLane(h, OWNERS, 'test', 'engine', A);
    expect(a).toEqual([ENGINE_LANES, ENGINE_LANES + 1]);
    expect(b).toEqual([ENGINE_LANES + 2]);
    expect(engine).toBe(0);
    // The owner word holds the thread id + 1 (0: free).
    expect(Array.from(h.subarray(OWNERS + ENGINE_LANES, OWNERS + ENGINE_LANES + 3))).toEqual([A + 1, A + 1, B + 1]);
    expect(releaseLanesOf(h, OWNERS, A)).toBe(3);
    expect(releaseLanesOf(h, OWNERS, A)).toBe(0);
    // B's lane is still B's: the next claims take A's old lanes, then the ones after B's.
    expect(Atomics.load(h, OWNERS + b[0])).toBe(B + 1);
    expect(claimLane(h, OWNERS, 'test', 'loop', B)).toBe(ENGINE_LANES);
    expect(claimLane(h, OWNERS, 'test', 'loop', A)).toBe(ENGINE_LANES + 1);
    expect(claimLane(h, OWNERS, 'test', 'loop', A)).toBe(ENGINE_LANES + 3);
    expect(claimLane(h, OWNERS, 'test', 'engine', B)).toBe(0);
    expect(releaseLanesOf(h, OWNERS, B)).toBe(3);
    // Nothing of B's left; A holds its two loop lanes.
    expect(Array.from(h.subarray(OWNERS)).filter((w) => w !== 0)).toEqual([A + 1, A + 1]);
  });

  it('every loop lane taken by threads that died: they go back and loops claim them again', () => {
    const h = header();
    for (let i = 0; i < LOOP_LANES; i++) claimLane(h, OWNERS, 'vector store', 'loop', 1000 + i);
    expect(() => claimLane(h, OWNERS, 'vector store', 'loop', 5000)).toThrow(/every 16 scratch lanes of the vector store for request loops are in use/);
    for (let i = 0; i < LOOP_LANES; i++) expect(releaseLanesOf(h, OWNERS, 1000 + i)).toBe(1);
    for (let i = 0; i < LOOP_LANES; i++) expect(claimLane(h, OWNERS, 'vector store', 'loop', 5000 + i)).toBe(ENGINE_LANES + i);
  });

  it('a release by a thread that no longer holds the lane frees nothing (the lane went back and another took it)', () => {
    const h = header();
    const lane = claimLane(h, OWNERS, 'test', 'loop', A);
    expect(releaseLanesOf(h, OWNERS, A)).toBe(1);
    expect(claimLane(h, OWNERS, 'test', 'loop', B)).toBe(lane);
    releaseLane(h, OWNERS, lane, A);
    expect(Atomics.load(h, OWNERS + lane)).toBe(B + 1);
    releaseLane(h, OWNERS, lane, B);
    expect(Atomics.load(h, OWNERS + lane)).toBe(0);
  });

  it('defaults to this thread', () => {
    const h = header();
    const lane = claimLane(h, OWNERS, 'test');
    expect(Atomics.load(h, OWNERS + lane)).toBe(threadId + 1);
    expect(releaseLanesOf(h, OWNERS, threadId)).toBe(1);
  });
});
