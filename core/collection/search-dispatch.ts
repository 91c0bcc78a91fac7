import { performance } from 'node:perf_hooks';

/**
 * The shortest wait in the event loop's poll that counts as having been idle. A loop that is never
 * out of work still passes through its poll phase, for a microsecond or two each turn.
 */
const IDLE_GAP_MS = 0.02;

/** Milliseconds this thread's event loop has spent waiting in its poll phase since it started. */
export const loopIdleMs = (): number => performance.eventLoopUtilization().idle;

export interface DispatchOptions {
  /** Cumulative idle time of the calling thread's event loop, in ms (default: loopIdleMs). */
  idleMs?: () => number;
  /** A search also stays when the previous one started longer ago than this (default 0; Infinity: never stays). */
  quietMs?: number;
}

/**
 * Decides where a dense search runs when there is a search pool: on the calling thread, or in a worker.
 *
 * It stays on the calling thread only when that thread has nothing else waiting: no search is in a
 * worker, no other search started in this turn of the event loop, and the loop went idle (waited for
 * I/O) at some point since the previous search started. A lone client's requests each find the loop
 * idle, so they skip the two thread hand-offs, which would only add latency. Under concurrent load the
 * loop never waits: it is the bottleneck (HTTP parsing, JSON, socket writes), and every search it hands
 * to a worker is time it gets back for the requests queued behind it. bench/suites/server.ts measured
 * this on 2 cores, 8 clients, one worker: REST QPS +58% over keeping a search whenever no worker had one
 * in flight, the policy before the idle probe (which left the worker 84% idle).
 */
export class SearchDispatch {
  private readonly idleMs: () => number;
  private readonly quietMs: number;
  private lastAt = -Infinity;
  private lastIdle = -Infinity;
  /** Turns of the event loop (counted only while searches run; see sameLoopTurn). */
  private loopTurn = 0;
  private turnArmed = false;
  private lastSearchTurn = -1;

  constructor(opts: DispatchOptions = {}) {
    this.idleMs = opts.idleMs ?? loopIdleMs;
    this.quietMs = opts.quietMs ?? 0;
  }

  /** Whether a search starting now (`nowMs`, monotonic) should run on the calling thread. */
  runHere(inFlight: number, nowMs: number): boolean {
    const sameTurn = this.sameLoopTurn();
    const quiet = nowMs - this.lastAt > this.quietMs;
    this.lastAt = nowMs;
    const idle = this.idleMs();
    const wentIdle = idle - this.lastIdle > IDLE_GAP_MS;
    this.lastIdle = idle;
    return inFlight === 0 && !sameTurn && quiet && wentIdle;
  }

  /**
   * Whether another search already started in this turn of the event loop: several requests were
   * ready at once, so they are queuing behind each other.
   */
  private sameLoopTurn(): boolean {
    if (!this.turnArmed) {
      this.turnArmed = true;
      setImmediate(() => {
        this.loopTurn++;
        this.turnArmed = false;
      });
    }
    const same = this.lastSearchTurn === this.loopTurn;
    this.lastSearchTurn = this.loopTurn;
    return same;
  }
}
