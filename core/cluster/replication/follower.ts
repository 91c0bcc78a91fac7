import type { Clock } from '../../base/clock.js';
import { invalidArgument } from '../../base/errors.js';
import type { ReplicaResume, ReplicationEvent } from '../../base/model.js';
import { decodeRecord, recordOpBytes, type DecodedRecord } from '../../collection/replication.js';
import { isReplicaBookkeeping, type Op } from '../../storage/codec.js';

/**
 * The follower (spec, "Node role and replication"): starting -> bootstrapping (a logical snapshot) ->
 * streaming (the commit tail), and back to starting on any stream error, after a bounded, jittered
 * back-off. It resumes after its last applied leader seq, which is durable with the data it covers
 * (Database.replicaPosition); the leader answers a seq it no longer holds with a full snapshot.
 *
 * What a reader sees: the follower serves reads only once its first bootstrap is complete, and not while
 * a later one runs (a bootstrap clears the collections first). Every record is decoded and checked before
 * any of it is applied, so a malformed one ends the stream (logged, reconnect), never half-applied.
 */

export type FollowerState = 'starting' | 'bootstrapping' | 'streaming' | 'stopped';

/**
 * The follower's side of the Replicate stream: resume after a seq of the leader history named, or a full
 * snapshot when absent (the leader sends one too when the history is not its own).
 */
export type ReplicationSource = (resume: ReplicaResume | undefined, signal: AbortSignal) => AsyncIterable<ReplicationEvent>;

/** What the follower writes to (core/collection/database.ts implements it). */
export interface ReplicaTarget {
  /** The applied leader seq and the leader history it counts in; null when no position holds. */
  readonly replicaSeq: ReplicaResume | null;
  replicaReset(): Promise<void>;
  /** `createdSeq`: the leader's seq of the create (0 when it does not know). */
  replicaCreate(uid: string, name: string, params: object, createdSeq: number): Promise<void>;
  replicaDrop(uid: string): Promise<void>;
  /** `encoded`: the op as the leader encoded it (what decoded to `op`), for this node's WAL as it is. */
  replicaWrite(uid: string, op: Op, bulk: boolean, encoded?: Uint8Array): Promise<void>;
  replicaPosition(leaderSeq: number): Promise<void>;
  /** The end of a bootstrap: what the snapshot did not name goes, then the position in `history`. */
  replicaSnapshotEnd(leaderSeq: number, history: string): Promise<void>;
  /** A new stream begins (a bootstrap the last one left unfinished is abandoned). */
  replicaStreamOpened?(): Promise<void>;
  /** Whether a bootstrap running now leaves the current state serving reads (a side directory). */
  servesDuringBootstrap?(): boolean;
}

export interface FollowerOptions {
  source: ReplicationSource;
  target: ReplicaTarget;
  clock: Clock;
  /** Waits `ms` or until `signal` aborts (real timers in roles/, fast ones in tests). */
  sleep(ms: number, signal: AbortSignal): Promise<void>;
  /** Uniform in [0, 1): the jitter of the back-off. */
  random(): number;
  log(level: 'info' | 'warn', message: string, detail?: Record<string, unknown>): void;
  /** First reconnect delay and its cap; each failed attempt doubles it (default 100 ms, 10 s). */
  backoffMs?: { base: number; max: number };
  /** Records applied concurrently (their WAL appends share fsyncs); default 256. */
  inFlightMax?: number;
  /** Called once the loop has stopped (the source's connection goes). */
  onStopped?: () => void;
  /**
   * Called at once whenever `serving` may have changed (a bootstrap begins or ends, a stream starts
   * over): what answers reads without asking this follower (a request loop's own searches) follows it.
   */
  onServing?: () => void;
}

export interface FollowerStats {
  state: FollowerState;
  /** The leader seq applied and durable here; null before the first bootstrap ends. */
  appliedSeq: number | null;
  /** The highest leader seq seen on the stream. */
  receivedSeq: number | null;
  /** When the oldest received record not yet applied arrived (monotonic ms); null when none waits. */
  oldestPendingMs: number | null;
  /** The leader's last seq, as its latest heartbeat or record said; null before it has said. */
  leaderSeq: number | null;
  /**
   * How stale this replica may be, in ms on its own clock: 0 while connected and holding every leader
   * commit it has heard of; else the time since it last knew it held all the leader had (a heartbeat's
   * seq, once applied) — so it grows while the stream is down or behind.
   */
  lagMs: number;
  reconnects: number;
  bootstraps: number;
  records: number;
  bytes: number;
  /** The first bootstrap has completed: reads may be served (unless a later bootstrap runs). */
  bootstrapped: boolean;
}

const DEFAULT_BACKOFF = { base: 100, max: 10_000 };
const IN_FLIGHT_MAX = 256;
/** A caught-up replica that heard no heartbeat for longer counts the silence as its lag (four heartbeats). */
const HEARD_WITHIN_MS = 1_000;

export class Follower {
  private readonly opts: FollowerOptions;
  private readonly stopping = new AbortController();
  private running: Promise<void> | null = null;
  private stream: AbortController | null = null;
  private readonly st: FollowerStats;
  private readonly pending: { at: number; done: Promise<void>; settled: boolean }[] = [];
  private readonly bootstrappedWaiters: (() => void)[] = [];
  /** The first write in flight that failed: the stream ends at the next record. */
  private failure: unknown = null;
  /** The last moment this replica held everything its leader had (start: the process's own start). */
  private caughtUpAt: number;
  /** When the last heartbeat came (start: the process's own start). */
  private heardAt: number;
  /** Counts streams: a heartbeat's completion applies only to the stream that sent it. */
  private generation = 0;
  /** The leader history of the snapshot being applied (from its begin record). */
  private history: string | null = null;
  /** A snapshot is being applied, or was cut short, in place of the served state (not in a side directory). */
  private partial = false;

  constructor(opts: FollowerOptions) {
    this.opts = opts;
    const applied = opts.target.replicaSeq;
    this.st = {
      state: 'starting', appliedSeq: applied?.seq ?? null, receivedSeq: applied?.seq ?? null, oldestPendingMs: null, leaderSeq: null, lagMs: 0,
      reconnects: 0, bootstraps: 0, records: 0, bytes: 0,
      // A follower that restarts with a durable position serves its state at once, as it was.
      bootstrapped: applied !== null,
    };
    this.caughtUpAt = opts.clock.monotonicMs();
    this.heardAt = this.caughtUpAt;
  }

  stats(): FollowerStats {
    return { ...this.st, oldestPendingMs: this.pending.find((p) => !p.settled)?.at ?? null, lagMs: this.lagMs() };
  }

  /**
   * How stale this replica may be: while streaming with everything the leader last said it had, 0 if
   * a heartbeat came within HEARD_WITHIN_MS (they come every 250 ms), else the time since the last one;
   * otherwise the time since it last held everything its leader had. A leader that stops sending
   * heartbeats (hung, or a consensus member cut off from its group, which sends none) so shows as a
   * growing lag, not as 0 for ever.
   */
  private lagMs(): number {
    const applied = this.st.appliedSeq ?? -1;
    const now = this.opts.clock.monotonicMs();
    if (this.st.state === 'streaming' && this.st.leaderSeq !== null && applied >= this.st.leaderSeq) {
      const quiet = now - this.heardAt;
      return quiet <= HEARD_WITHIN_MS ? 0 : quiet;
    }
    return Math.max(0, now - this.caughtUpAt);
  }

  /**
   * Reads may be served: the first bootstrap is complete, and none runs now in place of the served state,
   * nor was one cut short in place (its stream broke part way: the state is partial until a bootstrap
   * completes).
   */
  get serving(): boolean {
    return this.st.bootstrapped && !this.partial && (this.st.state !== 'bootstrapping' || this.opts.target.servesDuringBootstrap?.() === true);
  }

  /** Resolves once the first bootstrap is complete (at once after a restart with a position). */
  whenBootstrapped(): Promise<void> {
    if (this.st.bootstrapped) return Promise.resolve();
    return new Promise((resolve) => this.bootstrappedWaiters.push(resolve));
  }

  start(): void {
    this.running ??= this.loop();
  }

  async stop(): Promise<void> {
    this.stopping.abort();
    this.stream?.abort();
    await this.running;
    this.setState('stopped');
    this.opts.onStopped?.();
  }

  private async loop(): Promise<void> {
    const backoff = this.opts.backoffMs ?? DEFAULT_BACKOFF;
    let failures = 0;
    while (!this.stopping.signal.aborted) {
      this.setState('starting');
      const progressBefore = this.st.records;
      try {
        await this.follow();
        this.opts.log('info', 'replication stream ended; reconnecting');
      } catch (e) {
        if (this.stopping.signal.aborted) break;
        this.opts.log('warn', 'replication stream failed; reconnecting', { error: e instanceof Error ? e.message : String(e) });
      }
      await this.drain().catch(() => undefined);
      if (this.stopping.signal.aborted) break;
      this.st.reconnects++;
      failures = this.st.records > progressBefore ? 1 : failures + 1;
      // Full jitter: a uniform wait up to an exponentially growing cap, so followers do not retry in step.
      const cap = Math.min(backoff.max, backoff.base * 2 ** Math.min(failures - 1, 30));
      await this.opts.sleep(Math.max(1, Math.floor(this.opts.random() * cap)), this.stopping.signal);
    }
  }

  private async follow(): Promise<void> {
    const stream = new AbortController();
    this.stream = stream;
    this.generation++;
    const onStop = () => stream.abort();
    this.stopping.signal.addEventListener('abort', onStop, { once: true });
    try {
      await this.opts.target.replicaStreamOpened?.();
      const resume = this.opts.target.replicaSeq ?? undefined;
      for await (const ev of this.opts.source(resume, stream.signal)) {
        if (this.stopping.signal.aborted) return;
        if (this.failure !== null) throw this.failure;
        // Decoded whole before anything is applied: a bad record ends the stream here.
        const rec = decodeRecord(ev.record);
        this.st.bytes += ev.record.length;
        await this.apply(rec, ev.seq, ev.record);
      }
    } finally {
      this.stopping.signal.removeEventListener('abort', onStop);
      stream.abort();
      this.stream = null;
    }
  }

  private async apply(rec: DecodedRecord, seq: number, record: Uint8Array): Promise<void> {
    const t = this.opts.target;
    switch (rec.kind) {
      case 'snapshotBegin':
        await this.drain();
        // The state changes once the target is ready for the snapshot: a side directory is open (the
        // served state goes on serving), or the first bootstrap starts in place (nothing served yet).
        await t.replicaReset();
        this.history = rec.history!;
        this.partial = t.servesDuringBootstrap?.() !== true;
        this.setState('bootstrapping');
        this.st.bootstraps++;
        this.st.appliedSeq = null;
        return;
      case 'snapshot': {
        const op = rec.op;
        if (rec.keyId === 'db') {
          // Also in the tail: the leader announces a collection its snapshot missed before its first write.
          if (op?.t !== 'create_collection') throw invalidArgument('a snapshot db record must create a collection');
          await this.drain();
          await t.replicaCreate(op.uid, op.name, op.params, seq);
        } else {
          if (this.st.state !== 'bootstrapping') throw invalidArgument('a snapshot chunk outside a snapshot');
          if (op === null || (op.t !== 'upsert' && op.t !== 'upsert_docs' && op.t !== 'delete')) {
            throw invalidArgument('a snapshot collection record must carry points');
          }
          await this.enqueue(t.replicaWrite(rec.keyId, op, true, recordOpBytes(record)));
        }
        this.st.records++;
        return;
      }
      case 'snapshotEnd':
        if (this.st.state !== 'bootstrapping') throw invalidArgument('a snapshot end outside a snapshot');
        await this.drain();
        if (this.history === null) throw invalidArgument('a snapshot end without its begin');
        await t.replicaSnapshotEnd(seq, this.history);
        this.partial = false;
        this.st.appliedSeq = seq;
        this.st.receivedSeq = Math.max(this.st.receivedSeq ?? 0, seq);
        this.streaming();
        return;
      case 'commit':
        await this.commit(rec, seq, record);
        return;
      case 'heartbeat':
        this.heartbeat(seq, rec.leaderSeq!);
        return;
    }
  }

  private async commit(rec: DecodedRecord, seq: number, record: Uint8Array): Promise<void> {
    const t = this.opts.target;
    if (this.st.state === 'bootstrapping') throw invalidArgument('a commit inside a snapshot');
    if (this.st.appliedSeq === null && !this.st.bootstrapped) throw invalidArgument('a commit before any snapshot');
    this.st.receivedSeq = Math.max(this.st.receivedSeq ?? 0, seq);
    this.st.leaderSeq = Math.max(this.st.leaderSeq ?? 0, seq);
    this.streaming();
    const op = rec.op;
    if (op === null) throw invalidArgument('a commit record without a body');
    if (rec.keyId === 'db') {
      // Collection creates and drops are barriers: every write before them lands first.
      await this.drain();
      if (op.t === 'create_collection') await t.replicaCreate(op.uid, op.name, op.params, seq);
      else if (op.t === 'drop_collection') await t.replicaDrop(op.uid);
      else throw invalidArgument(`a commit db record of kind ${op.t}`);
      await t.replicaPosition(seq);
      this.st.appliedSeq = seq;
      this.st.records++;
      return;
    }
    if (op.t === 'create_collection' || op.t === 'drop_collection' || isReplicaBookkeeping(op)) {
      throw invalidArgument('a collection commit must carry points, deletes or payload updates');
    }
    // The write and then its position, issued back to back: the WAL keeps the order, so a position that
    // survives a crash covers its write; only the last write may be applied again, which no reader sees.
    // A write the target refuses throws here, before its position is issued; one issued after an earlier
    // failure would cover a hole, so none is.
    if (this.failure !== null) throw this.failure;
    const write = t.replicaWrite(rec.keyId, op, false, recordOpBytes(record));
    const position = t.replicaPosition(seq);
    await this.enqueue(Promise.all([write, position]).then(() => {
      if (seq > (this.st.appliedSeq ?? 0)) this.st.appliedSeq = seq;
    }));
    this.st.records++;
  }

  /**
   * The stream has read the leader's log through `through` (what it skips, such as a replica's own
   * positions, included), and the leader's log ended at `leaderSeq` when it was sent. Once the writes
   * in flight are done this replica holds everything through `through`; if that was all the leader had,
   * it was caught up as of the heartbeat's arrival.
   */
  private heartbeat(through: number, leaderSeq: number): void {
    if (this.st.state === 'bootstrapping') throw invalidArgument('a heartbeat inside a snapshot');
    if (through > leaderSeq) throw invalidArgument(`a heartbeat through ${through}, past the leader's last seq ${leaderSeq}`);
    this.st.leaderSeq = Math.max(this.st.leaderSeq ?? 0, leaderSeq);
    if (this.st.appliedSeq !== null || this.st.bootstrapped) this.streaming();
    const at = this.opts.clock.monotonicMs();
    this.heardAt = at;
    const generation = this.generation;
    const covered = (): void => {
      // Only for the stream that sent it: a later one may be bootstrapping from scratch.
      if (generation !== this.generation || this.st.state !== 'streaming') return;
      if (through === leaderSeq) this.caughtUpAt = Math.max(this.caughtUpAt, at);
      if (through > (this.st.appliedSeq ?? -1)) this.st.appliedSeq = through;
    };
    const inFlight = this.pending.filter((p) => !p.settled).map((p) => p.done);
    if (inFlight.length === 0) covered();
    else Promise.all(inFlight).then(covered, () => undefined);
  }

  private streaming(): void {
    if (this.st.state === 'streaming') return;
    if (!this.st.bootstrapped) {
      this.st.bootstrapped = true;
      for (const w of this.bootstrappedWaiters.splice(0)) w();
    }
    this.setState('streaming');
  }

  private setState(state: FollowerState): void {
    this.st.state = state;
    this.opts.onServing?.();
  }

  private async enqueue(done: Promise<void>): Promise<void> {
    const entry = { at: this.opts.clock.monotonicMs(), done, settled: false };
    // A failure ends the stream at the next record (or drain), never later: nothing after it is applied
    // on top of a hole. Until then the promise must not count as unhandled.
    done.then(() => { entry.settled = true; }, (e: unknown) => {
      entry.settled = true;
      this.failure ??= e;
    });
    // Tracked before anything else: drain() waits for every write issued, this one included.
    this.pending.push(entry);
    if (this.failure !== null) throw this.failure;
    while (this.pending.length > (this.opts.inFlightMax ?? IN_FLIGHT_MAX)) await this.pending.shift()!.done;
    while (this.pending.length > 0 && this.pending[0].settled) await this.pending.shift()!.done;
  }

  /** Waits for every write in flight, in order; the first failure is thrown (the stream then restarts). */
  private async drain(): Promise<void> {
    try {
      while (this.pending.length > 0) await this.pending.shift()!.done;
    } finally {
      this.pending.length = 0;
      this.failure = null;
    }
  }
}
