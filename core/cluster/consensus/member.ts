import { SvcError } from '../../base/errors.js';
import type { Prng } from '../../base/prng.js';
import { RaftNode, type Entry, type HardState, type Message, type RaftOptions, type RaftStatus, type Snapshot, type Storage, type Transport } from '../raft/index.js';

/**
 * One member of a consensus group, driven: the host's Ready loop around RaftNode (persist, then send,
 * then apply, then advance; a leader's appends are sent while they persist, and a Ready that only moves
 * the commit index is not waited for: loop()), and the Proposer seam a shard's write path goes through (issue 17): a
 * write is acknowledged only once a quorum holds it durably and this member applied it.
 *
 * It does no I/O of its own: the durable log (core/storage/raft-log.ts), the transport
 * (roles/raft/transport.ts) and the state machine are given, and so are time (the host calls tick())
 * and received messages (receive()). The Proposer interface belongs to the shard layer once it lands
 * (STYLE.md: LocalShard writes through a Proposer: local, follower, raft).
 */

/** What the member needs of its log beyond Raft's reads: RaftLog's save (one write + fsync per Ready). */
export interface DurableRaftStorage extends Storage {
  /**
   * Persists one Ready. Writes land in the order save is called, whether or not the caller waits for
   * each (RaftLog queues them): the member does not wait for a commit-index-only write, and a later
   * Ready's term and vote landing before it would be undone by it.
   */
  save(update: { snapshot?: Snapshot | null; entries?: readonly Entry[]; hardState?: HardState | null; sync?: boolean }): Promise<void>;
  /** Records the state machine's image at `index` (RaftLog); with compact, what Compaction needs. */
  createSnapshot?(index: number, data: Uint8Array): Promise<unknown>;
  /** Drops entries at or before `index`, at most the snapshot's. */
  compact?(index: number): Promise<void>;
}

/**
 * Bounds the log: once `everyEntries` entries were applied since the last snapshot, a snapshot is
 * recorded at the applied index and the log keeps `retainEntries` entries before it (a follower a little
 * behind catches up from them). The snapshot's data is the state machine's image when `image` is given;
 * without it the snapshot is a marker (no data: the state machine is durable on its own, as a database
 * is), and the host's Storage makes an image only when a follower needs one (roles/raft/member-host.ts).
 */
export interface Compaction {
  readonly everyEntries: number;
  readonly retainEntries: number;
  /** The state machine now, synchronously (nothing is being applied when it is called). */
  image?(): Uint8Array;
}

export interface ProposeAck {
  readonly index: number;
  readonly term: number;
  /** What the state machine's apply of the entry resolved to (the write's result). */
  readonly result: unknown;
}

/** The write path's seam: resolves once the write is committed and applied; never acknowledges less. */
export interface Proposer {
  /**
   * `deadline`: a signal that ends the wait, or a time (ms from now) after which it ends, checked at
   * each tick (so up to a tick late): no timer or signal is made for it, which a write per call pays.
   */
  propose(data: Uint8Array, deadline?: AbortSignal | { readonly timeoutMs: number }): Promise<ProposeAck>;
}

/**
 * The replicated state machine: every committed entry once, in order (a leader's no-op has empty data).
 * The member calls `apply` for every committed entry of a Ready, in order, before awaiting any of them
 * (so their writes may share one fsync), awaits them all, then calls `appliedThrough` with the last one
 * (the last before the first that failed, but for a refusal: the member stops at that one).
 * `apply` resolves to the write's result. A rejection that `refused` recognises is a deterministic
 * refusal (every member refuses that entry alike: a create of a name taken since it was proposed): it
 * rejects that one proposal, and the member goes on. Any other failure stops the member.
 */
export interface StateMachine {
  apply(entry: Entry): unknown;
  /**
   * Every entry up to `index` has been given to apply: a position the state machine records with them,
   * which need not be durable yet (the log is the durable record of the entries: a restarted member is
   * given `applied`, the last position the state machine kept, and applies the entries after it again,
   * so applying an entry twice must change nothing).
   */
  appliedThrough?(index: number): void | Promise<void>;
  /**
   * Every position given to appliedThrough so far is durable once it resolves. Called before a snapshot
   * marker (no image: Compaction without `image`) lets the log drop entries: the state machine must never
   * need them again. It runs beside the loop (it may write much: a database's segments), which records
   * the marker, at the index applied when it began, at the first Ready after it resolved; a rejection
   * records none and is logged. Without it, appliedThrough must be durable when it resolves.
   */
  syncApplied?(): Promise<void>;
  /**
   * Replaces the whole state with a snapshot received from the leader. `signal` is aborted by close():
   * the state machine may then stop part way (rejecting), as a kill -9 would stop it. It must then not
   * report the snapshot's index as applied at the next start, which restores it again (the log keeps
   * naming it: `applied` below its index).
   */
  restore(snapshot: Snapshot, signal: AbortSignal): void | Promise<void>;
}

export interface ConsensusMemberOptions {
  readonly id: string;
  readonly members: readonly string[];
  readonly storage: DurableRaftStorage;
  readonly transport: Transport;
  readonly stateMachine: StateMachine;
  readonly prng: Prng;
  readonly electionTicks: number;
  readonly heartbeatTicks: number;
  /** The state machine's applied index at start (its checkpoint); at least the snapshot's index. */
  readonly applied?: number;
  readonly raft?: Omit<Partial<RaftOptions>, 'id' | 'members' | 'storage' | 'prng' | 'electionTicks' | 'heartbeatTicks' | 'applied'>;
  readonly log?: (message: string, detail?: Record<string, unknown>) => void;
  readonly compaction?: Compaction;
  /** A deterministic refusal of an entry (see StateMachine); default: none is. */
  readonly refused?: (e: unknown) => boolean;
  /**
   * Called at once whenever `restoring` or `replaying` changes: what reads the state machine without
   * asking this member (a request loop's own searches) follows it.
   */
  readonly onRestoring?: () => void;
  /**
   * The index this member had committed before this start (its log's commit, at least `applied`). The
   * state machine may already hold some of the entries after `applied` (a database's segments written
   * after its durable position): applying them again passes through states it never had (an older value
   * of a point over newer ones), so until the member has applied through here it is `replaying`, and
   * nothing should read it as a state of the group.
   */
  readonly replayThrough?: number;
}

interface PendingRead {
  readonly resolve: (index: number) => void;
  readonly reject: (e: unknown) => void;
  /** Set once the leader confirmed the read index; answered when the state machine reaches it. */
  index: number | null;
}

interface Pending {
  readonly term: number;
  /** When the proposer stops waiting (performance.now()), if it gave a time rather than a signal. */
  readonly expiresAt: number | undefined;
  readonly resolve: (ack: ProposeAck) => void;
  readonly reject: (e: unknown) => void;
}

export class ConsensusMember implements Proposer {
  private readonly node: RaftNode;
  private readonly pending = new Map<number, Pending>();
  private readonly reads = new Map<string, PendingRead>();
  private nextRead = 1;
  private applied: number;
  private running = false;
  private failed: unknown = null;
  private closed = false;
  /** Aborted by close(): a restore running then stops part way (StateMachine.restore). */
  private readonly closing = new AbortController();
  private idle: (() => void)[] = [];
  /** The term whose first entry (the leader's no-op) this member has applied: a leader then holds every acknowledged write. */
  private termApplied = 0;
  /** The last snapshot's index (its own or one installed). */
  private snapshotIndex: number;
  /** Committed batches (and snapshot restores) being applied behind the loop, in order. */
  private applyChain: Promise<void> = Promise.resolve();
  private applyBatches = 0;
  /** Snapshot restores queued or running on the state machine (its state is not whole meanwhile). */
  private restores = 0;
  /** Restores ever queued: a read that began before one and ended after it saw part of it (restoresBegun). */
  private restoresQueued = 0;
  /** A restore failed or was cut short by close(): the state machine is partial for good (until a restart). */
  private restoreCut = false;

  constructor(private readonly o: ConsensusMemberOptions) {
    this.node = new RaftNode({
      ...o.raft, id: o.id, members: o.members, storage: o.storage, prng: o.prng,
      electionTicks: o.electionTicks, heartbeatTicks: o.heartbeatTicks,
      applied: Math.max(o.applied ?? 0, o.storage.snapshot().meta.index),
    });
    this.snapshotIndex = o.storage.snapshot().meta.index;
    this.applied = o.applied ?? this.snapshotIndex;
    if (this.applied < this.snapshotIndex) {
      // The log's snapshot is newer than the state machine (a restore a crash cut short): restored
      // first, behind the loop like any restore, so this member answers its peers meanwhile.
      this.queueRestore(o.storage.snapshot());
    }
  }

  /** One logical clock tick (the host's timer: heartbeatTicks of them make a heartbeat interval). */
  tick(): void {
    if (!this.usable()) return;
    this.expire();
    this.node.tick();
    this.kick();
  }

  /** Proposals whose time (propose's `timeoutMs`) is up: not acknowledged, though they may still apply. */
  private expire(): void {
    if (this.pending.size === 0) return;
    const now = performance.now();
    for (const [index, p] of this.pending) {
      if (p.expiresAt === undefined || p.expiresAt > now) continue;
      this.pending.delete(index);
      p.reject(notAcknowledged('no quorum acknowledged the write in time; it may still be applied'));
    }
  }

  /** A message from a peer, as the transport delivered it. */
  receive(m: Message): void {
    if (!this.usable()) return;
    this.node.step(m);
    this.kick();
  }

  /**
   * The host saw `peer`'s process go away (its address refuses connections): if it leads this member
   * and misses a heartbeat too, this member campaigns soon instead of after a whole election timeout
   * (RaftNode.leaderGone).
   */
  leaderGone(peer: string): boolean {
    return this.usable() && this.node.leaderGone(peer);
  }

  /** Leases ended early on a leaderGone hint (RaftNode.leasesEndedEarly). */
  get leasesEndedEarly(): number {
    return this.node.leasesEndedEarly;
  }

  propose(data: Uint8Array, deadline?: AbortSignal | { readonly timeoutMs: number }): Promise<ProposeAck> {
    const timed = deadline !== undefined && 'timeoutMs' in deadline ? deadline : undefined;
    const signal = timed === undefined ? deadline as AbortSignal | undefined : undefined;
    const expiresAt = timed === undefined ? undefined : performance.now() + timed.timeoutMs;
    if (!this.usable()) return Promise.reject(this.failed ?? new SvcError('unavailable', 'the consensus member is closed'));
    if (signal?.aborted === true) return Promise.reject(notAcknowledged('the request was cancelled before it was proposed'));
    const r = this.node.propose(data);
    if (!r.ok) {
      return Promise.reject(r.reason === 'busy'
        ? new SvcError('unavailable', 'too many writes wait for the quorum; retry shortly', { reason: 'busy' })
        : new SvcError('unavailable', `this member is not the leader (leader: ${r.leaderId ?? 'none known'})`, { reason: 'not_leader', leaderId: r.leaderId }));
    }
    // An earlier proposal of this member at the same index was cut from its log (a leader that lost its
    // term, then led again and reused the index): never committed, so it is answered now, not left waiting.
    const displaced = this.pending.get(r.index);
    if (displaced !== undefined) {
      this.pending.delete(r.index);
      displaced.reject(overwritten());
    }
    return new Promise<ProposeAck>((resolve, reject) => {
      const entry: Pending = {
        term: r.term,
        expiresAt,
        resolve: (ack) => { signal?.removeEventListener('abort', onAbort); resolve(ack); },
        reject: (e) => { signal?.removeEventListener('abort', onAbort); reject(e); },
      };
      const onAbort = (): void => {
        // Only its own entry: a later proposal may hold the index by now.
        if (this.pending.get(r.index) !== entry) return;
        this.pending.delete(r.index);
        reject(notAcknowledged('no quorum acknowledged the write in time; it may still be applied'));
      };
      signal?.addEventListener('abort', onAbort, { once: true });
      this.pending.set(r.index, entry);
      this.kick();
    });
  }

  /**
   * A linearizable read (ReadIndex): resolves with an index once this member's state machine has
   * applied through it, so reading the state machine then reflects every write acknowledged before
   * the call, on a follower too (it asks the leader). Without an answer in time (no leader, leadership
   * lost) the caller's signal ends it with `unavailable`.
   */
  readBarrier(signal?: AbortSignal): Promise<number> {
    if (!this.usable()) return Promise.reject(this.failed ?? new SvcError('unavailable', 'the consensus member is closed'));
    const ctx = `r${this.nextRead++}`;
    const r = this.node.readIndex(ctx);
    if (!r.ok) return Promise.reject(new SvcError('unavailable', r.reason === 'busy' ? 'too many reads wait for the leader' : 'no leader is known to confirm a strong read', { reason: r.reason }));
    return new Promise<number>((resolve, reject) => {
      const onAbort = (): void => {
        if (this.reads.delete(ctx)) reject(new SvcError('unavailable', 'the leader did not confirm the strong read in time', { reason: 'read_timeout' }));
      };
      signal?.addEventListener('abort', onAbort, { once: true });
      this.reads.set(ctx, {
        index: null,
        resolve: (index) => { signal?.removeEventListener('abort', onAbort); resolve(index); },
        reject: (e) => { signal?.removeEventListener('abort', onAbort); reject(e); },
      });
      this.kick();
    });
  }

  status(): RaftStatus {
    return this.node.status();
  }

  /** The last entry this member's state machine has applied. */
  get appliedIndex(): number {
    return this.applied;
  }

  /**
   * Resolves once this member has applied through `index` (a write its leader acknowledged, so that a
   * read here after it sees it); rejects with `unavailable` when the signal ends first.
   */
  whenApplied(index: number, signal: AbortSignal): Promise<void> {
    if (this.applied >= index) return Promise.resolve();
    if (!this.usable()) return Promise.reject(this.failed ?? new SvcError('unavailable', 'the consensus member is closed'));
    // A read whose index is already known: answered as a confirmed ReadIndex read is (answerReads).
    const ctx = `a${this.nextRead++}`;
    return new Promise<void>((resolve, reject) => {
      const onAbort = (): void => {
        if (this.reads.delete(ctx)) reject(new SvcError('unavailable', `this member did not apply entry ${index} in time`, { reason: 'apply_timeout' }));
      };
      signal.addEventListener('abort', onAbort, { once: true });
      this.reads.set(ctx, {
        index,
        resolve: () => { signal.removeEventListener('abort', onAbort); resolve(); },
        reject: (e) => { signal.removeEventListener('abort', onAbort); reject(e); },
      });
    });
  }

  /**
   * Whether this member leads and has applied every entry committed before its term (its no-op is
   * applied): its state machine then holds every acknowledged write, so a write checked against it
   * (a create of a name, a set_payload of ids) is checked against the whole history.
   */
  get leaderReady(): boolean {
    // Asked once or twice per write (raftEngine, the member host's proposer): no status() object built.
    const term = this.node.leaderTerm();
    return term >= 0 && this.termApplied === term;
  }

  /**
   * Whether a snapshot is being restored into the state machine (or waits to be): its state is then
   * not whole, so it must not be read as an image of any index.
   */
  get restoring(): boolean {
    return this.restores > 0 || this.restoreCut;
  }

  /**
   * How many snapshot restores were ever queued here: a read that waits while it runs (a search settling
   * its graph) notes it before and looks again after, since a restore may have begun and even ended
   * meanwhile, replacing the state under it.
   */
  get restoresBegun(): number {
    return this.restoresQueued;
  }

  /** Applying again, after a start, entries the state machine may hold in part (MemberOptions.replayThrough). */
  get replaying(): boolean {
    return this.applied < (this.o.replayThrough ?? 0);
  }

  /** Proposals waiting for their commit (tests: none left behind). */
  get waiting(): number {
    return this.pending.size;
  }

  /**
   * Stops taking input, cuts a running snapshot restore short (StateMachine.restore's signal), and waits
   * for the Ready and the applies in progress; pending proposals fail as not acknowledged.
   */
  async close(): Promise<void> {
    this.closed = true;
    // A restore of a large image could take minutes: it stops part way, and runs again at the next start.
    this.closing.abort();
    // Ticks stop with a close (tick() does nothing now): proposals whose time is up while the close
    // waits (a stalled disk) are still answered at their time.
    const expiring = setInterval(() => this.expire(), EXPIRE_WHILE_CLOSING_MS);
    try {
      while (this.running) await new Promise<void>((r) => this.idle.push(r));
      await this.applyChain;
      await this.lazySave;
      await this.markerSync?.done;
    } finally {
      clearInterval(expiring);
    }
    this.failAll(notAcknowledged('the consensus member closed before the write committed'));
  }

  /** Neither closed nor stopped by a failure (its state may then hold part of an entry it could not apply). */
  get healthy(): boolean {
    return this.usable();
  }

  private usable(): boolean {
    return !this.closed && this.failed === null;
  }

  /** The last write of a Ready the loop did not wait for (a commit index alone), settled. */
  private lazySave: Promise<void> = Promise.resolve();

  private kick(): void {
    if (this.running) return;
    this.running = true;
    void this.loop();
  }

  /**
   * Ready after Ready: persist, send, apply, advance. What a Ready promises is sent only once it is
   * durable, but for a leader's appends (sent while they persist) and a Ready that only moves the commit
   * index (not waited for at all).
   */
  private async loop(): Promise<void> {
    try {
      while (!this.closed && this.failed === null && (this.node.hasReady() || this.markerSyncEnded())) {
        if (!this.node.hasReady()) {
          // A marker whose sync ended while no Ready came (its end kicks this loop) is recorded now.
          await this.maybeCompact();
          continue;
        }
        const rd = this.node.ready();
        // Leadership lost (a higher term, or CheckQuorum when cut off from the quorum): this member's
        // proposals it has not seen committed can no longer be committed by it. They are answered now
        // rather than at their deadline (a later leader may still commit them: not acknowledged, not
        // refused). Those committed already (applied behind this loop, or in this Ready) are answered
        // when applied, as ever.
        if (rd.softState !== null && rd.softState.role !== 'leader' && this.pending.size > 0) {
          const e = leaderChanged(rd.softState.leaderId);
          const commit = this.node.status().commit;
          for (const [index, p] of this.pending) {
            if (index <= commit) continue;
            this.pending.delete(index);
            p.reject(e);
          }
        }
        // Without mustSync the Ready holds no entry, no snapshot and no new term or vote: at most the
        // commit index moved, which Raft need not keep (a restart learns it again, and the state machine
        // may be ahead of it: RaftLog's constructor). Nothing it sends or applies waits for its write:
        // the entries it commits were made durable by earlier Readies, which this loop awaited. The write
        // is queued behind those (the log writes in order) and not fsynced (RaftLogUpdate.sync); a
        // failure stops this member as an awaited one does.
        const lazy = !rd.mustSync;
        // A leader's appends go while its own disk writes them (Ready.sendBeforePersist): its fsync and
        // its followers' overlap. Anything else waits until what it may promise is durable.
        const early = rd.sendBeforePersist || lazy;
        if (early && rd.messages.length > 0) this.o.transport.send(rd.messages);
        const save = rd.hardState === null && rd.entries.length === 0 && rd.snapshot === null ? null
          : this.o.storage.save({ snapshot: rd.snapshot, entries: rd.entries, hardState: rd.hardState, sync: rd.mustSync });
        if (lazy && save !== null) {
          // A clean close waits for it; a write the log refuses because it closed is no fault.
          this.lazySave = save.catch((e: unknown) => {
            if (!(this.closed && e instanceof SvcError && e.code === 'not_ready')) this.stop(e);
          });
        } else await save;
        if (!early && rd.messages.length > 0) this.o.transport.send(rd.messages);
        if (rd.snapshot) {
          // The snapshot replaces the state, after the batches before it and before those after it (the
          // chain's order), while this loop goes on: the snapshot is durable in the log, so this member
          // may already answer and vote as one that holds it (a restore a crash cuts short runs again
          // at start), and a second fault elsewhere in the group meanwhile does not stall it.
          const snap = rd.snapshot;
          this.snapshotIndex = Math.max(this.snapshotIndex, snap.meta.index);
          this.queueRestore(snap);
          // Whether our own pending writes are in a leader's snapshot is unknown: never acknowledge a guess.
          for (const [index, p] of this.pending) {
            if (index > snap.meta.index) continue;
            this.pending.delete(index);
            p.reject(notAcknowledged('a snapshot replaced this member\'s log before the write was seen to commit'));
          }
        }
        if (rd.committedEntries.length > 0) {
          // Applied behind the loop, batch after batch in commit order, so that persisting and sending the
          // next Ready does not wait for this one's writes.
          const entries = rd.committedEntries;
          this.enqueue(() => this.applyAll(entries));
        }
        for (const rs of rd.readStates) {
          const read = this.reads.get(rs.ctx);
          if (read !== undefined) read.index = rs.index;
        }
        this.answerReads();
        this.node.advance(rd);
        await this.maybeCompact();
      }
    } catch (e) {
      this.stop(e);
    } finally {
      this.running = false;
      for (const r of this.idle.splice(0)) r();
    }
  }

  /**
   * Queues work on the state machine behind the loop. Bounded without blocking the loop: past
   * APPLY_BATCHES_AHEAD_MAX batches Raft holds further committed entries in its log until the chain
   * drains, while persisting, sending and answering peers go on.
   */
  private enqueue(work: () => Promise<void>): void {
    this.applyBatches++;
    if (this.applyBatches > APPLY_BATCHES_AHEAD_MAX) this.node.holdApply(true);
    this.applyChain = this.applyChain.then(work).then(
      () => this.dequeued(),
      (e: unknown) => { this.dequeued(); this.stop(e); },
    );
  }

  private dequeued(): void {
    this.applyBatches--;
    if (this.applyBatches <= APPLY_BATCHES_AHEAD_MAX) {
      this.node.holdApply(false);
      if (this.usable()) this.kick();
    }
  }

  /** A snapshot restored into the state machine in the chain's order; `restoring` from now until it ends. */
  private queueRestore(snap: Snapshot): void {
    this.restores++;
    this.restoresQueued++;
    if (this.restores === 1) this.o.onRestoring?.();
    // A leader that cannot apply its term's first entry until a restore ends would stall the group's
    // writes meanwhile: another member leads if it can (this one still votes for it).
    this.node.holdCampaign(true);
    this.enqueue(async () => {
      try {
        if (this.failed !== null || this.closing.signal.aborted) return;
        await this.o.stateMachine.restore(snap, this.closing.signal);
      } catch (e) {
        // The state machine holds part of the image: `restoring` stays true, so nothing reads it, until
        // the next start restores it again (the log names it).
        this.restoreCut = true;
        // Cut short by close(): not applied.
        if (this.closing.signal.aborted) return;
        throw e;
      } finally {
        this.restores--;
        if (this.restores === 0) {
          this.node.holdCampaign(false);
          this.o.onRestoring?.();
        }
      }
      const replaying = this.replaying;
      this.applied = Math.max(this.applied, snap.meta.index);
      this.termApplied = Math.max(this.termApplied, snap.meta.term);
      if (replaying && !this.replaying) this.o.onRestoring?.();
      this.answerReads();
    });
  }

  /** A failed fsync or apply: what is durable is unknown, so this member stops (a restart recovers it). */
  private stop(e: unknown): void {
    if (this.failed !== null) return;
    this.failed = e;
    this.o.log?.('consensus member stopped: persisting or applying failed', { error: e instanceof Error ? e.message : String(e) });
    this.failAll(notAcknowledged('the member failed to persist or apply; the write may or may not be committed'));
  }

  /**
   * Every committed entry of one Ready: all given to the state machine in order first (their writes may
   * share one fsync), then awaited; each proposal of this member is answered with its entry's outcome.
   */
  private async applyAll(entries: readonly Entry[]): Promise<void> {
    if (this.failed !== null) return;
    const sm = this.o.stateMachine;
    await this.applyBatch(sm, entries);
    this.answerReads();
  }

  private async applyBatch(sm: StateMachine, entries: readonly Entry[]): Promise<void> {
    const replaying = this.replaying;
    try {
      await this.applyEach(sm, entries);
    } finally {
      if (replaying && !this.replaying) this.o.onRestoring?.();
    }
  }

  private async applyEach(sm: StateMachine, entries: readonly Entry[]): Promise<void> {
    const outcomes = entries.map((e) => {
      try {
        return Promise.resolve(sm.apply(e)).then((value) => ({ ok: true as const, value }), (error: unknown) => ({ ok: false as const, error }));
      } catch (error) {
        return Promise.resolve({ ok: false as const, error });
      }
    });
    const settled = await Promise.all(outcomes);
    // Through the last entry before the first that failed (but for a refusal): the member stops at that
    // one, and the state machine must not count it as applied (it writes its position from this).
    const failedAt = settled.findIndex((out) => !out.ok && !(this.o.refused?.(out.error) ?? false));
    const last = failedAt < 0 ? entries.length - 1 : failedAt - 1;
    if (last >= 0) await sm.appliedThrough?.(entries[last].index);
    for (let i = 0; i < entries.length; i++) {
      const e = entries[i];
      const out = settled[i];
      if (!out.ok && !(this.o.refused?.(out.error) ?? false)) throw out.error;
      this.applied = e.index;
      if (e.term > this.termApplied) this.termApplied = e.term;
      const p = this.pending.get(e.index);
      if (p === undefined) continue;
      this.pending.delete(e.index);
      if (p.term !== e.term) p.reject(overwritten());
      else if (out.ok) p.resolve({ index: e.index, term: e.term, result: out.value });
      else p.reject(out.error);
    }
  }

  private async maybeCompact(): Promise<void> {
    const c = this.o.compaction;
    const st = this.o.storage;
    if (c === undefined || st.createSnapshot === undefined || st.compact === undefined) return;
    const synced = this.markerSync;
    if (synced !== null) {
      // A marker says the state machine holds everything through its index by itself: durably, first.
      // That may take a while (a state machine writes what it holds), so it runs beside this loop, and
      // the marker is recorded at the first Ready after it ended.
      if (synced.state === 'running') return;
      this.markerSync = null;
      if (synced.state === 'failed') {
        // Tried again once a quarter of the interval more is applied: not at every Ready.
        this.markerRetryAt = this.applied + Math.max(1, Math.floor(c.everyEntries / 4));
        this.o.log?.('consensus: the state machine could not make its state durable; the log is not compacted until it can', { index: synced.index, error: String(synced.error) });
        return;
      }
      // A snapshot installed meanwhile is past it.
      if (synced.index > this.snapshotIndex) await this.compactThrough(synced.index, new Uint8Array(0));
      return;
    }
    if (this.applied - this.snapshotIndex < c.everyEntries || this.applied < this.markerRetryAt) return;
    const index = this.applied;
    const image = c.image?.();
    const sync = this.o.stateMachine.syncApplied;
    if (image !== undefined || sync === undefined) {
      await this.compactThrough(index, image ?? new Uint8Array(0));
      return;
    }
    const run: MarkerSync = { index, state: 'running', error: null, done: Promise.resolve() };
    run.done = sync.call(this.o.stateMachine).then(
      () => { run.state = 'done'; },
      (e: unknown) => { run.state = 'failed'; run.error = e; },
    ).then(() => this.kick());
    this.markerSync = run;
  }

  private markerSyncEnded(): boolean {
    return this.markerSync !== null && this.markerSync.state !== 'running';
  }

  /** The state machine's durable sync for a marker, running or ended (maybeCompact). */
  private markerSync: MarkerSync | null = null;
  /** After a failed sync for a marker: the applied index before which none is tried again. */
  private markerRetryAt = 0;

  /** Records a snapshot at `index` (a marker when `image` is empty) and compacts the log behind it. */
  private async compactThrough(index: number, image: Uint8Array): Promise<void> {
    const st = this.o.storage;
    await st.createSnapshot!(index, image);
    this.snapshotIndex = index;
    const to = index - this.o.compaction!.retainEntries;
    if (to >= st.firstIndex()) await st.compact!(to);
    this.o.log?.('consensus: snapshot taken and log compacted', { index, compactedThrough: Math.max(to, st.firstIndex() - 1) });
  }

  /** Reads whose index the state machine has reached. */
  private answerReads(): void {
    for (const [ctx, read] of this.reads) {
      if (read.index === null || read.index > this.applied) continue;
      this.reads.delete(ctx);
      read.resolve(read.index);
    }
  }

  private failAll(e: SvcError): void {
    for (const p of this.pending.values()) p.reject(e);
    this.pending.clear();
    for (const r of this.reads.values()) r.reject(e);
    this.reads.clear();
  }
}

interface MarkerSync {
  readonly index: number;
  state: 'running' | 'done' | 'failed';
  error: unknown;
  done: Promise<void>;
}

/** How often a closing member answers proposals whose time is up (its ticks have stopped). */
const EXPIRE_WHILE_CLOSING_MS = 100;

/** Committed batches the loop may run ahead of the state machine before it waits for it. */
const APPLY_BATCHES_AHEAD_MAX = 4;

function overwritten(): SvcError {
  return new SvcError('unavailable', 'the write was not committed: leadership changed and another entry took its place', { reason: 'overwritten' });
}

function leaderChanged(leaderId: string | null): SvcError {
  return new SvcError('unavailable', `the write is not acknowledged: this member stopped leading before a quorum acknowledged it (leader now: ${leaderId ?? 'none known'}); it may still be applied`, {
    reason: 'leader_changed', leaderId,
  });
}

function notAcknowledged(why: string): SvcError {
  return new SvcError('unavailable', `the write is not acknowledged: ${why}`, { reason: 'not_acknowledged' });
}
