import { invalidArgument, SvcError } from '../base/errors.js';
import type { ReplicationEvent } from '../base/model.js';
import { decodeOp, encodeOp, isReplicaBookkeeping, type AnyOp, type Op } from '../storage/codec.js';
import type { CommitLog, RetentionHold } from '../storage/commit-log.js';
import type { CollectionSpec } from './params.js';

/**
 * The leader's replication stream (spec, "Node role and replication"): a logical snapshot, then the live
 * commit tail read from the WAL.
 *
 * Record layout (ReplicationEvent.record), version 2:
 *   u8 version (2) | u8 kind | u16 LE key-id length | key id (UTF-8: 'db' or a collection uid) | body
 * kinds: 1 snapshot_begin (body: the leader's history id, UTF-8), 2 snapshot (body: a create_collection
 * op, or a batch of a collection's points), 3 snapshot_end, 4 commit (body: the WAL record's op: an
 * upsert, delete, payload update (set_payload), documents upsert, or a create/drop), 5 heartbeat
 * (body: the leader's last durable seq when it was sent, u64 LE). Other bodies are core/storage/codec.ts
 * encodings. begin and end carry the snapshot's base seq in `seq`; snapshot chunks carry 0; commits
 * their own seq; a heartbeat the seq this stream has read its log through (every record up to it is sent
 * or was one a stream does not carry), so a follower that has applied what came before holds all of it.
 *
 * History: a position is a seq in one leader's log, and seqs mean nothing across logs (a leader restored
 * from a snapshot, or replaced by a fresh one, numbers its writes on from its own last seq). So a
 * follower resumes with the leader history id it was sent with its snapshot; a leader whose own history
 * is another answers with a full snapshot, never a tail that would silently diverge.
 *
 * Heartbeats: at the start of the tail and every HEARTBEAT_MS after (between records, or while waiting
 * for one), so a follower knows what the leader holds and how stale it is (svc_replication_lag_seconds);
 * none while the source cannot vouch for being current (ReplicationView.current), whose follower's lag
 * then grows.
 *
 * Consistency: the snapshot is "fuzzy" (writes go on while it is read), so the tail starts right after
 * the seq sampled before reading it. Every op is a whole-point upsert, a delete, a create/drop by uid,
 * or a payload update applied point by point (skipped where the point is absent; `merge` sets the keys
 * it names, `replace` all of them), so applying in seq order an op the snapshot already reflected
 * converges to the leader's state: each payload key ends with the value of the last op in the tail that
 * wrote it, as on the leader. Once a follower has applied the tail past the snapshot's end it matches
 * the leader at that seq.
 *
 * Tail: a caught-up stream waits on the log's `waitFor`, woken by the group commit that made the next
 * record durable. Retention: the stream holds the log from the first seq it still has to send (taken
 * before the snapshot is read, advanced as commits are sent, released when the stream ends), so
 * checkpoints keep those files, up to the log's bound (SVC_REPLICATION_RETAIN_BYTES). A follower that
 * falls further behind loses its hold: its stream ends with `unavailable`, detail reason
 * `retention_exceeded`, and its next Replicate (any after_seq no longer retained) gets a full snapshot.
 */

export const REPLICATION_FORMAT_VERSION = 2;
export const ReplicationKind = { snapshotBegin: 1, snapshot: 2, snapshotEnd: 3, commit: 4, heartbeat: 5 } as const;
/** How often a stream tells its follower the leader's last seq. */
export const HEARTBEAT_MS = 250;
const HISTORY_BYTES_MAX = 64;
export type ReplicationKindName = keyof typeof ReplicationKind;

/** Snapshot chunks stay below this size (a batch of points is split to fit; one point may exceed it). */
export const SNAPSHOT_CHUNK_BYTES_MAX = 1 << 20;
/** What the stream reads from the Database: never a write. */
export interface ReplicationView {
  readonly log: CommitLog;
  /** The leader's own log history (DataDir.history). */
  readonly history: string;
  /** Monotonic time, for heartbeats. */
  monotonicMs(): number;
  /** Resolves after `ms`, or at once when `signal` aborts. */
  sleep(ms: number, signal: AbortSignal): Promise<void>;
  /** The live collections now, each with a check that it is still live (not dropped since). */
  collections(): { uid: string; spec: CollectionSpec; createdSeq: number; captureAll(): Iterable<Op>; live(): boolean }[];
  isClosed(): boolean;
  /**
   * Whether this source can vouch that it is current (absent: always). A consensus member that knows no
   * leader cannot: it sends no heartbeats meanwhile (below).
   */
  current?(): boolean;
}

export function encodeRecord(kind: number, keyId: string, body: Uint8Array = new Uint8Array(0)): Uint8Array {
  const key = Buffer.from(keyId, 'utf8');
  const out = new Uint8Array(4 + key.length + body.length);
  out[0] = REPLICATION_FORMAT_VERSION;
  out[1] = kind;
  out[2] = key.length & 0xff;
  out[3] = key.length >>> 8;
  out.set(key, 4);
  out.set(body, 4 + key.length);
  return out;
}

export interface DecodedRecord {
  kind: ReplicationKindName;
  keyId: string;
  op: AnyOp | null;
  /** snapshotBegin only: the leader's history id. */
  history?: string;
  /** heartbeat only: the leader's last durable seq. */
  leaderSeq?: number;
}

/** The follower's side (and the tests'): refuses an unknown version or kind rather than guessing. */
export function decodeRecord(record: Uint8Array): DecodedRecord {
  if (record.length < 4 || record[0] !== REPLICATION_FORMAT_VERSION) throw invalidArgument('unsupported replication record version');
  const kind = (Object.keys(ReplicationKind) as ReplicationKindName[]).find((k) => ReplicationKind[k] === record[1]);
  if (kind === undefined) throw invalidArgument(`unknown replication record kind ${record[1]}`);
  const keyLen = record[2] | (record[3] << 8);
  if (keyLen === 0 || record.length < 4 + keyLen) throw invalidArgument('a replication record cut short in its key id');
  const keyId = Buffer.from(record.subarray(4, 4 + keyLen)).toString('utf8');
  const body = record.subarray(4 + keyLen);
  if (kind === 'snapshotBegin') {
    if (keyId !== 'db' || body.length === 0 || body.length > HISTORY_BYTES_MAX) throw invalidArgument('a snapshotBegin record carries the db key and a history id');
    const history = Buffer.from(body).toString('utf8');
    if (!/^[0-9a-f]+$/.test(history)) throw invalidArgument('a snapshotBegin history id is lowercase hex');
    return { kind, keyId, op: null, history };
  }
  if (kind === 'heartbeat') {
    if (keyId !== 'db' || body.length !== 8) throw invalidArgument('a heartbeat record carries the db key and a u64 seq');
    const b = Buffer.from(body.buffer, body.byteOffset, body.byteLength);
    const leaderSeq = b.readUInt32LE(4) * 2 ** 32 + b.readUInt32LE(0);
    if (!Number.isSafeInteger(leaderSeq)) throw invalidArgument('a heartbeat seq past 2^53');
    return { kind, keyId, op: null, leaderSeq };
  }
  const bare = kind === 'snapshotEnd';
  if (bare && (keyId !== 'db' || body.length > 0)) throw invalidArgument(`a ${kind} record carries the db key and no body`);
  if (!bare && body.length === 0) throw invalidArgument(`a ${kind} record without a body`);
  const op = body.length === 0 ? null : decodeOp(body);
  // A payload update changes points that exist: it is a collection's commit, never part of a snapshot
  // (which carries whole points) and never a database record.
  if (op?.t === 'set_payload' && (kind !== 'commit' || keyId === 'db')) {
    throw invalidArgument(`a payload update in a ${kind} record of key ${keyId === 'db' ? 'db' : 'a collection'}`);
  }
  return { kind, keyId, op };
}

/**
 * The encoded op of a record decodeRecord accepted (a commit or snapshot chunk), as the leader's WAL holds
 * it: a follower writes these bytes to its own WAL rather than encoding the decoded op again (they
 * decode to the same op; encoding 500 points of 784 floats again was a fifth of a follower's apply).
 */
export function recordOpBytes(record: Uint8Array): Uint8Array {
  return record.subarray(4 + (record[2] | (record[3] << 8)));
}

/** The position a follower asks to resume after, in the history it names; undefined asks for a snapshot. */
function parseResume(body: unknown): { afterSeq: number | undefined; history: string | undefined } {
  const none = { afterSeq: undefined, history: undefined };
  if (body === undefined || body === null) return none;
  if (typeof body !== 'object' || Array.isArray(body)) throw invalidArgument('replicate body must be a JSON object');
  for (const k of Object.keys(body)) if (k !== 'after_seq' && k !== 'history') throw invalidArgument(`replicate body has an unknown field '${k}'`);
  const { after_seq: v, history: h } = body as { after_seq?: unknown; history?: unknown };
  if (v !== undefined && v !== null && (typeof v !== 'number' || !Number.isSafeInteger(v) || v < 0)) throw invalidArgument('after_seq must be a non-negative integer');
  if (h !== undefined && h !== null && (typeof h !== 'string' || h.length > HISTORY_BYTES_MAX)) throw invalidArgument(`history must be a string of at most ${HISTORY_BYTES_MAX} characters`);
  return { afterSeq: typeof v === 'number' ? v : undefined, history: typeof h === 'string' && h !== '' ? h : undefined };
}

/** Splits a batch so that each encoded chunk stays near SNAPSHOT_CHUNK_BYTES_MAX. */
function* chunks(op: Op): Generator<Op> {
  const bytesOf = (floats: number, payload: unknown): number => floats * 4 + 64 + (payload === null ? 0 : JSON.stringify(payload).length);
  // A snapshot holds whole points only; anything else goes as it is.
  if (op.t === 'delete' || op.t === 'set_payload') {
    yield op;
    return;
  }
  const items: unknown[] = op.t === 'upsert' ? op.points : op.docs;
  let start = 0;
  let bytes = 0;
  for (let i = 0; i < items.length; i++) {
    const it = items[i] as { vector?: Float32Array; vectors?: Float32Array; payload: unknown };
    const b = bytesOf((it.vector ?? it.vectors!).length, it.payload);
    if (i > start && bytes + b > SNAPSHOT_CHUNK_BYTES_MAX) {
      yield slice(op, start, i);
      start = i;
      bytes = 0;
    }
    bytes += b;
  }
  if (start < items.length) yield slice(op, start, items.length);
}

function slice(op: Op, from: number, to: number): Op {
  if (op.t === 'upsert') return { t: 'upsert', points: op.points.slice(from, to) };
  if (op.t === 'upsert_docs') return { t: 'upsert_docs', docs: op.docs.slice(from, to) };
  return op;
}

/** The stream's error once its hold is lost: the follower must re-bootstrap. */
function fellBehind(hold: RetentionHold): SvcError {
  const lost = hold.lost!;
  return new SvcError('unavailable', `replication stream ended: ${lost.message}`, { ...lost.detail });
}

/**
 * The stream: a snapshot unless `after_seq` is given and still retained, then every commit after it, as
 * it becomes durable, until `signal` aborts or the database closes. Memory is bounded by one chunk (the
 * WAL is read from disk; the consumer's backpressure paces the producer).
 */
export async function* replicationStream(view: ReplicationView, body: unknown, signal?: AbortSignal): AsyncGenerator<ReplicationEvent> {
  const { afterSeq: asked, history } = parseResume(body);
  const log = view.log;
  // Aborted by the caller's signal, or when truncation takes the records this stream still needs.
  const stop = new AbortController();
  const onAbort = (): void => stop.abort();
  if (signal?.aborted) stop.abort();
  else signal?.addEventListener('abort', onAbort, { once: true });
  let hold: RetentionHold | undefined;
  try {
    // A position counts only in the history it was made in: from another log (a restored or replaced
    // leader), or with none named, the follower gets a snapshot.
    const resume = asked !== undefined && history === view.history && asked + 1 >= log.firstRetainedSeq && asked <= log.lastSeq;
    // Taken before anything is read (no await in between): the records after the base stay on disk.
    hold = log.hold((resume ? asked : log.lastSeq) + 1, () => stop.abort());
    yield* streamFrom(view, resume ? asked : undefined, hold, stop.signal);
    if (hold.lost !== null) throw fellBehind(hold);
  } catch (e) {
    // A read of a file deleted under the stream: the hold's reason, not ENOENT.
    if (hold?.lost != null) throw fellBehind(hold);
    throw e;
  } finally {
    hold?.release();
    signal?.removeEventListener('abort', onAbort);
  }
}

async function* streamFrom(view: ReplicationView, resumeAfter: number | undefined, hold: RetentionHold, signal: AbortSignal): AsyncGenerator<ReplicationEvent> {
  const log = view.log;
  let after: number;
  // Collections the follower has been told about on this stream (by the snapshot, or a create in the tail).
  const announced = new Set<string>();
  if (resumeAfter !== undefined) {
    after = resumeAfter;
  } else {
    const base = hold.floorSeq - 1;
    // Writes durable up to `base` are applied to memory by their continuations: let those run first.
    await new Promise<void>((r) => setImmediate(r));
    yield { seq: base, record: encodeRecord(ReplicationKind.snapshotBegin, 'db', Buffer.from(view.history, 'utf8')) };
    for (const c of view.collections()) {
      if (signal.aborted || view.isClosed()) return;
      if (!c.live()) continue; // dropped meanwhile: its drop record comes in the tail
      announced.add(c.uid);
      yield { seq: c.createdSeq, record: encodeRecord(ReplicationKind.snapshot, 'db', encodeOp({ t: 'create_collection', uid: c.uid, name: c.spec.name, params: c.spec })) };
      const it = c.captureAll()[Symbol.iterator]();
      for (;;) {
        // Checked before every step: a dropped collection's memory is gone.
        if (signal.aborted || view.isClosed()) return;
        if (!c.live()) break;
        const next = it.next();
        if (next.done) break;
        for (const part of chunks(next.value)) yield { seq: 0, record: encodeRecord(ReplicationKind.snapshot, c.uid, encodeOp(part)) };
      }
    }
    if (signal.aborted || view.isClosed()) return;
    yield { seq: base, record: encodeRecord(ReplicationKind.snapshotEnd, 'db') };
    after = base;
  }
  let next = after + 1;
  let beatAt = view.monotonicMs();
  const beat = (): ReplicationEvent | null => {
    beatAt = view.monotonicMs();
    // A source that cannot vouch for being current (a consensus member that knows no leader: cut off
    // from its group) sends none, so that its replica's lag grows and a router stops reading it.
    if (view.current?.() === false) return null;
    const last = Buffer.alloc(8);
    last.writeUInt32LE(log.lastSeq % 2 ** 32, 0);
    last.writeUInt32LE(Math.floor(log.lastSeq / 2 ** 32), 4);
    return { seq: next - 1, record: encodeRecord(ReplicationKind.heartbeat, 'db', last) };
  };
  if (signal.aborted || view.isClosed()) return;
  let b = beat();
  if (b !== null) yield b;
  while (!signal.aborted && !view.isClosed()) {
    if (log.lastSeq < next) {
      // Woken by the next commit, or by the heartbeat's timer: a caught-up follower still hears from us.
      const wait = new AbortController();
      const stopWait = (): void => wait.abort();
      signal.addEventListener('abort', stopWait, { once: true });
      void view.sleep(Math.max(1, HEARTBEAT_MS - (view.monotonicMs() - beatAt)), wait.signal).then(stopWait);
      try {
        await log.waitFor(next, wait.signal);
      } finally {
        wait.abort();
        signal.removeEventListener('abort', stopWait);
      }
      if (log.lastSeq < next && !signal.aborted && view.monotonicMs() - beatAt >= HEARTBEAT_MS && (b = beat()) !== null) yield b;
      continue;
    }
    // readFrom stops at the last durable seq at the time of the call; loop for the rest.
    for await (const r of log.readFrom(next)) {
      if (signal.aborted) return;
      if (view.monotonicMs() - beatAt >= HEARTBEAT_MS && (b = beat()) !== null) yield b;
      next = r.seq + 1;
      if (r.body === null) continue; // a dropped collection's record: its key is destroyed
      if (r.keyId === 'db') {
        const op = decodeOp(r.body);
        // A follower's own bookkeeping, in its log when it serves a stream in turn: not the leader's data.
        if (isReplicaBookkeeping(op)) continue;
        if (op.t === 'create_collection') announced.add(op.uid);
      } else if (!announced.has(r.keyId)) {
        // A collection whose create record this stream did not send: announce it before its first write.
        // After a snapshot, its create was durable before the base but not yet in memory when the
        // snapshot listed collections. On a resume too: the follower's position may be past the base of
        // its snapshot while the announcement made in that stream's tail never reached it (cut, or lost
        // with a crash before it was durable there). A follower takes an announcement it knows as a no-op.
        const c = view.collections().find((x) => x.uid === r.keyId);
        if (c === undefined) continue; // dropped since: its drop record follows
        announced.add(c.uid);
        yield { seq: c.createdSeq, record: encodeRecord(ReplicationKind.snapshot, 'db', encodeOp({ t: 'create_collection', uid: c.uid, name: c.spec.name, params: c.spec })) };
      }
      yield { seq: r.seq, record: encodeRecord(ReplicationKind.commit, r.keyId, r.body) };
      // Sent and taken by the consumer: the log may drop what is before it.
      hold.advance(next);
    }
    hold.advance(next);
  }
}
