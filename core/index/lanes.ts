import { threadId } from 'node:worker_threads';
import { assert } from '../base/assert.js';
import { SvcError } from '../base/errors.js';

/**
 * Per-thread scratch lanes of a shared memory (VectorStore, ScalarCodes): one per open view. ENGINE_LANES
 * of them for the engine's own threads (main thread, search workers, build workers: rebuild.ts plans
 * within them), the rest for request loops that search the collection themselves
 * (core/collection/shared-reads.ts); a loop that finds none free hands its searches to the engine thread.
 *
 * Each lane has one int32 owner word in the memory's header: 0 while free, else the holding thread's
 * `threadId + 1`. A claim is one compare-and-exchange of that word from 0, so a lane is never taken
 * without its owner being known: a thread that dies at any point holds only lanes that name it, and
 * `releaseLanesOf` gives them back (a thread's ids are never reused in a process). A view releases its
 * own lane with a compare-and-exchange from its owner, so a lane given back for it meanwhile and taken
 * by another thread is never freed under that thread.
 */
const LANES = 32;
/** Lanes 0..15: the engine's threads, which plan their counts within them (rebuild.ts buildWorkersMax). */
export const ENGINE_LANES = 16;
/** Scratch lanes per shared memory: one per open view (main thread, workers, request loops). */
export const LANES_PER_MEMORY = LANES;
/** Header words the owner words take (one per lane). */
export const LANE_OWNER_WORDS = LANES;
/** Which lanes a view claims: the engine's threads', or request loops' (lanes ENGINE_LANES and up). */
export type LaneSet = 'engine' | 'loop';

/** The owner word's value for thread `thread`. */
function ownerOf(thread: number): number {
  assert(Number.isInteger(thread) && thread >= 0 && thread < 0x7fff_ffff, `thread id ${thread} out of range`);
  return thread + 1;
}

/**
 * Claims a free lane (lock-free) for `thread` (default: this one; tests stand in for others) in the
 * owner words at `owners..owners+LANES` of a shared header, and returns its index.
 */
export function claimLane(header: Int32Array, owners: number, what: string, lanes: LaneSet = 'engine', thread = threadId): number {
  const owner = ownerOf(thread);
  const [from, to] = lanes === 'engine' ? [0, ENGINE_LANES] : [ENGINE_LANES, LANES];
  for (let i = from; i < to; i++) {
    if (Atomics.compareExchange(header, owners + i, 0, owner) === 0) return i;
  }
  throw new SvcError('limit_exceeded', `every ${to - from} scratch lanes of the ${what} for ${lanes === 'engine' ? "the engine's threads" : 'request loops'} are in use`, { lanes: to - from });
}

/** Gives back lane `index`, if `thread` (default: this one) still holds it. */
export function releaseLane(header: Int32Array, owners: number, index: number, thread = threadId): void {
  Atomics.compareExchange(header, owners + index, ownerOf(thread), 0);
}

/**
 * Gives back every lane `thread` holds (a thread that ended without closing its views); how many.
 * Only lanes whose owner word names it are freed, each with a compare-and-exchange.
 */
export function releaseLanesOf(header: Int32Array, owners: number, thread: number): number {
  const owner = ownerOf(thread);
  let n = 0;
  for (let i = 0; i < LANES; i++) {
    if (Atomics.load(header, owners + i) === owner && Atomics.compareExchange(header, owners + i, owner, 0) === owner) n++;
  }
  return n;
}
