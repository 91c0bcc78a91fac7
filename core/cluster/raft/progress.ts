import { assert } from '../../base/assert.js';

/**
 * How the leader replicates to one follower:
 * - probe: we do not know where its log agrees with ours; one append per heartbeat until one is accepted.
 * - replicate: appends are pipelined (next moves ahead optimistically), at most `maxInflight` unacked.
 * - snapshot: it needs entries we compacted; a snapshot is on its way and appends wait for its answer.
 */
export type ProgressState = 'probe' | 'replicate' | 'snapshot';

/**
 * The leader's view of one follower. Invariants: match < next; match only grows within a term (it is
 * what the follower durably acknowledged); inflight holds ascending last indexes of unacked appends.
 */
export class Progress {
  match = 0;
  next: number;
  state: ProgressState = 'probe';
  /** probe: an append is out and unanswered, so wait for a response or the next heartbeat response. */
  probeSent = false;
  /** snapshot: the index of the snapshot sent. */
  pendingSnapshot = 0;
  /** The commit index last sent to it (in an append or heartbeat): whether it may be missing ours. */
  sentCommit = 0;
  /** Heard from since the last CheckQuorum round. */
  recentActive = false;
  /** The leader's tick when this follower last answered an append, or changed state. */
  heardTick: number;
  private readonly inflight: number[] = [];

  constructor(next: number, private readonly maxInflight: number, tick: number) {
    assert(next >= 1 && maxInflight >= 1, 'progress starts at a real index with room for one append');
    this.next = next;
    this.heardTick = tick;
  }

  becomeProbe(tick: number): void {
    this.next = this.state === 'snapshot' ? Math.max(this.match + 1, this.pendingSnapshot + 1) : this.match + 1;
    this.enter('probe', tick);
  }

  becomeReplicate(tick: number): void {
    this.next = this.match + 1;
    this.enter('replicate', tick);
  }

  becomeSnapshot(index: number, tick: number): void {
    this.enter('snapshot', tick);
    this.pendingSnapshot = index;
  }

  /**
   * The follower no longer holds entries it acknowledged (its data directory was lost and it came back
   * empty): nothing of its log is known any more. Probe again from where its log now ends (match 0 only
   * lowers what the leader counts it for, never raises a commit).
   */
  forget(lastIndex: number, tick: number): void {
    this.match = 0;
    this.next = Math.max(1, lastIndex + 1);
    this.enter('probe', tick);
  }

  private enter(state: ProgressState, tick: number): void {
    this.state = state;
    this.probeSent = false;
    this.pendingSnapshot = 0;
    this.inflight.length = 0;
    this.heardTick = tick;
  }

  /** An accepted append through n. False when it tells us nothing new (stale or duplicated). */
  maybeUpdate(n: number): boolean {
    const updated = n > this.match;
    if (updated) {
      this.match = n;
      this.probeSent = false;
    }
    this.next = Math.max(this.next, n + 1);
    return updated;
  }

  /**
   * A rejection of the append whose prevIndex was `rejected`; `probeHint` is where the logs may agree.
   * False when the rejection is stale (it answers an append we already moved past).
   */
  maybeDecrTo(rejected: number, probeHint: number): boolean {
    if (this.state === 'replicate') {
      if (rejected <= this.match) return false;
      this.next = this.match + 1;
      return true;
    }
    if (this.state === 'snapshot' || this.next - 1 !== rejected) return false;
    this.next = Math.max(Math.min(rejected, probeHint + 1), this.match + 1);
    this.probeSent = false;
    return true;
  }

  isPaused(): boolean {
    if (this.state === 'probe') return this.probeSent;
    if (this.state === 'replicate') return this.inflight.length >= this.maxInflight;
    return true;
  }

  /** An append carrying entries through `lastIndex` (none when lastIndex < next) was sent. */
  sentAppend(lastIndex: number): void {
    if (this.state === 'probe') {
      this.probeSent = true;
      return;
    }
    if (this.state === 'replicate' && lastIndex >= this.next) {
      this.next = lastIndex + 1;
      this.inflight.push(lastIndex);
    }
  }

  /** Acknowledged through `index`: those appends are no longer in flight. */
  freeTo(index: number): void {
    let k = 0;
    while (k < this.inflight.length && this.inflight[k] <= index) k++;
    this.inflight.splice(0, k);
  }

  inflightCount(): number {
    return this.inflight.length;
  }
}
