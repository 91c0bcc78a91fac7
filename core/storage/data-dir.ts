import { randomBytes } from 'node:crypto';
import { assert } from '../base/assert.js';
import { SvcError, invalidArgument } from '../base/errors.js';
import { InsecureSealer, XChaChaSealer, type Sealer } from '../crypto/sealer.js';
import { deriveKey, randomDataKey, unwrapDataKey, wrapDataKey } from '../crypto/keys.js';
import { decodeOp, encodeOp, isDbOp, type DbOp, type MoveStateRecord, type Op } from './codec.js';
import { StorageCorruption } from './errors.js';
import { FORMAT_VERSION, aad, crc } from './format.js';
import { dirName, joinPath, mkdirDurable, writeFileAtomic, type FileSystem, type PathLock } from './fs.js';
import { GRAPH_FILE, GRAPH_TMP, GraphFileWriter, readGraphFile, type GraphContents } from './graph-file.js';
import { loadManifest, saveManifest, type CollectionEntry, type Manifest } from './manifest.js';
import { SegmentWriter, readSegment } from './segment.js';
import type { CommitLog } from './commit-log.js';
import { Wal, type Keyring, type StorageLog } from './wal.js';

/**
 * The data directory: svc.meta (magic, format, key check), manifest, wal/, collections/<uid>/seg-<n>.
 * The collection layer calls only this. Order of every change: WAL record first (durable), then the
 * manifest (atomic), then file deletions; DataDir.open finishes whatever a crash interrupted.
 */

export interface DataDirOptions {
  /** 32 bytes; null = insecure mode (plaintext with checksums). */
  masterKey: Uint8Array | null;
  log: StorageLog;
  /** WAL file size at which a new file is started. */
  segmentBytesMax?: number;
  /** Most bytes of WAL files kept only for replication readers (WalOptions.retainBytesMax; default 1 GiB). */
  replicationRetainBytes?: number;
  /**
   * Opened as a consensus member's directory (issue 17), whose positions count in this history: its WAL's
   * unsynced tail is a copy of what its consensus log holds, so damage there is cut at open rather than
   * refused (WalOptions.damagedTailAfterSeq, past the last seq the manifest names: `durableSeqFloor`).
   * Known before the WAL is opened: recovery decides. Only where the manifest shows no other kind of
   * directory (`cutsDamagedTail`): a single node's records are nowhere else, and stay refused.
   */
  consensusHistory?: string;
}

/**
 * Whether a directory opened as a consensus member's may have its WAL's damaged tail cut: its manifest
 * names that member's history, or a restore in progress (its state is replaced again), or holds nothing
 * yet (a new member; no single node's collection is in it).
 */
function cutsDamagedTail(m: Manifest, consensusHistory: string | undefined): boolean {
  if (consensusHistory === undefined) return false;
  const h = m.replica_history;
  return h === consensusHistory || h === '' || (h === undefined && m.collections.length === 0 && m.move === undefined);
}

/**
 * The last WAL seq a manifest shows to be durable: every seq it names (a collection's checkpoint or create,
 * a move's state) was fsynced before the manifest was saved (checkpoint() syncs the WAL first; a create's
 * record is a synced append; a move's seq is the WAL's durable lastSeq). A consensus member's WAL cuts
 * damage only past it: below it, segments and the manifest already count those seqs, and a WAL that
 * reused them would have its new records skipped at replay as checkpointed.
 */
function durableSeqFloor(m: Manifest): number {
  return Math.max(0, m.move?.seq ?? 0, ...m.collections.map((c) => c.checkpoint_seq));
}

export interface CollectionSummary {
  uid: string;
  name: string;
  params: object;
  checkpointSeq: number;
  /** Segment files the collection's state is in. */
  segments: number;
  /** Its create's seq (the leader's, on a follower); 0 when not known (older manifests). */
  createdSeq: number;
}

export interface ReplayRecord {
  seq: number;
  uid: string;
  /** A collection's op, or a create or drop (a follower's positions are read into replicaSeq instead). */
  op: Op | Extract<DbOp, { t: 'create_collection' | 'drop_collection' }>;
}

/** A node's rebalance move as a source, with each collection's cursor (core/collection/move.ts). */
export interface MoveProgress extends MoveStateRecord {
  /** By collection uid: the last id the move has scanned there (absent: nothing yet). */
  cursors: Map<string, string>;
  /**
   * By collection uid: ids of batches handed out (move_out records) that no commit's cursor has passed
   * yet; they may be on their new owners, so a batch names those gone from here (core/collection/move.ts).
   */
  out: Map<string, Set<string>>;
}

const META = 'svc.meta';
/** A log history id: 128 random bits, hex. */
const newHistoryId = (): string => randomBytes(16).toString('hex');
/** The one-owner lock (CONTRACT.md section 1): never part of the data, never copied into a snapshot. */
export const LOCK_FILE = 'svc.lock';
const MANIFEST = 'manifest';
const WAL_DIR = 'wal';
const COLLECTIONS_DIR = 'collections';
const INIT_NAMES = new Set([LOCK_FILE, MANIFEST, `${MANIFEST}.tmp`, `${META}.tmp`, WAL_DIR, COLLECTIONS_DIR]);
const META_MAGIC = Buffer.from('SVCMETA\x01', 'latin1');
const KEY_CHECK = Buffer.from('svc key check v1');
const MODE_INSECURE = 0;
const MODE_ENCRYPTED = 1;
const COPY_CHUNK_BYTES = 1 << 20;
const UID_RE = /^[0-9a-f]{16}$/;
const segName = (id: number) => `seg-${String(id).padStart(10, '0')}`;

function encodeMeta(sealer: Sealer, mode: number): Buffer {
  const head = Buffer.alloc(13);
  META_MAGIC.copy(head, 0);
  head.writeUInt32LE(FORMAT_VERSION, 8);
  head[12] = mode;
  const body = Buffer.concat([head, sealer.seal(KEY_CHECK, aad('meta', [mode]))]);
  const tail = Buffer.alloc(4);
  tail.writeUInt32LE(crc(body), 0);
  return Buffer.concat([body, tail]);
}

export class DataDir implements Keyring {
  private manifest!: Manifest;
  private manifestBytes = 0;
  private metaBytes = 0;
  private wal!: Wal;
  private readonly sealers = new Map<string, Sealer>();
  private readonly manifestSealer: Sealer;
  private readonly dbSealer: Sealer;
  private chain: Promise<unknown> = Promise.resolve();
  private closed = false;
  private lock: PathLock | null = null;
  /** Bytes of each collection's graph file (counted in stats' disk bytes). */
  private readonly graphBytes = new Map<string, number>();
  /** A follower's applied leader seq (the manifest's, then every replica_position record since); null on a leader. */
  private replicaPosition: number | null = null;
  /**
   * The WAL seq of the record that set replicaPosition (0: the manifest's, durable). A position may be
   * written unsynced (`appendReplicaPosition`'s `sync: false`; a consensus member of a build before
   * 2026-11-28 wrote its own so): a manifest saves one only once its record is durable (saveManifest).
   */
  private positionSeq = 0;
  /** The leader history that position counts in ('' while a bootstrap runs); null when none is known. */
  private replicaHistory: string | null = null;
  /** A follower's bootstrap (or a consensus member's snapshot restore) began and has not ended. */
  get bootstrapping(): boolean {
    return this.replicaHistory === '';
  }

  /** This node's rebalance move as a source (the manifest's, then the records since); null when none ever ran. */
  private moveProgress: MoveProgress | null = null;
  /** Until replay() has read the WAL, the move records in it are not in moveProgress: saves keep the manifest's. */
  private moveReplayed = false;
  /** The highest WAL seq of a move's record (its state, a batch handed out, a commit's mark) replayed or appended. */
  private moveRecordSeq = 0;
  /** By collection uid: the highest seq of its records appended by this process, and appends not yet resolved. */
  private readonly appended = new Map<string, { seq: number; pending: number }>();

  private constructor(private readonly fs: FileSystem, readonly path: string, private readonly opts: DataDirOptions) {
    const mk = opts.masterKey;
    if (mk !== null && mk.length !== 32) throw invalidArgument('the master key must be 256 bits');
    this.manifestSealer = mk ? new XChaChaSealer(deriveKey(mk, 'manifest')) : new InsecureSealer();
    this.dbSealer = mk ? new XChaChaSealer(deriveKey(mk, 'wal-db')) : new InsecureSealer();
  }

  static async open(fs: FileSystem, path: string, opts: DataDirOptions): Promise<DataDir> {
    const d = new DataDir(fs, path, opts);
    try {
      await d.openOrInit();
    } catch (e) {
      await d.wal?.close().catch(() => undefined);
      await d.lock?.release().catch(() => undefined);
      throw e;
    }
    return d;
  }

  private p(...parts: string[]): string {
    return joinPath(this.path, ...parts);
  }

  sealerFor(keyId: string): Sealer | undefined {
    return keyId === 'db' ? this.dbSealer : this.sealers.get(keyId);
  }

  private get mode(): number {
    return this.opts.masterKey ? MODE_ENCRYPTED : MODE_INSECURE;
  }

  private async openOrInit(): Promise<void> {
    await mkdirDurable(this.fs, this.path);
    await this.takeLock();
    if ((await this.fs.stat(this.p(META))) === null) await this.init();
    await this.checkMeta();
    this.manifest = await loadManifest(this.fs, this.p(MANIFEST), this.manifestSealer);
    this.manifestBytes = (await this.fs.stat(this.p(MANIFEST)))!.size;
    this.replicaPosition = this.manifest.replica_position ?? null;
    this.replicaHistory = this.manifest.replica_history ?? null;
    const mv = this.manifest.move;
    this.moveProgress = mv === undefined ? null : {
      move: mv.move, self: mv.self, targets: [...mv.targets], finished: mv.finished, cursors: new Map(Object.entries(mv.cursors)),
      out: new Map(Object.entries(mv.out ?? {}).map(([uid, ids]) => [uid, new Set(ids)])),
    };
    for (const c of this.manifest.collections) this.sealers.set(c.uid, this.sealerOf(c));
    this.wal = await Wal.open(this.fs, this.p(WAL_DIR), {
      keyring: this, log: this.opts.log, segmentBytesMax: this.opts.segmentBytesMax, retainBytesMax: this.opts.replicationRetainBytes,
      ...(cutsDamagedTail(this.manifest, this.opts.consensusHistory) ? { damagedTailAfterSeq: durableSeqFloor(this.manifest) } : {}),
    });
    await this.finishInterrupted();
    await this.removeOrphans();
    // A directory made before histories were kept gets one, once (the only write an open may make).
    if (this.manifest.history === undefined) await this.saveManifest({ ...this.manifest, history: newHistoryId() });
  }

  /**
   * One owner per directory: two writers would each append their own log and one would lose the
   * other's acknowledged writes. Taken before anything else is read or written, held until close.
   */
  private async takeLock(): Promise<void> {
    const r = await this.fs.lockExclusive(this.p(LOCK_FILE));
    if (r.ok) {
      this.lock = r.lock;
      return;
    }
    const who = /^\d+$/.test(r.holder) ? `process ${r.holder}` : 'another process';
    throw new SvcError('unavailable', `the data directory ${this.path} is in use by ${who}: one process opens a data directory `
      + 'at a time (stop it first, or send the work through its API)', { reason: 'data_dir_locked', holder: r.holder });
  }

  /** A fresh directory, or one whose first initialisation was interrupted (no svc.meta yet). */
  private async init(): Promise<void> {
    const stray = (await this.fs.readdir(this.path)).filter((n) => !INIT_NAMES.has(n));
    if (stray.length > 0) {
      throw invalidArgument(`${this.path} is not an svc data directory (it holds ${stray.slice(0, 3).join(', ')} but no ${META})`);
    }
    await this.fs.rmdir(this.p(WAL_DIR));
    await this.fs.rmdir(this.p(COLLECTIONS_DIR));
    await this.fs.fsyncDir(this.path);
    await mkdirDurable(this.fs, this.p(WAL_DIR));
    await mkdirDurable(this.fs, this.p(COLLECTIONS_DIR));
    await saveManifest(this.fs, this.p(MANIFEST), this.manifestSealer, { manifest_version: 1, format_version: FORMAT_VERSION, collections: [], history: newHistoryId() });
    // svc.meta last: its presence means the directory is complete.
    await writeFileAtomic(this.fs, this.p(META), encodeMeta(this.metaSealer(), this.mode));
  }

  private metaSealer(): Sealer {
    return this.opts.masterKey ? new XChaChaSealer(deriveKey(this.opts.masterKey, 'meta')) : new InsecureSealer();
  }

  private async checkMeta(): Promise<void> {
    const path = this.p(META);
    const b = Buffer.from(await this.fs.readFile(path));
    if (b.length < 17 || b.readUInt32LE(b.length - 4) !== crc(b.subarray(0, b.length - 4))) throw new StorageCorruption(path, 0, 'svc.meta checksum mismatch');
    if (!b.subarray(0, 8).equals(META_MAGIC)) throw new StorageCorruption(path, 0, 'not an svc.meta file');
    if (b.readUInt32LE(8) !== FORMAT_VERSION) throw new StorageCorruption(path, 8, `unsupported format version ${b.readUInt32LE(8)}`);
    const mode = b[12];
    if (mode === MODE_ENCRYPTED && this.mode === MODE_INSECURE) {
      throw new SvcError('invalid_argument', 'this data directory is encrypted: open it with its master key', { reason: 'key_required' });
    }
    if (mode === MODE_INSECURE && this.mode === MODE_ENCRYPTED) {
      throw new SvcError('invalid_argument', 'this data directory was created in insecure mode (no encryption at rest): refusing to open it with a master key', { reason: 'insecure_directory' });
    }
    try {
      this.metaSealer().open(b.subarray(13, b.length - 4), aad('meta', [mode]));
    } catch {
      throw new SvcError('invalid_argument', 'the master key does not open this data directory', { reason: 'wrong_master_key' });
    }
    this.metaBytes = b.length;
  }

  private sealerOf(c: CollectionEntry): Sealer {
    const mk = this.opts.masterKey;
    if (!mk) return new InsecureSealer();
    if (c.wrapped_key === null) throw new StorageCorruption(this.p(MANIFEST), 0, `collection ${c.uid} has no wrapped key`);
    try {
      return new XChaChaSealer(unwrapDataKey(mk, Buffer.from(c.wrapped_key, 'base64'), c.uid));
    } catch {
      throw new StorageCorruption(this.p(MANIFEST), 0, `the data key of collection ${c.uid} does not unwrap`);
    }
  }

  /** Completes a create or drop whose WAL record is durable but whose manifest change was lost. */
  private async finishInterrupted(): Promise<void> {
    const creates = new Map<string, { seq: number; name: string; params: object; createdSeq: number }>();
    const dropped = new Set<string>();
    for await (const r of this.wal.readFrom(this.wal.firstRetainedSeq, { want: (keyId) => keyId === 'db' })) {
      const op = this.decode(r.body!, r.seq);
      if (op.t === 'create_collection') creates.set(op.uid, { seq: r.seq, name: op.name, params: op.params, createdSeq: op.origin_seq ?? r.seq });
      else if (op.t === 'drop_collection') dropped.add(op.uid);
    }
    let m = this.manifest;
    const live = new Set(m.collections.map((c) => c.uid));
    for (const [uid, c] of creates) {
      if (live.has(uid) || dropped.has(uid)) continue;
      this.opts.log('storage: completing an interrupted collection create', { uid, seq: c.seq });
      m = { ...m, collections: [...m.collections, this.newEntry(uid, c.name, c.params, c.seq, c.createdSeq)] };
    }
    for (const uid of dropped) {
      if (!live.has(uid)) continue;
      this.opts.log('storage: completing an interrupted collection drop', { uid });
      m = { ...m, collections: m.collections.filter((c) => c.uid !== uid) };
    }
    if (m !== this.manifest) await this.saveManifest(m);
  }

  private decode(body: Uint8Array, seq: number): Op | DbOp {
    try {
      return decodeOp(body);
    } catch (e) {
      throw new StorageCorruption(this.p(WAL_DIR), 0, `record seq ${seq}: ${(e as Error).message}`);
    }
  }

  private newEntry(uid: string, name: string, params: object, seq: number, createdSeq: number): CollectionEntry {
    const mk = this.opts.masterKey;
    let wrapped: string | null = null;
    if (mk) {
      const dataKey = randomDataKey();
      wrapped = Buffer.from(wrapDataKey(mk, dataKey, uid)).toString('base64');
      this.sealers.set(uid, new XChaChaSealer(dataKey));
      dataKey.fill(0);
    } else {
      this.sealers.set(uid, new InsecureSealer());
    }
    return { uid, name, params, wrapped_key: wrapped, segments: [], next_segment_id: 1, checkpoint_seq: seq, created_seq: createdSeq };
  }

  private async saveManifest(next: Manifest): Promise<void> {
    const m: Manifest = { ...next, manifest_version: this.manifest.manifest_version + 1 };
    if (this.replicaPosition !== null) m.replica_position = this.replicaPosition;
    if (this.replicaHistory !== null) m.replica_history = this.replicaHistory;
    // A position written unsynced (sync: false) is made durable before a manifest names it: a
    // power loss that took its record, and the records of the entries before it, would otherwise leave a
    // manifest claiming them, and the member would never apply them again (replay finds no later record
    // when the checkpoints are past every durable one).
    if (this.positionSeq > (this.wal?.lastSeq ?? 0)) await this.wal.sync();
    // Move records are appended in `serial`, as this save runs: every one up to lastSeq is in it.
    const mv = this.moveProgress;
    if (!this.moveReplayed) {
      if (this.manifest?.move !== undefined) m.move = this.manifest.move;
    } else if (mv !== null) {
      m.move = {
        move: mv.move, self: mv.self, targets: [...mv.targets], finished: mv.finished,
        cursors: Object.fromEntries([...mv.cursors].filter(([uid]) => m.collections.some((c) => c.uid === uid))), seq: this.wal?.lastSeq ?? 0,
      };
      const out = [...mv.out].filter(([uid, ids]) => ids.size > 0 && m.collections.some((c) => c.uid === uid));
      if (out.length > 0) m.move.out = Object.fromEntries(out.map(([uid, ids]) => [uid, [...ids]]));
    }
    this.manifestBytes = await saveManifest(this.fs, this.p(MANIFEST), this.manifestSealer, m);
    this.manifest = m;
    const live = new Set(m.collections.map((c) => c.uid));
    for (const uid of [...this.sealers.keys()]) if (!live.has(uid)) this.sealers.delete(uid);
  }

  /** Deletes what no manifest lists: leftovers of a crash between a manifest save and a cleanup. */
  private async removeOrphans(): Promise<void> {
    if (await this.fs.stat(this.p(`${MANIFEST}.tmp`))) await this.fs.unlink(this.p(`${MANIFEST}.tmp`));
    const root = this.p(COLLECTIONS_DIR);
    await mkdirDurable(this.fs, root);
    let changed = false;
    for (const uid of await this.fs.readdir(root)) {
      const entry = this.manifest.collections.find((c) => c.uid === uid);
      if (!entry) {
        await this.fs.rmdir(joinPath(root, uid));
        changed = true;
        continue;
      }
      // The graph file is the one file of a collection no manifest lists (graph-file.ts): derived data,
      // kept while its collection is; a temp file of an interrupted write goes.
      const listed = new Set([...entry.segments.map((s) => segName(s.id)), GRAPH_FILE]);
      let dirChanged = false;
      for (const f of await this.fs.readdir(joinPath(root, uid))) {
        if (!listed.has(f)) {
          await this.fs.unlink(joinPath(root, uid, f));
          dirChanged = true;
        }
      }
      if (dirChanged) await this.fs.fsyncDir(joinPath(root, uid));
      const graph = await this.fs.stat(joinPath(root, uid, GRAPH_FILE));
      if (graph !== null) this.graphBytes.set(uid, graph.size);
    }
    if (changed) await this.fs.fsyncDir(root);
  }

  private serial<T>(fn: () => Promise<T>): Promise<T> {
    if (this.closed) return Promise.reject(new SvcError('not_ready', 'the data directory is closed'));
    const run = this.chain.then(fn);
    this.chain = run.catch(() => {});
    return run;
  }

  private entry(uid: string): CollectionEntry {
    const c = this.manifest.collections.find((x) => x.uid === uid);
    if (!c) throw new SvcError('not_found', `no collection with uid ${uid}`);
    return c;
  }

  collections(): CollectionSummary[] {
    return this.manifest.collections.map((c) => ({
      uid: c.uid, name: c.name, params: c.params, checkpointSeq: c.checkpoint_seq, segments: c.segments.length, createdSeq: c.created_seq ?? 0,
    }));
  }

  /** The ops of a collection's segments, in order (its state at its checkpoint seq). */
  async *readCollection(uid: string): AsyncIterable<Op> {
    const c = this.entry(uid);
    const sealer = this.sealers.get(uid)!;
    for (const s of c.segments) yield* readSegment(this.fs, this.p(COLLECTIONS_DIR, uid, segName(s.id)), sealer, uid, s.id);
  }

  /**
   * WAL records after each collection's checkpoint, in seq order. Create and drop records in that range
   * come too; collections() already reflects them (open finishes interrupted ones), so redoing them is
   * idempotent. Records of dropped collections are skipped.
   */
  async *replay(): AsyncIterable<ReplayRecord> {
    const checkpoints = new Map(this.manifest.collections.map((c) => [c.uid, c.checkpoint_seq]));
    // Move records at or below it are in the manifest's move state already.
    const moveSeq = this.manifest.move?.seq ?? 0;
    const { base, from } = this.replayRange();
    // A collection's record at or below its checkpoint is in its segments: skipped unopened, unless a
    // move's progress may be in it (an idle collection's old checkpoint would otherwise have every
    // later record of the others decrypted at each open).
    const moveMayTell = (seq: number): boolean => this.moveProgress !== null && seq > moveSeq;
    const want = (keyId: string, seq: number): boolean => {
      if (keyId === 'db') return true;
      const cp = checkpoints.get(keyId);
      return cp !== undefined && (seq > cp || moveMayTell(seq));
    };
    for await (const r of this.wal.readFrom(from, { want })) {
      if (r.keyId === 'db') {
        const op = this.decode(r.body!, r.seq) as DbOp;
        assert(isDbOp(op), 'db records hold database ops');
        if (r.seq < base && op.t !== 'move_state' && op.t !== 'move_out') continue;
        if (op.t === 'replica_position') {
          // The last one written wins.
          this.replicaPosition = op.leader_seq;
          this.positionSeq = r.seq;
          continue;
        }
        if (op.t === 'replica_origin') {
          // A bootstrap's start ('': nothing applied yet) or its end (the leader's history and seq).
          this.replicaHistory = op.history;
          this.replicaPosition = op.leader_seq;
          this.positionSeq = r.seq;
          continue;
        }
        if (op.t === 'move_state') {
          this.moveRecordSeq = Math.max(this.moveRecordSeq, r.seq);
          if (r.seq > moveSeq) this.takeMoveState(op);
          continue;
        }
        if (op.t === 'move_out') {
          this.moveRecordSeq = Math.max(this.moveRecordSeq, r.seq);
          if (r.seq > moveSeq) this.takeMoveOut(op.move, op.uid, op.ids);
          continue;
        }
        yield { seq: r.seq, uid: op.uid, op };
        continue;
      }
      const cp = checkpoints.get(r.keyId);
      if (cp === undefined || r.body === null) continue;
      // A record the segments hold may still carry a move's progress that the manifest does not.
      const mayTell = moveMayTell(r.seq);
      if (r.seq <= cp && !mayTell) continue;
      const op = this.decode(r.body, r.seq);
      if (isDbOp(op)) throw new StorageCorruption(this.p(WAL_DIR), 0, `record seq ${r.seq}: a database op under a collection key`);
      if (op.t === 'delete' && op.move !== undefined) this.moveRecordSeq = Math.max(this.moveRecordSeq, r.seq);
      if (mayTell && op.t === 'delete' && op.move !== undefined) this.takeMoveMark(r.keyId, op.move.move, op.move.cursor);
      if (r.seq <= cp) continue;
      yield { seq: r.seq, uid: r.keyId, op };
    }
    this.moveReplayed = true;
  }

  /**
   * The WAL records an open reads (replay): from the lowest collection checkpoint on (`base`), and from
   * just after the manifest's move state when that is lower (only a move's records are taken below
   * `base`). Builds before this one compute the same range, and decode every record in it: a record of
   * a kind they do not know (a batch handed out, `move_out`) refuses their open. They (and this one)
   * decode every retained `db` record at open too (finishInterrupted), from the first retained seq.
   */
  private replayRange(): { base: number; from: number } {
    const cps = this.manifest.collections.map((c) => c.checkpoint_seq);
    const base = cps.length === 0 ? this.wal.firstRetainedSeq : Math.min(...cps) + 1;
    const from = this.manifest.move === undefined ? base : Math.min(base, this.manifest.move.seq + 1);
    return { base, from: Math.max(from, this.wal.firstRetainedSeq) };
  }

  /**
   * At a clean close (Database.close, once every collection's changes are in its segments and nothing
   * is being written): when a retained WAL file may hold a move's record (`move_state`, `move_out`, a
   * move's commit), the WAL rolls to a new file, every collection's checkpoint and the manifest's move
   * state move to the WAL's last seq, and truncation deletes every file before the new one; the move's
   * state stays whole in the manifest. An open reads every retained `db` record (finishInterrupted), not
   * only the replay range, so this is what lets a build older than `move_out` (or than moves) open the
   * directory (docs/deployment.md, Upgrades and downgrades). True once no retained file holds a record
   * at or below the last seq (the WAL is one file with no record). False, changing nothing, when no
   * retained file may hold a move's record (a node that never had a move), before replay, or when a
   * collection has a record past `applied` (by collection uid, the last seq applied to it in memory) or
   * one still being appended; false too, logged, when a replication reader's retention hold keeps an
   * older file (the checkpoints have moved; a later clean close with no follower connected finishes).
   */
  sealMoveRecords(applied: ReadonlyMap<string, number>): Promise<boolean> {
    return this.serial(async () => {
      if (!this.moveReplayed) return false;
      // Every move record past the manifest's move state was read by replay or written since (moveRecordSeq);
      // those at or below it may be in any retained file.
      const first = this.wal.firstRetainedSeq;
      const mv = this.manifest.move;
      if (this.moveRecordSeq < first && (mv === undefined || mv.seq < first)) return false;
      for (const c of this.manifest.collections) {
        const a = this.appended.get(c.uid);
        if (a !== undefined && (a.pending > 0 || a.seq > (applied.get(c.uid) ?? -1))) return false;
      }
      // The manifest never names a seq the WAL might lose (checkpoint() does the same); roll() fsyncs too.
      await this.wal.sync();
      // The active file is never deleted: a new one is started, so the file holding the move's records is not.
      await this.wal.roll();
      const last = this.wal.lastSeq;
      await this.saveManifest({
        ...this.manifest,
        collections: this.manifest.collections.map((c) => ({ ...c, checkpoint_seq: Math.max(c.checkpoint_seq, last) })),
      });
      await this.truncateWal();
      if (this.wal.firstRetainedSeq <= last) {
        this.opts.log('storage: a replication reader holds WAL files that may hold a move\'s records; a build older than the move cannot open this directory until a clean close with the followers caught up or disconnected', {
          first_retained_seq: this.wal.firstRetainedSeq, last_seq: last,
        });
        return false;
      }
      return true;
    });
  }

  /** Records the seq of a collection's record once its append resolves (sealMoveRecords). */
  private tracked(uid: string, append: Promise<number>): Promise<number> {
    const a = this.appended.get(uid) ?? { seq: 0, pending: 0 };
    this.appended.set(uid, a);
    a.pending++;
    return append.then(
      (seq) => {
        a.pending--;
        a.seq = Math.max(a.seq, seq);
        return seq;
      },
      (e: unknown) => {
        a.pending--;
        throw e;
      },
    );
  }

  /**
   * `origin`: a follower keeps its leader's uid (16 hex digits) and the leader's seq of the create;
   * otherwise a fresh random uid, and this node's own seq.
   */
  createCollection(name: string, params: object, origin?: { uid: string; seq: number }): Promise<{ uid: string; seq: number; createdSeq: number }> {
    const givenUid = origin?.uid;
    return this.serial(async () => {
      if (this.manifest.collections.some((c) => c.name === name)) throw new SvcError('already_exists', `collection '${name}' already exists`);
      if (givenUid !== undefined && !UID_RE.test(givenUid)) throw invalidArgument('a collection uid is 16 hex digits');
      if (givenUid !== undefined && this.manifest.collections.some((c) => c.uid === givenUid)) {
        throw new SvcError('already_exists', `a collection with uid ${givenUid} already exists`);
      }
      const uid = givenUid ?? randomBytes(8).toString('hex');
      const op = { t: 'create_collection' as const, uid, name, params, ...(origin !== undefined ? { origin_seq: origin.seq } : {}) };
      const seq = await this.wal.append('db', encodeOp(op));
      const createdSeq = origin?.seq ?? seq;
      await this.saveManifest({ ...this.manifest, collections: [...this.manifest.collections, this.newEntry(uid, name, params, seq, createdSeq)] });
      return { uid, seq, createdSeq };
    });
  }

  /** Drop record, then a manifest without the wrapped key (crypto-shredding), then the files. */
  dropCollection(uid: string): Promise<number> {
    return this.serial(async () => {
      this.entry(uid);
      const seq = await this.wal.append('db', encodeOp({ t: 'drop_collection', uid }));
      await this.saveManifest({ ...this.manifest, collections: this.manifest.collections.filter((c) => c.uid !== uid) });
      await this.fs.rmdir(this.p(COLLECTIONS_DIR, uid));
      await this.fs.fsyncDir(this.p(COLLECTIONS_DIR));
      this.graphBytes.delete(uid);
      await this.truncateWal();
      return seq;
    });
  }

  /**
   * A follower's applied position, durable behind the records it covers (the WAL is a prefix after any
   * crash, so a position that survived means every record before it did). Replay and the manifest
   * (saved at every checkpoint) give it back at open.
   */
  async appendReplicaPosition(leaderSeq: number, opts: { sync?: boolean } = {}): Promise<void> {
    if (this.closed) throw new SvcError('not_ready', 'the data directory is closed');
    const seq = await this.wal.append('db', encodeOp({ t: 'replica_position', leader_seq: leaderSeq }), opts);
    this.replicaPosition = leaderSeq;
    this.positionSeq = seq;
  }

  /**
   * Every WAL record appended before the call is durable once it resolves (unsynced appends:
   * `append(..., { sync: false })`).
   */
  sync(): Promise<void> {
    if (this.closed) return Promise.reject(new SvcError('not_ready', 'the data directory is closed'));
    return this.wal.sync();
  }

  /**
   * A follower's leader history and position in it, at once: `history` '' when a bootstrap begins (no
   * position holds until the next origin), the leader's history id when one ends.
   */
  async appendReplicaOrigin(history: string, leaderSeq: number): Promise<void> {
    if (this.closed) throw new SvcError('not_ready', 'the data directory is closed');
    const seq = await this.wal.append('db', encodeOp({ t: 'replica_origin', history, leader_seq: leaderSeq }));
    this.replicaHistory = history;
    this.replicaPosition = leaderSeq;
    this.positionSeq = seq;
  }

  /**
   * The follower's applied leader seq after open and replay (read it once replay() is done), with the
   * leader history it counts in; null when no position holds (on a leader, during a bootstrap, or one
   * written before histories were kept).
   */
  get replicaSeq(): { history: string; seq: number } | null {
    if (this.replicaHistory === null || this.replicaHistory === '' || this.replicaPosition === null) return null;
    return { history: this.replicaHistory, seq: this.replicaPosition };
  }

  /** This node's rebalance move as a source, with its cursors; null when it never was one. */
  get move(): Readonly<MoveProgress> | null {
    return this.moveProgress;
  }

  /**
   * A move started (a new id: its cursors start empty) or finished, durable before it is taken. In
   * `serial`, so a manifest save never misses a move record below the seq it notes.
   */
  appendMoveState(state: MoveStateRecord): Promise<number> {
    return this.serial(async () => {
      const seq = await this.wal.append('db', encodeOp({ t: 'move_state', ...state }));
      this.moveRecordSeq = Math.max(this.moveRecordSeq, seq);
      this.takeMoveState(state);
      return seq;
    });
  }

  /**
   * A batch handed out from collection `uid` (its ids may reach their new owners), durable before it is
   * answered. In `serial` like appendMoveState.
   */
  appendMoveOut(move: string, uid: string, ids: string[]): Promise<number> {
    return this.serial(async () => {
      const seq = await this.wal.append('db', encodeOp({ t: 'move_out', move, uid, ids }));
      this.moveRecordSeq = Math.max(this.moveRecordSeq, seq);
      this.takeMoveOut(move, uid, ids);
      return seq;
    });
  }

  /**
   * A move batch's commit: the delete of its ids and the collection's new cursor, in one record (so a
   * crash keeps both or neither). In `serial` like appendMoveState.
   */
  appendMoveCommit(uid: string, op: Extract<Op, { t: 'delete' }>): Promise<number> {
    assert(op.move !== undefined, 'a move commit carries its mark');
    const mark = op.move;
    return this.serial(async () => {
      if (!this.sealers.has(uid)) throw new SvcError('not_found', `no collection with uid ${uid}`);
      const seq = await this.tracked(uid, this.wal.append(uid, encodeOp(op)));
      this.moveRecordSeq = Math.max(this.moveRecordSeq, seq);
      this.takeMoveMark(uid, mark.move, mark.cursor);
      return seq;
    });
  }

  private takeMoveState(s: MoveStateRecord): void {
    const same = this.moveProgress?.move === s.move;
    this.moveProgress = {
      move: s.move, self: s.self, targets: [...s.targets], finished: s.finished, cursors: same ? this.moveProgress!.cursors : new Map(),
      // A finished move hands nothing out again: no batch will name them.
      out: same && !s.finished ? this.moveProgress!.out : new Map(),
    };
  }

  private takeMoveOut(move: string, uid: string, ids: readonly string[]): void {
    const mv = this.moveProgress;
    if (mv?.move !== move || mv.finished) return;
    const set = mv.out.get(uid) ?? new Set<string>();
    for (const id of ids) set.add(id);
    mv.out.set(uid, set);
  }

  private takeMoveMark(uid: string, move: string, cursor: string): void {
    // A mark of another move (an older one, or one replicated from a leader) tells nothing here.
    if (this.moveProgress?.move !== move) return;
    this.moveProgress.cursors.set(uid, cursor);
    // Those up to the cursor were carried by the batch (gone from here now) or named gone in it.
    const out = this.moveProgress.out.get(uid);
    if (out === undefined) return;
    for (const id of out) if (id <= cursor) out.delete(id);
    if (out.size === 0) this.moveProgress.out.delete(uid);
  }

  /** This directory's own log history (what its followers' positions count in). */
  get history(): string {
    return this.manifest.history!;
  }

  /**
   * Durable (group-committed with concurrent appends) before it resolves; returns the record's seq.
   * `encoded`: `op` already encoded (a follower's record as its leader sent it), written as it is.
   * `sync: false`: written, not fsynced (Wal.append): a record of a snapshot a consensus member restores,
   * made durable by the restore's end (a member applies its committed point commands to memory only).
   */
  append(uid: string, op: Op, encoded?: Uint8Array, opts: { sync?: boolean } = {}): Promise<number> {
    if (!this.sealers.has(uid)) return Promise.reject(new SvcError('not_found', `no collection with uid ${uid}`));
    return this.tracked(uid, this.wal.append(uid, encoded ?? encodeOp(op), opts));
  }

  /**
   * Writes `ops` as a new segment (a delta, or with replaceAll the whole state), then the manifest with
   * the new segment list and checkpoint seq, then deletes unlisted segments and unneeded WAL files.
   */
  checkpoint(uid: string, ops: AsyncIterable<Op> | Iterable<Op>, uptoSeq: number, options: { replaceAll: boolean }): Promise<void> {
    return this.serial(async () => {
      // The manifest never names a seq the WAL might lose (an unsynced record): after a power loss the
      // WAL would reuse it for another record, which replay would then skip as checkpointed.
      await this.wal.sync();
      const c = this.entry(uid);
      assert(uptoSeq >= c.checkpoint_seq && uptoSeq <= this.wal.lastSeq, `checkpoint seq ${uptoSeq} within [${c.checkpoint_seq}, ${this.wal.lastSeq}]`);
      const dir = this.p(COLLECTIONS_DIR, uid);
      await mkdirDurable(this.fs, dir);
      const id = c.next_segment_id;
      const writer = await SegmentWriter.create(this.fs, joinPath(dir, segName(id)), this.sealers.get(uid)!, uid, id);
      let info;
      try {
        for await (const op of ops) await writer.add(op);
        info = await writer.finish();
      } catch (e) {
        await writer.abort();
        throw e;
      }
      const seg = info.records > 0 ? [{ id, bytes: info.bytes, records: info.records }] : [];
      const next: CollectionEntry = {
        ...c, segments: options.replaceAll ? seg : [...c.segments, ...seg], next_segment_id: id + 1, checkpoint_seq: uptoSeq,
      };
      await this.saveManifest({ ...this.manifest, collections: this.manifest.collections.map((x) => (x.uid === uid ? next : x)) });
      // The graph file stays, and so does its temp file: a graph write may be under way (writeGraph).
      const listed = new Set([...next.segments.map((s) => segName(s.id)), GRAPH_FILE, GRAPH_TMP]);
      let removed = false;
      for (const f of await this.fs.readdir(dir)) {
        if (!listed.has(f)) {
          await this.fs.unlink(joinPath(dir, f));
          removed = true;
        }
      }
      if (removed) await this.fs.fsyncDir(dir);
      await this.truncateWal();
    });
  }

  /**
   * Moves the checkpoints of collections whose segments already hold every record of theirs through
   * `seq` up to it, with one manifest save and no segment (the caller vouches for that: nothing of theirs
   * was unapplied or unsegmented when it read `seq`). A checkpoint never moves back; a collection dropped
   * meanwhile is skipped. Then the WAL files no checkpoint needs any more go.
   */
  advanceCheckpoints(uids: readonly string[], seq: number): Promise<void> {
    return this.serial(async () => {
      // As checkpoint(): the manifest never names a seq the WAL might lose.
      await this.wal.sync();
      assert(seq <= this.wal.lastSeq, `checkpoint seq ${seq} past the WAL's last ${this.wal.lastSeq}`);
      const move = new Set(uids);
      let moved = false;
      const collections = this.manifest.collections.map((c) => {
        if (!move.has(c.uid) || c.checkpoint_seq >= seq) return c;
        moved = true;
        return { ...c, checkpoint_seq: seq };
      });
      if (!moved) return;
      await this.saveManifest({ ...this.manifest, collections });
      await this.truncateWal();
    });
  }

  /**
   * A writer of the collection's graph file (graph-file.ts): written to a temp file beside the segments
   * outside `serial` (a checkpoint meanwhile keeps it), then renamed into place in `serial` if the
   * collection is still here (a drop meanwhile removed the directory, temp file included).
   */
  graphWriter(uid: string): Promise<GraphFileWriter> {
    return this.serial(async () => {
      this.entry(uid);
      const dir = this.p(COLLECTIONS_DIR, uid);
      await mkdirDurable(this.fs, dir);
      const commit = () => this.serial(async () => {
        this.entry(uid);
        await this.fs.rename(joinPath(dir, GRAPH_TMP), joinPath(dir, GRAPH_FILE));
        await this.fs.fsyncDir(dir);
        this.graphBytes.set(uid, (await this.fs.stat(joinPath(dir, GRAPH_FILE)))?.size ?? 0);
      });
      return GraphFileWriter.create(this.fs, joinPath(dir, GRAPH_TMP), this.sealers.get(uid)!, uid, commit);
    });
  }

  /** The collection's graph file, or null when it has none; throws StorageCorruption when it is damaged. */
  async readGraph(uid: string): Promise<GraphContents | null> {
    this.entry(uid);
    return readGraphFile(this.fs, this.p(COLLECTIONS_DIR, uid, GRAPH_FILE), this.sealers.get(uid)!, uid);
  }

  /** Deletes the WAL files every checkpoint is past, but for those a replication reader holds (within its bound). */
  private async truncateWal(): Promise<void> {
    const cps = this.manifest.collections.map((c) => c.checkpoint_seq);
    const upto = cps.length === 0 ? this.wal.lastSeq : Math.min(...cps);
    await this.wal.truncateBefore(upto + 1);
  }

  /**
   * A consistent copy that is itself a data directory (same master key). `target` is created here, new:
   * an entry already there (a directory, a file, a symbolic link, dangling or not) is refused, never
   * followed or written into.
   */
  snapshot(target: string): Promise<{ manifest_version: number; disk_bytes: number }> {
    return this.serial(async () => {
      try {
        await mkdirDurable(this.fs, dirName(target));
        await this.fs.mkdir(target, { exclusive: true });
      } catch (e) {
        const code = (e as NodeJS.ErrnoException).code;
        if (code === 'EEXIST' && (await this.fs.stat(dirName(target)))?.isDirectory === true) {
          throw new SvcError('already_exists', 'a snapshot of that name (or another entry of that name) already exists');
        }
        if (code === 'EEXIST' || code === 'ENOTDIR' || code === 'ENOENT') throw invalidArgument('the snapshot root is not a directory');
        throw e;
      }
      await this.fs.fsyncDir(dirName(target));
      // Captured now: the manifest and WAL prefix agree; segments are immutable; no checkpoint runs meanwhile.
      const walFiles = this.wal.retainedFiles();
      await mkdirDurable(this.fs, joinPath(target, WAL_DIR));
      await mkdirDurable(this.fs, joinPath(target, COLLECTIONS_DIR));
      let bytes = 0;
      for (const c of this.manifest.collections) {
        await mkdirDurable(this.fs, joinPath(target, COLLECTIONS_DIR, c.uid));
        for (const s of c.segments) {
          bytes += await this.copy(this.p(COLLECTIONS_DIR, c.uid, segName(s.id)), joinPath(target, COLLECTIONS_DIR, c.uid, segName(s.id)), s.bytes);
        }
        // The graph too (a rename of a new one waits in `serial`): a directory restored from the copy
        // reads it back onto the points it recovers rather than rebuilding.
        const graph = this.graphBytes.get(c.uid);
        if (graph !== undefined) bytes += await this.copy(this.p(COLLECTIONS_DIR, c.uid, GRAPH_FILE), joinPath(target, COLLECTIONS_DIR, c.uid, GRAPH_FILE), graph);
        await this.fs.fsyncDir(joinPath(target, COLLECTIONS_DIR, c.uid));
      }
      for (const f of walFiles) bytes += await this.copy(f.path, joinPath(target, WAL_DIR, f.name), f.bytes);
      await this.fs.fsyncDir(joinPath(target, WAL_DIR));
      // The copy starts its own history: a directory restored from it writes seqs on from here that the
      // original's followers must not take for the original's.
      bytes += await saveManifest(this.fs, joinPath(target, MANIFEST), this.manifestSealer, { ...this.manifest, history: newHistoryId() });
      await this.fs.fsyncDir(target);
      bytes += await this.copy(this.p(META), joinPath(target, META), this.metaBytes);
      await this.fs.fsyncDir(target);
      return { manifest_version: this.manifest.manifest_version, disk_bytes: bytes };
    });
  }

  private async copy(from: string, to: string, bytes: number): Promise<number> {
    const src = await this.fs.open(from, 'read');
    const tmp = `${to}.tmp`;
    const dst = await this.fs.open(tmp, 'create');
    try {
      for (let at = 0; at < bytes; at += COPY_CHUNK_BYTES) {
        const chunk = await src.read(at, Math.min(COPY_CHUNK_BYTES, bytes - at));
        if (chunk.length === 0) throw new StorageCorruption(from, at, 'file shorter than recorded');
        await dst.write(chunk, at);
      }
      await dst.sync();
    } finally {
      await src.close();
      await dst.close();
    }
    await this.fs.rename(tmp, to);
    await this.fs.fsyncDir(dirName(to));
    return bytes;
  }

  stats(): { manifest_version: number; disk_bytes: number } {
    const segs = this.manifest.collections.reduce((s, c) => s + c.segments.reduce((t, x) => t + x.bytes, 0), 0);
    let graphs = 0;
    for (const b of this.graphBytes.values()) graphs += b;
    return { manifest_version: this.manifest.manifest_version, disk_bytes: this.metaBytes + this.manifestBytes + segs + graphs + this.wal.diskBytes };
  }

  get lastSeq(): number {
    return this.wal.lastSeq;
  }

  /** The first seq of the WAL file being appended to (Wal.activeFirstSeq). */
  get walActiveFirstSeq(): number {
    return this.wal.activeFirstSeq;
  }

  /** The seq through which the collection's segments hold its records (its manifest entry). */
  checkpointSeqOf(uid: string): number {
    return this.entry(uid).checkpoint_seq;
  }

  /** The commit log, read-only, for replication: `readFrom(seq)` from any retained seq, `waitFor`, `hold`. */
  get log(): CommitLog {
    return this.wal;
  }

  async close(): Promise<void> {
    if (this.closed) return;
    await this.chain;
    this.closed = true;
    try {
      await this.wal.close();
    } finally {
      await this.lock?.release();
    }
  }
}
