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

export class TokenBuckets {
  private readonly buckets = new Map<string, Bucket>();
  private readonly capacity: number;

  constructor(private readonly opts: RateLimitOptions, private readonly clock: Clock) {
    // A burst of 0 with a positive rate would refuse everything: allow at least one second's worth.
    this.capacity = opts.burst > 0 ? opts.burst : Math.max(1, Math.ceil(opts.requestsPerSecond));
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
