import { assert } from '../../base/assert.js';
import type { Prng } from '../../base/prng.js';
import { RaftLog } from './log.js';
import { Progress } from './progress.js';
import { majority, quorumValue, voteResult } from './quorum.js';
import { ReadTracker } from './read-index.js';
import type { Storage } from './storage.js';
import type {
  AppendMessage,
  AppendResponseMessage,
  HeartbeatMessage,
  HeartbeatResponseMessage,
  Message,
  NodeId,
  OutgoingMessage,
  ReadState,
  Role,
  SnapshotMessage,
  VoteMessage,
  VoteResponseMessage,
} from './types.js';

export interface RaftOptions {
  id: NodeId;
  /** Every member of the group, this one included (static membership). */
  members: readonly NodeId[];
  storage: Storage;
  /** The only source of randomness (election timeouts): a seed reproduces a run. */
  prng: Prng;
  /** A follower campaigns after a randomized [electionTicks, 2 * electionTicks) ticks without a leader. */
  electionTicks: number;
  /** A leader sends heartbeats every heartbeatTicks; less than electionTicks. */
  heartbeatTicks: number;
  /** The host's applied index at start (its state machine image); at least the snapshot's index. */
  applied?: number;
  /** Raft thesis §9.6: ask first without raising the term, so a rejoining member cannot disrupt. */
  preVote?: boolean;
  /** Raft thesis §6.2: a leader that has not heard from a quorum for an election timeout steps down. */
  checkQuorum?: boolean;
  maxEntriesPerMsg?: number;
  maxBytesPerMsg?: number;
  /** Unacknowledged appends pipelined to one follower. */
  maxInflightMsgs?: number;
  /** Proposals beyond this many uncommitted entries are refused (`busy`), so the log cannot run away. */
  maxUncommittedEntries?: number;
  maxPendingReads?: number;
  /** Committed entries handed to the host per Ready. */
  maxApplyEntries?: number;
  /**
   * A member that starts with nothing durable (term 0, an empty log, no snapshot) may be one whose data
   * directory was lost after it voted: it grants no vote for this many ticks (two election
   * timeouts is what a host should give), by which time any election it may have voted in has ended.
   * Pre-votes promise nothing and are answered as usual. A new group's first election waits for it too.
   * Default 0 (off): the algorithm as the paper has it.
   */
  amnesiaTicks?: number;
}

export const RAFT_DEFAULTS = Object.freeze({
  preVote: true,
  checkQuorum: true,
  maxEntriesPerMsg: 256,
  maxBytesPerMsg: 1 << 20,
  maxInflightMsgs: 64,
  maxUncommittedEntries: 10_000,
  maxPendingReads: 10_000,
  maxApplyEntries: 1024,
});

export type ProposeResult =
  | { readonly ok: true; readonly index: number; readonly term: number }
  | { readonly ok: false; readonly reason: 'not_leader'; readonly leaderId: NodeId | null }
  | { readonly ok: false; readonly reason: 'busy' };

export type ReadIndexResult = { readonly ok: true } | { readonly ok: false; readonly reason: 'no_leader' | 'busy' };

type Limits = Required<Omit<RaftOptions, 'id' | 'members' | 'storage' | 'prng' | 'electionTicks' | 'heartbeatTicks' | 'applied' | 'amnesiaTicks'>>;

/**
 * Raft (Ongaro and Ousterhout, "In Search of an Understandable Consensus Algorithm", and Ongaro's thesis)
 * as a pure state machine: it reacts to tick(), step(message), propose() and readIndex() by changing its
 * state and queueing messages; RaftNode turns that into Ready batches for the host. No I/O, no clock,
 * no randomness but the injected PRNG.
 *
 * Invariants it keeps (the simulation checks the cluster-wide ones after every step):
 * - at most one vote per term, persisted before the vote is sent (hard state precedes messages in Ready);
 * - a leader never overwrites or deletes entries in its own log;
 * - an entry is committed by counting replicas only if it is from the leader's current term (§5.4.2);
 * - a leader counts itself toward a quorum only for entries its host has persisted.
 */
export class Raft {
  readonly id: NodeId;
  readonly members: readonly NodeId[];
  readonly log: RaftLog;
  term: number;
  vote: NodeId | null;
  role: Role = 'follower';
  leaderId: NodeId | null = null;
  /** Outgoing messages and read results since the last Ready; RaftNode takes them. */
  msgs: Message[] = [];
  readStates: ReadState[] = [];

  private readonly storage: Storage;
  private readonly prng: Prng;
  private readonly electionTicks: number;
  private readonly heartbeatTicks: number;
  private readonly limits: Limits;
  private readonly peers: readonly NodeId[];
  private readonly progress = new Map<NodeId, Progress>();
  private readonly reads = new ReadTracker();
  /** Reads that arrived before this leader committed an entry of its term (it cannot know the commit yet). */
  private waitingReads: { ctx: string; from: NodeId }[] = [];
  private votes = new Map<NodeId, boolean>();
  private ticks = 0;
  private electionElapsed = 0;
  private heartbeatElapsed = 0;
  private randomizedElectionTicks = 0;
  /** Ticks before which a member that started with nothing durable grants no vote (RaftOptions.amnesiaTicks). */
  private readonly noVotesBefore: number;
  /**
   * While set, an election timeout starts no campaign (the host's state machine cannot serve as a
   * leader's yet: a snapshot being restored); this member still votes, and still follows a leader.
   */
  campaignHeld = false;
  /** The election timeout was shortened by leaderGone: a leader heard from afterwards restores a full one. */
  private hinted = false;
  /** The leader a leaderGone hint named, until its next message or the end of its lease. */
  private suspect: NodeId | null = null;
  private leasesEnded = 0;

  constructor(options: RaftOptions) {
    assert(options.members.includes(options.id), `member ${options.id} is not in its own group`);
    assert(new Set(options.members).size === options.members.length, 'member ids are unique');
    assert(options.heartbeatTicks >= 1 && options.electionTicks > options.heartbeatTicks, 'heartbeat < election timeout');
    this.id = options.id;
    this.members = [...options.members];
    this.peers = this.members.filter((m) => m !== options.id);
    this.storage = options.storage;
    this.prng = options.prng;
    this.electionTicks = options.electionTicks;
    this.heartbeatTicks = options.heartbeatTicks;
    this.limits = { ...RAFT_DEFAULTS, ...definedOnly(options) };
    const hs = options.storage.hardState();
    assert(hs.vote === null || this.members.includes(hs.vote), `persisted vote for a non-member ${hs.vote}`);
    this.term = hs.term;
    this.vote = hs.vote;
    this.log = new RaftLog(options.storage, hs.commit, options.applied ?? 0);
    const pristine = hs.term === 0 && options.storage.lastIndex() === 0 && options.storage.snapshot().meta.index === 0;
    this.noVotesBefore = pristine ? (options.amnesiaTicks ?? 0) : 0;
    this.becomeFollower(this.term, null);
  }

  // ---- inputs ----

  tick(): void {
    this.ticks++;
    if (this.role === 'leader') this.tickLeader();
    else this.tickElection();
  }

  /**
   * The host saw `peer`'s process go away: its address refuses connections (a kill, a crash, a shutdown),
   * which silence alone never says. A follower of that peer then suspects it, and once the leader has
   * also missed a heartbeat (more than heartbeatTicks ticks since its last message) the follower stops
   * waiting out its election timeout: its lease ends (it grants votes again), and it campaigns after
   * `(rank + 1/2) * spacing` more ticks, where rank is its place among the other members by id and the
   * spacing a fifth of the election timeout (a rank that would wait that long keeps its random timeout).
   * Members told at about the same time so campaign one after the other rather than split the vote (the
   * first waits half a spacing, by which time the others have ended their lease too), and a member whose
   * log cannot win leaves the next to win.
   *
   * Safety never rests on timing. A wrong hint (the leader lives: a wrong address in one member's list, a
   * firewall that rejects) is dropped at the leader's next message, before the lease ends; a leader whose
   * heartbeats are lost as well is one a timeout would replace too. Returns whether the hint was taken
   * (this member follows `peer`).
   */
  leaderGone(peer: NodeId): boolean {
    if (this.role !== 'follower' || this.leaderId !== peer) return false;
    this.suspect = peer;
    return true;
  }

  /** Leases this member ended early on a leaderGone hint (its leader then missed a heartbeat too). */
  get leasesEndedEarly(): number {
    return this.leasesEnded;
  }

  /** The suspected leader missed a heartbeat: see leaderGone. */
  private endLease(): void {
    const gone = this.suspect!;
    this.suspect = null;
    this.leasesEnded++;
    const rank = this.members.filter((m) => m !== gone).sort().indexOf(this.id);
    const spacing = Math.max(1, Math.floor(this.electionTicks / 5));
    const delay = Math.max(1, Math.floor((rank + 0.5) * spacing));
    this.leaderId = null;
    if (delay >= this.electionTicks) return;
    this.electionElapsed = 0;
    this.randomizedElectionTicks = delay;
    this.hinted = true;
  }

  /** Starts an election now (PreVote first when enabled), as an election timeout would. */
  campaign(): void {
    if (this.role === 'leader' || this.log.unstableSnapshot()) return;
    this.startCampaign(this.limits.preVote);
  }

  propose(data: Uint8Array): ProposeResult {
    if (this.role !== 'leader') return { ok: false, reason: 'not_leader', leaderId: this.leaderId };
    if (this.log.lastIndex() - this.log.committed >= this.limits.maxUncommittedEntries) return { ok: false, reason: 'busy' };
    const index = this.log.lastIndex() + 1;
    this.log.append([{ term: this.term, index, data }]);
    this.broadcastAppend();
    return { ok: true, index, term: this.term };
  }

  /** A linearizable read: its ReadState appears in a later Ready (or never, if leadership is lost). */
  readIndex(ctx: string): ReadIndexResult {
    if (this.role === 'leader') return this.leaderRead(ctx, this.id);
    if (this.leaderId === null) return { ok: false, reason: 'no_leader' };
    this.send({ type: 'readIndex', to: this.leaderId, ctx });
    return { ok: true };
  }

  /** The host persisted what a Ready asked: a leader may now count itself for those entries. */
  onPersisted(): void {
    if (this.role === 'leader' && this.maybeCommit()) this.broadcastAppend();
  }

  step(m: Message): void {
    if (m.to !== this.id || !this.members.includes(m.from) || m.from === this.id) return;
    if (m.term > this.term && !this.onHigherTerm(m)) return;
    if (m.term < this.term) {
      this.onLowerTerm(m);
      return;
    }
    if (m.type === 'vote' || m.type === 'preVote') this.handleVoteRequest(m);
    else if (this.role === 'leader') this.stepLeader(m);
    else if (this.role === 'follower') this.stepFollower(m);
    else this.stepCandidate(m);
  }

  // ---- terms ----

  /** Returns false when the message must be ignored. */
  private onHigherTerm(m: Message): boolean {
    const voteRequest = m.type === 'vote' || m.type === 'preVote';
    // Thesis §4.2.3: while we hear from a live leader, a candidate's higher term must not disrupt us.
    if (voteRequest && this.inLease()) return false;
    // A pre-vote asks about a term nobody holds yet; granted answers carry that future term.
    if (m.type === 'preVote' || (m.type === 'preVoteResp' && !m.reject)) return true;
    const fromLeader = m.type === 'app' || m.type === 'heartbeat' || m.type === 'snap';
    this.becomeFollower(m.term, fromLeader ? m.from : null);
    return true;
  }

  private onLowerTerm(m: Message): void {
    if ((this.limits.checkQuorum || this.limits.preVote) && (m.type === 'app' || m.type === 'heartbeat')) {
      // A stale leader, or we raised our term while cut off and now nobody can reach us: our term in
      // the answer makes that leader step down, so an election can bring us back in.
      this.send({ type: 'appResp', to: m.from, index: 0, reject: false, hintIndex: 0, hintTerm: 0 });
    } else if (m.type === 'preVote') {
      this.send({ type: 'preVoteResp', to: m.from, reject: true });
    }
  }

  private inLease(): boolean {
    return this.limits.checkQuorum && this.leaderId !== null && this.electionElapsed < this.electionTicks;
  }

  // ---- roles ----

  private resetTerm(term: number): void {
    if (term !== this.term) {
      assert(term > this.term, `term goes back from ${this.term} to ${term}`);
      this.term = term;
      this.vote = null;
    }
    this.leaderId = null;
    this.electionElapsed = 0;
    this.heartbeatElapsed = 0;
    this.randomizedElectionTicks = this.electionTicks + this.prng.int(this.electionTicks);
    this.hinted = false;
    this.suspect = null;
    this.votes = new Map();
    this.progress.clear();
    this.reads.reset();
    this.waitingReads = [];
  }

  private becomeFollower(term: number, leaderId: NodeId | null): void {
    this.resetTerm(term);
    this.role = 'follower';
    this.leaderId = leaderId;
  }

  private becomePreCandidate(): void {
    assert(this.role !== 'leader', 'a leader does not campaign');
    this.resetTerm(this.term);
    this.role = 'pre-candidate';
  }

  private becomeCandidate(): void {
    assert(this.role !== 'leader', 'a leader does not campaign');
    this.resetTerm(this.term + 1);
    this.vote = this.id;
    this.role = 'candidate';
  }

  private becomeLeader(): void {
    assert(this.role === 'candidate', `only a candidate becomes leader (was ${this.role})`);
    this.role = 'leader';
    this.leaderId = this.id;
    const next = this.log.lastIndex() + 1;
    for (const peer of this.peers) this.progress.set(peer, new Progress(next, this.limits.maxInflightMsgs, this.ticks));
    // §8: an entry of our own term lets us commit (and so learn the commit index) without waiting for a client.
    this.log.append([{ term: this.term, index: next, data: new Uint8Array(0) }]);
    this.broadcastAppend();
  }

  private startCampaign(pre: boolean): void {
    if (pre) this.becomePreCandidate();
    else this.becomeCandidate();
    this.votes.set(this.id, true);
    if (voteResult(this.members, this.votes) === 'won') {
      if (pre) this.startCampaign(false);
      else this.becomeLeader();
      return;
    }
    const term = pre ? this.term + 1 : this.term;
    const lastIndex = this.log.lastIndex();
    const lastTerm = this.log.lastTerm();
    for (const to of this.peers) this.send({ type: pre ? 'preVote' : 'vote', to, term, lastIndex, lastTerm });
  }

  // ---- time ----

  private tickElection(): void {
    this.electionElapsed++;
    if (this.suspect !== null && this.role === 'follower' && this.leaderId === this.suspect && this.electionElapsed > this.heartbeatTicks) this.endLease();
    if (this.electionElapsed < this.randomizedElectionTicks) return;
    this.electionElapsed = 0;
    if (!this.campaignHeld) this.campaign();
  }

  private tickLeader(): void {
    this.heartbeatElapsed++;
    this.electionElapsed++;
    if (this.electionElapsed >= this.electionTicks) {
      this.electionElapsed = 0;
      if (this.limits.checkQuorum && !this.quorumActive()) {
        this.becomeFollower(this.term, null);
        return;
      }
      this.retryStalledSnapshots();
    }
    if (this.heartbeatElapsed >= this.heartbeatTicks) {
      this.heartbeatElapsed = 0;
      this.broadcastHeartbeat();
    }
  }

  /** Whether a majority (us included) was heard from since the last check; starts the next round. */
  private quorumActive(): boolean {
    let active = 1;
    for (const pr of this.progress.values()) {
      if (pr.recentActive) active++;
      pr.recentActive = false;
    }
    return active >= majority(this.members.length);
  }

  /** A snapshot that got no answer for an election timeout was probably lost: probe again. */
  private retryStalledSnapshots(): void {
    for (const pr of this.progress.values()) {
      if (pr.state === 'snapshot' && this.ticks - pr.heardTick >= this.electionTicks) pr.becomeProbe(this.ticks);
    }
  }

  // ---- votes ----

  private handleVoteRequest(m: VoteMessage): void {
    const pre = m.type === 'preVote';
    // One vote per term: for the same candidate again (a retry) or for the first who asks while we know
    // no leader. A pre-vote for a future term promises nothing, so it only looks at the log.
    const canVote = this.vote === m.from || (this.vote === null && this.leaderId === null) || (pre && m.term > this.term);
    const amnesiac = !pre && this.ticks < this.noVotesBefore;
    const grant = canVote && !amnesiac && this.log.isUpToDate(m.lastIndex, m.lastTerm);
    if (grant && !pre) {
      this.vote = m.from;
      this.electionElapsed = 0;
    }
    const term = grant && pre ? m.term : this.term;
    this.send({ type: pre ? 'preVoteResp' : 'voteResp', to: m.from, term, reject: !grant });
  }

  private stepCandidate(m: Message): void {
    if (m.type === 'app' || m.type === 'heartbeat' || m.type === 'snap') {
      // A leader exists in our term (we would have stepped down on a higher one): follow it.
      this.becomeFollower(this.term, m.from);
      this.stepFollower(m);
      return;
    }
    const wanted = this.role === 'pre-candidate' ? 'preVoteResp' : 'voteResp';
    if (m.type !== wanted) return;
    this.votes.set(m.from, !(m as VoteResponseMessage).reject);
    const result = voteResult(this.members, this.votes);
    if (result === 'won') {
      if (this.role === 'pre-candidate') this.startCampaign(false);
      else this.becomeLeader();
    } else if (result === 'lost') {
      this.becomeFollower(this.term, null);
    }
  }

  // ---- follower ----

  private stepFollower(m: Message): void {
    switch (m.type) {
      case 'app':
      case 'heartbeat':
      case 'snap':
        this.electionElapsed = 0;
        this.leaderId = m.from;
        this.suspect = null;
        if (this.hinted) {
          // leaderGone was wrong, or another member now leads this term: a full timeout again.
          this.hinted = false;
          this.randomizedElectionTicks = this.electionTicks + this.prng.int(this.electionTicks);
        }
        if (m.type === 'app') this.handleAppend(m);
        else if (m.type === 'heartbeat') this.handleHeartbeat(m);
        else this.handleSnapshot(m);
        return;
      case 'readIndexResp':
        this.readStates.push({ ctx: m.ctx, index: m.index });
        return;
      default:
        return;
    }
  }

  private handleAppend(m: AppendMessage): void {
    if (m.prevIndex < this.log.committed) {
      // Everything through our commit already agrees with any leader: say where to continue from.
      this.sendAppendResponse(m.from, this.log.committed);
      return;
    }
    const lastNew = this.log.maybeAppend(m.prevIndex, m.prevTerm, m.commit, m.entries);
    if (lastNew !== null) {
      this.sendAppendResponse(m.from, lastNew);
      return;
    }
    const hintIndex = this.log.findConflictByTerm(Math.min(m.prevIndex, this.log.lastIndex()), m.prevTerm);
    const hintTerm = this.log.term(hintIndex) ?? 0;
    this.send({ type: 'appResp', to: m.from, index: m.prevIndex, reject: true, hintIndex, hintTerm });
  }

  private sendAppendResponse(to: NodeId, index: number): void {
    this.send({ type: 'appResp', to, index, reject: false, hintIndex: 0, hintTerm: 0 });
  }

  private handleHeartbeat(m: HeartbeatMessage): void {
    // The leader sends at most what it knows we hold, so this never commits an entry we lack, unless we
    // lost our log since (a member back with an empty data directory): then commit nothing, and our
    // answer's lastIndex tells the leader to start over with us (Progress.forget).
    if (m.commit <= this.log.lastIndex()) this.log.commitTo(m.commit);
    this.send({ type: 'heartbeatResp', to: m.from, readSeq: m.readSeq, sent: m.sent, lastIndex: this.log.lastIndex() });
  }

  private handleSnapshot(m: SnapshotMessage): void {
    const meta = m.snapshot.meta;
    if (meta.index <= this.log.committed) {
      this.sendAppendResponse(m.from, this.log.committed);
    } else if (this.log.matchTerm(meta.index, meta.term)) {
      // We hold its last entry, so (log matching) everything before it too: just commit that far.
      this.log.commitTo(meta.index);
      this.sendAppendResponse(m.from, meta.index);
    } else {
      this.log.restore(m.snapshot);
      this.sendAppendResponse(m.from, meta.index);
    }
  }

  // ---- leader ----

  private stepLeader(m: Message): void {
    if (m.type === 'appResp') this.handleAppendResponse(m);
    else if (m.type === 'heartbeatResp') this.handleHeartbeatResponse(m);
    else if (m.type === 'readIndex') this.leaderRead(m.ctx, m.from);
  }

  private handleAppendResponse(m: AppendResponseMessage): void {
    const pr = this.progress.get(m.from);
    if (!pr) return;
    pr.recentActive = true;
    pr.heardTick = this.ticks;
    if (m.reject) {
      const hint = m.hintTerm > 0 ? this.log.findConflictByTerm(m.hintIndex, m.hintTerm) : m.hintIndex;
      if (pr.maybeDecrTo(m.index, hint)) {
        if (pr.state === 'replicate') pr.becomeProbe(this.ticks);
        this.sendAppend(m.from);
      }
      return;
    }
    if (!pr.maybeUpdate(m.index)) return;
    // Its log agrees with ours through match: pipeline from there (sendAppend falls back to a snapshot
    // by itself if match + 1 is compacted by now).
    if (pr.state === 'replicate') pr.freeTo(m.index);
    else pr.becomeReplicate(this.ticks);
    if (this.maybeCommit()) this.broadcastAppend();
    // It was paused when the commit moved (or the append carrying it was lost): tell it now rather
    // than at the next heartbeat, since it holds entries past the commit index it last heard.
    else if (pr.sentCommit < Math.min(this.log.committed, pr.match)) this.sendAppend(m.from);
    while (this.sendAppend(m.from, false));
  }

  private handleHeartbeatResponse(m: HeartbeatResponseMessage): void {
    const pr = this.progress.get(m.from);
    if (!pr) return;
    pr.recentActive = true;
    pr.probeSent = false;
    // Within one leader's term a follower never drops entries it acknowledged (they are the leader's):
    // holding fewer now, it lost its log (a member back with an empty data directory).
    if (m.lastIndex < pr.match) pr.forget(m.lastIndex, this.ticks);
    else if (pr.state === 'replicate' && this.pipelineLost(pr, m)) pr.becomeProbe(this.ticks);
    // Behind: send more, unless all of it is already pipelined (an empty append overtaking the
    // entries in flight would only be rejected and send it back to probing).
    const allInFlight = pr.state === 'replicate' && pr.next > this.log.lastIndex();
    if (pr.match < this.log.lastIndex() && !allInFlight) this.sendAppend(m.from);
    this.reads.ack(m.from, m.readSeq);
    for (const r of this.reads.release(this.members, this.id)) this.answerRead(r.from, r.ctx, r.index);
  }

  /**
   * Pipelined appends were lost if the follower lacks entries sent before this heartbeat (over an
   * in-order transport that is certain; reordered, it costs at most a resend), or, as a last resort, if
   * it hears us but has answered no append for an election timeout.
   */
  private pipelineLost(pr: Progress, m: HeartbeatResponseMessage): boolean {
    if (pr.inflightCount() === 0) return false;
    if (m.lastIndex < m.sent && pr.match < m.sent) return true;
    return this.ticks - pr.heardTick >= this.electionTicks;
  }

  /** Sends the next append (or a snapshot) if the follower is not paused; whether anything was sent. */
  private sendAppend(to: NodeId, sendIfEmpty = true): boolean {
    const pr = this.progress.get(to);
    if (!pr || pr.isPaused()) return false;
    const prevIndex = pr.next - 1;
    const prevTerm = this.log.term(prevIndex);
    const limit = { maxCount: this.limits.maxEntriesPerMsg, maxBytes: this.limits.maxBytesPerMsg };
    const entries = this.log.slice(pr.next, this.log.lastIndex() + 1, limit);
    if (prevTerm === null || entries === null) return this.sendSnapshot(to, pr);
    if (entries.length === 0 && !sendIfEmpty) return false;
    this.send({ type: 'app', to, prevIndex, prevTerm, entries, commit: this.log.committed });
    pr.sentAppend(prevIndex + entries.length);
    pr.sentCommit = this.log.committed;
    return true;
  }

  private sendSnapshot(to: NodeId, pr: Progress): boolean {
    const snapshot = this.storage.snapshot();
    if (snapshot.meta.index === 0) return false;
    pr.becomeSnapshot(snapshot.meta.index, this.ticks);
    this.send({ type: 'snap', to, snapshot });
    return true;
  }

  private broadcastAppend(): void {
    for (const peer of this.peers) this.sendAppend(peer);
  }

  private broadcastHeartbeat(): void {
    const readSeq = this.reads.latestSeq();
    for (const peer of this.peers) {
      const pr = this.progress.get(peer);
      const commit = Math.min(pr ? pr.match : 0, this.log.committed);
      this.send({ type: 'heartbeat', to: peer, commit, readSeq, sent: pr ? pr.next - 1 : 0 });
      if (pr) pr.sentCommit = Math.max(pr.sentCommit, commit);
    }
  }

  private matchOf(id: NodeId): number | undefined {
    return id === this.id ? this.log.stableLastIndex() : this.progress.get(id)?.match;
  }

  /** Raft §5.4.2: only an entry of the current term is committed by counting replicas. */
  private maybeCommit(): boolean {
    const index = quorumValue(this.members, (id) => this.matchOf(id));
    if (index <= this.log.committed || this.log.term(index) !== this.term) return false;
    this.log.commitTo(index);
    this.releaseWaitingReads();
    return true;
  }

  // ---- reads ----

  private committedInTerm(): boolean {
    return this.log.term(this.log.committed) === this.term;
  }

  private leaderRead(ctx: string, from: NodeId): ReadIndexResult {
    if (this.reads.size() + this.waitingReads.length >= this.limits.maxPendingReads) return { ok: false, reason: 'busy' };
    if (!this.committedInTerm()) {
      this.waitingReads.push({ ctx, from });
      return { ok: true };
    }
    if (this.members.length === 1) {
      this.answerRead(from, ctx, this.log.committed);
      return { ok: true };
    }
    this.reads.add(ctx, this.log.committed, from);
    this.broadcastHeartbeat();
    return { ok: true };
  }

  private releaseWaitingReads(): void {
    if (this.waitingReads.length === 0 || !this.committedInTerm()) return;
    const waiting = this.waitingReads;
    this.waitingReads = [];
    for (const w of waiting) this.leaderRead(w.ctx, w.from);
  }

  private answerRead(to: NodeId, ctx: string, index: number): void {
    if (to === this.id) this.readStates.push({ ctx, index });
    else this.send({ type: 'readIndexResp', to, ctx, index });
  }

  // ---- output ----

  private send(m: OutgoingMessage): void {
    this.msgs.push({ ...m, from: this.id, term: m.term ?? this.term } as Message);
  }

  /** For status reports (GET /cluster/raft) and tests. */
  progressOf(id: NodeId): Readonly<Progress> | undefined {
    return this.progress.get(id);
  }
}

function definedOnly(options: RaftOptions): Partial<Limits> {
  const out: Record<string, unknown> = {};
  for (const key of Object.keys(RAFT_DEFAULTS)) {
    const v = (options as unknown as Record<string, unknown>)[key];
    if (v !== undefined) out[key] = v;
  }
  return out as Partial<Limits>;
}
