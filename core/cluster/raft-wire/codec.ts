import { assert } from '../../base/assert.js';
import type { Entry, Message, MessageType, Snapshot } from '../raft/types.js';

/**
 * The binary encoding of Raft messages on the consensus transport (roles/raft/transport.ts), version 1.
 * A batch: `version u8 | count u32 | message*`. A message: `type u8 | from str | to str | term u64 |`
 * then its fields in the order of its interface in raft/types.ts. Integers are little-endian; u64 holds
 * at most 2^53 - 1; `str` is `len u16 | utf8`; `bool` is one byte, 0 or 1; `bytes` is `len u32 | bytes`;
 * an entry is `index u64 | term u64 | data bytes`; a snapshot `index u64 | term u64 | data bytes`.
 * Anything else (an unknown version or type, a field past the end, bytes left over, a non-canonical
 * bool) is a WireError: the connection is closed, never the member.
 */

export const RAFT_WIRE_VERSION = 1;
/** A member id or a read context longer than this is damage, not data. */
export const WIRE_STRING_BYTES_MAX = 1024;
/** Most messages in one batch. */
export const WIRE_BATCH_MESSAGES_MAX = 1 << 16;

/** Why bytes were refused: `oversize` for a frame over the bound, `malformed` for everything else. */
export type WireErrorKind = 'malformed' | 'oversize';

export class WireError extends Error {
  constructor(message: string, readonly kind: WireErrorKind = 'malformed') {
    super(`raft wire: ${message}`);
    this.name = 'WireError';
  }
}

const TYPE_CODE: Readonly<Record<MessageType, number>> = {
  app: 1, appResp: 2, vote: 3, preVote: 4, voteResp: 5, preVoteResp: 6, heartbeat: 7, heartbeatResp: 8, snap: 9, readIndex: 10, readIndexResp: 11,
};
const CODE_TYPE = new Map(Object.entries(TYPE_CODE).map(([t, c]) => [c, t as MessageType]));

class Writer {
  private buf = Buffer.allocUnsafe(256);
  private at = 0;

  private room(n: number): void {
    if (this.at + n <= this.buf.length) return;
    const next = Buffer.allocUnsafe(Math.max(this.buf.length * 2, this.at + n));
    this.buf.copy(next, 0, 0, this.at);
    this.buf = next;
  }

  u8(v: number): void {
    this.room(1);
    this.buf[this.at++] = v;
  }

  u32(v: number): void {
    this.room(4);
    this.buf.writeUInt32LE(v, this.at);
    this.at += 4;
  }

  u64(v: number): void {
    assert(Number.isSafeInteger(v) && v >= 0, `a wire u64 is a safe non-negative integer, not ${v}`);
    this.room(8);
    this.buf.writeUInt32LE(v % 0x1_0000_0000, this.at);
    this.buf.writeUInt32LE(Math.floor(v / 0x1_0000_0000), this.at + 4);
    this.at += 8;
  }

  bool(v: boolean): void {
    this.u8(v ? 1 : 0);
  }

  str(s: string): void {
    const b = Buffer.from(s, 'utf8');
    assert(b.length <= WIRE_STRING_BYTES_MAX, `a wire string is at most ${WIRE_STRING_BYTES_MAX} bytes`);
    this.room(2 + b.length);
    this.buf.writeUInt16LE(b.length, this.at);
    b.copy(this.buf, this.at + 2);
    this.at += 2 + b.length;
  }

  bytes(b: Uint8Array): void {
    this.u32(b.length);
    this.room(b.length);
    this.buf.set(b, this.at);
    this.at += b.length;
  }

  done(): Buffer {
    return this.buf.subarray(0, this.at);
  }
}

class Reader {
  private at = 0;

  constructor(private readonly buf: Buffer) {}

  private need(n: number, what: string): void {
    if (this.at + n > this.buf.length) throw new WireError(`${what} runs past the end of the frame`);
  }

  u8(what: string): number {
    this.need(1, what);
    return this.buf[this.at++];
  }

  u32(what: string): number {
    this.need(4, what);
    const v = this.buf.readUInt32LE(this.at);
    this.at += 4;
    return v;
  }

  u64(what: string): number {
    this.need(8, what);
    const lo = this.buf.readUInt32LE(this.at);
    const hi = this.buf.readUInt32LE(this.at + 4);
    this.at += 8;
    if (hi > 0x1f_ffff) throw new WireError(`${what} is past 2^53`);
    return hi * 0x1_0000_0000 + lo;
  }

  bool(what: string): boolean {
    const v = this.u8(what);
    if (v > 1) throw new WireError(`${what} is not a bool (${v})`);
    return v === 1;
  }

  str(what: string): string {
    this.need(2, what);
    const n = this.buf.readUInt16LE(this.at);
    if (n > WIRE_STRING_BYTES_MAX) throw new WireError(`${what} is ${n} bytes (at most ${WIRE_STRING_BYTES_MAX})`);
    this.at += 2;
    this.need(n, what);
    const s = this.buf.toString('utf8', this.at, this.at + n);
    this.at += n;
    return s;
  }

  bytes(what: string): Uint8Array {
    const n = this.u32(what);
    this.need(n, what);
    // A copy: the frame's buffer is not kept alive by one entry.
    const b = new Uint8Array(this.buf.subarray(this.at, this.at + n));
    this.at += n;
    return b;
  }

  end(): void {
    if (this.at !== this.buf.length) throw new WireError(`${this.buf.length - this.at} bytes left after the last message`);
  }
}

function writeEntry(w: Writer, e: Entry): void {
  w.u64(e.index);
  w.u64(e.term);
  w.bytes(e.data);
}

function readEntry(r: Reader): Entry {
  return { index: r.u64('entry index'), term: r.u64('entry term'), data: r.bytes('entry data') };
}

function writeSnapshot(w: Writer, s: Snapshot): void {
  w.u64(s.meta.index);
  w.u64(s.meta.term);
  w.bytes(s.data);
}

function readSnapshot(r: Reader): Snapshot {
  return { meta: { index: r.u64('snapshot index'), term: r.u64('snapshot term') }, data: r.bytes('snapshot data') };
}

function writeMessage(w: Writer, m: Message): void {
  w.u8(TYPE_CODE[m.type]);
  w.str(m.from);
  w.str(m.to);
  w.u64(m.term);
  switch (m.type) {
    case 'app':
      w.u64(m.prevIndex);
      w.u64(m.prevTerm);
      w.u64(m.commit);
      w.u32(m.entries.length);
      for (const e of m.entries) writeEntry(w, e);
      return;
    case 'appResp':
      w.u64(m.index);
      w.bool(m.reject);
      w.u64(m.hintIndex);
      w.u64(m.hintTerm);
      return;
    case 'vote':
    case 'preVote':
      w.u64(m.lastIndex);
      w.u64(m.lastTerm);
      return;
    case 'voteResp':
    case 'preVoteResp':
      w.bool(m.reject);
      return;
    case 'heartbeat':
      w.u64(m.commit);
      w.u64(m.readSeq);
      w.u64(m.sent);
      return;
    case 'heartbeatResp':
      w.u64(m.readSeq);
      w.u64(m.sent);
      w.u64(m.lastIndex);
      return;
    case 'snap':
      writeSnapshot(w, m.snapshot);
      return;
    case 'readIndex':
      w.str(m.ctx);
      return;
    case 'readIndexResp':
      w.str(m.ctx);
      w.u64(m.index);
      return;
  }
}

function readMessage(r: Reader): Message {
  const code = r.u8('message type');
  const type = CODE_TYPE.get(code);
  if (type === undefined) throw new WireError(`unknown message type ${code}`);
  const base = { from: r.str('from'), to: r.str('to'), term: r.u64('term') };
  if (base.from === '' || base.to === '') throw new WireError('a message names an empty member id');
  switch (type) {
    case 'app': {
      const head = { ...base, type, prevIndex: r.u64('prevIndex'), prevTerm: r.u64('prevTerm'), commit: r.u64('commit') };
      const n = r.u32('entry count');
      const entries: Entry[] = [];
      // Each entry takes at least 20 bytes, so a lying count runs out of frame before it runs out of memory.
      for (let k = 0; k < n; k++) entries.push(readEntry(r));
      return { ...head, entries };
    }
    case 'appResp':
      return { ...base, type, index: r.u64('index'), reject: r.bool('reject'), hintIndex: r.u64('hintIndex'), hintTerm: r.u64('hintTerm') };
    case 'vote':
    case 'preVote':
      return { ...base, type, lastIndex: r.u64('lastIndex'), lastTerm: r.u64('lastTerm') };
    case 'voteResp':
    case 'preVoteResp':
      return { ...base, type, reject: r.bool('reject') };
    case 'heartbeat':
      return { ...base, type, commit: r.u64('commit'), readSeq: r.u64('readSeq'), sent: r.u64('sent') };
    case 'heartbeatResp':
      return { ...base, type, readSeq: r.u64('readSeq'), sent: r.u64('sent'), lastIndex: r.u64('lastIndex') };
    case 'snap':
      return { ...base, type, snapshot: readSnapshot(r) };
    case 'readIndex':
      return { ...base, type, ctx: r.str('ctx') };
    case 'readIndexResp':
      return { ...base, type, ctx: r.str('ctx'), index: r.u64('index') };
  }
}

/** One batch of messages as bytes (the payload of one frame). */
export function encodeMessages(messages: readonly Message[]): Buffer {
  assert(messages.length <= WIRE_BATCH_MESSAGES_MAX, `a batch holds at most ${WIRE_BATCH_MESSAGES_MAX} messages`);
  const w = new Writer();
  w.u8(RAFT_WIRE_VERSION);
  w.u32(messages.length);
  for (const m of messages) writeMessage(w, m);
  return w.done();
}

/** The messages of one batch; throws WireError on any malformed byte. */
export function decodeMessages(payload: Uint8Array): Message[] {
  const r = new Reader(Buffer.from(payload.buffer, payload.byteOffset, payload.byteLength));
  const version = r.u8('version');
  if (version !== RAFT_WIRE_VERSION) throw new WireError(`unknown encoding version ${version} (this member speaks ${RAFT_WIRE_VERSION})`);
  const n = r.u32('message count');
  if (n > WIRE_BATCH_MESSAGES_MAX) throw new WireError(`${n} messages in one batch (at most ${WIRE_BATCH_MESSAGES_MAX})`);
  const out: Message[] = [];
  for (let k = 0; k < n; k++) out.push(readMessage(r));
  r.end();
  return out;
}

/** The encoded size of one message, for batching by bytes without encoding twice. */
export function encodedMessageBytes(m: Message): number {
  const s = (x: string): number => 2 + Buffer.byteLength(x, 'utf8');
  const head = 1 + s(m.from) + s(m.to) + 8;
  switch (m.type) {
    case 'app':
      return head + 28 + m.entries.reduce((n, e) => n + 20 + e.data.byteLength, 0);
    case 'appResp':
      return head + 25;
    case 'vote':
    case 'preVote':
      return head + 16;
    case 'voteResp':
    case 'preVoteResp':
      return head + 1;
    case 'heartbeat':
    case 'heartbeatResp':
      return head + 24;
    case 'snap':
      return head + 20 + m.snapshot.data.byteLength;
    case 'readIndex':
      return head + s(m.ctx);
    case 'readIndexResp':
      return head + s(m.ctx) + 8;
  }
}
