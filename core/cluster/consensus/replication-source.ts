import { createHash } from 'node:crypto';
import { SvcError } from '../../base/errors.js';
import { commandParts, decodeCommand } from './command.js';
import { LogHold, type CommitLog, type LogRecord, type RetentionHold } from '../../storage/commit-log.js';

/**
 * A consensus member's replication source (issues 7 and 17): the group's committed entries, as this
 * member has applied them, read as the commit log a replication stream reads
 * (core/collection/replication.ts). A member's database WAL holds no point writes (they are applied to
 * memory, the consensus log is their durable record), so a read replica of a member follows this log
 * instead: a snapshot of the member's database, then every entry after it.
 *
 * - Positions are log indexes. A committed entry is the same on every member, so what a replica holds
 *   at a position is the group's state there. The stream's history is the member's data directory's
 *   own, hashed with a label (consensusStreamHistory): a replica resumes on the member it followed, and
 *   never takes an index for a single node's WAL seq or the other way round.
 * - `lastSeq` is the last index the database has applied (the member's `appliedThrough`, once every
 *   command of a Ready is settled), never one only committed: a replica is sent nothing this member
 *   does not show.
 * - Records: an entry's command is its operation's bytes under its collection's uid (`db` for a
 *   create, a drop, a move's state or a batch handed out, which the stream skips as bookkeeping).
 *   Every index is read as a record, so a reader's position moves past each: an empty entry (a
 *   leader's first of its term) is one without a body, which the stream skips.
 * - A create whose collection is not here when it is read comes with no body, as a dropped
 *   collection's records do from a WAL: every member refused it (its name was taken), or it was
 *   dropped since, and then its writes are not sent either and its drop finds nothing on the replica.
 *   A replica must never apply a refused create: it would drop the collection that holds the name.
 * - Retention: the member's log keeps its entries in memory and compacts them at each marker. A stream's
 *   hold keeps them back (ConsensusReplicationLog.compactTo), by at most `holdEntriesMax` entries and
 *   `holdBytesMax` bytes past where the member would compact; a replica further behind loses its hold
 *   (`unavailable`, reason `retention_exceeded`) and its next stream starts with a snapshot. A restore
 *   of a snapshot from the leader replaces the log and the database: every hold is lost (loseAll).
 */

/** Pending waitFor calls; each replica's stream has at most one. */
const WAITERS_MAX = 1 << 12;
/** Holds; each replica's stream has one. */
const HOLDS_MAX = 1 << 10;
/** Entries read from the log at once (in memory), with a turn of the event loop between batches. */
const READ_BATCH = 256;

/** The member's log and database as the source reads them. */
export interface ConsensusLogReader {
  /** Entries [lo, hi), at most `max` (RaftLog.entries: from memory; lo at least firstIndex). */
  entries(lo: number, hi: number, max: number): readonly { readonly index: number; readonly data: Uint8Array }[];
  firstIndex(): number;
  /** Whether the database holds a collection of this uid now. */
  holdsCollection(uid: string): boolean;
}

export interface ConsensusReplicationOptions {
  /** Entries a replica's hold may keep past where the member compacts its log. */
  holdEntriesMax: number;
  /** Bytes of entries it may keep so. */
  holdBytesMax: number;
}

/** The history a member's replication stream names: its data directory's, hashed with a label. */
export function consensusStreamHistory(dirHistory: string): string {
  return createHash('sha256').update(`svc consensus replication\0${dirHistory}`).digest('hex').slice(0, 32);
}

interface Waiter {
  seq: number;
  settle(): void;
}

export class ConsensusReplicationLog implements CommitLog {
  private applied: number;
  private readonly holds = new Set<LogHold>();
  private readonly waiters = new Set<Waiter>();
  private closed = false;

  /** `applied`: the index the database holds at the start (its position). */
  constructor(private readonly reader: ConsensusLogReader, applied: number, private readonly opts: ConsensusReplicationOptions) {
    this.applied = applied;
  }

  get lastSeq(): number {
    return this.applied;
  }

  get firstRetainedSeq(): number {
    return this.reader.firstIndex();
  }

  /** The database has applied every entry through `index` (a Ready's, or a restored snapshot's). */
  appliedThrough(index: number): void {
    if (index <= this.applied) return;
    this.applied = index;
    for (const w of [...this.waiters]) if (w.seq <= index) w.settle();
  }

  async *readFrom(seq: number, opts: { want?: (keyId: string, seq: number) => boolean } = {}): AsyncIterable<LogRecord> {
    const end = this.applied;
    let next = seq;
    while (next <= end) {
      const first = this.reader.firstIndex();
      if (next < first) throw new SvcError('not_found', `index ${next} is no longer in this member's log (its first is ${first})`, { firstRetainedSeq: first });
      const batch = this.reader.entries(next, Math.min(end + 1, next + READ_BATCH), READ_BATCH);
      if (batch.length === 0) return;
      for (const e of batch) {
        next = e.index + 1;
        const r = this.recordOf(e.index, e.data, opts.want);
        if (r !== null) yield r;
        // The log may have been compacted (or replaced by a restore) while this reader was suspended:
        // the next batch's read checks it.
      }
      // The entries are in memory and a consumer may skip every record (a dropped collection's): without
      // a turn of the event loop between batches, a long stretch of them would hold the member's loop.
      if (next <= end) await new Promise<void>((r) => setImmediate(r));
    }
  }

  private recordOf(index: number, data: Uint8Array, want?: (keyId: string, seq: number) => boolean): LogRecord | null {
    // A leader's first entry of its term: a record with no body, as the WAL gives for a record it cannot
    // open, so that a reader's position moves past it (the stream sends none for it).
    if (data.length === 0) return want === undefined || want('db', index) ? { seq: index, keyId: 'db', body: null } : null;
    const { uid, op } = commandParts(data);
    const keyId = uid === '' ? 'db' : uid;
    if (want !== undefined && !want(keyId, index)) return null;
    let body: Uint8Array | null = op;
    if (uid === '') {
      // Rare (a create, a drop, a move's state): decoded whole, to see which.
      const cmd = decodeCommand(data);
      if (cmd.op.t === 'create_collection' && !this.reader.holdsCollection(cmd.op.uid)) body = null;
    }
    return { seq: index, keyId, body };
  }

  waitFor(seq: number, signal?: AbortSignal): Promise<void> {
    if (this.applied >= seq || this.closed || signal?.aborted === true) return Promise.resolve();
    if (this.waiters.size >= WAITERS_MAX) return Promise.reject(new SvcError('unavailable', `too many waits on the consensus log (${WAITERS_MAX})`));
    return new Promise<void>((resolve) => {
      const onAbort = (): void => w.settle();
      const w: Waiter = {
        seq,
        settle: () => {
          this.waiters.delete(w);
          signal?.removeEventListener('abort', onAbort);
          resolve();
        },
      };
      this.waiters.add(w);
      signal?.addEventListener('abort', onAbort, { once: true });
    });
  }

  hold(floorSeq: number, onLost?: (reason: SvcError) => void): RetentionHold {
    const first = this.firstRetainedSeq;
    if (floorSeq < first) throw new SvcError('not_found', `index ${floorSeq} is no longer in this member's log (its first is ${first})`, { firstRetainedSeq: first });
    if (this.holds.size >= HOLDS_MAX) throw new SvcError('unavailable', `too many replication streams hold this member's log (${HOLDS_MAX})`);
    const h = new LogHold(this.holds, floorSeq, onLost);
    this.holds.add(h);
    return h;
  }

  /** Live holds (tests, metrics). */
  get holdCount(): number {
    return this.holds.size;
  }

  /**
   * Where the member may compact its log to, when it would compact through `index`: no further than
   * just below the lowest hold, unless that keeps more than the bounds allow past `index`; the holds
   * that compaction then passes are lost (their streams end; their replicas start over from a snapshot).
   */
  compactTo(index: number): number {
    let floor = Infinity;
    for (const h of this.holds) floor = Math.min(floor, h.floorSeq);
    if (floor - 1 >= index) return index;
    const first = this.reader.firstIndex();
    // The lowest index the bounds let the log keep from: counted down from `index`, entry by entry.
    let keepFrom = index + 1;
    let bytes = 0;
    const lowest = Math.max(first, floor, index + 1 - this.opts.holdEntriesMax);
    while (keepFrom > lowest) {
      const lo = Math.max(lowest, keepFrom - READ_BATCH);
      let batchBytes = 0;
      for (const e of this.reader.entries(lo, keepFrom, READ_BATCH)) batchBytes += e.data.length;
      if (bytes + batchBytes > this.opts.holdBytesMax) break;
      bytes += batchBytes;
      keepFrom = lo;
    }
    const to = keepFrom - 1;
    if (floor <= to) {
      const reason = new SvcError('unavailable',
        `the replica fell behind what this consensus member keeps of its log for it: indexes through ${to} are compacted (at most ${this.opts.holdEntriesMax} entries or ${this.opts.holdBytesMax} bytes are kept for a replica); it starts over from a snapshot`,
        { reason: 'retention_exceeded', firstRetainedSeq: to + 1 });
      for (const h of [...this.holds]) if (h.floorSeq <= to) h.lose(reason);
    }
    return Math.min(index, to);
  }

  /** The log and the database are being replaced (a snapshot from the leader): no stream goes on over them. */
  loseAll(why: string): void {
    const reason = new SvcError('unavailable', `the replication stream ended: ${why}; the replica asks again (from its position if this member's log still holds it, else from a snapshot)`, { reason: 'retention_exceeded', firstRetainedSeq: this.reader.firstIndex() });
    for (const h of [...this.holds]) h.lose(reason);
  }

  /** Every stream ends (its hold is lost): a caught-up one would otherwise find waitFor answering at once, for ever. */
  close(): void {
    this.closed = true;
    this.loseAll('this member is closing');
    for (const w of [...this.waiters]) w.settle();
  }
}
