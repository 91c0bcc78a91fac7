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
 *   probe frame (version 2): stream id (16) | seq u32 LE | 2 u8   (a chunk frame's shape, no bytes)
 *
 * Version 1 is the above less the probe: any break (a connection lost, ACK_TIMEOUT_MS without an
 * acknowledgement) ends the stream, and Raft's next probe starts another from chunk 0.
 *
 * Version 2 resumes a stream whose connection broke, within the leader process that began it (the image
 * is read from its live database as it is sent: no other process can go on with that read). Frames keep
 * their bytes and meaning; what is new is a probe, and what each side does around it:
 * - The leader keeps the chunks sent and not yet acknowledged (at most WINDOW_CHUNKS: no more than are
 *   in flight anyway). When its connection to the member breaks, the stream is kept, its reader paused,
 *   for at most RESUME_KEEP_MS; every PROBE_MS it sends a probe (once its connection is up again) until
 *   an acknowledgement comes. It then sends again the kept chunks after the highest one acknowledged,
 *   and reads on. A probe goes too when the member has acknowledged nothing for PROBE_MS with the
 *   connection up (its acknowledgements ride its own connection to the leader, which may have broken).
 * - The member answers a probe for the stream it is receiving from that peer, after every chunk it took
 *   before it is written, with an ack of the last chunk written; for any other stream (one it let go or
 *   whose file failed) with an ack of seq 0xffffffff: nothing held, and the leader ends the stream (Raft's
 *   next probe starts another). A chunk of its stream it took already (sent again) is not written twice:
 *   it acknowledges where it is instead.
 * - A member restarted mid-stream keeps the partial files it finds at start (KeptImages) for at most
 *   KEPT_IMAGE_MS. A probe naming one of them reopens it (its whole chunks verified, a torn or garbled
 *   tail cut, synced) as the stream being received, and is answered with an ack of its last whole chunk.
 *   A leader that no longer keeps the chunks after it (the member lost chunks it had acknowledged: a
 *   power loss, chunks not being synced one by one) ends the stream, and Raft's next probe starts another.
 * - Safety: a stream id is one fuzzy read; a member writes a stream's chunks to that id's file only in
 *   order, each once, and creates the file only at seq 0 of an id it is not receiving; the token names
 *   the id and the count. So a file handed to Raft holds every chunk of exactly one read.
 * Chunks are not synced one by one (SealedChunkWriter syncs at the end): what a restarted member holds
 * may be less than it acknowledged, never more than it was sent.
 *
 * A version-1 member drops a probe as malformed and would refuse a chunk sent twice, so a leader resumes
 * only streams in version 2, to a member advertising 2; to a version-1 member it streams as version 1
 * does (a break ends the stream). A version-2 member behaves as version 1 towards a version-1 leader: such
 * a leader sends no probes and never sends a chunk of one stream twice.
 *
 * Members advertise the highest stream version they read (core/cluster/consensus/versions.ts), and a
 * leader streams to a member only in a version it reads, and only an image whose records (commands,
 * command.ts) it reads: a move's state and batches are versions 2 and 3. With none in common the stream
 * is not started: counted (`refused`) and logged once per member and reason, and Raft's next probe asks
 * again (the member may have been upgraded meanwhile).
 */

export const CHUNK_BYTES = 1 << 20;
export const WINDOW_CHUNKS = 8;
/** A member that acknowledges nothing for this long has gone (or its disk has): the stream ends. */
export const ACK_TIMEOUT_MS = 30_000;
/** A stream whose connection broke is kept this long for its member to come back (version 2); then it ends. */
export const RESUME_KEEP_MS = ACK_TIMEOUT_MS;
/** How often a kept stream asks its member where it is, and how long a quiet member is waited on before it is asked. */
export const PROBE_MS = 1000;
/**
 * How long a restarted member keeps the partial image files it found at start for their leader to resume
 * (counted from its start): a leader keeps a broken stream RESUME_KEEP_MS from the break, which came first.
 */
export const KEPT_IMAGE_MS = RESUME_KEEP_MS + 5 * PROBE_MS;

const REQUEST = Buffer.from('svc-srq1', 'latin1');
const TOKEN = Buffer.from('svc-stm1', 'latin1');
const REF = Buffer.from('svc-ref1', 'latin1');
const ID_BYTES = 16;
const MAGIC_BYTES = 8;
const PROBE_FLAG = 2;
/** An ack's seq saying that the member holds nothing of the stream (version 2). */
const NOTHING_HELD = 0xffff_ffff;

export const STREAM_REQUEST: Uint8Array = REQUEST;

/** The stream versions this build writes and reads, lowest first; the last is what it advertises. */
export const SNAPSHOT_STREAM_VERSIONS: readonly number[] = Object.freeze([1, 2]);
export const SNAPSHOT_STREAM_VERSION = SNAPSHOT_STREAM_VERSIONS[SNAPSHOT_STREAM_VERSIONS.length - 1];
/** The first stream version that resumes a stream after a broken connection. */
export const RESUME_STREAM_VERSION = 2;

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

function encodeProbe(id: Buffer, seq: number): Uint8Array {
  const b = Buffer.allocUnsafe(ID_BYTES + 5);
  id.copy(b, 0);
  b.writeUInt32LE(seq, ID_BYTES);
  b[ID_BYTES + 4] = PROBE_FLAG;
  return b;
}

/** A chunk frame, or a probe (version 2: no bytes). */
function decodeChunk(p: Buffer): { id: string; seq: number; last: boolean; probe: boolean; bytes: Buffer } | null {
  const flag = p.length < ID_BYTES + 5 ? -1 : p[ID_BYTES + 4];
  if (flag < 0 || flag > PROBE_FLAG || (flag === PROBE_FLAG && p.length !== ID_BYTES + 5)) return null;
  return { id: p.toString('hex', 0, ID_BYTES), seq: p.readUInt32LE(ID_BYTES), last: flag === 1, probe: flag === PROBE_FLAG, bytes: p.subarray(ID_BYTES + 5) };
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
  /** Times a stream whose connection broke went on from where its member was (version 2), not from chunk 0. */
  resumed: number;
  /** Chunks sent again after a resume: those its member did not hold. */
  chunksResent: number;
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
  /** RESUME_KEEP_MS unless given. */
  resumeKeepMs?: number;
  /** PROBE_MS unless given. */
  probeMs?: number;
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
  /** Whether a broken connection is resumed (stream version 2) rather than ending the stream. */
  readonly resumable: boolean;
  /** The highest seq acknowledged; -1 before the first. */
  acked: number;
  /** Chunks read and sent (the next chunk's seq). */
  sent: number;
  /** The frames of chunks sent and not yet acknowledged, by seq (kept only when resumable). */
  readonly unacked: Map<number, Uint8Array>;
  /** Acks of this stream received (a probe's answer is the first after it). */
  acks: number;
  /** The connection to the member broke: nothing is sent until it answers a probe. */
  broken: boolean;
  /** When the connection broke, and what was acknowledged then: a break with no progress since keeps the deadline. */
  brokenSince: number | null;
  ackedAtBreak: number;
  /** Why the stream cannot go on from where its member is (it holds nothing of it, or less than it acknowledged); null while it can. */
  gone: string | null;
  readonly stop: AbortController;
  wake: (() => void) | null;
}

/** The leader's side: one stream per member at a time. */
export class SnapshotStreams {
  private readonly out = new Map<NodeId, OutStream>();
  /** Members sent an image whole, not yet caught up: the log after the image's index (or after what they hold since) stays. */
  private readonly catchingUp = new Map<NodeId, { index: number; since: number }>();
  readonly stats: SnapshotStreamStats = { sent: 0, bytesSent: 0, failed: 0, received: 0, dropped: 0, refused: 0, resumed: 0, chunksResent: 0 };
  private closed = false;
  /** The last refusal logged for each member: logged again only when the reason changes. */
  private readonly refusalLogged = new Map<NodeId, string>();

  constructor(private readonly o: SnapshotStreamsOptions) {}

  private now(): number {
    return (this.o.now ?? Date.now)();
  }

  /** Raft's `snap` message carrying a request: starts a stream to its member unless one runs. */
  send(m: SnapshotMessage): void {
    if (this.closed || this.out.has(m.to)) return;
    const h = this.catchingUp.get(m.to);
    if (h !== undefined && this.now() - h.since < RECENT_STREAM_MS) return;
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
    const s: OutStream = {
      id: randomBytes(ID_BYTES), to: m.to, index: m.snapshot.meta.index, resumable: this.versionFor(m.to) >= RESUME_STREAM_VERSION,
      acked: -1, sent: 0, unacked: new Map(), acks: 0, broken: false, brokenSince: null, ackedAtBreak: -1, gone: null, stop: new AbortController(), wake: null,
    };
    this.out.set(m.to, s);
    void this.run(s, m).then(
      () => undefined,
      (e: unknown) => {
        this.stats.failed++;
        // A member not connected fails at the first chunk, as often as Raft probes it: not worth a line each time.
        if (s.sent > 0) this.o.log?.('consensus: a snapshot stream to a member ended early (Raft sends another)', { to: m.to, index: s.index, chunks: s.sent, error: e instanceof Error ? e.message : String(e) });
      },
    ).finally(() => {
      s.unacked.clear();
      if (this.out.get(m.to) === s) this.out.delete(m.to);
    });
  }

  /** The stream version this member sends to `to` (it has one: refusal() said so). */
  private versionFor(to: NodeId): number {
    const v = this.o.peerVersions === undefined ? SNAPSHOT_STREAM_VERSION : this.o.peerVersions(to)?.stream ?? 1;
    return streamVersionFor(v) ?? 1;
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
    const now = this.now();
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
    if (a === null || s === undefined || a.id !== s.id.toString('hex') || (a.seq !== NOTHING_HELD && a.seq >= s.sent)) {
      this.stats.dropped++;
      return;
    }
    if (a.seq === NOTHING_HELD) {
      s.gone = `'${s.to}' holds nothing of the stream (it let it go, or restarted without its file)`;
    } else if (a.seq < s.acked) {
      // A member restarted after a power loss lost chunks it had acknowledged: the chunks after those it
      // holds are no longer kept here (nor can the image's read go back), so the stream starts over.
      s.gone = `'${s.to}' holds chunks through ${a.seq} only, fewer than the ${s.acked + 1} it acknowledged (it restarted and lost some)`;
    } else {
      s.acks++;
      if (a.seq > s.acked) {
        s.acked = a.seq;
        for (const seq of s.unacked.keys()) if (seq <= a.seq) s.unacked.delete(seq);
      }
    }
    s.wake?.();
  }

  /**
   * The connection to a peer broke: chunks may be lost. A stream in version 2 is kept for the member to
   * come back (at most resumeKeepMs); one in version 1, or one that sent nothing yet, ends.
   */
  peerLost(peer: NodeId): void {
    // Its hold stays: a member restoring an image may lose its connection for a moment.
    const s = this.out.get(peer);
    if (s === undefined) return;
    if (s.resumable && s.sent > 0) {
      s.broken = true;
      s.wake?.();
    } else {
      s.stop.abort(new Error(`the connection to '${peer}' closed`));
    }
  }

  close(): void {
    this.closed = true;
    for (const s of this.out.values()) s.stop.abort(new Error('the member is closing'));
  }

  /** Waits up to `ms`, or until an ack, a break or an abort; throws once aborted. */
  private async pause(s: OutStream, ms: number): Promise<void> {
    if (s.stop.signal.aborted) throw s.stop.signal.reason;
    await new Promise<void>((resolve) => {
      const t = setTimeout(done, ms);
      function done(): void { clearTimeout(t); s.wake = null; s.stop.signal.removeEventListener('abort', done); resolve(); }
      s.wake = done;
      s.stop.signal.addEventListener('abort', done, { once: true });
    });
    if (s.stop.signal.aborted) throw s.stop.signal.reason;
    if (s.gone !== null) throw new Error(s.gone);
  }

  /** Throws when this member stopped leading or the member holds the image's index already. */
  private checkProgress(s: OutStream): void {
    if (this.o.progress === undefined) return;
    const p = this.o.progress(s.to);
    if (p === null) throw new Error('this member stopped leading');
    if (p.match >= s.index) throw new Error(`'${s.to}' holds index ${p.match} already`);
  }

  /**
   * The connection broke (version 2): probes the member every probeMs until it answers, then sends again
   * the chunks it does not hold. Throws after resumeKeepMs (counted from the break; a break after no
   * progress since the last one keeps that one's deadline), or when the member holds nothing of it.
   */
  private async resume(s: OutStream): Promise<void> {
    const keepMs = this.o.resumeKeepMs ?? RESUME_KEEP_MS;
    const probeMs = this.o.probeMs ?? PROBE_MS;
    if (s.brokenSince === null || s.acked > s.ackedAtBreak) {
      s.brokenSince = this.now();
      s.ackedAtBreak = s.acked;
    }
    for (;;) {
      if (this.now() - s.brokenSince > keepMs) throw new Error(`the connection to '${s.to}' stayed broken for more than ${keepMs} ms`);
      this.checkProgress(s);
      // A member back on an older build reads no probe (and holds nothing of the stream).
      if (this.versionFor(s.to) < RESUME_STREAM_VERSION) throw new Error(`'${s.to}' came back on a build that does not resume a stream`);
      const acks = s.acks;
      const asked = this.o.sendChunk(s.to, encodeProbe(s.id, s.acked + 1));
      const until = this.now() + probeMs;
      // Acks that were on their way when the probe went may come first: at worst a chunk or two it holds is sent again, and it ignores them.
      while (s.acks === acks && this.now() < until) await this.pause(s, until - this.now());
      if (asked && s.acks !== acks) break;
    }
    s.broken = false;
    this.stats.resumed++;
    const from = s.acked + 1;
    for (let seq = from; seq < s.sent; seq++) {
      if (!this.o.sendChunk(s.to, s.unacked.get(seq)!)) {
        s.broken = true;
        return;
      }
      this.stats.chunksResent++;
    }
    this.o.log?.('consensus: a snapshot stream to a member goes on after its connection broke', { to: s.to, index: s.index, from_chunk: from, resent: s.sent - from });
  }

  private async run(s: OutStream, m: SnapshotMessage): Promise<void> {
    const timeoutMs = this.o.ackTimeoutMs ?? ACK_TIMEOUT_MS;
    const probeMs = this.o.probeMs ?? PROBE_MS;
    let bytes = 0;
    /** Waits until fewer than `window` chunks are unacknowledged (through `s.sent - 1`), resuming a broken stream first. */
    const waitAcks = async (window: number): Promise<void> => {
      let since = this.now();
      while (s.broken || s.sent - 1 - s.acked >= window) {
        if (s.broken) {
          await this.resume(s);
          since = this.now();
          continue;
        }
        const before = s.acked;
        const acks = s.acks;
        // A resumable stream asks a quiet member where it is: its acknowledgements may have gone with its own connection.
        const left = timeoutMs - (this.now() - since);
        await this.pause(s, s.resumable ? Math.min(probeMs, left) : left);
        if (s.acked !== before) {
          since = this.now();
          continue;
        }
        if (s.broken) continue;
        // A leader that stopped leading while its member was quiet ends the stream now, not at the timeout.
        this.checkProgress(s);
        if (this.now() - since >= timeoutMs) throw new Error(`no acknowledgement from '${s.to}' in ${timeoutMs} ms`);
        // Only after a whole quiet while: a member that answers with no progress (its disk stalls) is asked once per probeMs.
        if (s.resumable && s.acks === acks && !this.o.sendChunk(s.to, encodeProbe(s.id, s.acked + 1))) s.broken = true;
      }
    };
    const put = async (chunk: Uint8Array, last: boolean): Promise<void> => {
      await waitAcks(WINDOW_CHUNKS);
      // This member stopped leading, or the member holds the image's index already: nothing to send.
      this.checkProgress(s);
      const frame = encodeChunk(s.id, s.sent, last, chunk);
      if (!this.o.sendChunk(s.to, frame)) {
        if (!s.resumable || s.sent === 0) throw new Error(`no connection to '${s.to}'`);
        s.broken = true;
      }
      if (s.resumable) s.unacked.set(s.sent, frame);
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
    this.catchingUp.set(s.to, { index: s.index, since: this.now() });
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

/**
 * The partial files of streams a member found when it started (it was restarted mid-stream), for their
 * leader to resume: kept until a probe names one (reopened; the others are let go), a probe names another
 * stream or a new stream begins (all let go), or KEPT_IMAGE_MS after the member started. Nothing is added
 * to them after the start, so they never pile up.
 */
export interface KeptImages {
  readonly ids: readonly string[];
  /**
   * Stream `id`'s file, reopened for appending after its last whole chunk (SealedChunkWriter.resume: every
   * chunk verified, a torn or garbled tail cut, the file synced), and how many chunks it holds.
   */
  resume(id: string): Promise<{ sink: ChunkSink; chunks: number }>;
  /** Stream `id`'s file is not wanted any more: removed. */
  drop(id: string): Promise<void>;
}

export interface SnapshotInboxOptions {
  /** A sink for stream `id` (a new file). */
  create(id: string): Promise<ChunkSink>;
  /** What this member kept of streams it was receiving when it stopped (absent: nothing). */
  kept?: KeptImages;
  sendAck(to: NodeId, payload: Uint8Array): void;
  log?(message: string, detail?: Record<string, unknown>): void;
  now?(): number;
}

interface InStream {
  readonly id: string;
  readonly from: NodeId;
  /** The next seq expected. */
  next: number;
  /** The last seq written to its file; -1 before the first. */
  written: number;
  done: boolean;
  failed: boolean;
  /** A kept file being reopened: the chunks it holds are not known yet. */
  opening: boolean;
  /** The chunks its file held, synced, when it was reopened after a restart; -1 for a stream begun here. */
  reopened: number;
  chain: Promise<ChunkSink | null>;
  /** When its last chunk came. */
  at: number;
}

/** A member's side: at most one incoming stream per peer (a newer one from it replaces the older). */
export class SnapshotInbox {
  private readonly in = new Map<NodeId, InStream>();
  /** The ids of KeptImages not reopened nor let go yet, and until when they are kept. */
  private readonly kept: Set<string>;
  private readonly keptUntil: number;

  constructor(private readonly o: SnapshotInboxOptions, readonly stats: SnapshotStreamStats) {
    this.kept = new Set(o.kept?.ids ?? []);
    this.keptUntil = this.now() + KEPT_IMAGE_MS;
  }

  private now(): number {
    return (this.o.now ?? Date.now)();
  }

  onChunk(from: NodeId, payload: Buffer): void {
    const c = decodeChunk(payload);
    if (c === null) {
      this.stats.dropped++;
      return;
    }
    let s = this.in.get(from);
    if (c.probe) {
      this.answerProbe(from, c.id, s);
      return;
    }
    if ((s !== undefined && s.id === c.id && s.opening) || ((s === undefined || s.id !== c.id) && this.kept.has(c.id))) {
      // A kept stream not reopened yet (a probe reopens it): where its chunks go is not known yet, and its
      // file is not a new one to create. Its leader, hearing nothing, probes.
      this.stats.dropped++;
      return;
    }
    if (s !== undefined && s.id === c.id && !s.failed && c.seq < s.next) {
      // A chunk taken already, sent again by a leader resuming the stream (version 2): not written twice.
      this.ackWhereItIs(s);
      return;
    }
    if (c.seq === 0) {
      if (s !== undefined) this.abandon(s);
      // A new stream: what was kept from before a restart will not be resumed.
      this.dropKept();
      s = { id: c.id, from, next: 0, written: -1, done: false, failed: false, opening: false, reopened: -1, chain: Promise.resolve(null), at: 0 };
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
    s.at = this.now();
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
        stream.written = seq;
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
   * A leader's probe (version 2: its connection broke, or it heard nothing for a while): once every chunk
   * taken before it is written, an ack of the last one written. For a stream kept from before a restart,
   * its file is reopened first (reopen). For any other stream (one this member let go, or whose file
   * failed), an ack saying that nothing is held.
   */
  private answerProbe(from: NodeId, id: string, s: InStream | undefined): void {
    if (s !== undefined && s.id === id && !s.failed) {
      // Its leader still holds it: not a stream to let go of as stale.
      s.at = this.now();
      this.ackWhereItIs(s);
      return;
    }
    if (this.kept.has(id)) {
      this.reopen(from, id, s);
      return;
    }
    // Its leader streams something else: what was kept from before a restart will not be resumed.
    this.dropKept();
    this.o.sendAck(from, encodeAck(id, NOTHING_HELD));
  }

  /**
   * Stream `id`, kept from before a restart, becomes the stream received from `from`: its file reopened
   * after its last whole chunk, the next chunk expected the one after it, and the probe answered with an
   * ack of that chunk (nothing held, when the file holds no whole chunk or fails to open: it is removed).
   */
  private reopen(from: NodeId, id: string, prev: InStream | undefined): void {
    this.dropKept(id);
    if (prev !== undefined) this.abandon(prev);
    const s: InStream = { id, from, next: 0, written: -1, done: false, failed: false, opening: true, reopened: -1, chain: Promise.resolve(null), at: this.now() };
    this.in.set(from, s);
    const fail = (why: string): null => {
      s.failed = true;
      s.opening = false;
      if (this.in.get(from) === s) this.in.delete(from);
      this.o.log?.('consensus: a kept snapshot stream could not be resumed (it starts over)', { from, stream: id, error: why });
      return null;
    };
    s.chain = this.o.kept!.resume(id).then(
      async ({ sink, chunks }) => {
        // Let go meanwhile (a new stream began): the abort queued behind this removes the file.
        if (s.failed) return sink;
        if (chunks === 0) {
          await sink.abort().catch(() => undefined);
          return fail('its file holds no whole chunk');
        }
        s.next = chunks;
        s.written = chunks - 1;
        s.reopened = chunks;
        s.opening = false;
        return sink;
      },
      (e: unknown) => {
        void this.o.kept!.drop(id).catch(() => undefined);
        return fail(e instanceof Error ? e.message : String(e));
      },
    );
    this.ackWhereItIs(s);
  }

  /** Lets go of the files kept from before a restart, all but `except`'s (removed). */
  private dropKept(except?: string): void {
    for (const id of this.kept) if (id !== except) void this.o.kept!.drop(id).catch(() => undefined);
    this.kept.clear();
  }

  /** After the writes queued before this call: an ack of the last chunk written (nothing held, if none or it failed). */
  private ackWhereItIs(s: InStream): void {
    s.chain = s.chain.then((sink) => {
      const held = sink !== null && !s.failed && s.written >= 0;
      this.o.sendAck(s.from, encodeAck(s.id, held ? s.written : NOTHING_HELD));
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
    // A stream reopened after a restart that held every chunk already: its file was synced when reopened.
    const whole = s !== undefined && (s.done || (!s.opening && !s.failed && s.reopened === s.next));
    if (t === null || s === undefined || s.id !== t.id || !whole || s.next !== t.chunks) {
      this.stats.dropped++;
      return null;
    }
    if (!s.done) {
      s.done = true;
      // Closed: its data and directory entry were synced when it was reopened (a failing close changes nothing held).
      void s.chain.then((sink) => sink?.finish()).catch(() => undefined);
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
    const now = this.now();
    for (const s of [...this.in.values()]) if (!s.done && now - s.at > 2 * ACK_TIMEOUT_MS) this.abandon(s);
    for (const [id, index] of [...this.handed]) if (index <= persistedIndex) this.handed.delete(id);
    // Files kept from before a restart that no leader asked for in time: no leader keeps their streams now.
    if (now >= this.keptUntil) this.dropKept();
    const ids = new Set([...this.in.values()].map((s) => s.id));
    for (const id of this.handed.keys()) ids.add(id);
    for (const id of this.kept) ids.add(id);
    return ids;
  }

  /** The kept files' time is up (the host's timer, whatever the wall clock did meanwhile): let them go. */
  expireKept(): void {
    this.dropKept();
  }

  private abandon(s: InStream): void {
    s.failed = true;
    if (this.in.get(s.from) === s) this.in.delete(s.from);
    void s.chain.then((sink) => sink?.abort());
  }
}
