import { randomBytes, randomInt } from 'node:crypto';
import { availableParallelism } from 'node:os';
import { BODIES, bodyKeys } from '../base/bodies.js';
import { sleep, systemClock, type Clock } from '../base/clock.js';
import { invalidArgument, notFound, SvcError } from '../base/errors.js';
import { after } from '../base/id-order.js';
import { checkLimit, resolveLimits, type Limits } from '../base/limits.js';
import {
  markCollectionExisted,
  type BulkUpsertBody, type CollectionParams, type GetOptions, type SnapshotBody, type UpsertBody, type UpsertDocumentsBody,
  type CollectionInfo, type CountQuery, type DatabaseStats, type DeletePointsBody, type FetchQuery,
  type Hit, type MultiVectorQuery, type PointOutput, type ReplicaResume, type ReplicateRequest, type ReplicationEvent,
  type SearchQuery, type SetPayloadBody, type SnapshotResult,
} from '../base/model.js';
import { checkName, checkPointId } from '../base/names.js';
import type { SearchResult } from '../index/flat.js';
import { compileFilter, type CompiledFilter } from '../query/filter.js';
import {
  checkTextStats, corpusOf, type Ranked, type Rankings, type RankingsBody, type TextStats, type TextStatsBody,
} from '../query/ranking.js';
import { CodecError, decodeOp, encodeOp, type MoveStateRecord, type Op } from '../storage/codec.js';
import { DataDir } from '../storage/data-dir.js';
import { NodeFileSystem, joinPath, type FileSystem } from '../storage/fs.js';
import { validateSparse, type Bm25Corpus, type ScoredSlots } from '../text/sparse-index.js';
import { Collection, type IndexBuilder } from './collection.js';
import { infoOf, parseCollectionParams, sameShape, splitExistOk, type CollectionSpec } from './params.js';
import {
  checkPayloadResults, parseDocuments, parsePayloadUpdate, parsePoints, parseTokens, parseVector,
} from './points.js';
import {
  checkObject, decodeCursor, encodeCursor, parseBool, parseConsistency, parseDepth, parseEf, parseFetchLimit, parseK, parseQueryTerms,
} from './queries.js';
import { defaultBuildWorkers, extendGraphInline, extendGraphInWorker, indexBuilderInWorkers, prewarmIndexBuilds } from './rebuild.js';
import { SearchDispatch } from './search-dispatch.js';
import { SearchPool, type SearchPoolStats } from './search-pool.js';
import { multiTiesById, tieAtCut, tiesById, widenTies } from './ties.js';
import type { MatchBits, ReadGraph, ReadViewHandle } from './shared-reads.js';
import { replicationStream, type ReplicationView } from './replication.js';
import { consensusStreamHistory } from '../cluster/consensus/replication-source.js';
import type { CommitLog } from '../storage/commit-log.js';
import { owner } from '../cluster/routing/hrw.js';
import { COMMAND_VERSION_MOVE_OUT, COMMAND_VERSION_MOVES, commandVersion, decodeCommand, encodeCommand, isDeterministicRefusal, isMoveCommand, type ShardCommand } from '../cluster/consensus/command.js';
import {
  MOVE_BATCH_BYTES_MAX, MOVE_BATCH_POINTS_MAX, MOVE_SCAN_IDS_MAX, movedError, movedIds, parseMoveRequest, WriteGate, type MoveBatchAnswer, type MoveRequest,
} from './move.js';

export type LogFn = (level: 'debug' | 'info' | 'warn' | 'error', message: string, detail?: Record<string, unknown>) => void;

export interface DatabaseOptions {
  dataDir: string;
  /** 32-byte master key; null only in explicit insecure mode. */
  masterKey: Uint8Array | null;
  limits?: Partial<Limits>;
  /** Where snapshots go (CONTRACT.md section 6); default `<dataDir>-snapshots`. */
  snapshotDir?: string;
  fs?: FileSystem;
  clock?: Clock;
  log?: LogFn;
  /** Seed of the HNSW level generators (default: fixed, so a rebuild of the same data is the same graph). */
  seed?: number;
  /**
   * Whether each collection's graph is written to its data directory (collections/<uid>/graph) and read
   * back at open instead of rebuilt (default true; graph-persist.ts).
   */
  persistGraphs?: boolean;
  /** How graphs are rebuilt: in a worker thread (default) or inline (tests of the state machine). */
  buildIndex?: IndexBuilder;
  /** Longest unindexed tail inserted in place on the main thread; longer ones are a rebuild's (default 5,000). */
  absorbMax?: number;
  /**
   * Graphs take large tails of new points in a build worker, on a copy of the graph, instead of in
   * slices of the event loop (Collection's extendGraph): a read replica, whose loop applies its leader's
   * records first. The graph is the same either way. Default false.
   */
  absorbOffThread?: boolean;
  /**
   * A consensus member's database (issue 17; the member then calls useProposer): its WAL's unsynced tail
   * is a copy of its consensus log, so damage a power loss left there is cut at open and replayed from
   * the log, not refused (DataDirOptions.consensus). Default false: a single node refuses it.
   */
  consensus?: boolean;
  /** Dirty points that trigger a checkpoint of a collection into a segment. */
  checkpointPoints?: number;
  /** Delta segments a collection may have before a checkpoint compacts them into one (default 8). */
  segmentsMax?: number;
  /** WAL file size at which a new file is started (default 16 MiB); tests make it small to roll and truncate often. */
  walFileBytesMax?: number;
  /**
   * Most bytes of WAL files kept only for connected replication streams (files every checkpoint is past);
   * past it the oldest go and the slowest stream ends so its follower re-bootstraps. Default 1 GiB
   * (SVC_REPLICATION_RETAIN_BYTES).
   */
  replicationRetainBytes?: number;
  /**
   * Worker threads that run dense searches over the shared vectors and graphs (search-pool.ts). 0, the
   * default, searches on the calling thread (the embedded API); `svc serve` uses one per core.
   */
  searchWorkers?: number;
  /**
   * Threads that build one large graph in parallel (default: every core but the search workers', at
   * least two on two cores: rebuild.ts defaultBuildWorkers). Ignored with `buildIndex`.
   */
  buildWorkers?: number;
  /**
   * Whether an eventual read of a collection with a bulk load not yet in its graph (an unindexed tail
   * longer than absorbMax) waits for the build rather than scanning the new points exactly (default
   * true: the embedded API, where the spec has in-process searches rebuild synchronously, and where a
   * search right after loading should run at graph speed). `svc serve` and `svc mcp` pass false: a
   * server read never waits unless it asks for `consistency: 'strong'`. Reads see every write either way.
   */
  waitForBulkBuild?: boolean;
  /** Collections with fewer live points than this are searched on the calling thread (default 2000). */
  searchPoolMinPoints?: number;
  /**
   * With a pool, a search runs on the calling thread only when nothing else waits there
   * (search-dispatch.ts) and the previous search started longer ago than this many milliseconds
   * (default 0). Infinity: always the pool.
   */
  searchPoolIdleMs?: number;
  /**
   * Collections keep what a search reads in shared memory too, so request loops on other threads answer
   * plain dense searches themselves (shared-reads.ts, `readView`): a multi-loop `svc serve`.
   */
  sharedReads?: boolean;
}

/** The fields each body may have: from the one schema of each body (core/base/bodies.ts). */
const SEARCH_KEYS = bodyKeys(BODIES.search);
const FETCH_KEYS = bodyKeys(BODIES.fetch);
const MULTI_QUERY_KEYS = bodyKeys(BODIES.searchMultiVector);
/** What a shard's rankings take (a hybrid body's query fields, without k and rrf_k0, plus depth and text_stats). */
const RANKINGS_KEYS = bodyKeys(BODIES.rankings);
const COUNT_KEYS = bodyKeys(BODIES.count);
const DELETE_POINTS_KEYS = bodyKeys(BODIES.deletePoints);
/** Token vectors per multi-vector document or query (not a spec limit: a bound so no request is unbounded). */
/** Ids per delete record when a follower's bootstrap clears a collection. */
const REPLICA_CLEAR_IDS = 10_000;

/** Dirty points that start a checkpoint, and delta segments before a compaction (DatabaseOptions). */
const CHECKPOINT_POINTS = 20_000;
const SEGMENTS_MAX = 8;

interface SegmentLoad {
  segments: number;
  points: number;
}

/** Points (or documents) an op writes or deletes: a segment's share of the collection's history. */
function pointRecords(op: Op): number {
  switch (op.t) {
    case 'upsert': return op.points.length;
    case 'upsert_docs': return op.docs.length;
    case 'set_payload': return op.points.length;
    case 'delete': return op.ids.length;
  }
}

/** The first bytes of a consensus image (consensusImage): a snapshot without them is a marker, never restored. */
const CONSENSUS_IMAGE_MAGIC = Buffer.from('svc-img1', 'latin1');

/**
 * A move batch's token: random, then the batch's collection uid and cursor, so a commit asked again
 * with it can be answered from the durable cursor when no lease holds it (Database.commitBatch).
 */
function moveToken(uid: string, cursor: string): string {
  return `${randomBytes(16).toString('hex')}.${uid}.${Buffer.from(cursor, 'utf8').toString('base64url')}`;
}

function parseMoveToken(token: string): { uid: string; cursor: string } | null {
  const m = /^[0-9a-f]{32}\.([^.]+)\.([A-Za-z0-9_-]*)$/.exec(token);
  return m === null ? null : { uid: m[1], cursor: Buffer.from(m[2], 'base64url').toString('utf8') };
}

/** The history a consensus member's position counts in (DataDir's replica position: the command index). */
const CONSENSUS_HISTORY = 'raft';

/** The largest record a consensus image holds (one collection's batch of points; the WAL's own bound). */
const IMAGE_RECORD_BYTES_MAX = 1 << 30;

/** The largest WAL record a bulk upsert makes (the WAL takes records up to 1 GiB). */
const BULK_RECORD_BYTES_MAX = 256 << 20;

/** A consensus member as the database's writes see it: resolves to the command's applied result. */
export interface CommandProposer {
  propose(cmd: ShardCommand): Promise<unknown>;
  /**
   * Resolves once this node's state holds every write committed before the call (a ReadIndex round:
   * its leadership confirmed by a quorum, then applied through it); rejects when that cannot be shown
   * in time. A write answered from the state without a proposal (nothing to delete, an exist_ok create
   * of a collection here) waits for it: a leader cut off from its group must not answer from what it
   * held before.
   */
  confirm?(): Promise<void>;
}

/**
 * The database: a DataDir (WAL, segments, manifest) and the collections in memory, one node's storage.
 * It is the node's shard (core/engine/shard.ts NodeShard): point reads and writes, dense and
 * multi-vector search, a hybrid or text query's rankings and BM25 statistics, moves, the replication
 * stream. It validates every argument and enforces every per-request limit of what it answers. What is
 * orchestration and not storage (embedding text, fusing rankings, reranking) is the engine's, once, for a
 * single node and a router alike (core/engine/node.ts, core/engine/engine.ts).
 */
export class Database {
  readonly limits: Limits;
  private readonly dir: DataDir;
  private readonly opts: DatabaseOptions;
  private readonly clock: Clock;
  private readonly log: LogFn;
  private readonly byName = new Map<string, Collection>();
  private readonly byUid = new Map<string, Collection>();
  private readonly checkpoints = new Map<string, Promise<void>>();
  /** The manifest update that moves quiet collections' checkpoints (advanceIdleCheckpoints), while it runs. */
  private quietMove: Promise<void> | null = null;
  /** A collection's records appended to the WAL and not yet applied to it (advanceIdleCheckpoints). */
  private readonly appending = new Map<string, number>();
  /** Each collection's create seq (its leader's, on a follower; 0 when not known): tells two of one name apart. */
  private readonly createdSeqs = new Map<string, number>();
  /** A follower's bootstrap in progress: the collections its snapshot has not named yet. */
  private unconfirmed: Set<string> | null = null;
  /** What each collection's segments hold: their number and the point records in them (live or not). */
  private readonly segmentLoad = new Map<string, SegmentLoad>();
  private closed = false;
  private readonly ready: Promise<void>;
  private readonly pool: SearchPool | null;
  private readonly waitForBulkBuild: boolean;
  private readonly dispatch: SearchDispatch;
  /** Every point write passes it; a rebalance batch holds it closed until its commit (move.ts). */
  private readonly gate = new WriteGate();
  /** The batch of a rebalance move that holds the gate now. */
  private lease: { token: string; move: string; uid: string; ids: string[]; cursor: string; stop: AbortController } | null = null;
  private readonly buildIndex: IndexBuilder;
  /** A consensus member's: every write is proposed through it and applied by applyCommand (issue 17). */
  private proposer: CommandProposer | null = null;
  /**
   * A consensus member's: the points of a snapshot it restores go to the WAL unsynced (the restore's
   * end makes them durable at once). Its committed point commands are not written to the WAL at all
   * (applyPoints): their durable record is the consensus log until segments hold them (syncApplied).
   */
  private deferSync = false;
  /** A create or drop being applied: commands after it start once it is done (applyCommand). */
  private applyTail: Promise<void> | null = null;
  /** A consensus member's: the last command index given to applyCommand (appliedThrough). */
  private givenThrough = 0;
  /** This directory is a consensus member's (consensusApplied took it as one): its points are in memory only. */
  private member = false;
  /** A consensus member's replication source (useConsensusLog). */
  private consensusLog: CommitLog | null = null;
  private consensusCurrent: () => boolean = () => true;
  /** The last syncApplied, settled: each runs after the one before. */
  private syncing: Promise<void> = Promise.resolve();
  /** The highest position written or being written (writePosition): a position never moves back. */
  private positionAsked = 0;
  /**
   * A command failed to apply here for a reason of this node's (its disk), not as a refusal every member
   * makes: the member stops, and no position is written from now on (the restart applies it again).
   */
  private applyBroken: unknown = null;

  private constructor(dir: DataDir, opts: DatabaseOptions) {
    this.dir = dir;
    this.opts = opts;
    this.limits = resolveLimits(opts.limits);
    this.clock = opts.clock ?? systemClock;
    this.log = opts.log ?? (() => undefined);
    this.ready = Promise.resolve();
    this.waitForBulkBuild = opts.waitForBulkBuild ?? true;
    const workers = opts.searchWorkers ?? 0;
    if (!Number.isInteger(workers) || workers < 0) throw invalidArgument(`searchWorkers must be a non-negative integer, got ${workers}`);
    this.buildIndex = indexBuilderInWorkers(opts.buildWorkers ?? defaultBuildWorkers(availableParallelism(), workers), workers);
    // The pool's clock times its respawn bound; its log tells of a worker that died and its replacement.
    this.pool = workers > 0 ? new SearchPool({ workers, clock: this.clock, log: this.log }) : null;
    this.dispatch = new SearchDispatch({ quietMs: opts.searchPoolIdleMs });
  }

  static async open(opts: DatabaseOptions): Promise<Database> {
    // A build worker starts while storage opens, so the first graph build does not wait for one.
    if (opts.buildIndex === undefined) prewarmIndexBuilds();
    const fs = opts.fs ?? new NodeFileSystem();
    const log = opts.log ?? (() => undefined);
    const dir = await DataDir.open(fs, opts.dataDir, {
      masterKey: opts.masterKey,
      log: (message, detail) => log('warn', message, detail),
      segmentBytesMax: opts.walFileBytesMax,
      replicationRetainBytes: opts.replicationRetainBytes,
      ...(opts.consensus === true ? { consensusHistory: CONSENSUS_HISTORY } : {}),
    });
    const db = new Database(dir, opts);
    try {
      await db.recover();
    } catch (e) {
      await db.pool?.close().catch(() => undefined);
      await dir.close().catch(() => undefined);
      throw e;
    }
    return db;
  }

  /** Rebuilds memory from segments and the WAL tail, then starts the graph builds in workers. */
  private async recover(): Promise<void> {
    for (const c of this.dir.collections()) {
      const col = this.newCollection(c.uid, c.params as CollectionSpec);
      col.beginRecovery();
      let points = 0;
      for await (const op of this.dir.readCollection(c.uid)) {
        col.apply(op, 0, true);
        points += pointRecords(op);
      }
      // What the segments hold is already on disk: only the WAL tail below is the next checkpoint's.
      col.markCheckpointed();
      col.appliedSeq = c.checkpointSeq;
      this.createdSeqs.set(c.uid, c.createdSeq);
      this.segmentLoad.set(c.uid, { segments: c.segments, points });
    }
    for await (const rec of this.dir.replay()) {
      const op = rec.op;
      if (op.t === 'create_collection') {
        // The manifest (completed by DataDir.open) lists every live collection; a replayed create of a
        // uid it lacks was dropped later, and must not take the name from the live one of the same name.
        if (!this.byUid.has(op.uid) && !this.byName.has(op.name)) {
          this.newCollection(op.uid, op.params as CollectionSpec).beginRecovery();
          this.createdSeqs.set(op.uid, op.origin_seq ?? rec.seq);
        }
      } else if (op.t === 'drop_collection') {
        this.forget(op.uid);
      } else {
        const col = this.byUid.get(rec.uid);
        if (col !== undefined && rec.seq > col.appliedSeq) col.apply(op, rec.seq, true);
      }
    }
    for (const col of this.byName.values()) {
      if (col.count === 0) {
        col.endRecovery();
        continue;
      }
      col.expectGraphFile();
      void col.rebuild().catch(() => undefined);
    }
  }

  private newCollection(uid: string, spec: CollectionSpec): Collection {
    const col = new Collection({
      uid,
      spec,
      limits: this.limits,
      clock: this.clock,
      seed: this.opts.seed ?? 0x5eed,
      ...(this.opts.sharedReads === true ? { sharedReads: true } : {}),
      buildIndex: this.opts.buildIndex ?? this.buildIndex,
      ...(this.opts.absorbMax !== undefined ? { absorbMax: this.opts.absorbMax } : {}),
      ...(this.opts.absorbOffThread === true ? { extendGraph: this.opts.buildIndex === undefined ? extendGraphInWorker : extendGraphInline } : {}),
      onIndexError: (e) => this.log('error', 'index build failed; the prior index stays in use', {
        collection: spec.name, error: e instanceof Error ? e.message : String(e),
      }),
      ...(this.opts.persistGraphs === false ? {} : {
        graphFiles: { read: () => this.dir.readGraph(uid), writer: () => this.dir.graphWriter(uid) },
      }),
      onGraphFileWarning: (message, detail) => this.log('warn', message, { collection: spec.name, ...detail }),
    });
    this.byName.set(spec.name, col);
    this.byUid.set(uid, col);
    return col;
  }

  private forget(uid: string): void {
    const col = this.byUid.get(uid);
    if (col === undefined) return;
    col.drop();
    this.pool?.forget(uid);
    this.byUid.delete(uid);
    this.byName.delete(col.spec.name);
  }

  private collection(name: unknown): Collection {
    this.checkOpen();
    const n = checkName(name);
    const col = this.byName.get(n);
    if (col === undefined) throw notFound(`collection '${n}' does not exist`);
    return col;
  }

  private checkOpen(): void {
    if (this.closed) throw new SvcError('not_ready', 'the database is closed');
  }

  /** Resolves when every collection's graph has been built from the store (readiness). */
  /**
   * Until every collection's graph holds every write (`upToNow`: every write made before this call,
   * which ends under a steady write load: a follower's readiness).
   */
  async whenIndexed(opts: { upToNow?: boolean } = {}): Promise<void> {
    await this.ready;
    await Promise.all([...this.byName.values()].map((c) => (opts.upToNow === true ? c.settleUpToNow() : c.settle()).catch(() => undefined)));
  }

  // ---------------------------------------------------------------- collections

  async listCollections(): Promise<{ collections: CollectionInfo[] }> {
    this.checkOpen();
    const names = [...this.byName.keys()].sort();
    return { collections: names.map((n) => this.infoOf(this.byName.get(n)!)) };
  }

  async collectionInfo(name: string): Promise<CollectionInfo> {
    return this.infoOf(this.collection(name));
  }

  /** A collection's parameters as they are now (its engine's parsing reads them: node.ts); not to be changed. */
  collectionSpec(name: string): CollectionSpec {
    return this.collection(name).spec;
  }

  private infoOf(col: Collection): CollectionInfo {
    return infoOf(col.spec, col.count, col.indexState === 'stale');
  }

  async createCollection(params: CollectionParams): Promise<CollectionInfo> {
    this.checkOpen();
    const { existOk, rest } = splitExistOk(params);
    const spec = parseCollectionParams(rest, this.limits);
    const existing = this.existingFor(spec, existOk);
    if (existing !== null) {
      // A consensus member answers from its state only once that state is shown current.
      if (!(await this.confirmedCurrent())) return existing;
      const still = this.existingFor(spec, existOk);
      if (still !== null) return still;
    }
    if (this.proposer !== null) return this.proposeCreate(spec, existOk);
    let made: { uid: string; createdSeq: number };
    try {
      made = await this.dir.createCollection(spec.name, spec as unknown as object);
    } catch (e) {
      // A concurrent create of the same name got to the data directory first: with exist_ok, its
      // collection is the answer, if it has this shape. The winner puts it in memory in the continuation
      // of its own write, a few microtasks from now at most.
      if (e instanceof SvcError && e.code === 'already_exists' && existOk) {
        for (let i = 0; i < 16 && !this.byName.has(spec.name); i++) await Promise.resolve();
        const other = this.existingFor(spec, existOk);
        if (other !== null) return other;
      }
      throw e;
    }
    const { uid, createdSeq } = made;
    // A concurrent create of the same name lost the race if this one got here first.
    const raced = this.existingFor(spec, existOk);
    if (raced !== null) return raced;
    const col = this.newCollection(uid, spec);
    this.createdSeqs.set(uid, createdSeq);
    this.segmentLoad.set(uid, { segments: 0, points: 0 });
    return this.infoOf(col);
  }

  /**
   * A collection of the spec's name: refused with already_exists, unless `existOk` and it has the same
   * shape, when its info is the answer (marked COLLECTION_EXISTED). Null when there is none.
   */
  private existingFor(spec: CollectionSpec, existOk: boolean): CollectionInfo | null {
    const have = this.byName.get(spec.name);
    if (have === undefined) return null;
    if (!existOk) throw new SvcError('already_exists', `collection '${spec.name}' already exists`);
    if (!sameShape(have.spec, spec)) {
      throw new SvcError('already_exists', `collection '${spec.name}' already exists with another shape (dim, metric, index or fields differ)`);
    }
    return markCollectionExisted(this.infoOf(have));
  }

  async deleteCollection(name: string): Promise<{ existed: boolean }> {
    this.checkOpen();
    const n = checkName(name);
    let col = this.byName.get(n);
    // Not here: on a consensus member, so only once its state is shown current.
    if (col === undefined && await this.confirmedCurrent()) col = this.byName.get(n);
    if (col === undefined) return { existed: false };
    if (this.proposer !== null) {
      // Answered from what the drop did when applied: a drop of the same collection committed first
      // (two callers at once, each finding it here) dropped it, and this one found it gone.
      const dropped = await this.proposer.propose({ uid: '', bulk: false, op: { t: 'drop_collection', uid: col.uid } });
      return { existed: dropped === 1 };
    }
    this.forget(col.uid);
    // Queued at once (after any checkpoint of it, which is already queued), so that a create of the same
    // name called right after this one finds the name free in the DataDir too.
    const dropping = this.dir.dropCollection(col.uid);
    await this.checkpoints.get(col.uid)?.catch(() => undefined);
    await dropping;
    return { existed: true };
  }

  // ---------------------------------------------------------------- a follower's writes

  /**
   * A follower's applied leader seq, durable with the data it covers (DataDir.appendReplicaPosition);
   * null before its first bootstrap ends, and on a leader.
   */
  get replicaSeq(): ReplicaResume | null {
    return this.dir.replicaSeq;
  }

  /** This node's own log history: what the positions of its own followers count in. */
  get history(): string {
    return this.dir.history;
  }

  /**
   * Follower: the leader's collection, under the leader's uid (so a resumed stream's records find it).
   * One of that uid already here is kept: a create seen again after a resume changes nothing, and in a
   * bootstrap its points are cleared for the snapshot's (a uid is never dropped and created again here:
   * the records of one incarnation would be read with the other's key). One of the same name with
   * another uid was dropped on the leader and is dropped here first. Trusts no field: the leader's spec
   * is parsed as a create body would be.
   */
  async replicaCreate(uid: string, name: string, params: object, createdSeq: number): Promise<void> {
    this.checkOpen();
    const have = this.byUid.get(uid);
    if (have !== undefined) {
      if (this.unconfirmed?.delete(uid) === true) await this.replicaClear(have);
      return;
    }
    const spec = parseCollectionParams(params, this.limits);
    if (spec.name !== name) throw invalidArgument(`replicated collection ${uid} names itself '${spec.name}', not '${name}'`);
    const same = this.byName.get(name);
    if (same !== undefined) {
      // A snapshot is read while the leader goes on, so this node may already hold a newer collection of
      // the name when the tail replays an older one's create: that one was dropped on the leader before
      // the newer was made, and its records are not sent (the leader no longer has it). Otherwise the one
      // here is the older, dropped on the leader since.
      // A collection from before this bootstrap (unconfirmed) is always replaced: its create seq may be
      // another history's (a replica pointed at another leader, or at a consensus member, whose seqs are
      // log indexes), and comparing the two would keep it and refuse the snapshot's points for ever.
      if (createdSeq > 0 && this.unconfirmed?.has(same.uid) !== true && (this.createdSeqs.get(same.uid) ?? 0) > createdSeq) return;
      await this.replicaDrop(same.uid);
    }
    await this.createWithUid(uid, spec, createdSeq);
  }

  /** A collection under a uid and create seq given from elsewhere (a leader's, a consensus command's). */
  private async createWithUid(uid: string, spec: CollectionSpec, createdSeq: number): Promise<void> {
    await this.dir.createCollection(spec.name, spec as unknown as object, { uid, seq: createdSeq });
    this.newCollection(uid, spec);
    this.createdSeqs.set(uid, createdSeq);
    this.segmentLoad.set(uid, { segments: 0, points: 0 });
  }

  /** Every point of a collection deleted, through the WAL (a bootstrap refills it from the snapshot). */
  private async replicaClear(col: Collection): Promise<void> {
    const ids = [...col.idsSorted()];
    for (let i = 0; i < ids.length; i += REPLICA_CLEAR_IDS) await this.writeHere(col, { t: 'delete', ids: ids.slice(i, i + REPLICA_CLEAR_IDS) }, true);
  }

  /** Follower: drops the collection of that uid, if it is here. */
  async replicaDrop(uid: string): Promise<void> {
    this.checkOpen();
    const col = this.byUid.get(uid);
    if (col === undefined) return;
    this.forget(uid);
    this.unconfirmed?.delete(uid);
    const dropping = this.dir.dropCollection(uid);
    await this.checkpoints.get(uid)?.catch(() => undefined);
    await dropping;
  }

  /**
   * Follower bootstrap, begin: nothing applied (position 0, so a crash before the end asks for a full
   * snapshot again); every collection here is to be confirmed by the snapshot or dropped at its end.
   */
  async replicaReset(): Promise<void> {
    this.checkOpen();
    this.unconfirmed = new Set(this.byUid.keys());
    await this.dir.appendReplicaOrigin('', 0);
  }

  /**
   * Follower bootstrap, end: the collections the snapshot did not name were dropped on the leader; then
   * the leader's history and the snapshot's seq, in one record (a resume needs both).
   */
  async replicaSnapshotEnd(leaderSeq: number, history: string): Promise<void> {
    for (const uid of [...(this.unconfirmed ?? [])]) await this.replicaDrop(uid);
    this.unconfirmed = null;
    this.checkOpen();
    await this.dir.appendReplicaOrigin(history, leaderSeq);
  }

  /**
   * Follower: one of the leader's collection ops, durable in this node's own WAL (sealed with this
   * node's keys) before it is applied. Snapshot chunks come as `bulk` (a graph build takes them; live
   * commits are absorbed in place like any write). Several may be in flight: the WAL keeps their order.
   * `encoded`: the leader's encoding of `op` (it decoded to `op`), written to the WAL as it is.
   */
  replicaWrite(uid: string, op: Op, bulk: boolean, encoded?: Uint8Array): Promise<void> {
    // Refused by a throw, not a rejected promise: the follower then issues no position for this write.
    this.checkOpen();
    const col = this.byUid.get(uid);
    if (col === undefined) throw notFound(`replicated record for unknown collection ${uid}`);
    return this.writeHere(col, op, bulk, encoded).then(() => undefined);
  }

  /** Follower: every leader commit up to `leaderSeq` is applied; durable behind the writes before it. */
  replicaPosition(leaderSeq: number): Promise<void> {
    this.checkOpen();
    return this.dir.appendReplicaPosition(leaderSeq);
  }

  // ---------------------------------------------------------------- a consensus member's writes (issue 17)

  /**
   * From now on every write (points, create, drop) is proposed through `p`, a consensus member, and
   * acknowledged once a quorum holds it and this node applied it (applyCommand). Checks against the
   * state (a name taken, the ids a filter matches) run before the proposal, on the leader.
   */
  useProposer(p: CommandProposer): void {
    this.proposer = p;
    this.deferSync = true;
  }

  private async proposeCreate(spec: CollectionSpec, existOk: boolean): Promise<CollectionInfo> {
    const uid = randomBytes(8).toString('hex');
    try {
      await this.proposer!.propose({ uid: '', bulk: false, op: { t: 'create_collection', uid, name: spec.name, params: spec as unknown as object } });
    } catch (e) {
      // A create of the same name committed first: with exist_ok, it is the answer if it has this shape.
      if (e instanceof SvcError && e.code === 'already_exists' && existOk) {
        const other = this.existingFor(spec, existOk);
        if (other !== null) return other;
      }
      throw e;
    }
    const col = this.byUid.get(uid);
    // Dropped by the next command already: the create happened, and this is what it made.
    return col === undefined ? infoOf(spec, 0, false) : this.infoOf(col);
  }

  /**
   * A committed command, applied: every member applies the same ones in the same order. A point write
   * is applied to memory at once, and nothing of it is written here (applyPoints): the consensus log
   * holds it until a checkpoint does. It resolves to the points it changed, 0 when its collection is
   * gone. A create or drop (or a move's command) runs alone: commands after it start once it is done. A
   * create of a name another collection took meanwhile is refused (already_exists) on every member alike.
   * A drop resolves to 1 when it dropped the collection, 0 when it was gone already.
   */
  applyCommand(cmd: ShardCommand, index: number): Promise<number> {
    // A move's state or a batch's commit runs alone too (its records go through DataDir's serial queue).
    const barrier = cmd.uid === '' || isMoveCommand(cmd);
    if (this.applyTail === null && !barrier) return this.applyPoints(cmd.uid, cmd.op as Op, cmd.bulk);
    let done: Promise<number> = Promise.resolve(0);
    const started = (this.applyTail ?? Promise.resolve()).then(() => {
      done = !barrier ? this.applyPoints(cmd.uid, cmd.op as Op, cmd.bulk)
        : this.noteBroken(isMoveCommand(cmd) ? this.applyMoveCommand(cmd)
          : this.applyCollectionOp(cmd.op as Extract<ShardCommand['op'], { t: 'create_collection' | 'drop_collection' }>, index));
      // A later command starts when a create or drop has ended, and right after a point write.
      return barrier ? done.then(() => undefined, () => undefined) : undefined;
    });
    this.applyTail = started;
    void started.then(() => {
      if (this.applyTail === started) this.applyTail = null;
    });
    return started.then(() => done);
  }

  /**
   * Every command through `index` has been given to applyCommand. Kept in memory only: the position a
   * restarted member applies the log after is written by syncApplied, once segments hold every point
   * command through it.
   */
  appliedThrough(index: number): void {
    if (index > this.givenThrough) this.givenThrough = index;
  }

  /** `p`, whose failure (but for a deterministic refusal) stops positions from being written (applyBroken). */
  private noteBroken<T>(p: Promise<T>): Promise<T> {
    // Attached before anything else waits on `p`: a sync after the command sees the flag.
    p.catch((e: unknown) => {
      if (!isDeterministicRefusal(e) && this.applyBroken === null) this.applyBroken = e;
    });
    return p;
  }

  /**
   * The applied position, written (fsynced) behind every record before it: never one below a position
   * already written or being written, nor while a snapshot's restore runs (its end writes its own), nor
   * once a command failed to apply here (applyBroken: the restart applies it again).
   */
  private writePosition(index: number): Promise<void> {
    if (this.applyBroken !== null) {
      return Promise.reject(new SvcError('internal', `no applied position is written: a command failed to apply on this node (${String(this.applyBroken)}); the next start applies the log again from the last one`));
    }
    if (this.dir.bootstrapping || index <= Math.max(this.positionAsked, this.dir.replicaSeq?.seq ?? 0)) return Promise.resolve();
    this.positionAsked = index;
    // A position asked and not written: none is written after it (a later sync must not take it as done).
    return this.dir.appendReplicaPosition(index).catch((e: unknown) => {
      if (this.applyBroken === null) this.applyBroken = e;
      throw e;
    });
  }

  /**
   * Makes every command given so far durable here, so that a restarted member need not apply them again:
   * once no create or drop is being applied (every command given is then in memory), every collection's
   * changes go into a segment (a checkpoint, after any under way), and then the position, fsynced. A
   * consensus member calls it before a snapshot marker lets its log drop the entries it applied, and a
   * close calls it (so does a drop's apply, for the position up to the drop). Rejects, writing no
   * position, when a checkpoint fails or a command failed to apply here (applyBroken).
   */
  syncApplied(): Promise<void> {
    // One at a time, so that a position never moves back.
    const run = this.syncing.then(() => this.syncAppliedNow());
    this.syncing = run.catch(() => undefined);
    return run;
  }

  private async syncAppliedNow(): Promise<void> {
    while (this.applyTail !== null) await this.applyTail;
    const index = this.givenThrough;
    // Rejects, naming the failure, once a command failed to apply here.
    if (this.applyBroken !== null) return this.writePosition(index);
    if (this.dir.bootstrapping || index <= this.positionAsked) return;
    await this.checkpointAll();
    // Checked again in the turn that queues the record: a snapshot's restore may have begun (its records
    // then come after this one, and its end wins) or ended at a later index.
    await this.writePosition(index);
  }

  /**
   * Every change applied to memory before the call is in a segment once it resolves: a checkpoint under
   * way is waited for (it may have taken its changes before the call), and then each collection that
   * still has changes is checkpointed. A checkpoint's failure rejects (its changes stay to be written).
   */
  private async checkpointAll(): Promise<void> {
    for (const col of [...this.byUid.values()]) {
      for (;;) {
        // Dropped meanwhile: nothing of it is to be kept.
        if (this.byUid.get(col.uid) !== col) break;
        const running = this.checkpoints.get(col.uid);
        if (running !== undefined) {
          await running;
          continue;
        }
        if (col.dirtyCount === 0) break;
        const run = this.checkpoint(col).finally(() => this.checkpoints.delete(col.uid));
        this.checkpoints.set(col.uid, run.catch(() => undefined));
        await run;
        break;
      }
    }
  }

  /**
   * A consensus member's image of the whole state, as bytes read while they are consumed (a snapshot
   * stream to a member behind the log: core/cluster/consensus/snapshot-stream.ts):
   * `'svc-img1' | (length u32 LE | command)*`, each collection's create then its points, then a
   * rebalance move's state and its cursor in each collection (as the move's commands). It is fuzzy:
   * writes applied while it is read may or may not be in it, and the member applies the log from the
   * index the stream names on, which converges (every command is a whole-point upsert, a delete, a
   * create or drop by uid, or a payload update setting or removing whole values). Yields to the event
   * loop as often as its reader waits, so nothing here holds the loop for long.
   * `commandVersionMax`: the highest command version the member it is for reads (versions.ts); a record
   * above it (a move started while the image was read) ends the image with `unavailable` rather than
   * send what that member would stop at.
   */
  async *consensusImage(opts: { commandVersionMax?: number } = {}): AsyncGenerator<Uint8Array> {
    yield CONSENSUS_IMAGE_MAGIC;
    const max = opts.commandVersionMax ?? Infinity;
    const record = (c: ShardCommand): Uint8Array => {
      const v = commandVersion(c);
      if (v > max) throw new SvcError('unavailable', `the image holds a command of version ${v} (${c.op.t}); its member reads up to ${max}`, { reason: 'version_skew' });
      const b = encodeCommand(c);
      const out = Buffer.allocUnsafe(4 + b.length);
      out.writeUInt32LE(b.length, 0);
      out.set(b, 4);
      return out;
    };
    for (const col of [...this.byUid.values()]) {
      if (this.closed || this.byUid.get(col.uid) !== col) continue; // dropped meanwhile: its drop is in the log after the index
      yield record({ uid: '', bulk: false, op: { t: 'create_collection', uid: col.uid, name: col.spec.name, params: col.spec as unknown as object, origin_seq: this.createdSeqs.get(col.uid) ?? 0 } });
      const it = col.captureAll()[Symbol.iterator]();
      for (;;) {
        // Checked before every step: a dropped collection's memory is gone.
        if (this.closed || this.byUid.get(col.uid) !== col) break;
        const next = it.next();
        if (next.done) break;
        // Encoded now, before the reader's wait lets writes change the vectors it views.
        yield record({ uid: col.uid, bulk: true, op: next.value });
      }
    }
    // A rebalance move's state and cursors (a group as a move's source), after the collections they name.
    const mv = this.dir.move;
    if (mv !== null) {
      yield record({ uid: '', bulk: false, op: { t: 'move_state', move: mv.move, self: mv.self, targets: [...mv.targets], finished: mv.finished } });
      for (const [uid, cursor] of [...mv.cursors]) {
        if (this.byUid.has(uid)) yield record({ uid, bulk: false, op: { t: 'delete', ids: [], move: { move: mv.move, cursor } } });
      }
      // After the cursors (a cursor forgets the handed-out ids up to it), in parts a record holds.
      for (const [uid, set] of [...mv.out]) {
        const ids = [...set];
        for (let i = 0; i < ids.length && this.byUid.has(uid); i += MOVE_BATCH_POINTS_MAX) {
          yield record({ uid: '', bulk: false, op: { t: 'move_out', move: mv.move, uid, ids: ids.slice(i, i + MOVE_BATCH_POINTS_MAX) } });
        }
      }
    }
  }

  /**
   * The highest command version consensusImage's records take now: 3 while a move's batches are handed
   * out (`move_out`), 2 with a move's state (its start or end, and cursors), else 1.
   */
  consensusImageVersion(): number {
    const mv = this.dir.move;
    if (mv === null) return 1;
    for (const [uid, ids] of mv.out) if (ids.size > 0 && this.byUid.has(uid)) return COMMAND_VERSION_MOVE_OUT;
    return COMMAND_VERSION_MOVES;
  }

  /**
   * Replaces the whole state with a consensus snapshot taken at `index` (consensusImage, its bytes in
   * any chunking): as a read replica's bootstrap does (the collections it names are kept by uid and
   * refilled, the others dropped), and the position is `index` once it is all durable. `signal` (a
   * member closing) stops it between records: the directory is then left mid-restore (consensusApplied
   * answers 0 until a restore ends), as a kill -9 would leave it, and the member restores again at start.
   */
  async restoreConsensusImage(chunks: AsyncIterable<Uint8Array>, index: number, signal?: AbortSignal): Promise<void> {
    const it = chunks[Symbol.asyncIterator]();
    let buf: Buffer = Buffer.alloc(0);
    /** At least `n` bytes buffered, or false at the end of the image. */
    const fill = async (n: number): Promise<boolean> => {
      const parts: Buffer[] = [buf];
      let have = buf.length;
      while (have < n) {
        const r = await it.next();
        if (r.done === true) break;
        const b = Buffer.from(r.value.buffer, r.value.byteOffset, r.value.byteLength);
        parts.push(b);
        have += b.length;
      }
      buf = parts.length === 1 ? buf : Buffer.concat(parts);
      return buf.length >= n;
    };
    try {
      // Checked before anything is cleared: a marker snapshot (no data) or a damaged one never wipes a member.
      const m = CONSENSUS_IMAGE_MAGIC.length;
      if (!(await fill(m)) || !buf.subarray(0, m).equals(CONSENSUS_IMAGE_MAGIC)) {
        throw new SvcError('internal', `a consensus snapshot at ${index} without an image: nothing was replaced`);
      }
      buf = buf.subarray(m);
      // Segments first hold every change in memory: the reset clears the ids memory holds, and a point
      // whose delete was in memory only would otherwise come back from its segment at the next start.
      await this.checkpointAll();
      await this.replicaReset();
      for (;;) {
        if (signal?.aborted === true) throw new SvcError('unavailable', `the restore of the consensus snapshot at ${index} was cut short by a close; it runs again at the next start`);
        if (!(await fill(4))) {
          if (buf.length > 0) throw new SvcError('internal', 'a consensus snapshot ends inside a record length');
          break;
        }
        const n = buf.readUInt32LE(0);
        // No record of an image is larger than a WAL record may be: a damaged length is not read on for.
        if (n > IMAGE_RECORD_BYTES_MAX) throw new SvcError('internal', `a consensus snapshot record claims ${n} bytes`);
        if (!(await fill(4 + n))) throw new SvcError('internal', 'a consensus snapshot ends inside a record');
        const cmd = decodeCommand(buf.subarray(4, 4 + n));
        buf = buf.subarray(4 + n);
        if (isMoveCommand(cmd)) {
          await this.applyMoveCommand(cmd);
        } else if (cmd.uid === '') {
          if (cmd.op.t === 'create_collection') await this.replicaCreate(cmd.op.uid, cmd.op.name, cmd.op.params, cmd.op.origin_seq ?? 0);
        } else {
          await this.replicaWrite(cmd.uid, cmd.op as Op, true);
        }
      }
    } finally {
      // The reader's file is closed whatever happened (a generator's finally runs on return()).
      await it.return?.();
    }
    // Before the end's record: a sync that took an older index meanwhile writes nothing after it.
    this.positionAsked = Math.max(this.positionAsked, index);
    await this.replicaSnapshotEnd(index, CONSENSUS_HISTORY);
    this.givenThrough = index;
  }

  /**
   * This directory as a consensus member's: the command index it has applied through (0 for a new,
   * empty directory, whose position starts now). A directory with data of another kind (a single node's,
   * a read replica's) is refused: its data is not what the group's log describes.
   */
  async consensusApplied(): Promise<number> {
    const r = this.dir.replicaSeq;
    if (r !== null && r.history === CONSENSUS_HISTORY) {
      this.member = true;
      this.givenThrough = r.seq;
      this.positionAsked = r.seq;
      return r.seq;
    }
    // A snapshot's restore that a crash cut short: nothing holds until it is restored again.
    if (this.dir.bootstrapping) {
      this.member = true;
      return 0;
    }
    if (r === null && this.byUid.size === 0) {
      await this.dir.appendReplicaOrigin(CONSENSUS_HISTORY, 0);
      this.member = true;
      return 0;
    }
    throw new SvcError('invalid_argument', 'this data directory holds data that is not a consensus member\'s (a single node\'s or a read replica\'s). Fix: start the member on an empty data directory; it gets the group\'s data from the leader');
  }

  /**
   * A committed point command, applied to memory only: no WAL record (the consensus log is its durable
   * record until a checkpoint's segment holds it, syncApplied). Its seq is the WAL's last, so that the
   * collection's checkpoints name seqs the WAL has, as the replay of its records expects.
   */
  private applyPoints(uid: string, op: Op, bulk: boolean): Promise<number> {
    try {
      this.checkOpen();
      const col = this.byUid.get(uid);
      if (col === undefined) return Promise.resolve(0);
      const changed = col.apply(op, this.dir.lastSeq, bulk);
      this.maybeCheckpoint(col);
      return Promise.resolve(changed);
    } catch (e) {
      return this.noteBroken(Promise.reject(e));
    }
  }

  /**
   * A move's command (a group as a move's source, issue 18), applied on every member: the same DataDir
   * records a single node writes (appendMoveState, appendMoveCommit), so every member's move and
   * cursors are equal and any of them can lead the move on. A batch's commit resolves to the points it
   * deleted. Writes are never refused here: `moved` is decided on the leader before it proposes (gated),
   * so no member's apply can disagree with what the leader acknowledged.
   */
  private async applyMoveCommand(cmd: ShardCommand): Promise<number> {
    this.checkOpen();
    const op = cmd.op;
    if (op.t === 'move_state') {
      await this.dir.appendMoveState({ move: op.move, self: op.self, targets: [...op.targets], finished: op.finished });
      return 0;
    }
    if (op.t === 'move_out') {
      await this.dir.appendMoveOut(op.move, op.uid, op.ids);
      return 0;
    }
    const col = this.byUid.get(cmd.uid);
    if (col === undefined || op.t !== 'delete' || op.move === undefined) return 0;
    return this.appendApply(col, op, false, () => this.dir.appendMoveCommit(col.uid, op));
  }

  private async applyCollectionOp(op: Extract<ShardCommand['op'], { t: 'create_collection' | 'drop_collection' }>, index: number): Promise<number> {
    this.checkOpen();
    if (op.t === 'drop_collection') {
      if (!this.byUid.has(op.uid)) return 0; // dropped before a restart, or never here
      // The position reaches the drop before the drop reaches the directory: a restart never applies the
      // log again from before a drop its directory holds. (A create refused then because the dropped
      // collection held its name would succeed here, where every other member refused it; a create of
      // the dropped uid would make it again.) The commands before the drop are in memory: segments take
      // them first. A crash between the two applies the drop again, which finds the collection here.
      await this.checkpointAll();
      await this.writePosition(index - 1);
      await this.replicaDrop(op.uid);
      return 1;
    }
    if (this.byUid.has(op.uid)) return 0; // applied before a restart: its create is in the data directory
    if (this.byName.has(op.name)) throw new SvcError('already_exists', `collection '${op.name}' already exists`);
    await this.createWithUid(op.uid, parseCollectionParams(op.params, this.limits), index);
    return 0;
  }

  // ---------------------------------------------------------------- writes

  async upsert(name: string, body: UpsertBody): Promise<{ upserted: number }> {
    const col = this.pointCollection(name);
    const b = checkObject(body, 'upsert body', bodyKeys(BODIES.upsert));
    const points = parsePoints(b.points, col.spec, this.limits, 'maxBatchSize');
    if (points.length === 0) return this.unchanged(col, { upserted: 0 });
    await this.gated(col, points.map((p) => p.id), async () => this.wrote(col, await this.write(col, { t: 'upsert', points }, false)));
    return { upserted: points.length };
  }

  async bulkUpsert(name: string, body: BulkUpsertBody): Promise<{ upserted: number }> {
    const col = this.pointCollection(name);
    const b = checkObject(body, 'bulk body', bodyKeys(BODIES.bulkUpsert));
    const points = parsePoints(b.points, col.spec, this.limits, 'maxBulkBatchSize');
    if (points.length === 0) return this.unchanged(col, { upserted: 0 });
    await this.gated(col, points.map((p) => p.id), () => this.bulkWrite(col, points));
    return { upserted: points.length };
  }

  private async bulkWrite(col: Collection, points: Extract<Op, { t: 'upsert' }>['points']): Promise<void> {
    // A bulk is one WAL record, so it is applied whole or not at all, after a crash too; only a bulk
    // whose encoding passes BULK_RECORD_BYTES_MAX is split into several records (each still whole).
    const writes: Promise<number>[] = [];
    let start = 0;
    let bytes = 0;
    for (let i = 0; i < points.length; i++) {
      const p = points[i];
      const size = 16 + p.id.length * 3 + p.vector.length * 4 + (p.payload === null ? 0 : Buffer.byteLength(JSON.stringify(p.payload)));
      if (i > start && bytes + size > BULK_RECORD_BYTES_MAX) {
        writes.push(this.write(col, { t: 'upsert', points: points.slice(start, i) }, true));
        start = i;
        bytes = 0;
      }
      bytes += size;
    }
    writes.push(this.write(col, { t: 'upsert', points: points.slice(start) }, true));
    this.wrote(col, (await Promise.all(writes)).reduce((n, c) => n + c, 0));
  }

  async delete(name: string, id: string): Promise<{ deleted: boolean }> {
    const col = this.collection(name);
    const pid = checkPointId(id);
    return this.deleteOne(col, pid);
  }

  /**
   * New payloads for existing points, vectors untouched (`merge`: the keys given replace those keys;
   * `replace`: the payload given is the payload). All or nothing: the whole body is checked (shape,
   * batch size, every resulting payload's size and reserved keys) and every id must exist before one
   * record goes to the WAL. A point deleted by a write that reached the WAL first is skipped and not
   * counted in `updated`.
   */
  async setPayload(name: string, body: SetPayloadBody): Promise<{ updated: number }> {
    const col = this.collection(name);
    const { mode, points } = parsePayloadUpdate(body, this.limits);
    return this.gated(col, points.map((p) => p.id), async () => {
      const missing = points.find((p) => !col.has(p.id));
      if (missing !== undefined) {
        throw notFound(`point '${missing.id}' does not exist in collection '${col.spec.name}'; no payload was changed`);
      }
      checkPayloadResults(points, mode, (id) => col.point(id)!.payload, this.limits);
      if (points.length === 0) return this.unchanged(col, { updated: 0 });
      return { updated: this.wrote(col, await this.write(col, { t: 'set_payload', mode, points }, false)) };
    });
  }

  /**
   * Deletes the points of a list of ids (those not there are not counted) or every point matching a
   * filter; `deleted` is how many went. The matches are resolved once, when the call is made.
   */
  async deletePoints(name: string, body: DeletePointsBody): Promise<{ deleted: number }> {
    const col = this.collection(name);
    const b = checkObject(body, 'delete body', DELETE_POINTS_KEYS);
    const byIds = b.ids !== undefined && b.ids !== null;
    const byFilter = b.filter !== undefined && b.filter !== null;
    if (byIds === byFilter) throw invalidArgument('give either ids or filter (one of the two)');
    let given: string[] | null = null;
    let filter: CompiledFilter | undefined;
    if (byIds) {
      if (!Array.isArray(b.ids)) throw invalidArgument('ids must be a list of point ids');
      checkLimit(this.limits, 'maxBatchSize', b.ids.length, 'ids count');
      given = [...new Set(b.ids.map((id: unknown) => checkPointId(id)))];
    } else {
      filter = this.compile(col, b.filter);
    }
    return this.gated(col, given, () => this.deleteResolved(col, given, filter));
  }

  /** The delete of deletePoints, inside the gate: the matches are resolved there. */
  private async deleteResolved(col: Collection, given: string[] | null, filter: CompiledFilter | undefined): Promise<{ deleted: number }> {
    const resolve = (): string[] => {
      if (given !== null) return given.filter((id) => col.has(id));
      const { bits } = col.matching(filter);
      const out: string[] = [];
      for (const slot of bits) out.push(col.idOf(slot));
      return out;
    };
    let ids = resolve();
    // Nothing to delete: on a consensus member, so only once its state is shown current.
    if (ids.length === 0 && await this.confirmedCurrentFor(col)) ids = resolve();
    if (ids.length === 0) return { deleted: 0 };
    // One WAL record (so one all-or-nothing write) unless it would pass BULK_RECORD_BYTES_MAX.
    const writes: Promise<number>[] = [];
    let start = 0;
    let bytes = 0;
    for (let i = 0; i < ids.length; i++) {
      const size = 2 + Buffer.byteLength(ids[i], 'utf8');
      if (i > start && bytes + size > BULK_RECORD_BYTES_MAX) {
        writes.push(this.write(col, { t: 'delete', ids: ids.slice(start, i) }, false));
        start = i;
        bytes = 0;
      }
      bytes += size;
    }
    writes.push(this.write(col, { t: 'delete', ids: ids.slice(start) }, false));
    const counts = await Promise.all(writes);
    return { deleted: this.wrote(col, counts.reduce((n, c) => n + c, 0)) };
  }

  /** The points matching a filter (every point without one), from the point table: always exact. */
  async count(name: string, query: CountQuery = {}): Promise<{ count: number }> {
    const col = this.collection(name);
    const q = checkObject(query, 'count body', COUNT_KEYS);
    return { count: col.matching(this.compile(col, q.filter)).count };
  }

  /**
   * A point write through the gate (move.ts): it waits while a rebalance batch holds the node, and ids
   * the running move has taken from this node already are refused with `moved` (a router sends them to
   * their new owner). `ids` null: a delete by filter, which only reaches points that are here.
   */
  private async gated<T>(col: Collection, ids: readonly string[] | null, fn: () => Promise<T>): Promise<T> {
    await this.gate.enter();
    try {
      this.checkOpen();
      const move = this.dir.move;
      if (ids !== null && move !== null) {
        const moved = movedIds(move, col.uid, ids);
        if (moved.length > 0) throw movedError(move, moved);
      }
      return await fn();
    } finally {
      this.gate.exit();
    }
  }

  /**
   * On a consensus member, waits until its state holds every write committed before the call
   * (CommandProposer.confirm) and resolves true: the caller looks again. False at once elsewhere.
   */
  private async confirmedCurrent(): Promise<boolean> {
    if (this.proposer?.confirm === undefined) return false;
    await this.proposer.confirm();
    return true;
  }

  /** A delete of one point or document by id (delete, deleteDocument). */
  private deleteOne(col: Collection, pid: string): Promise<{ deleted: boolean }> {
    return this.gated(col, [pid], async () => {
      // Nothing to delete: on a consensus member, so only once its state is shown current.
      if (!col.has(pid) && (!(await this.confirmedCurrentFor(col)) || !col.has(pid))) return { deleted: false };
      // What the delete did when applied: another delete of the point (two callers at once, each finding
      // it here) may have gone first.
      return { deleted: this.wrote(col, await this.write(col, { t: 'delete', ids: [pid] }, false)) > 0 };
    });
  }

  /**
   * The answer of a write that changes nothing (an empty batch), which says that `col` is still there:
   * on a consensus member, given only once its state is shown current (a leader behind its group may hold
   * a collection the group dropped; the confirmation applies the drop, and the write is not taken).
   */
  private async unchanged<T>(col: Collection, answer: T): Promise<T> {
    await this.confirmedCurrentFor(col);
    return answer;
  }

  /**
   * confirmedCurrent for a write holding `col`: the collection it looks at again must still be the one
   * of that name (the confirmation may apply its drop, or a restore: then the write is not taken).
   */
  private async confirmedCurrentFor(col: Collection): Promise<boolean> {
    if (!(await this.confirmedCurrent())) return false;
    if (this.byUid.get(col.uid) !== col) throw new SvcError('unavailable', `collection '${col.spec.name}' changed while this write confirmed its state: the write was not taken; retry`);
    return true;
  }

  /**
   * A write's count, checked: 0 because its collection went while it was written (a drop that reached the
   * log first) is `not_found`, as the write came after the drop; 0 with the collection here is an answer
   * (the points it deletes or updates were deleted first).
   */
  private wrote(col: Collection, n: number): number {
    if (n === 0 && this.byUid.get(col.uid) !== col) throw notFound(`collection '${col.spec.name}' was dropped while this write was made; nothing was written`);
    return n;
  }

  /**
   * Durable first (the WAL fsync), then applied to memory: an acknowledged write survives any crash.
   * Resolves to the points the op wrote (Collection.apply); 0 when the collection was dropped meanwhile.
   */
  private async write(col: Collection, op: Op, bulk: boolean): Promise<number> {
    if (this.proposer !== null) return (await this.proposer.propose({ uid: col.uid, bulk, op })) as number;
    return this.writeHere(col, op, bulk);
  }

  /**
   * The write to this node's own data directory (a consensus member's proposals end here, applied).
   * `encoded`: op's encoding as received (a follower's leader record), written as it is.
   */
  private async writeHere(col: Collection, op: Op, bulk: boolean, encoded?: Uint8Array): Promise<number> {
    // A consensus member's write is durable in its consensus log already (deferSync).
    return this.appendApply(col, op, bulk, () => this.dir.append(col.uid, op, encoded, { sync: !this.deferSync }));
  }

  /**
   * Appends one of `col`'s records and applies it: counted (`appending`) from before the append until it
   * is applied, so that advanceIdleCheckpoints never moves a checkpoint past a record not yet applied.
   * 0 when the collection was dropped while the record was being made durable.
   */
  private async appendApply(col: Collection, op: Op, bulk: boolean, append: () => Promise<number>): Promise<number> {
    this.appending.set(col.uid, (this.appending.get(col.uid) ?? 0) + 1);
    let changed = 0;
    try {
      const seq = await append();
      if (this.byUid.get(col.uid) !== col) return 0;
      changed = col.apply(op, seq, bulk);
    } finally {
      const n = (this.appending.get(col.uid) ?? 1) - 1;
      if (n <= 0) this.appending.delete(col.uid);
      else this.appending.set(col.uid, n);
    }
    this.maybeCheckpoint(col);
    return changed;
  }

  private maybeCheckpoint(col: Collection): void {
    if (col.dirtyCount < (this.opts.checkpointPoints ?? CHECKPOINT_POINTS) || this.checkpoints.has(col.uid)) return;
    const run = this.checkpoint(col).then(() => this.advanceIdleCheckpoints()).finally(() => this.checkpoints.delete(col.uid));
    this.checkpoints.set(col.uid, run.catch((e) => {
      this.log('error', 'checkpoint failed; the WAL keeps the data', { collection: col.spec.name, error: String(e) });
    }));
  }

  /**
   * Brings up the checkpoints of the collections written to seldom or never, after each checkpoint of
   * another. Without this such a collection keeps its checkpoint where it was, and with it every WAL
   * file since (truncateWal deletes only what every checkpoint is past) and the replay of every record
   * since at each open.
   * - One with no changes outside its segments and no record being appended: its checkpoint moves up to
   *   the WAL's last record by a manifest update alone (one for all of them): its segments hold every
   *   record of it through there.
   * - One with a few changes (fewer than would start a checkpoint) whose checkpoint lies before the WAL
   *   file being appended to, so that it keeps older files: its changes go into a segment, then its
   *   checkpoint moves up as above. At most once per WAL file.
   */
  private advanceIdleCheckpoints(): void {
    if (this.closed) return;
    const active = this.dir.walActiveFirstSeq;
    // Read together, in one turn of the loop: a record of a quiet one appended after this has a later seq.
    const last = this.dir.lastSeq;
    const quiet: string[] = [];
    for (const col of this.byUid.values()) {
      let cp: number;
      try {
        cp = this.dir.checkpointSeqOf(col.uid);
      } catch {
        continue; // dropped from the manifest meanwhile
      }
      if (this.checkpoints.has(col.uid) || cp >= last || this.appending.has(col.uid)) continue;
      if (col.dirtyCount === 0) {
        quiet.push(col.uid);
        continue;
      }
      if (cp >= active - 1) continue;
      const run = (async () => {
        await this.checkpoint(col);
        // Read together, as above.
        if (this.closed || col.dirtyCount > 0 || this.appending.has(col.uid) || this.byUid.get(col.uid) !== col) return;
        await this.dir.advanceCheckpoints([col.uid], this.dir.lastSeq);
      })().finally(() => this.checkpoints.delete(col.uid));
      this.checkpoints.set(col.uid, run.catch((e) => {
        this.log('warn', 'bringing up a quiet collection\'s checkpoint failed; the WAL keeps its files', { collection: col.spec.name, error: String(e) });
      }));
    }
    if (quiet.length === 0 || this.quietMove !== null) return;
    // Not in `checkpoints`: a checkpoint of one of them may start meanwhile (it moves past `last`; this
    // never moves a checkpoint back), and a drop is skipped.
    this.quietMove = this.dir.advanceCheckpoints(quiet, last).catch((e) => {
      this.log('warn', 'bringing up quiet collections\' checkpoints failed; the WAL keeps their files', { collections: quiet.length, error: String(e) });
    }).finally(() => { this.quietMove = null; });
  }

  /**
   * Writes the collection's changes since its last checkpoint into a delta segment, or compacts every
   * segment into one when the deltas would pass either bound: `segmentsMax` segments, or point records
   * (superseded and deleted ones included) above twice the live points plus one checkpoint's worth. So
   * the segments stay within about twice the live data, whatever the history of writes and restarts,
   * and a compaction's rewrite is paid for by at least as many points written since the last one.
   */
  private async checkpoint(col: Collection): Promise<void> {
    const load = this.segmentLoad.get(col.uid) ?? { segments: 0, points: 0 };
    const delta = col.captureDelta();
    const deltaPoints = delta.ops.reduce((n, op) => n + pointRecords(op), 0);
    const slack = this.opts.checkpointPoints ?? CHECKPOINT_POINTS;
    const compact = load.segments + 1 > (this.opts.segmentsMax ?? SEGMENTS_MAX) || load.points + deltaPoints > 2 * col.count + slack;
    try {
      if (compact) {
        await this.dir.checkpoint(col.uid, [...col.captureAll()], delta.uptoSeq, { replaceAll: true });
        this.segmentLoad.set(col.uid, { segments: col.count > 0 ? 1 : 0, points: col.count });
      } else {
        await this.dir.checkpoint(col.uid, delta.ops, delta.uptoSeq, { replaceAll: false });
        this.segmentLoad.set(col.uid, { segments: load.segments + (deltaPoints > 0 ? 1 : 0), points: load.points + deltaPoints });
      }
    } catch (e) {
      delta.restore();
      throw e;
    }
  }

  // ---------------------------------------------------------------- point reads

  async get(name: string, id: string, opts: GetOptions = {}): Promise<PointOutput> {
    const col = this.collection(name);
    const pid = checkPointId(id);
    const withVector = parseBool(opts.with_vector, 'with_vector', false);
    const p = col.point(pid);
    if (p === undefined) {
      // Taken by a rebalance move: a router whose map is older than the move asks the new owner.
      const move = this.dir.move;
      if (move !== null && movedIds(move, col.uid, [pid]).length > 0) throw movedError(move, [pid]);
      throw notFound(`point '${pid}' does not exist in collection '${col.spec.name}'`);
    }
    const out: PointOutput = { id: pid, payload: p.payload };
    if (withVector) this.attachVectors(col, out, pid, p.slot);
    return out;
  }

  async fetch(name: string, query: FetchQuery = {}): Promise<{ points: PointOutput[]; next_cursor: string | null }> {
    const col = this.collection(name);
    const q = checkObject(query, 'fetch body', FETCH_KEYS);
    const limit = parseFetchLimit(q.limit, this.limits);
    const cursorId = decodeCursor(q.cursor);
    const withVector = parseBool(q.with_vector, 'with_vector', false);
    const filter = this.compile(col, q.filter);
    const { bits } = col.matching(filter);
    const ids = col.idsSorted();
    let i = after(ids, cursorId ?? undefined);
    const points: PointOutput[] = [];
    let more = false;
    for (; i < ids.length; i++) {
      const slot = col.slotOf(ids[i])!;
      if (!bits.has(slot)) continue;
      if (points.length === limit) {
        more = true;
        break;
      }
      const out: PointOutput = { id: ids[i], payload: col.payloadOf(slot) };
      if (withVector) this.attachVectors(col, out, ids[i], slot);
      points.push(out);
    }
    return { points, next_cursor: more ? encodeCursor(points[points.length - 1].id) : null };
  }

  private attachVectors(col: Collection, out: PointOutput, id: string, slot: number): void {
    if (col.spec.multivector) out.vectors = col.tokensOf(id);
    else out.vector = col.vectorOf(slot);
  }

  private compile(col: Collection, filter: unknown): CompiledFilter | undefined {
    if (filter === undefined || filter === null) return undefined;
    return compileFilter(filter, col.spec.filterable);
  }

  // ---------------------------------------------------------------- search

  /**
   * A request loop's handle on collection `name`, to search it itself (shared-reads.ts), or null: no
   * such collection, or opts.sharedReads unset. Ready once open.
   */
  readView(name: string): ReadViewHandle | null {
    if (this.closed) return null;
    return this.byName.get(name)?.readHandle() ?? null;
  }

  /** The graph epoch request loops should search collection `uid` with now (ReadView.adoptGraph). */
  readGraph(uid: string): ReadGraph | null {
    const col = this.byUid.get(uid);
    return col?.reads == null ? null : col.reads.currentGraph();
  }

  /**
   * A filter's match bits in collection `uid` for request loops' searches (shared-reads.ts MatchBits),
   * or null: no such collection, no shared reads, or a filter the search would refuse.
   */
  matchBits(uid: string, filter: unknown): MatchBits | null {
    const col = this.byUid.get(uid);
    if (col === undefined || this.closed) return null;
    try {
      return col.matchBits(filter);
    } catch {
      return null;
    }
  }

  /** A request loop searched collection `uid`: what a read here starts (an absorb, a rebuild) starts. */
  noteRead(uid: string): void {
    this.byUid.get(uid)?.onRead();
  }

  /**
   * Thread `thread` (a request loop that read collections here, `readView`) ended without closing its
   * views: the scratch lanes it held in every collection's shared memories go back; how many.
   */
  releaseLanesOf(thread: number): number {
    let n = 0;
    for (const col of this.byUid.values()) n += col.releaseLanesOf(thread);
    return n;
  }

  async search(name: string, query: SearchQuery): Promise<{ hits: Hit[] }> {
    const col = this.pointCollection(name);
    const q = checkObject(query, 'search body', SEARCH_KEYS);
    const k = parseK(q.k, this.limits);
    const ef = parseEf(q.ef_search, this.limits, col.spec.index_params.ef_search);
    const vector = parseVector(q.vector, col.spec.dim, col.spec.metric, this.limits, 'query vector');
    const filter = this.compile(col, q.filter);
    const withPayload = parseBool(q.with_payload, 'with_payload', true);
    const withVector = parseBool(q.with_vector, 'with_vector', false);
    const consistency = parseConsistency(q.consistency);
    // The common path stays synchronous: no promise hop for an eventual read answered in this thread.
    const wait = this.prepareRead(col, consistency);
    if (wait !== undefined) await wait;
    // One more than k: the cut must not fall inside a run of equal distances (ties go by id).
    const found = this.searchDense(col, vector, k + 1, ef, filter);
    let r = found instanceof Promise ? await found : found;
    if (tieAtCut(r.dists, k, k + 1)) r = await widenTies(r, k, k + 1, col.liveCount, (n) => this.searchDense(col, vector, n, Math.max(ef, n), filter));
    return { hits: this.denseHits(col, r, k, withPayload, withVector) };
  }

  /**
   * A dense search: here, or in a search worker when there is a pool, the collection is large enough
   * and the dispatcher hands it off (then a promise). The plan is made here; a hit whose point was
   * deleted or replaced while the worker ran (its slot no longer live) makes the search run again here,
   * so no answer holds a dead point.
   */
  private searchDense(col: Collection, vector: Float32Array, k: number, ef: number, filter: CompiledFilter | undefined): SearchResult | Promise<SearchResult> {
    const pool = this.pool;
    if (pool === null || col.liveCount < (this.opts.searchPoolMinPoints ?? 2000) || this.dispatch.runHere(pool.inFlight, this.clock.monotonicMs())) {
      return col.searchDense(vector, k, ef, filter);
    }
    // Planned when a worker slot is free (at once, or after the searches waiting): never run here as overflow.
    return pool.search(col, vector, () => col.planDense(k, ef, filter)).then((r) => {
      for (const s of r.slots) if (!col.isLive(s)) return col.searchDense(vector, k, ef, filter);
      return r;
    });
  }

  /**
   * Before a read: what it must wait for (a strong read, or a bulk load the embedded API waits for, on a
   * collection whose graph is behind), or undefined after starting what an eventual read starts. The
   * common path gives no promise, so a search answered at once takes no microtask hop.
   */
  private prepareRead(col: Collection, consistency: 'eventual' | 'strong'): Promise<void> | undefined {
    if (consistency === 'strong' || (this.waitForBulkBuild && col.bulkTailPending())) {
      return col.isCurrent() ? undefined : col.settle();
    }
    col.onRead();
    return undefined;
  }

  private denseHits(col: Collection, r: SearchResult, k: number, withPayload: boolean, withVector: boolean): Hit[] {
    const slots = tiesById((s) => col.idOf(s), r, k);
    const hits: Hit[] = [];
    for (let i = 0; i < Math.min(k, slots.length); i++) {
      hits.push(this.hit(col, slots[i], i, col.score(r.dists[i]), withPayload, withVector));
    }
    return hits;
  }

  private hit(col: Collection, slot: number, rank: number, score: number, withPayload: boolean, withVector: boolean): Hit {
    const h: Hit = { id: col.idOf(slot), rank, score };
    if (withPayload) h.payload = col.payloadOf(slot);
    if (withVector) h.vector = col.vectorOf(slot);
    return h;
  }

  /**
   * A shard's part of a hybrid or text query (core/query/ranking.ts): each ranking the body asks for,
   * `depth` deep, best first, equal scores in id order. BM25 scores against `corpus` when given (the
   * whole collection's statistics, summed over its shards), else this collection's own.
   */
  async rankings(name: string, body: RankingsBody): Promise<Rankings> {
    const col = this.pointCollection(name);
    const { depth: d, text_stats: stats, ...q } = checkObject(body, 'rankings body', RANKINGS_KEYS);
    const depth = parseDepth(d, this.limits);
    const corpus = stats === undefined || stats === null ? undefined : corpusOf(checkTextStats(stats, this.limits.maxSparseTerms));
    return this.rankingsOf(col, q, depth, corpus);
  }

  /** This collection's BM25 statistics for a query text's terms (summed over shards by a router). */
  async textStats(name: string, body: TextStatsBody): Promise<TextStats> {
    const col = this.pointCollection(name);
    const b = checkObject(body, 'text stats body', bodyKeys(BODIES.textStats));
    const c = col.sparse.corpus(this.queryTerms(b.text));
    return { docs: c.n, total_length: c.totalLength, df: Object.fromEntries([...c.df].map(([t, n]) => [String(t), n])) };
  }

  private async rankingsOf(col: Collection, q: Record<string, unknown>, depth: number, corpus: Bm25Corpus | undefined): Promise<Rankings> {
    const ef = parseEf(q.ef_search, this.limits, col.spec.index_params.ef_search);
    const filter = this.compile(col, q.filter);
    const withPayload = parseBool(q.with_payload, 'with_payload', true);
    const withVector = parseBool(q.with_vector, 'with_vector', false);
    const dense = q.vector === undefined || q.vector === null
      ? null
      : parseVector(q.vector, col.spec.dim, col.spec.metric, this.limits, 'query vector');
    const hasSparse = q.sparse_indices !== undefined || q.sparse_values !== undefined;
    const sparse = hasSparse
      ? validateSparse({ indices: q.sparse_indices ?? [], values: q.sparse_values ?? [] }, this.limits.maxSparseTerms, 'sparse query')
      : null;
    const terms = q.query_text === undefined || q.query_text === null ? null : this.queryTerms(q.query_text);
    if (dense === null && sparse === null && terms === null) {
      throw invalidArgument('a hybrid query needs a vector, sparse_indices/sparse_values or query_text');
    }
    await this.prepareRead(col, parseConsistency(q.consistency));
    const out: Rankings = {};
    // Each ranking `depth` deep with the tie rule at its cut too (see search). `whole`: `run` gives every
    // entry tied with its last (the sparse and BM25 rankings), so no wider run is needed.
    const ranked = async (run: (n: number) => SearchResult | Promise<SearchResult>, score: (x: number) => number, whole = false): Promise<Ranked[]> => {
      let r = await run(depth + 1);
      if (!whole && tieAtCut(r.dists, depth, depth + 1)) r = await widenTies(r, depth, depth + 1, col.liveCount, run);
      const dists = r.dists.subarray(0, Math.min(depth, r.dists.length));
      const slots = tiesById((s) => col.idOf(s), r, dists.length).subarray(0, dists.length);
      return Array.from(slots, (slot, i) => {
        const e: Ranked = { id: col.idOf(slot), score: score(dists[i]) };
        if (withPayload) e.payload = col.payloadOf(slot);
        if (withVector) e.vector = col.vectorOf(slot);
        return e;
      });
    };
    // The dense ranking first: it may run in a search worker; the others are computed after it, in
    // the same synchronous stretch, so every ranking sees the same live points.
    if (dense !== null) out.dense = await ranked((n) => this.searchDense(col, dense, n, Math.max(ef, n), filter), (d) => col.score(d));
    // Scores best first: as negated "distances", so the tie rule reads them the same way.
    const scored = (r: ScoredSlots): SearchResult => ({ slots: r.slots, dists: r.scores });
    if (sparse !== null) out.sparse = await ranked((n) => scored(col.searchSparseDot(sparse.terms, sparse.weights, n, filter)), (x) => x, true);
    // BM25 where some document has text: a text query over a collection without any is its dense ranking.
    if (terms !== null && (corpus?.n ?? col.sparse.stats().n) > 0) out.text = await ranked((n) => scored(col.searchBm25(terms, n, filter, corpus)), (x) => x, true);
    else if (terms !== null) out.text = [];
    return out;
  }

  private queryTerms(text: unknown): Uint32Array {
    return parseQueryTerms(text, this.limits);
  }


  // ---------------------------------------------------------------- multi-vector

  async upsertDocuments(name: string, body: UpsertDocumentsBody): Promise<{ upserted: number }> {
    const col = this.multiCollection(name);
    const docs = parseDocuments(body, col.spec, this.limits);
    if (docs.length === 0) return this.unchanged(col, { upserted: 0 });
    await this.gated(col, docs.map((d) => d.id), async () => this.wrote(col, await this.write(col, { t: 'upsert_docs', docs }, false)));
    return { upserted: docs.length };
  }

  async searchMultiVector(name: string, query: MultiVectorQuery): Promise<{ hits: Hit[] }> {
    const col = this.multiCollection(name);
    const q = checkObject(query, 'multi-vector query', MULTI_QUERY_KEYS);
    const k = parseK(q.k, this.limits);
    const ef = parseEf(q.ef_search, this.limits, col.spec.index_params.ef_search);
    const tokens = parseTokens(q.vectors, col.spec, this.limits, 'vectors');
    const filter = this.compile(col, q.filter);
    const withPayload = parseBool(q.with_payload, 'with_payload', true);
    const withVector = parseBool(q.with_vector, 'with_vector', false);
    await this.prepareRead(col, parseConsistency(q.consistency));
    let r = col.searchMulti(tokens, k + 1, Math.max(ef, k + 1), filter);
    for (let n = 2 * (k + 1); tieAtCut(r.scores, k, n / 2) && n / 2 <= col.liveCount; n *= 2) r = col.searchMulti(tokens, n, Math.max(ef, n), filter);
    r = multiTiesById(r, k);
    return {
      hits: r.ids.map((id, rank) => {
        const h: Hit = { id, rank, score: r.scores[rank] };
        if (withPayload) h.payload = col.point(id)!.payload;
        if (withVector) h.vectors = col.tokensOf(id);
        return h;
      }),
    };
  }

  async deleteDocument(name: string, id: string): Promise<{ deleted: boolean }> {
    const col = this.multiCollection(name);
    const pid = checkPointId(id);
    return this.deleteOne(col, pid);
  }

  private multiCollection(name: string): Collection {
    const col = this.collection(name);
    if (!col.spec.multivector) {
      throw invalidArgument(`collection '${col.spec.name}' is not a multivector collection: use points, not documents`);
    }
    return col;
  }

  /** Points operations refuse multi-vector collections, whose rows are document tokens. */
  private pointCollection(name: string): Collection {
    const col = this.collection(name);
    if (col.spec.multivector) {
      throw invalidArgument(`collection '${col.spec.name}' is a multivector collection: use documents and query/multi`);
    }
    return col;
  }

  // ---------------------------------------------------------------- rebalance moves (move.ts)

  /**
   * `POST /v1/cluster/move/{step}`: a coordinator moving this node's points (batch, commit) or bringing
   * points here (apply). docs/cluster.md, Rebalancing.
   */
  async move(step: string, body: unknown): Promise<unknown> {
    this.checkOpen();
    const req = parseMoveRequest(step, body);
    if (req.step === 'batch') return this.nextBatch(req);
    if (req.step === 'commit') return this.commitBatch(req);
    return this.applyBatch(req);
  }

  moveBatch(body: unknown): Promise<unknown> {
    return this.move('batch', body);
  }

  moveCommit(body: unknown): Promise<unknown> {
    return this.move('commit', body);
  }

  moveApply(body: unknown): Promise<unknown> {
    return this.move('apply', body);
  }

  /**
   * The next batch of the move: the gate closed (writes wait, reads go on), then, in the first
   * collection (by uid) with ids after its cursor, up to `limit` points this node does not own in the
   * target set, with the cursor they reach. Nothing left anywhere: the move is finished (durably), and
   * every later write of an id owned elsewhere is refused with `moved`. A new move id starts the move.
   */
  private async nextBatch(req: Extract<MoveRequest, { step: 'batch' }>): Promise<MoveBatchAnswer> {
    let mv = this.dir.move;
    if (mv === null || mv.move !== req.move) {
      if (this.lease !== null) this.endLease();
      await this.moveState({ move: req.move, self: req.self, targets: req.targets, finished: false });
      mv = this.dir.move!;
    } else if (mv.self !== req.self || mv.targets.join() !== req.targets.join()) {
      throw invalidArgument(`move ${req.move} runs here as shard ${mv.self} to shards ${mv.targets.join(', ')}; a move id names one move`);
    }
    if (mv.finished) return { done: true, move: req.move };
    if (this.lease !== null && this.lease.move === req.move) {
      // Its caller asks again (a coordinator that restarted): the gate stays closed, nothing was written
      // since, so the same points go again (an upsert sent twice is one).
      this.lease.stop.abort();
      this.lease = null;
    } else {
      await this.gate.close();
    }
    try {
      this.checkOpen();
      const cols = [...this.byUid.values()].sort((a, b) => (a.uid < b.uid ? -1 : 1));
      for (const col of cols) {
        const batch = this.scanForMove(col, mv, req.limit);
        if (batch === null) continue;
        // Durable before the answer, on every member of a group: after any restart (this node's, a
        // group's leader change, the coordinator's) the next batch can still name those deleted later.
        const known = mv.out.get(col.uid);
        // On a consensus member always, even for ids handed out already: its commit shows this leader's
        // state current (a cut-off leader behind its group would hand out old points).
        if (this.proposer !== null || batch.ids.some((id) => known?.has(id) !== true)) await this.moveOut(mv.move, col.uid, batch.ids);
        const token = moveToken(col.uid, batch.cursor);
        const stop = new AbortController();
        this.lease = { token, move: req.move, uid: col.uid, ids: batch.ids, cursor: batch.cursor, stop };
        void sleep(req.leaseMs, stop.signal).then(() => {
          if (!stop.signal.aborted && this.lease?.token === token) this.endLease();
        });
        const records: string[] = [];
        for (let i = 0; i < batch.ids.length; i += 1000) records.push(Buffer.from(encodeOp(col.recordsOf(batch.ids.slice(i, i + 1000)))).toString('base64'));
        return {
          done: false, move: req.move, token, collection: col.spec.name, params: col.spec as unknown as object, cursor: batch.cursor,
          records, deletes: batch.deletes, count: batch.ids.length, bytes: batch.bytes, lease_ms: req.leaseMs,
        };
      }
      // Nothing left to move, with the gate closed: no write can slip in between this and the record.
      await this.moveState({ move: mv.move, self: mv.self, targets: [...mv.targets], finished: true });
      this.gate.open();
      return { done: true, move: req.move };
    } catch (e) {
      if (this.lease === null) this.gate.open();
      throw e;
    }
  }

  /** One collection's next batch after its cursor; null when nothing is left there. */
  private scanForMove(col: Collection, mv: NonNullable<DataDir['move']>, limit: number): { ids: string[]; cursor: string; deletes: string[]; bytes: number } | null {
    const ids = col.idsSorted();
    const from = mv.cursors.get(col.uid);
    const out = mv.out.get(col.uid);
    const deletes = out === undefined ? [] : [...out].filter((id) => !col.has(id));
    let i = after(ids, from);
    if (i >= ids.length && deletes.length === 0) return null;
    const take: string[] = [];
    let bytes = 0;
    let cursor = from ?? '';
    for (let scanned = 0; i < ids.length && scanned < MOVE_SCAN_IDS_MAX && take.length < limit && bytes < MOVE_BATCH_BYTES_MAX; i++, scanned++) {
      const id = ids[i];
      cursor = id;
      if (owner(id, mv.targets) === mv.self) continue;
      take.push(id);
      const p = col.point(id)!;
      bytes += col.spec.dim * 4 * (col.spec.multivector ? col.tokensOf(id).length : 1) + (p.payload === null ? 0 : JSON.stringify(p.payload).length) + id.length;
    }
    // Scanned to the end: the cursor passes the ids named gone too (nothing of them is here any more), so
    // the commit forgets them all and the next scan can find nothing left (else they would be named again
    // by an empty batch forever).
    if (i >= ids.length) for (const id of deletes) if (id > cursor) cursor = id;
    return { ids: take, cursor, deletes, bytes };
  }

  /**
   * A move's start or end, durable before it is taken: this node's record, or on a consensus member a
   * command every member applies (applyMoveCommand) and that is applied here when this resolves.
   */
  private async moveState(state: MoveStateRecord): Promise<void> {
    if (this.proposer === null) await this.dir.appendMoveState(state);
    else await this.proposer.propose({ uid: '', bulk: false, op: { t: 'move_state', ...state } });
  }

  /** A batch handed out (DataDir appendMoveOut), durable as moveState is. */
  private async moveOut(move: string, uid: string, ids: string[]): Promise<void> {
    if (this.proposer === null) await this.dir.appendMoveOut(move, uid, ids);
    else await this.proposer.propose({ uid: '', bulk: false, op: { t: 'move_out', move, uid, ids } });
  }

  /**
   * A batch's ids leave this node and the cursor advances, in one WAL record (on a consensus member, one
   * command every member applies as that record); then the gate opens. A token this node holds no lease
   * for is answered from the durable cursor: the batch was committed when the cursor of its collection
   * reached the batch's (a commit asked again after an answer that was lost, or on a group's new leader
   * after the old one's commit was cut off), else `not_found` (its lease ended: ask the next batch).
   */
  private async commitBatch(req: Extract<MoveRequest, { step: 'commit' }>): Promise<{ moved: number }> {
    const l = this.lease;
    if (l === null || l.token !== req.token || l.move !== req.move) {
      if (await this.committedBefore(req.move, req.token)) return { moved: 0 };
      throw notFound(`no batch of move ${req.move} holds this node with that token (its lease ended, or it was committed): ask for the next batch`);
    }
    l.stop.abort();
    // The lease ends now (nothing else may end it: endMoveLease); the gate stays closed until the
    // commit is done or settled (finally).
    this.lease = null;
    let settle = false;
    try {
      const col = this.byUid.get(l.uid);
      if (col === undefined) return { moved: 0 };
      const op = { t: 'delete' as const, ids: l.ids, move: { move: l.move, cursor: l.cursor } };
      if (this.proposer !== null) {
        // Applied here (applyMoveCommand) once this resolves. If it fails, the entry may still be in the
        // log and commit later: the gate stays closed until that is settled (below), or a write checked
        // against the cursor before it could be proposed after it.
        settle = true;
        await this.proposer.propose({ uid: col.uid, bulk: false, op });
        settle = false;
      } else {
        await this.appendApply(col, op, false, () => this.dir.appendMoveCommit(col.uid, op));
      }
      return { moved: l.ids.length };
    } finally {
      // Not known to be committed: its ids stay handed out (the move's durable list), and the next
      // batch names which of them went. The gate opens once its proposal is settled.
      if (settle) await this.settleProposals(l.uid).catch(() => undefined);
      this.gate.open();
    }
  }

  /**
   * Whether the batch of `token` (moveToken) is committed here: the move runs and the cursor of the
   * batch's collection reached the batch's. On a consensus member, first every command this member
   * proposed before is settled (applied, or never to be), so a commit still in the log is counted.
   */
  private async committedBefore(move: string, token: string): Promise<boolean> {
    const t = parseMoveToken(token);
    if (t === null) return false;
    if (this.proposer !== null) await this.settleProposals(t.uid);
    const mv = this.dir.move;
    if (mv === null || mv.move !== move) return false;
    const cursor = mv.cursors.get(t.uid);
    return mv.finished || (cursor !== undefined && cursor >= t.cursor);
  }

  /**
   * A consensus member's barrier: an empty delete of collection `uid`, proposed and applied. Entries
   * apply in log order, so once it is applied here every command this member proposed before it is
   * applied or was overwritten by another leader's (and will never apply). Fails (unavailable) when
   * this member no longer leads: then the next leader's state, once it is ready, is the answer.
   */
  private async settleProposals(uid: string): Promise<void> {
    if (this.proposer === null || !this.byUid.has(uid)) return;
    await this.proposer.propose({ uid, bulk: false, op: { t: 'delete', ids: [] } });
  }

  /**
   * A consensus member that stopped leading ends its batch's lease at once (its commit could not be
   * proposed any more), so writes waiting at its gate go on to the new leader. raft-engine.ts calls it.
   */
  endMoveLease(): void {
    if (this.lease !== null) this.endLease();
  }

  /** Whether a move batch holds this node's gate now. */
  get moveLeaseHeld(): boolean {
    return this.lease !== null;
  }

  /**
   * A lease that ended uncommitted: writes go on. Its ids may be on their new owners; they stay in the
   * move's durable list of ids handed out, so the next batch there says which went meanwhile.
   */
  private endLease(): void {
    this.lease!.stop.abort();
    this.lease = null;
    this.gate.open();
  }

  /**
   * Points a move brings here: the source's logical records (core/storage/codec.ts), written as they
   * are (payload keys of text and sparse vectors included), the collection created first with the
   * source's parameters when it is not here. Not through the gate: these ids are this node's own in
   * the move's target set, so none of its own batches ever holds them.
   */
  private async applyBatch(req: Extract<MoveRequest, { step: 'apply' }>): Promise<{ applied: number; deleted: number }> {
    const spec = parseCollectionParams(req.params, this.limits);
    if (spec.name !== req.collection) throw invalidArgument(`params name collection '${spec.name}', not '${req.collection}'`);
    // Deletes alone never create the collection: there is nothing of it here to delete (on a consensus
    // member, once its state is shown current).
    if (!this.byName.has(spec.name) && req.records.length === 0 && (!(await this.confirmedCurrent()) || !this.byName.has(spec.name))) return { applied: 0, deleted: 0 };
    if (!this.byName.has(spec.name)) await this.createCollection({ ...(req.params as CollectionParams), exist_ok: true });
    const col = this.collection(spec.name);
    if (!sameShape(col.spec, spec)) throw new SvcError('already_exists', `collection '${spec.name}' exists here with another shape`);
    const ops: Op[] = req.records.map((r, i) => {
      let op;
      try {
        op = decodeOp(r);
      } catch (e) {
        if (e instanceof CodecError) throw invalidArgument(`records[${i}]: ${e.message}`);
        throw e;
      }
      if (op.t === 'upsert' && !spec.multivector) {
        for (const p of op.points) {
          checkPointId(p.id);
          if (p.vector.length !== spec.dim) throw invalidArgument(`records[${i}]: point '${p.id}' has ${p.vector.length} dimensions, not ${spec.dim}`);
        }
      } else if (op.t === 'upsert_docs' && spec.multivector) {
        for (const d of op.docs) {
          checkPointId(d.id);
          if (d.count < 1 || d.vectors.length !== d.count * spec.dim) throw invalidArgument(`records[${i}]: document '${d.id}' does not hold ${d.count} vectors of ${spec.dim}`);
        }
      } else {
        throw invalidArgument(`records[${i}] is not a batch of whole ${spec.multivector ? 'documents' : 'points'}`);
      }
      return op;
    });
    let applied = 0;
    for (const op of ops) applied += await this.write(col, op, pointRecords(op) >= 256);
    const named = req.deletes.map((id) => checkPointId(id));
    let gone = named.filter((id) => col.has(id));
    // Nothing written and nothing of the deletes here: on a consensus member, so only once its state is
    // shown current (a write that proposes shows it by its commit).
    if (ops.length === 0 && gone.length === 0 && named.length > 0 && await this.confirmedCurrentFor(col)) gone = named.filter((id) => col.has(id));
    const deleted = gone.length === 0 ? 0 : await this.write(col, { t: 'delete', ids: gone }, false);
    return { applied, deleted };
  }

  // ---------------------------------------------------------------- database

  async stats(): Promise<DatabaseStats> {
    this.checkOpen();
    const cols = [...this.byName.values()].sort((a, b) => (a.spec.name < b.spec.name ? -1 : 1));
    const s = await this.dir.stats();
    return {
      collections: cols.length,
      total_points: cols.reduce((n, c) => n + c.count, 0),
      per_collection: cols.map((c) => {
        const bytes = c.memoryBytes();
        return { name: c.spec.name, count: c.count, index: c.spec.index, index_state: c.indexState, vector_bytes: bytes.vectors, graph_bytes: bytes.graph };
      }),
      snapshot_status: { manifest_version: s.manifest_version, disk_bytes: s.disk_bytes },
      // A consensus member's replicas count in its log's indexes (replicate).
      replication: { role: 'leader', commit_seq: this.member && this.consensusLog !== null ? this.consensusLog.lastSeq : this.dir.lastSeq },
    };
  }

  async snapshot(body: SnapshotBody): Promise<SnapshotResult> {
    this.checkOpen();
    const b = checkObject(body, 'snapshot body', bodyKeys(BODIES.snapshot));
    const name = checkName(b.name, 'snapshot name');
    const root = this.opts.snapshotDir ?? `${this.opts.dataDir.replace(/\/+$/, '')}-snapshots`;
    const path = joinPath(root, name);
    // A consensus member's points applied since its last checkpoints are in memory only: segments take
    // them first, so that the copy holds every write acknowledged before the call.
    if (this.member) await this.checkpointAll();
    // The copy's own manifest version and size, not the live directory's (which moves on with writes).
    const s = await this.dir.snapshot(path);
    return { name, path, manifest_version: s.manifest_version, disk_bytes: s.disk_bytes };
  }

  /**
   * The replication stream (core/collection/replication.ts): a logical snapshot, then the WAL commit
   * tail; on a consensus member, the consensus log's entries this member applied instead
   * (core/cluster/consensus/replication-source.ts: its WAL holds no point writes).
   */
  replicate(body?: ReplicateRequest, signal?: AbortSignal): AsyncIterable<ReplicationEvent> {
    this.checkOpen();
    if (!this.member) return replicationStream(this.replicationView(), body, signal);
    if (this.consensusLog === null) {
      // A member without its log's source (none is given outside a server's member host).
      throw invalidArgument('this consensus member serves no read replicas here: read from any member of the group instead');
    }
    return replicationStream({ ...this.replicationView(), log: this.consensusLog, history: consensusStreamHistory(this.dir.history), current: this.consensusCurrent }, body, signal);
  }

  /**
   * A consensus member's replication source: the log entries it applied (its member host gives it), and
   * whether the member can vouch for being current (it knows a leader): its streams send no heartbeats
   * while it cannot, so its replicas' lag grows.
   */
  useConsensusLog(log: CommitLog, current: () => boolean = () => true): void {
    this.consensusLog = log;
    this.consensusCurrent = current;
  }

  /** Whether a collection of this uid is here now. */
  holdsCollection(uid: string): boolean {
    return this.byUid.has(uid);
  }

  /** Read-only access for replication: the commit log and the live collections. */
  replicationView(): ReplicationView {
    return {
      log: this.dir.log,
      history: this.dir.history,
      monotonicMs: () => this.clock.monotonicMs(),
      sleep: (ms, signal) => sleep(ms, signal),
      collections: () => [...this.byName.values()].map((c) => ({
        uid: c.uid, spec: c.spec, createdSeq: this.createdSeqs.get(c.uid) ?? 0, captureAll: () => c.captureAll(), live: () => this.byUid.get(c.uid) === c,
      })),
      isClosed: () => this.closed,
    };
  }

  /** The search pool's workers and counters (null without a pool), for metrics. */
  searchPoolStats(): SearchPoolStats | null {
    const p = this.pool;
    return p === null ? null : { workers: p.size, inFlight: p.inFlight, ...p.counters };
  }

  /** Index state per collection, for metrics. */
  indexStates(): { name: string; count: number; stale: boolean; rebuilds: number; graphLoads: number; graphWrites: number }[] {
    return [...this.byName.values()].map((c) => ({
      name: c.spec.name, count: c.count, stale: c.indexState === 'stale', rebuilds: c.rebuilds, graphLoads: c.graphLoads, graphWrites: c.graphWrites,
    }));
  }

  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    // From here every read here answers not_ready: so does every request loop's view, at once (not only
    // once each collection is dropped below, after the checkpoints).
    for (const col of this.byName.values()) col.reads?.retire();
    this.lease?.stop.abort();
    this.lease = null;
    this.gate.open();
    // The pool first: searches waiting for a worker are cancelled and those in flight finish before the
    // collections they read are dropped.
    await this.pool?.close();
    await Promise.all([...this.checkpoints.values()]);
    await this.quietMove;
    // A consensus member's points applied since its last position go into segments, and the position
    // follows them: its next start applies only the log's entries after it.
    if (this.member) await this.syncApplied().catch((e) => this.log('warn', 'writing the applied position at close failed; the next start applies the log from the last one', { error: String(e) }));
    /** By uid, the last seq each collection applied, when all of them are in their segments now. */
    let applied: Map<string, number> | null = new Map();
    for (const col of this.byName.values()) {
      if (col.dirtyCount > 0) await this.checkpoint(col).catch((e) => this.log('warn', 'checkpoint at close failed', { error: String(e) }));
      if (col.dirtyCount > 0) applied = null;
      else applied?.set(col.uid, col.appliedSeq);
      // The graph as it is now, if it changed since its file: the next open reads it instead of rebuilding.
      await col.persistGraphAtClose();
      col.drop();
    }
    // A move's records (a batch handed out is one no build before it reads) leave the WAL: it rolls, the
    // checkpoints pass them and their files are deleted, so that an older build can open this directory
    // once no move runs (docs/deployment.md); a follower's retention hold on them is logged by the seal.
    if (applied !== null) {
      await this.dir.sealMoveRecords(applied).catch((e) => this.log('warn', 'moving the checkpoints past the move\'s records at close failed; the WAL keeps them', { error: String(e) }));
    }
    await this.dir.close();
  }
}

/** A random seed for callers that want graphs to differ between runs. */
export function randomSeed(): number {
  return randomInt(0, 2 ** 31);
}
