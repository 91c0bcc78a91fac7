/** Time is injected so storage and cluster code can run under a simulated clock. */
export interface Clock {
  /** Milliseconds since the Unix epoch. */
  nowMs(): number;
  /** A monotonic reading in milliseconds, for durations. */
  monotonicMs(): number;
}

export const systemClock: Clock = {
  nowMs: () => Date.now(),
  monotonicMs: () => performance.now(),
};
