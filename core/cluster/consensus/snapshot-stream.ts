import { randomBytes } from 'node:crypto';
import type { NodeId, SnapshotMessage } from '../raft/index.js';

/**
 * A database image streamed to a member too far behind the leader's log (issue 17), in chunks, outside
 * Raft's messages: no image is ever held whole in memory or put in one frame, whatever the shard's size.
 *
 * - The leader's Raft asks its storage for a snapshot and gets a **request** (the data is STREAM_REQUEST;
 *   the meta is the leader's applied index and its term): nothing is built yet.
 * - Its `snap` message to a member goes to SnapshotStreams instead of the wire. That starts a stream to
 *   the member (one at a time per member; a second ask while one runs is dropped, and Raft asks again
 *   later if it must): the image's bytes are read from the database as they are sent, in chunks of at
 *   most CHUNK_BYTES, with at most WINDOW_CHUNKS not yet acknowledged (the member acknowledges a chunk
 *   once it is in its file). After the last acknowledgement the `snap` message itself goes, its data the
 *   stream's **token** (the stream id and chunk count).
 * - The member (SnapshotInbox) writes the chunks to a file (sealed: core/storage/sealed-chunks.ts),
 *   syncs it at the last, and hands Raft the `snap` message with a **reference** to the complete file
 *   as its data; a `snap` naming a stream it does not hold whole is dropped. Raft persists the snapshot
 *   (the reference, a few bytes) before the host restores the database from the file.
 *
 * The image is fuzzy, as a read replica's bootstrap is (core/collection/replication.ts): writes go on
 * while it is read, so it holds every write through the meta index and some after it. The member then
 * applies the log from the meta index on; each command is a whole-point upsert, a delete, a create or
 * drop by uid, or a payload update setting or removing whole values, so applying one the image already
 * reflects converges to the leader's state (docs/consensus.md, Snapshots).
 *
 *   request:  'svc-srq1'
 *   token:    'svc-stm1' | stream id (16 bytes) | chunks u32 LE
 *   ref:      'svc-ref1' | stream id (16 bytes) | chunks u32 LE     (the file's name comes from the id)
 *   chunk frame: stream id (16) | seq u32 LE | last u8 | bytes
 *   ack frame:   stream id (16) | seq u32 LE               (every chunk through seq is written)
 *
 * That is stream version 1 (SNAPSHOT_STREAM_VERSIONS), the only one so far. Members advertise the highest
 * they read (core/cluster/consensus/versions.ts), and a leader streams to a member only in a version it
 * reads, and only an image whose records (commands, command.ts) it reads: a move's state and batches are
 * versions 2 and 3. With none in common the stream is not started: counted (`refused`) and logged once
 * per member and reason, and Raft's next probe asks again (the member may have been upgraded meanwhile).
 */

export const CHUNK_BYTES = 1 << 20;
export const WINDOW_CHUNKS = 8;
/** A member that acknowledges nothing for this long has gone (or its disk has): the stream ends. */
export const ACK_TIMEOUT_MS = 30_000;

const REQUEST = Buffer.from('svc-srq1', 'latin1');
const TOKEN = Buffer.from('svc-stm1', 'latin1');
const REF = Buffer.from('svc-ref1', 'latin1');
const ID_BYTES = 16;
const MAGIC_BYTES = 8;

export const STREAM_REQUEST: Uint8Array = REQUEST;

/** The stream versions this build writes and reads, lowest first; the last is what it advertises. */
export const SNAPSHOT_STREAM_VERSIONS: readonly number[] = Object.freeze([1]);
export const SNAPSHOT_STREAM_VERSION = SNAPSHOT_STREAM_VERSIONS[SNAPSHOT_STREAM_VERSIONS.length - 1];

/** The highest stream version both this build and a member reading up to `peerMax` read; null when none. */
export function streamVersionFor(peerMax: number): number | null {
  let v: number | null = null;
  for (const x of SNAPSHOT_STREAM_VERSIONS) if (x <= peerMax) v = x;
  return v;
}

export interface StreamRef {
  /** 32 hex digits. */
  readonly id: string;
  readonly chunks: number;
}

const startsWith = (data: Uint8Array, magic: Buffer): boolean =>
  data.length >= MAGIC_BYTES && Buffer.from(data.buffer, data.byteOffset, MAGIC_BYTES).equals(magic);

export function isStreamRequest(data: Uint8Array): boolean {
  return data.length === MAGIC_BYTES && startsWith(data, REQUEST);
}

function encodeRef(magic: Buffer, r: StreamRef): Uint8Array {
  const b = Buffer.allocUnsafe(MAGIC_BYTES + ID_BYTES + 4);
  magic.copy(b, 0);
  Buffer.from(r.id, 'hex').copy(b, MAGIC_BYTES);
  b.writeUInt32LE(r.chunks, MAGIC_BYTES + ID_BYTES);
  return b;
}

function decodeRef(magic: Buffer, data: Uint8Array): StreamRef | null {
  if (data.length !== MAGIC_BYTES + ID_BYTES + 4 || !startsWith(data, magic)) return null;
  const b = Buffer.from(data.buffer, data.byteOffset, data.byteLength);
  return { id: b.toString('hex', MAGIC_BYTES, MAGIC_BYTES + ID_BYTES), chunks: b.readUInt32LE(MAGIC_BYTES + ID_BYTES) };
}

export const encodeImageRef = (r: StreamRef): Uint8Array => encodeRef(REF, r);
/** The complete image file a snapshot's data names; null when the data is not such a reference. */
export const decodeImageRef = (data: Uint8Array): StreamRef | null => decodeRef(REF, data);

function encodeChunk(id: Buffer, seq: number, last: boolean, bytes: Uint8Array): Uint8Array {
  const b = Buffer.allocUnsafe(ID_BYTES + 5 + bytes.length);
  id.copy(b, 0);
  b.writeUInt32LE(seq, ID_BYTES);
  b[ID_BYTES + 4] = last ? 1 : 0;
  b.set(bytes, ID_BYTES + 5);
  return b;
}

function decodeChunk(p: Buffer): { id: string; seq: number; last: boolean; bytes: Buffer } | null {
  if (p.length < ID_BYTES + 5 || p[ID_BYTES + 4] > 1) return null;
  return { id: p.toString('hex', 0, ID_BYTES), seq: p.readUInt32LE(ID_BYTES), last: p[ID_BYTES + 4] === 1, bytes: p.subarray(ID_BYTES + 5) };
}

function encodeAck(id: string, seq: number): Uint8Array {
  const b = Buffer.allocUnsafe(ID_BYTES + 4);
  Buffer.from(id, 'hex').copy(b, 0);
  b.writeUInt32LE(seq, ID_BYTES);
  return b;
}

function decodeAck(p: Buffer): { id: string; seq: number } | null {
  if (p.length !== ID_BYTES + 4) return null;
  return { id: p.toString('hex', 0, ID_BYTES), seq: p.readUInt32LE(ID_BYTES) };
}

export interface SnapshotStreamStats {
  /** Streams this member sent whole, and the bytes of image in them. */
  sent: number;
  bytesSent: number;
  /** Streams that ended before their last chunk was acknowledged (peer lost, timeout, an image read failing). */
  failed: number;
  /** Streams this member received whole and handed to Raft. */
  received: number;
  /** Frames or `snap` messages dropped: malformed, out of order, or naming a stream not held whole. */
  dropped: number;
  /** Streams not started: the member reads no stream version, or no command version of the image, this member would send. */
  refused: number;
}

export interface SnapshotStreamsOptions {
  /** The database image's bytes for member `to`, read as they are consumed (Database.consensusImage). */
  image(to: NodeId): AsyncIterable<Uint8Array>;
  /**
   * What a member reads (versions.ts): the highest stream and command versions it advertised (1 and 1
   * when it advertised none); null when it has not been heard from. Absent: every member reads this build's.
   */
  peerVersions?(peer: NodeId): { readonly stream: number; readonly command: number } | null;
  /** The highest command version the image's records take now (a move's state: 2, its batches: 3). */
  imageCommandVersion?(): number;
  /** One chunk frame to a peer now; false when its connection is not up. */
  sendChunk(to: NodeId, payload: Uint8Array): boolean;
  /** The `snap` message, through Raft's usual path, once every chunk is acknowledged. */
  sendSnapshot(m: SnapshotMessage): void;
  /**
   * A member's progress as this leader sees it: the index it holds, and whether it is within the log's
   * usual reach again (replicating, close to the last entry); null when this member does not lead.
   */
  progress?(peer: NodeId): { match: number; caughtUp: boolean; lastIndex: number } | null;
  /** The most entries the log keeps for a member catching up from an image (it is held in memory). */
  holdEntriesMax?: number;
  log?(message: string, detail?: Record<string, unknown>): void;
  ackTimeoutMs?: number;
  now?(): number;
}

/** How long the log is kept for a member that installs an image and catches up from it, at most. */
export const CATCH_UP_HOLD_MS = 60 * 60_000;
/**
 * After a stream to a member completed, Raft's requests for it are dropped this long: a probe rejected
 * just before the member stepped the image's `snap` would otherwise start a second whole stream.
 */
export const RECENT_STREAM_MS = 10_000;

interface OutStream {
  readonly id: Buffer;
  readonly to: NodeId;
  readonly index: number;
  acked: number;
  sent: number;
  readonly stop: AbortController;
  wake: (() => void) | null;
}

/** The leader's side: one stream per member at a time. */
export class SnapshotStreams {
  private readonly out = new Map<NodeId, OutStream>();
  /** Members sent an image whole, not yet caught up: the log after the image's index (or after what they hold since) stays. */
  private readonly catchingUp = new Map<NodeId, { index: number; since: number }>();
  readonly stats: SnapshotStreamStats = { sent: 0, bytesSent: 0, failed: 0, received: 0, dropped: 0, refused: 0 };
  private closed = false;
  /** The last refusal logged for each member: logged again only when the reason changes. */
  private readonly refusalLogged = new Map<NodeId, string>();

  constructor(private readonly o: SnapshotStreamsOptions) {}

  /** Raft's `snap` message carrying a request: starts a stream to its member unless one runs. */
  send(m: SnapshotMessage): void {
    if (this.closed || this.out.has(m.to)) return;
    const h = this.catchingUp.get(m.to);
    if (h !== undefined && (this.o.now ?? Date.now)() - h.since < RECENT_STREAM_MS) return;
    const refusal = this.refusal(m.to);
    if (refusal !== null) {
      this.stats.refused++;
      if (this.refusalLogged.get(m.to) !== refusal) {
        this.refusalLogged.set(m.to, refusal);
        this.o.log?.('consensus: no snapshot stream to a member behind the log: it reads no format this member sends (upgrade it; Raft asks again)', { to: m.to, index: m.snapshot.meta.index, reason: refusal });
      }
      return;
    }
    this.refusalLogged.delete(m.to);
    const s: OutStream = { id: randomBytes(ID_BYTES), to: m.to, index: m.snapshot.meta.index, acked: -1, sent: 0, stop: new AbortController(), wake: null };
    this.out.set(m.to, s);
    void this.run(s, m).then(
      () => undefined,
      (e: unknown) => {
        this.stats.failed++;
        // A member not connected fails at the first chunk, as often as Raft probes it: not worth a line each time.
        if (s.sent > 0) this.o.log?.('consensus: a snapshot stream to a member ended early (Raft sends another)', { to: m.to, index: s.index, chunks: s.sent, error: e instanceof Error ? e.message : String(e) });
      },
    ).finally(() => {
      if (this.out.get(m.to) === s) this.out.delete(m.to);
    });
  }

  /** Why member `to` cannot read an image from this member now, or null when it can. */
  private refusal(to: NodeId): string | null {
    if (this.o.peerVersions === undefined) return null;
    const v = this.o.peerVersions(to);
    if (v === null) return 'not heard from since this member started: its versions are unknown';
    if (streamVersionFor(v.stream) === null) {
      return `it reads snapshot-stream versions up to ${v.stream}; this member sends ${SNAPSHOT_STREAM_VERSIONS.join(', ')}`;
    }
    const needs = this.o.imageCommandVersion?.() ?? 1;
    if (v.command < needs) return `the image holds commands of version ${needs} (a rebalancing move's state); it reads up to ${v.command}`;
    return null;
  }

  /**
   * The lowest index whose successors the log must keep: a running stream's image index, or, for a member
   * that received an image and is catching up from it, what it holds (its restore may take long, and it
   * would need another image if the entries after it were compacted meanwhile, forever under a steady
   * write load). A member's hold ends once it holds more than the image (so it has restored: it answers
   * nothing past the image before) and is within the log's usual reach, when this member stops leading,
   * after CATCH_UP_HOLD_MS, or when it would keep more than holdEntriesMax entries.
   */
  get floor(): number | null {
    let f: number | null = null;
    const lower = (i: number): void => { f = f === null ? i : Math.min(f, i); };
    for (const s of this.out.values()) lower(s.index);
    const now = (this.o.now ?? Date.now)();
    for (const [peer, h] of this.catchingUp) {
      const p = this.o.progress?.(peer) ?? null;
      const keep = Math.max(h.index, p?.match ?? 0);
      const tooMany = p !== null && this.o.holdEntriesMax !== undefined && p.lastIndex - keep > this.o.holdEntriesMax;
      if (p === null || (p.caughtUp && p.match > h.index) || now - h.since > CATCH_UP_HOLD_MS || tooMany) {
        this.catchingUp.delete(peer);
        continue;
      }
      lower(keep);
    }
    return f;
  }

  /** An ack frame from a peer. */
  onAck(from: NodeId, payload: Buffer): void {
    const a = decodeAck(payload);
    const s = this.out.get(from);
    if (a === null || s === undefined || a.id !== s.id.toString('hex')) {
      this.stats.dropped++;
      return;
    }
    if (a.seq > s.acked) s.acked = a.seq;
    s.wake?.();
  }

  /** The connection to a peer broke: its stream cannot go on (chunks may be lost). */
  peerLost(peer: NodeId): void {
    // Its hold stays: a member restoring an image may lose its connection for a moment.
    this.out.get(peer)?.stop.abort(new Error(`the connection to '${peer}' closed`));
  }

  close(): void {
    this.closed = true;
    for (const s of this.out.values()) s.stop.abort(new Error('the member is closing'));
  }

  private async run(s: OutStream, m: SnapshotMessage): Promise<void> {
    const timeoutMs = this.o.ackTimeoutMs ?? ACK_TIMEOUT_MS;
    let bytes = 0;
    /** Waits until fewer than `window` chunks are unacknowledged (through `s.sent - 1`). */
    const waitAcks = async (window: number): Promise<void> => {
      while (s.sent - 1 - s.acked >= window) {
        if (s.stop.signal.aborted) throw s.stop.signal.reason;
        const before = s.acked;
        await new Promise<void>((resolve) => {
          const t = setTimeout(resolve, timeoutMs);
          const done = (): void => { clearTimeout(t); s.wake = null; s.stop.signal.removeEventListener('abort', done); resolve(); };
          s.wake = done;
          s.stop.signal.addEventListener('abort', done, { once: true });
        });
        if (s.stop.signal.aborted) throw s.stop.signal.reason;
        if (s.acked === before) throw new Error(`no acknowledgement from '${s.to}' in ${timeoutMs} ms`);
      }
    };
    const put = async (chunk: Uint8Array, last: boolean): Promise<void> => {
      await waitAcks(WINDOW_CHUNKS);
      // This member stopped leading, or the member holds the image's index already: nothing to send.
      if (this.o.progress !== undefined) {
        const p = this.o.progress(s.to);
        if (p === null) throw new Error('this member stopped leading');
        if (p.match >= s.index) throw new Error(`'${s.to}' holds index ${p.match} already`);
      }
      if (!this.o.sendChunk(s.to, encodeChunk(s.id, s.sent, last, chunk))) throw new Error(`no connection to '${s.to}'`);
      s.sent++;
      bytes += chunk.length;
    };
    // Chunks are cut from the image's byte stream where CHUNK_BYTES falls; the last one is flagged, so
    // one is held back until the next shows it was not the last.
    let held: Uint8Array | null = null;
    let pending: Buffer[] = [];
    let pendingBytes = 0;
    for await (const piece of this.o.image(s.to)) {
      if (s.stop.signal.aborted) throw s.stop.signal.reason;
      let at = 0;
      while (at < piece.length) {
        const take = Math.min(CHUNK_BYTES - pendingBytes, piece.length - at);
        pending.push(Buffer.from(piece.buffer, piece.byteOffset + at, take));
        pendingBytes += take;
        at += take;
        if (pendingBytes === CHUNK_BYTES) {
          if (held !== null) await put(held, false);
          held = Buffer.concat(pending);
          pending = [];
          pendingBytes = 0;
        }
      }
    }
    if (pendingBytes > 0) {
      if (held !== null) await put(held, false);
      held = Buffer.concat(pending);
    }
    await put(held ?? new Uint8Array(0), true);
    await waitAcks(1);
    this.stats.sent++;
    this.stats.bytesSent += bytes;
    this.catchingUp.set(s.to, { index: s.index, since: (this.o.now ?? Date.now)() });
    this.o.sendSnapshot({ ...m, snapshot: { meta: m.snapshot.meta, data: encodeRef(TOKEN, { id: s.id.toString('hex'), chunks: s.sent }) } });
  }
}

/** Where a member writes one incoming stream's chunks (a SealedChunkWriter over a file). */
export interface ChunkSink {
  append(chunk: Uint8Array): Promise<void>;
  /** Durable. */
  finish(): Promise<void>;
  /** Abandoned: closed and removed. */
  abort(): Promise<void>;
}

export interface SnapshotInboxOptions {
  /** A sink for stream `id` (a new file). */
  create(id: string): Promise<ChunkSink>;
  sendAck(to: NodeId, payload: Uint8Array): void;
  log?(message: string, detail?: Record<string, unknown>): void;
  now?(): number;
}

interface InStream {
  readonly id: string;
  readonly from: NodeId;
  /** The next seq expected. */
  next: number;
  done: boolean;
  failed: boolean;
  chain: Promise<ChunkSink | null>;
  /** When its last chunk came. */
  at: number;
}

/** A member's side: at most one incoming stream per peer (a newer one from it replaces the older). */
export class SnapshotInbox {
  private readonly in = new Map<NodeId, InStream>();

  constructor(private readonly o: SnapshotInboxOptions, readonly stats: SnapshotStreamStats) {}

  onChunk(from: NodeId, payload: Buffer): void {
    const c = decodeChunk(payload);
    if (c === null) {
      this.stats.dropped++;
      return;
    }
    let s = this.in.get(from);
    if (c.seq === 0) {
      if (s !== undefined) this.abandon(s);
      s = { id: c.id, from, next: 0, done: false, failed: false, chain: Promise.resolve(null), at: 0 };
      const created = s;
      s.chain = this.o.create(c.id).catch((e: unknown) => {
        created.failed = true;
        if (this.in.get(from) === created) this.in.delete(from);
        this.o.log?.('consensus: an incoming snapshot\'s file could not be made', { from, error: e instanceof Error ? e.message : String(e) });
        return null;
      });
      this.in.set(from, s);
    }
    if (s === undefined || s.id !== c.id || s.next !== c.seq || s.done || s.failed) {
      // Out of order (a chunk lost with a broken connection): this stream cannot complete.
      this.stats.dropped++;
      if (s !== undefined && s.id === c.id && !s.failed) this.abandon(s);
      return;
    }
    s.next++;
    s.at = (this.o.now ?? Date.now)();
    const stream = s;
    const seq = c.seq;
    const bytes = Buffer.from(c.bytes); // the frame's buffer is not ours to keep
    const failed = (e: unknown): null => {
      stream.failed = true;
      if (this.in.get(from) === stream) this.in.delete(from);
      this.o.log?.('consensus: writing an incoming snapshot failed', { from, error: e instanceof Error ? e.message : String(e) });
      return null;
    };
    stream.chain = stream.chain.then(async (sink) => {
      // An abandoned stream's steps pass its sink on untouched, to the abort queued behind them.
      if (sink === null || stream.failed) return sink;
      try {
        await sink.append(bytes);
        if (c.last) {
          await sink.finish();
          stream.done = true;
        }
      } catch (e) {
        await sink.abort().catch(() => undefined);
        return failed(e);
      }
      this.o.sendAck(from, encodeAck(stream.id, seq));
      return sink;
    });
  }

  /**
   * A `snap` message's data, as Raft may take it: a token naming a stream from this peer that is whole
   * and durable becomes a reference to its file; anything else is null (dropped: Raft sends again).
   */
  complete(from: NodeId, data: Uint8Array, index: number): Uint8Array | null {
    const t = decodeRef(TOKEN, data);
    const s = this.in.get(from);
    if (t === null || s === undefined || s.id !== t.id || !s.done || s.next !== t.chunks) {
      this.stats.dropped++;
      return null;
    }
    this.in.delete(from);
    this.stats.received++;
    this.handed.set(t.id, index);
    return encodeImageRef(t);
  }

  /** Streams handed to Raft whole, by id: their image index. Raft may not have persisted their snapshot yet. */
  private readonly handed = new Map<string, number>();

  /**
   * The ids of the streams being received now and of those handed to Raft that a snapshot persisted at
   * `persistedIndex` does not supersede (their files are not stale; the one that snapshot names, the
   * host keeps itself).
   */
  inUse(persistedIndex: number): Set<string> {
    // A stream its leader stopped sending (it died, or lost its leadership) is not in use any more.
    const now = (this.o.now ?? Date.now)();
    for (const s of [...this.in.values()]) if (!s.done && now - s.at > 2 * ACK_TIMEOUT_MS) this.abandon(s);
    for (const [id, index] of [...this.handed]) if (index <= persistedIndex) this.handed.delete(id);
    const ids = new Set([...this.in.values()].map((s) => s.id));
    for (const id of this.handed.keys()) ids.add(id);
    return ids;
  }

  private abandon(s: InStream): void {
    s.failed = true;
    if (this.in.get(s.from) === s) this.in.delete(s.from);
    void s.chain.then((sink) => sink?.abort());
  }
}
