import { assert } from '../base/assert.js';

/**
 * Binary encoding of what the WAL and segments carry. One tag byte first, so new kinds can be added
 * without touching the old ones; a decoder meeting an unknown tag refuses rather than guessing.
 * Vectors are raw little-endian f32, payloads UTF-8 JSON, ids UTF-8 with a u16 length.
 */
export interface PointRecord {
  id: string;
  vector: Float32Array;
  payload: Record<string, unknown> | null;
}

/** A multi-vector document: its token vectors back to back (count * dim floats). */
export interface DocRecord {
  id: string;
  count: number;
  vectors: Float32Array;
  payload: Record<string, unknown> | null;
}

/** New payload for an existing point: merged into the stored one key by key, or replacing it. */
export interface PayloadPatch {
  id: string;
  payload: Record<string, unknown>;
}

export type PayloadMode = 'merge' | 'replace';

export type Op =
  | { t: 'upsert'; points: PointRecord[] }
  /**
   * `move`: a rebalance batch's commit on its source (core/collection/move.ts): the ids went to their new
   * owners, and the move's cursor for this collection advances to `cursor`, in the same record.
   */
  | { t: 'delete'; ids: string[]; move?: MoveMark }
  | { t: 'upsert_docs'; docs: DocRecord[] }
  /**
   * Payloads of existing points changed, vectors untouched. Carries the patch, not the result: applied
   * point by point (a point absent when it is applied is skipped), so replaying it over a state that
   * already holds it, or a later whole-point write, converges as upserts and deletes do.
   */
  | { t: 'set_payload'; mode: PayloadMode; points: PayloadPatch[] };

/** A rebalance move's progress on one collection (docs/cluster.md, Rebalancing). */
export interface MoveMark {
  move: string;
  /** The last id (fetch order) the move has scanned; every id up to it that the node does not own has left. */
  cursor: string;
}

/** A node's rebalance move as a source: its id, its own shard id, the target set, and whether it is done. */
export interface MoveStateRecord {
  move: string;
  self: number;
  targets: number[];
  finished: boolean;
}

/** Database-level records, sealed with the master-derived 'db' key. */
export type DbOp =
  /** `origin_seq`: on a follower, the leader's seq of this create (the collection's age there). */
  | { t: 'create_collection'; uid: string; name: string; params: object; origin_seq?: number }
  | { t: 'drop_collection'; uid: string }
  /** A follower's applied position: every leader commit up to `leader_seq` is in the records before it. */
  | { t: 'replica_position'; leader_seq: number }
  /**
   * A follower's leader history (the leader's log lineage that its positions count in) with the position
   * reached in it, at once: `history` '' while a bootstrap runs (no position holds), the leader's id at
   * its end. Later replica_position records advance the seq within that history.
   */
  | { t: 'replica_origin'; history: string; leader_seq: number }
  /** A rebalance move started (new id: every cursor starts over) or finished on this node, as a source. */
  | ({ t: 'move_state' } & MoveStateRecord)
  /**
   * A batch of move `move` handed out from collection `uid`, durable before its answer: its ids may reach
   * their new owners before (or without) its commit. Kept until a commit's cursor passes them, so the
   * next batch names those deleted meanwhile after any restart (core/collection/move.ts).
   */
  | { t: 'move_out'; move: string; uid: string; ids: string[] };

export type AnyOp = Op | DbOp;

const TAG = { upsert: 1, delete: 2, upsert_docs: 3, set_payload: 4, create_collection: 64, drop_collection: 65, replica_position: 66, replica_origin: 67, move_state: 68, move_out: 69 } as const;
const NULL_PAYLOAD = 0xffffffff;
const PAYLOAD_MODES: readonly PayloadMode[] = ['merge', 'replace'];

assert(new Uint8Array(new Uint16Array([1]).buffer)[0] === 1, 'svc storage needs a little-endian host');

export class CodecError extends Error {
  constructor(message: string) {
    super(`cannot decode record: ${message}`);
    this.name = 'CodecError';
  }
}

class Writer {
  private buf: Uint8Array;
  private view: DataView;
  len = 0;

  constructor(capacity = 256) {
    this.buf = new Uint8Array(capacity);
    this.view = new DataView(this.buf.buffer);
  }

  private need(n: number): void {
    if (this.len + n <= this.buf.length) return;
    const next = new Uint8Array(Math.max(this.len + n, this.buf.length * 2));
    next.set(this.buf.subarray(0, this.len));
    this.buf = next;
    this.view = new DataView(next.buffer);
  }

  u8(v: number): void { this.need(1); this.view.setUint8(this.len, v); this.len += 1; }
  u16(v: number): void { this.need(2); this.view.setUint16(this.len, v, true); this.len += 2; }
  u32(v: number): void { this.need(4); this.view.setUint32(this.len, v, true); this.len += 4; }
  bytes(b: Uint8Array): void { this.need(b.length); this.buf.set(b, this.len); this.len += b.length; }

  str16(s: string): void {
    const b = Buffer.from(s, 'utf8');
    assert(b.length <= 0xffff, 'string fits a u16 length');
    this.u16(b.length);
    this.bytes(b);
  }

  blob32(b: Uint8Array): void {
    this.u32(b.length);
    this.bytes(b);
  }

  done(): Uint8Array {
    return this.buf.slice(0, this.len);
  }
}

class Reader {
  private readonly view: DataView;
  pos = 0;

  constructor(private readonly buf: Uint8Array) {
    this.view = new DataView(buf.buffer, buf.byteOffset, buf.byteLength);
  }

  private need(n: number): void {
    if (this.pos + n > this.buf.length) throw new CodecError(`truncated at byte ${this.pos}`);
  }

  u8(): number { this.need(1); return this.view.getUint8(this.pos++); }
  u16(): number { this.need(2); const v = this.view.getUint16(this.pos, true); this.pos += 2; return v; }
  u32(): number { this.need(4); const v = this.view.getUint32(this.pos, true); this.pos += 4; return v; }
  bytes(n: number): Uint8Array { this.need(n); const b = this.buf.subarray(this.pos, this.pos + n); this.pos += n; return b; }
  str16(): string { return Buffer.from(this.bytes(this.u16())).toString('utf8'); }
  blob32(): Uint8Array { return this.bytes(this.u32()); }

  atEnd(): boolean {
    return this.pos === this.buf.length;
  }

  end(): void {
    if (this.pos !== this.buf.length) throw new CodecError(`${this.buf.length - this.pos} trailing bytes`);
  }
}

function json(value: unknown): Uint8Array {
  return Buffer.from(JSON.stringify(value), 'utf8');
}

function parseJson(bytes: Uint8Array): unknown {
  try {
    return JSON.parse(Buffer.from(bytes).toString('utf8'));
  } catch {
    throw new CodecError('bad JSON');
  }
}

export function encodeOp(op: AnyOp): Uint8Array {
  const w = new Writer();
  switch (op.t) {
    case 'upsert':
      w.u8(TAG.upsert);
      w.u32(op.points.length);
      for (const p of op.points) {
        w.str16(p.id);
        w.u32(p.vector.length);
        w.bytes(new Uint8Array(p.vector.buffer, p.vector.byteOffset, p.vector.byteLength));
        if (p.payload === null) w.u32(NULL_PAYLOAD);
        else w.blob32(json(p.payload));
      }
      break;
    case 'upsert_docs':
      w.u8(TAG.upsert_docs);
      w.u32(op.docs.length);
      for (const d of op.docs) {
        w.str16(d.id);
        w.u32(d.count);
        w.u32(d.vectors.length);
        w.bytes(new Uint8Array(d.vectors.buffer, d.vectors.byteOffset, d.vectors.byteLength));
        if (d.payload === null) w.u32(NULL_PAYLOAD);
        else w.blob32(json(d.payload));
      }
      break;
    case 'delete':
      w.u8(TAG.delete);
      w.u32(op.ids.length);
      for (const id of op.ids) w.str16(id);
      // Optional trailing field: a plain delete ends after its ids.
      if (op.move !== undefined) {
        w.str16(op.move.move);
        w.str16(op.move.cursor);
      }
      break;
    case 'set_payload':
      w.u8(TAG.set_payload);
      w.u8(PAYLOAD_MODES.indexOf(op.mode));
      w.u32(op.points.length);
      for (const p of op.points) {
        w.str16(p.id);
        w.blob32(json(p.payload));
      }
      break;
    case 'create_collection':
      w.u8(TAG.create_collection);
      w.str16(op.uid);
      w.str16(op.name);
      w.blob32(json(op.params));
      // Optional trailing field: records written before it existed end after the params.
      if (op.origin_seq !== undefined) seq64(w, op.origin_seq);
      break;
    case 'drop_collection':
      w.u8(TAG.drop_collection);
      w.str16(op.uid);
      break;
    case 'replica_position':
      w.u8(TAG.replica_position);
      seq64(w, op.leader_seq);
      break;
    case 'replica_origin':
      w.u8(TAG.replica_origin);
      w.str16(op.history);
      seq64(w, op.leader_seq);
      break;
    case 'move_state':
      w.u8(TAG.move_state);
      w.str16(op.move);
      w.u32(op.self);
      w.u8(op.finished ? 1 : 0);
      w.u32(op.targets.length);
      for (const t of op.targets) w.u32(t);
      break;
    case 'move_out':
      w.u8(TAG.move_out);
      w.str16(op.move);
      w.str16(op.uid);
      w.u32(op.ids.length);
      for (const id of op.ids) w.str16(id);
      break;
  }
  return w.done();
}

export function decodeOp(bytes: Uint8Array): AnyOp {
  const r = new Reader(bytes);
  const tag = r.u8();
  let op: AnyOp;
  switch (tag) {
    case TAG.upsert: {
      const n = r.u32();
      const points: PointRecord[] = [];
      for (let i = 0; i < n; i++) {
        const id = r.str16();
        const dim = r.u32();
        const vector = new Float32Array(dim);
        new Uint8Array(vector.buffer).set(r.bytes(dim * 4));
        const len = r.u32();
        const payload = len === NULL_PAYLOAD ? null : (parseJson(r.bytes(len)) as Record<string, unknown>);
        points.push({ id, vector, payload });
      }
      op = { t: 'upsert', points };
      break;
    }
    case TAG.upsert_docs: {
      const n = r.u32();
      const docs: DocRecord[] = [];
      for (let i = 0; i < n; i++) {
        const id = r.str16();
        const count = r.u32();
        const floats = r.u32();
        const vectors = new Float32Array(floats);
        new Uint8Array(vectors.buffer).set(r.bytes(floats * 4));
        const len = r.u32();
        const payload = len === NULL_PAYLOAD ? null : (parseJson(r.bytes(len)) as Record<string, unknown>);
        docs.push({ id, count, vectors, payload });
      }
      op = { t: 'upsert_docs', docs };
      break;
    }
    case TAG.delete: {
      const n = r.u32();
      const ids: string[] = [];
      for (let i = 0; i < n; i++) ids.push(r.str16());
      op = r.atEnd() ? { t: 'delete', ids } : { t: 'delete', ids, move: { move: r.str16(), cursor: r.str16() } };
      break;
    }
    case TAG.set_payload: {
      const mode = PAYLOAD_MODES[r.u8()];
      if (mode === undefined) throw new CodecError('unknown payload mode');
      const n = r.u32();
      const points: PayloadPatch[] = [];
      for (let i = 0; i < n; i++) {
        const id = r.str16();
        const payload = parseJson(r.blob32());
        if (typeof payload !== 'object' || payload === null || Array.isArray(payload)) throw new CodecError('a payload that is not an object');
        points.push({ id, payload: payload as Record<string, unknown> });
      }
      op = { t: 'set_payload', mode, points };
      break;
    }
    case TAG.create_collection: {
      const c: AnyOp = { t: 'create_collection', uid: r.str16(), name: r.str16(), params: parseJson(r.blob32()) as object };
      if (!r.atEnd()) c.origin_seq = readSeq64(r);
      op = c;
      break;
    }
    case TAG.drop_collection:
      op = { t: 'drop_collection', uid: r.str16() };
      break;
    case TAG.replica_position:
      op = { t: 'replica_position', leader_seq: readSeq64(r) };
      break;
    case TAG.replica_origin:
      op = { t: 'replica_origin', history: r.str16(), leader_seq: readSeq64(r) };
      break;
    case TAG.move_state: {
      const move = r.str16();
      const self = r.u32();
      const finished = r.u8();
      if (finished > 1) throw new CodecError('a move state whose finished flag is not 0 or 1');
      const n = r.u32();
      if (n > 4096) throw new CodecError('a move state with more than 4096 targets');
      const targets: number[] = [];
      for (let i = 0; i < n; i++) targets.push(r.u32());
      op = { t: 'move_state', move, self, targets, finished: finished === 1 };
      break;
    }
    case TAG.move_out: {
      const move = r.str16();
      const uid = r.str16();
      const n = r.u32();
      const ids: string[] = [];
      for (let i = 0; i < n; i++) ids.push(r.str16());
      op = { t: 'move_out', move, uid, ids };
      break;
    }
    default:
      throw new CodecError(`unknown tag ${tag}`);
  }
  r.end();
  return op;
}

/** A sequence number as two u32 (low, high): safe integers only. */
function seq64(w: Writer, seq: number): void {
  assert(Number.isSafeInteger(seq) && seq >= 0, 'a seq is a non-negative safe integer');
  w.u32(seq % 2 ** 32);
  w.u32(Math.floor(seq / 2 ** 32));
}

function readSeq64(r: Reader): number {
  const lo = r.u32();
  return r.u32() * 2 ** 32 + lo;
}

export function isDbOp(op: AnyOp): op is DbOp {
  return op.t === 'create_collection' || op.t === 'drop_collection' || op.t === 'replica_position' || op.t === 'replica_origin' || op.t === 'move_state' || op.t === 'move_out';
}

/**
 * A node's own bookkeeping records (a follower's positions in its leader's log, a source's rebalance
 * move), never data: a replication stream does not carry them.
 */
export function isReplicaBookkeeping(op: AnyOp): op is Extract<DbOp, { t: 'replica_position' | 'replica_origin' | 'move_state' | 'move_out' }> {
  return op.t === 'replica_position' || op.t === 'replica_origin' || op.t === 'move_state' || op.t === 'move_out';
}
