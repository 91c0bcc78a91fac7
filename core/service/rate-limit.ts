import type { Clock } from '../base/clock.js';

/**
 * Per-key token buckets (SVC_RATE_LIMIT_REQUESTS_PER_SECOND, SVC_RATE_LIMIT_BURST). Off when the rate is 0.
 * The map is bounded by the number of configured keys, since only authenticated key names reach it.
 */
export interface RateLimitOptions {
  requestsPerSecond: number;
  burst: number;
}

export type TakeResult = { ok: true } | { ok: false; retryAfterSeconds: number };

interface Bucket { tokens: number; atMs: number }

export class TokenBuckets implements RateLimiter {
  private readonly buckets = new Map<string, Bucket>();
  private readonly capacity: number;

  constructor(private readonly opts: RateLimitOptions, private readonly clock: Clock) {
    // A burst of 0 with a positive rate would refuse everything: allow at least one second's worth.
    this.capacity = bucketCapacity(opts);
  }

  get enabled(): boolean {
    return this.opts.requestsPerSecond > 0;
  }

  take(key: string): TakeResult {
    if (!this.enabled) return { ok: true };
    const now = this.clock.monotonicMs();
    const b = this.buckets.get(key) ?? { tokens: this.capacity, atMs: now };
    b.tokens = Math.min(this.capacity, b.tokens + ((now - b.atMs) / 1000) * this.opts.requestsPerSecond);
    b.atMs = now;
    this.buckets.set(key, b);
    if (b.tokens >= 1) {
      b.tokens -= 1;
      return { ok: true };
    }
    const retryAfterSeconds = Math.max(1, Math.ceil((1 - b.tokens) / this.opts.requestsPerSecond));
    return { ok: false, retryAfterSeconds };
  }
}

/** What the service takes a request's token from: one process's buckets, or buckets shared by threads. */
export interface RateLimiter {
  take(key: string): TakeResult;
}

/**
 * The same buckets in a SharedArrayBuffer, so that several event loops of one server (roles/loops/)
 * draw on one bucket per key: a key's rate is the process's, not each loop's. The keys are the
 * configured key names (only an authenticated principal reaches `take`), laid out in the order given,
 * which every thread builds from the same configuration. Each bucket is two float64s (tokens, time)
 * changed under one spin lock (an Int32 word); the critical section is a few arithmetic operations.
 * Time is wall-clock milliseconds with sub-millisecond precision (`timeOrigin + now()`), the one clock
 * every thread of the process reads alike (`performance.now()` alone starts at each thread's own origin).
 */
export class SharedTokenBuckets implements RateLimiter {
  private readonly lock: Int32Array;
  private readonly cells: Float64Array;
  private readonly slot = new Map<string, number>();
  private readonly capacity: number;

  /** The buffer for `keys`, filled with full buckets: made once, handed to every thread. */
  static allocate(keys: readonly string[], opts: RateLimitOptions): SharedArrayBuffer {
    const sab = new SharedArrayBuffer(8 + 16 * Math.max(1, keys.length));
    const cells = new Float64Array(sab, 8);
    const capacity = bucketCapacity(opts);
    const now = wallMs();
    for (let i = 0; i < keys.length; i++) {
      cells[2 * i] = capacity;
      cells[2 * i + 1] = now;
    }
    return sab;
  }

  constructor(sab: SharedArrayBuffer, keys: readonly string[], private readonly opts: RateLimitOptions) {
    this.lock = new Int32Array(sab, 0, 1);
    this.cells = new Float64Array(sab, 8);
    keys.forEach((k, i) => this.slot.set(k, i));
    this.capacity = bucketCapacity(opts);
  }

  take(key: string): TakeResult {
    if (this.opts.requestsPerSecond <= 0) return { ok: true };
    const i = this.slot.get(key);
    if (i === undefined) throw new Error(`rate limit: key ${key} has no shared bucket`);
    while (Atomics.compareExchange(this.lock, 0, 0, 1) !== 0) { /* another thread holds it for a few instructions */ }
    try {
      const now = wallMs();
      const elapsed = Math.max(0, now - this.cells[2 * i + 1]);
      let tokens = Math.min(this.capacity, this.cells[2 * i] + (elapsed / 1000) * this.opts.requestsPerSecond);
      this.cells[2 * i + 1] = Math.max(now, this.cells[2 * i + 1]);
      if (tokens >= 1) {
        tokens -= 1;
        this.cells[2 * i] = tokens;
        return { ok: true };
      }
      this.cells[2 * i] = tokens;
      return { ok: false, retryAfterSeconds: Math.max(1, Math.ceil((1 - tokens) / this.opts.requestsPerSecond)) };
    } finally {
      Atomics.store(this.lock, 0, 0);
    }
  }
}

function bucketCapacity(opts: RateLimitOptions): number {
  return opts.burst > 0 ? opts.burst : Math.max(1, Math.ceil(opts.requestsPerSecond));
}

function wallMs(): number {
  return performance.timeOrigin + performance.now();
}
