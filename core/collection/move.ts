import { invalidArgument, SvcError } from '../base/errors.js';
import { owner } from '../cluster/routing/hrw.js';
import type { MoveProgress } from '../storage/data-dir.js';

/**
 * A node's part of a rebalance move (docs/cluster.md, Rebalancing): the pieces Database uses.
 *
 * - WriteGate: the node's single-writer gate. Every point write enters it; a move batch closes it (after
 *   the writes inside have finished) and holds it until its commit or its lease ends. Reads never wait.
 * - movedIds: the ids of a write that this node must refuse with `moved`, because the move took them
 *   away already (at or before the collection's cursor, or the move finished) and this node does not own
 *   them in the target set.
 * - parseMoveRequest: the body of `POST /v1/cluster/move/{batch,commit,apply}`.
 */

/** Most points in one batch, and the default. */
export const MOVE_BATCH_POINTS_MAX = 10_000;
export const MOVE_BATCH_POINTS_DEFAULT = 1000;
/** Most ids looked at by one batch call (a scan past them returns an empty batch that advances the cursor). */
export const MOVE_SCAN_IDS_MAX = 50_000;
/** Most bytes (vectors and payloads, estimated) of one batch. */
export const MOVE_BATCH_BYTES_MAX = 16 << 20;
/** How long a batch may hold the write gate before its commit (default), and the bounds of what a caller may ask. */
export const MOVE_LEASE_MS_DEFAULT = 5_000;
const MOVE_LEASE_MS_MIN = 100;
const MOVE_LEASE_MS_MAX = 300_000;
/** Longest batch token (Database's moveToken: 50 characters and the cursor, a point id, in base64url). */
const MOVE_TOKEN_MAX = 2048;
/** Most target shards a move names (the coordinator's own cap). */
const MOVE_TARGETS_MAX = 1024;

export class WriteGate {
  private writers = 0;
  private held: { released: Promise<void>; release: () => void } | null = null;
  private drained: (() => void) | null = null;

  /** Waits while a batch holds the gate, then counts the caller in. */
  async enter(): Promise<void> {
    while (this.held !== null) await this.held.released;
    this.writers++;
  }

  exit(): void {
    this.writers--;
    if (this.writers === 0) this.drained?.();
  }

  get closed(): boolean {
    return this.held !== null;
  }

  /** Closes the gate once no one else holds it and every write inside has finished; `open()` releases it. */
  async close(): Promise<void> {
    while (this.held !== null) await this.held.released;
    let release!: () => void;
    const released = new Promise<void>((r) => { release = r; });
    this.held = { released, release };
    if (this.writers > 0) {
      await new Promise<void>((r) => { this.drained = r; });
      this.drained = null;
    }
  }

  open(): void {
    const h = this.held;
    this.held = null;
    h?.release();
  }
}

/** The ids of a write to collection `uid` that the move has taken from this node (refused with `moved`). */
export function movedIds(move: Readonly<MoveProgress> | null, uid: string, ids: Iterable<string>): string[] {
  if (move === null) return [];
  const cursor = move.cursors.get(uid);
  if (!move.finished && cursor === undefined) return [];
  const out: string[] = [];
  for (const id of ids) {
    if ((move.finished || id <= cursor!) && owner(id, move.targets) !== move.self) out.push(id);
  }
  return out;
}

/** The error a router understands: these ids live on their owners in `targets` now. */
export function movedError(move: Readonly<MoveProgress>, ids: string[]): SvcError {
  const shown = ids.slice(0, 3).map((id) => `'${id}'`).join(', ');
  return new SvcError('moved', `${ids.length} point(s) of this write (${shown}${ids.length > 3 ? ', ...' : ''}) moved to other shards `
    + `in rebalance move ${move.move}: send them to their owners among shards ${move.targets.join(', ')}`, {
    moved: { move: move.move, ids, targets: [...move.targets] },
  });
}

export type MoveRequest =
  | { step: 'batch'; move: string; self: number; targets: number[]; limit: number; leaseMs: number }
  | { step: 'commit'; move: string; token: string }
  | { step: 'apply'; collection: string; params: object; records: Uint8Array[]; deletes: string[] };

const MOVE_ID_RE = /^[A-Za-z0-9_-]{1,64}$/;

function shardId(v: unknown, what: string): number {
  if (!Number.isSafeInteger(v) || (v as number) < 0 || (v as number) > 0xffffffff) throw invalidArgument(`${what} must be a shard id (a non-negative integer)`);
  return v as number;
}

function only(b: Record<string, unknown>, keys: readonly string[], what: string): void {
  for (const k of Object.keys(b)) if (!keys.includes(k)) throw invalidArgument(`${what} has an unknown field '${k.slice(0, 100)}'`);
}

/** A move route's body, checked whole (an internal route, but a bad body is still a 400, never a crash). */
export function parseMoveRequest(step: unknown, body: unknown): MoveRequest {
  if (typeof body !== 'object' || body === null || Array.isArray(body)) throw invalidArgument('a move body must be a JSON object');
  const b = body as Record<string, unknown>;
  if (step === 'batch') {
    only(b, ['move', 'self', 'targets', 'limit', 'lease_ms'], 'move batch body');
    if (typeof b.move !== 'string' || !MOVE_ID_RE.test(b.move)) throw invalidArgument('move must be 1 to 64 letters, digits, _ or -');
    const self = shardId(b.self, 'self');
    if (!Array.isArray(b.targets) || b.targets.length === 0 || b.targets.length > MOVE_TARGETS_MAX) {
      throw invalidArgument(`targets must be a list of 1 to ${MOVE_TARGETS_MAX} shard ids`);
    }
    const targets = b.targets.map((t, i) => shardId(t, `targets[${i}]`));
    if (new Set(targets).size !== targets.length) throw invalidArgument('targets names a shard twice');
    const limit = b.limit === undefined ? MOVE_BATCH_POINTS_DEFAULT : b.limit;
    if (!Number.isSafeInteger(limit) || (limit as number) < 1 || (limit as number) > MOVE_BATCH_POINTS_MAX) throw invalidArgument(`limit must be 1 to ${MOVE_BATCH_POINTS_MAX}`);
    const lease = b.lease_ms === undefined ? MOVE_LEASE_MS_DEFAULT : b.lease_ms;
    if (!Number.isSafeInteger(lease) || (lease as number) < MOVE_LEASE_MS_MIN || (lease as number) > MOVE_LEASE_MS_MAX) {
      throw invalidArgument(`lease_ms must be ${MOVE_LEASE_MS_MIN} to ${MOVE_LEASE_MS_MAX}`);
    }
    return { step, move: b.move, self, targets: [...targets].sort((x, y) => x - y), limit: limit as number, leaseMs: lease as number };
  }
  if (step === 'commit') {
    only(b, ['move', 'token'], 'move commit body');
    if (typeof b.move !== 'string' || !MOVE_ID_RE.test(b.move)) throw invalidArgument('move must be 1 to 64 letters, digits, _ or -');
    if (typeof b.token !== 'string' || b.token.length === 0 || b.token.length > MOVE_TOKEN_MAX) throw invalidArgument('token must be the batch token');
    return { step, move: b.move, token: b.token };
  }
  if (step === 'apply') {
    only(b, ['collection', 'params', 'records', 'deletes'], 'move apply body');
    if (typeof b.collection !== 'string') throw invalidArgument('collection must be a name');
    if (typeof b.params !== 'object' || b.params === null || Array.isArray(b.params)) throw invalidArgument('params must be the collection\'s parameters');
    if (!Array.isArray(b.records) || b.records.length > 64) throw invalidArgument('records must be a list of at most 64 base64 records');
    const records = b.records.map((r, i) => {
      if (typeof r !== 'string') throw invalidArgument(`records[${i}] must be base64`);
      return new Uint8Array(Buffer.from(r, 'base64'));
    });
    const deletes = b.deletes ?? [];
    if (!Array.isArray(deletes) || deletes.length > MOVE_SCAN_IDS_MAX || deletes.some((d) => typeof d !== 'string')) {
      throw invalidArgument(`deletes must be a list of at most ${MOVE_SCAN_IDS_MAX} point ids`);
    }
    return { step, collection: b.collection, params: b.params, records, deletes: deletes as string[] };
  }
  throw invalidArgument('a move step is batch, commit or apply');
}

/** What a batch call answers. */
export type MoveBatchAnswer =
  | { done: true; move: string }
  | {
    done: false; move: string; token: string; collection: string; params: object; cursor: string;
    /** The points, as logical records (core/storage/codec.ts upsert or upsert_docs ops), base64. */
    records: string[];
    /** Ids an earlier batch of this move handed out (durably: DataDir MoveProgress.out) that no commit has passed, and that are gone here since. */
    deletes: string[];
    count: number; bytes: number; lease_ms: number;
  };

