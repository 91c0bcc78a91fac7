import type { SvcError } from '../base/errors.js';

/**
 * The commit log as its readers see it (replication streams now, Raft later): read and wait, never
 * append. The Wal implements it; a reader is handed this interface, so no write is reachable from it.
 */

export interface LogRecord {
  seq: number;
  keyId: string;
  /** null when the keyring has no key for `keyId` any more (a dropped, crypto-shredded collection). */
  body: Uint8Array | null;
}

/**
 * A reader's claim on the log from `floorSeq` on: truncation keeps the files holding it, within the
 * log's retention bound (WalOptions.retainBytesMax). Past the bound the oldest files go anyway; the hold
 * is then lost (`lost` set, `onLost` called once) and the reader must start over from a snapshot.
 */
export interface RetentionHold {
  readonly floorSeq: number;
  /** Set once truncation deleted a file this hold still needed. */
  readonly lost: SvcError | null;
  /** The reader no longer needs records below `seq` (a floor only moves forward). */
  advance(seq: number): void;
  /** Ends the claim; idempotent. Files kept for it go at the next truncation. */
  release(): void;
}

export interface CommitLog {
  /** The last durable (acknowledged) seq; 0 when nothing was ever written. */
  readonly lastSeq: number;
  /** The oldest seq still on disk. */
  readonly firstRetainedSeq: number;
  /**
   * Every retained record from `seq` up to the last durable one at the time of the call, in order;
   * those `want` returns false for are skipped, unopened. Throws not_found when `seq` is below firstRetainedSeq.
   */
  readFrom(seq: number, opts?: { want?: (keyId: string, seq: number) => boolean }): AsyncIterable<LogRecord>;
  /**
   * Resolves once `lastSeq >= seq` (woken by the group commit that made it durable), or at once when
   * `signal` aborts or the log closes: callers check their own state again. Rejects when the log failed
   * (a write error: nothing more will ever be committed) or too many waits are pending.
   */
  waitFor(seq: number, signal?: AbortSignal): Promise<void>;
  /**
   * Claims the records from `floorSeq` on (see RetentionHold); `onLost` runs once if truncation takes
   * them anyway. Throws not_found when `floorSeq` is no longer retained.
   */
  hold(floorSeq: number, onLost?: (reason: SvcError) => void): RetentionHold;
}

/** A RetentionHold in its log's set of holds (the Wal's, a consensus member's replication source). */
export class LogHold implements RetentionHold {
  floorSeq: number;
  lost: SvcError | null = null;

  constructor(private readonly holds: Set<LogHold>, floorSeq: number, private readonly onLost?: (reason: SvcError) => void) {
    this.floorSeq = floorSeq;
  }

  advance(seq: number): void {
    if (seq > this.floorSeq) this.floorSeq = seq;
  }

  release(): void {
    this.holds.delete(this);
  }

  /** The log no longer holds what this hold needs: it ends, and its reader is told why. */
  lose(reason: SvcError): void {
    this.holds.delete(this);
    this.lost = reason;
    this.onLost?.(reason);
  }
}
