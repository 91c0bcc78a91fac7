import { assert } from '../../base/assert.js';
import { Raft, type ProposeResult, type RaftOptions, type ReadIndexResult } from './raft.js';
import type { Entry, HardState, Message, NodeId, ReadState, Role, Snapshot } from './types.js';

/** Who leads, as this member sees it; in a Ready only when it changed. */
export interface SoftState {
  readonly role: Role;
  readonly leaderId: NodeId | null;
}

/**
 * One batch of work for the host, to be done in this order:
 * 1. install `snapshot` (if any) in storage and the state machine;
 * 2. append `entries` to stable storage, dropping any persisted entries at or after entries[0].index;
 * 3. persist `hardState` (if any), and sync: all of it must be durable before step 4;
 * 4. send `messages` (they may promise what steps 1-3 persisted: a vote, an acknowledged append);
 *    when `sendBeforePersist` is set they promise nothing of it, and may go before or during 1-3;
 * 5. apply `committedEntries` in order; answer `readStates` once applied through their index;
 * 6. call advance(ready).
 * Without `mustSync` (no entries, no snapshot, no new term or vote) steps 4-6 may also come before 3
 * ends: nothing they promise or apply depends on a commit index alone. The host must still write that
 * hard state in order with its other writes (a later Ready's must not land before it).
 */
export interface Ready {
  readonly softState: SoftState | null;
  readonly hardState: HardState | null;
  readonly snapshot: Snapshot | null;
  readonly entries: readonly Entry[];
  readonly messages: readonly Message[];
  readonly committedEntries: readonly Entry[];
  readonly readStates: readonly ReadState[];
  /** Whether steps 1-3 wrote anything that needs an fsync. */
  readonly mustSync: boolean;
  /**
   * The messages may be sent before this Ready is persisted (Raft thesis 10.2.1): a leader whose term
   * and vote are already durable, sending appends and heartbeats. Its own entries count toward a commit
   * only once the host has persisted them (advance), and a follower acknowledges an append only after
   * persisting it, so a crash before the write loses nothing acknowledged; the leader's fsync and its
   * followers' overlap instead of running one after the other.
   */
  readonly sendBeforePersist: boolean;
}

/** A leader's view of one follower's log. */
export interface FollowerProgress {
  readonly id: NodeId;
  /** The highest index it is known to hold durably in agreement with the leader. */
  readonly match: number;
  readonly next: number;
  readonly state: 'probe' | 'replicate' | 'snapshot';
}

export interface RaftStatus {
  readonly id: NodeId;
  readonly role: Role;
  readonly term: number;
  readonly vote: NodeId | null;
  readonly leaderId: NodeId | null;
  readonly commit: number;
  readonly applied: number;
  readonly firstIndex: number;
  readonly lastIndex: number;
  readonly members: readonly NodeId[];
  /** The followers' progress when this member leads; empty otherwise. */
  readonly progress: readonly FollowerProgress[];
}

/**
 * The host's handle on one member (etcd's RawNode): inputs in (tick, step, propose, readIndex), work out
 * as Ready batches. One Ready at a time: ready() then advance() before the next ready(); tick and step
 * may be called in between (their effects go into the next Ready).
 */
export class RaftNode {
  private readonly raft: Raft;
  private prevHard: HardState;
  private prevSoft: SoftState;
  private outstanding: Ready | null = null;
  private readonly maxApplyEntries: number;
  /** While set, committed entries wait in the log: the host's state machine is busy (ConsensusMember). */
  private applyHeld = false;

  constructor(options: RaftOptions) {
    this.raft = new Raft(options);
    this.prevHard = this.hardState();
    this.prevSoft = this.softState();
    this.maxApplyEntries = options.maxApplyEntries ?? 1024;
  }

  tick(): void {
    this.raft.tick();
  }

  step(message: Message): void {
    this.raft.step(message);
  }

  /** Appends `data` if this member leads; otherwise says who does (null while no leader is known). */
  propose(data: Uint8Array): ProposeResult {
    return this.raft.propose(data);
  }

  /** Asks for a linearizable read index; the answer comes as a ReadState in a later Ready. */
  readIndex(ctx: string): ReadIndexResult {
    return this.raft.readIndex(ctx);
  }

  /** The host saw `peer`'s process go away (Raft.leaderGone): a follower of it campaigns soon. */
  leaderGone(peer: NodeId): boolean {
    return this.raft.leaderGone(peer);
  }

  /** Leases ended early on a leaderGone hint (the leader then missed a heartbeat too). */
  get leasesEndedEarly(): number {
    return this.raft.leasesEndedEarly;
  }

  /** Campaigns now, as an election timeout would (tests; leadership hand-over later). */
  campaign(): void {
    this.raft.campaign();
  }

  /**
   * Holds committed entries back from Readies (true) or lets them through again (false). Everything
   * else (persisting, messages, read states) goes on, so a host whose state machine is slow (a restore,
   * a backlog of applies) still answers its peers. Entries are never skipped: applied moves only with
   * the entries a Ready hands out.
   */
  holdApply(held: boolean): void {
    this.applyHeld = held;
  }

  /**
   * Keeps an election timeout from starting a campaign (true) or lets it again (false): a member whose
   * state machine is being restored would be a leader that cannot apply its own term's first entry, so
   * it leaves leading to a member that can, while it still votes and follows.
   */
  holdCampaign(held: boolean): void {
    this.raft.campaignHeld = held;
  }

  hasReady(): boolean {
    if (this.outstanding) return false;
    const r = this.raft;
    return (
      r.msgs.length > 0 ||
      r.readStates.length > 0 ||
      r.log.hasUnstableEntries() ||
      r.log.unstableSnapshot() !== null ||
      (!this.applyHeld && r.log.hasNextCommitted()) ||
      !sameHard(this.hardState(), this.prevHard) ||
      !sameSoft(this.softState(), this.prevSoft)
    );
  }

  ready(): Ready {
    assert(this.outstanding === null, 'ready() again before advance()');
    const r = this.raft;
    const hard = this.hardState();
    const soft = this.softState();
    const entries = r.log.unstableEntries();
    const snapshot = r.log.unstableSnapshot();
    const hardChanged = !sameHard(hard, this.prevHard);
    const termOrVote = hardChanged && (hard.term !== this.prevHard.term || hard.vote !== this.prevHard.vote);
    const rd: Ready = {
      softState: sameSoft(soft, this.prevSoft) ? null : soft,
      hardState: hardChanged ? hard : null,
      snapshot,
      entries,
      messages: r.msgs,
      committedEntries: this.applyHeld ? [] : r.log.nextCommitted({ maxCount: this.maxApplyEntries, maxBytes: Number.MAX_SAFE_INTEGER }),
      readStates: r.readStates,
      mustSync: entries.length > 0 || snapshot !== null || termOrVote,
      sendBeforePersist: r.role === 'leader' && !termOrVote && snapshot === null,
    };
    r.msgs = [];
    r.readStates = [];
    this.prevHard = hard;
    this.prevSoft = soft;
    this.outstanding = rd;
    return rd;
  }

  /** The host did everything `rd` asked. */
  advance(rd: Ready): void {
    assert(rd === this.outstanding, 'advance() with a Ready that is not the outstanding one');
    this.outstanding = null;
    const log = this.raft.log;
    if (rd.snapshot) {
      log.stableSnapshotTo(rd.snapshot.meta.index);
      log.appliedTo(Math.max(log.applied, rd.snapshot.meta.index));
    }
    const last = rd.entries[rd.entries.length - 1];
    if (last) log.stableTo(last.index, last.term);
    const applied = rd.committedEntries[rd.committedEntries.length - 1];
    if (applied) log.appliedTo(applied.index);
    this.raft.onPersisted();
  }

  /** This node's term while it leads, else -1: what status() says of it, without building the rest. */
  leaderTerm(): number {
    return this.raft.role === 'leader' ? this.raft.term : -1;
  }

  status(): RaftStatus {
    const r = this.raft;
    return {
      id: r.id,
      role: r.role,
      term: r.term,
      vote: r.vote,
      leaderId: r.leaderId,
      commit: r.log.committed,
      applied: r.log.applied,
      firstIndex: r.log.firstIndex(),
      lastIndex: r.log.lastIndex(),
      members: r.members,
      progress: r.role !== 'leader' ? [] : r.members.flatMap((id) => {
        const pr = r.progressOf(id);
        return pr ? [{ id, match: pr.match, next: pr.next, state: pr.state }] : [];
      }),
    };
  }

  /** The term of entry i in this member's log (null when compacted or absent): for checkers and tests. */
  entryTerm(i: number): number | null {
    return this.raft.log.term(i);
  }

  /** Entries [lo, hi) of this member's log, or null when lo is compacted: for checkers and tests. */
  entries(lo: number, hi: number): Entry[] | null {
    return this.raft.log.slice(lo, Math.min(hi, this.raft.log.lastIndex() + 1));
  }

  private hardState(): HardState {
    return { term: this.raft.term, vote: this.raft.vote, commit: this.raft.log.committed };
  }

  private softState(): SoftState {
    return { role: this.raft.role, leaderId: this.raft.leaderId };
  }
}

function sameHard(a: HardState, b: HardState): boolean {
  return a.term === b.term && a.vote === b.vote && a.commit === b.commit;
}

function sameSoft(a: SoftState, b: SoftState): boolean {
  return a.role === b.role && a.leaderId === b.leaderId;
}
