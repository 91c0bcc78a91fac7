import { quorumValue } from './quorum.js';
import type { NodeId } from './types.js';

export interface PendingRead {
  readonly seq: number;
  readonly ctx: string;
  /** The leader's commit index when the read arrived. */
  readonly index: number;
  /** Who asked: the leader itself or a follower that forwarded its host's read. */
  readonly from: NodeId;
}

/**
 * ReadIndex (Raft thesis §6.4): a read arriving at the leader records the commit index, then waits until
 * a quorum has answered a heartbeat sent after it arrived; that proves no newer leader had committed
 * anything at that moment, so state applied through the recorded index is linearizable.
 *
 * Each read gets a sequence number; heartbeats carry the latest and followers echo it. Once a majority
 * (the leader included) has echoed s, every read with seq <= s is confirmed. Sequence numbers grow across
 * terms, and responses from older terms never reach here (Raft drops lower-term messages), so an echo
 * always answers a heartbeat of this leadership sent after the read.
 */
export class ReadTracker {
  private seq = 0;
  private pending: PendingRead[] = [];
  private readonly acked = new Map<NodeId, number>();

  /** A new leadership (or losing it): forget reads and echoes; the reads' hosts time out and retry. */
  reset(): void {
    this.pending = [];
    this.acked.clear();
  }

  size(): number {
    return this.pending.length;
  }

  latestSeq(): number {
    return this.seq;
  }

  add(ctx: string, index: number, from: NodeId): void {
    this.seq++;
    this.pending.push({ seq: this.seq, ctx, index, from });
  }

  ack(from: NodeId, seq: number): void {
    if (seq > (this.acked.get(from) ?? 0)) this.acked.set(from, seq);
  }

  /** Takes the reads a quorum has confirmed, oldest first. `self` counts as having echoed everything. */
  release(members: readonly NodeId[], self: NodeId): PendingRead[] {
    if (this.pending.length === 0) return [];
    const confirmed = quorumValue(members, (id) => (id === self ? this.seq : this.acked.get(id)));
    let k = 0;
    while (k < this.pending.length && this.pending[k].seq <= confirmed) k++;
    return this.pending.splice(0, k);
  }
}
