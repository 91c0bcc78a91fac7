import { assert } from '../../base/assert.js';
import { WireError } from './codec.js';

/**
 * Frames of the consensus transport: `length u32 LE | type u8 | payload`, length counting the type byte
 * and the payload. A frame longer than the reader's bound is refused as soon as its length arrives,
 * before a byte of it is buffered. The bound is RAFT_FRAME_BYTES_MAX unless the host sets another.
 */

/** 64 MiB: a batch of appends (a database image goes in chunks: core/cluster/consensus/snapshot-stream.ts). */
export const RAFT_FRAME_BYTES_MAX = 64 << 20;
export const FRAME_HEADER_BYTES = 5;
/** Before a peer has authenticated, no frame may be larger than a handshake needs (ids, nonce, proof). */
export const HANDSHAKE_FRAME_BYTES_MAX = 4096;

/**
 * `forward`: a write a follower member hands to its leader, or the leader's answer
 * (core/cluster/consensus/forward.ts). `snapshotChunk` and `snapshotAck`: a database image streamed to a
 * member, and its acknowledgements (core/cluster/consensus/snapshot-stream.ts). `ping` and `pong`
 * (empty): the dialer asks whether its connection still reaches the peer, which answers on the same
 * connection (roles/raft/transport.ts, "A connection that hangs"); only to a peer that said it answers.
 */
export const FrameType = { hello: 1, challenge: 2, proof: 3, messages: 4, forward: 5, snapshotChunk: 6, snapshotAck: 7, ping: 8, pong: 9 } as const;
export type FrameTypeCode = (typeof FrameType)[keyof typeof FrameType];
const KNOWN = new Set<number>(Object.values(FrameType));

export interface Frame {
  readonly type: FrameTypeCode;
  readonly payload: Buffer;
}

export function encodeFrame(type: FrameTypeCode, payload: Uint8Array): Buffer {
  const b = Buffer.allocUnsafe(FRAME_HEADER_BYTES + payload.length);
  b.writeUInt32LE(payload.length + 1, 0);
  b[4] = type;
  b.set(payload, FRAME_HEADER_BYTES);
  return b;
}

/** Turns a byte stream into frames; throws WireError on an oversize, empty or unknown frame. */
export class FrameDecoder {
  private chunks: Buffer[] = [];
  private buffered = 0;

  constructor(private frameBytesMax = RAFT_FRAME_BYTES_MAX) {
    assert(frameBytesMax >= 64, 'a frame bound fits a handshake');
  }

  /** Raises (or lowers) the bound for frames not yet started: after authentication, say. */
  setFrameBytesMax(n: number): void {
    assert(n >= 64, 'a frame bound fits a handshake');
    this.frameBytesMax = n;
  }

  /** Bytes held for a frame not yet complete. */
  get pendingBytes(): number {
    return this.buffered;
  }

  /**
   * Takes bytes and yields the frames they complete, one at a time: the caller acts on each (a finished
   * handshake raises the bound) before the next one's length is checked.
   */
  *push(chunk: Buffer): Generator<Frame, void, undefined> {
    this.chunks.push(chunk);
    this.buffered += chunk.length;
    for (;;) {
      if (this.buffered < 4) return;
      const head = this.peek(4);
      const length = head.readUInt32LE(0);
      if (length === 0) throw new WireError('an empty frame');
      if (length + 4 > this.frameBytesMax) throw new WireError(`a frame of ${length + 4} bytes (at most ${this.frameBytesMax})`, 'oversize');
      if (this.buffered < 4 + length) return;
      const whole = this.take(4 + length);
      const type = whole[4];
      if (!KNOWN.has(type)) throw new WireError(`unknown frame type ${type}`);
      yield { type: type as FrameTypeCode, payload: whole.subarray(FRAME_HEADER_BYTES) };
    }
  }

  private peek(n: number): Buffer {
    if (this.chunks[0].length < n) this.chunks = [Buffer.concat(this.chunks)];
    return this.chunks[0];
  }

  private take(n: number): Buffer {
    const all = this.chunks.length === 1 ? this.chunks[0] : Buffer.concat(this.chunks);
    const frame = all.subarray(0, n);
    const rest = all.subarray(n);
    this.chunks = rest.length > 0 ? [rest] : [];
    this.buffered = rest.length;
    return frame;
  }
}
