import { SvcError, toSvcError } from '../../base/errors.js';
import { decodeOp, encodeOp, type DocRecord, type PointRecord } from '../../storage/codec.js';
import { owner } from '../routing/hrw.js';
import type { MoveRecord } from './rebalance.js';

/**
 * One source's part of a move (docs/cluster.md, Rebalancing), driven by the coordinator: ask the source
 * for a batch (it holds its writes meanwhile), write the batch's points on their owners in the target
 * set, then commit on the source (which deletes them and advances its cursor in one WAL record). The
 * source's cursor is the truth: a batch asked again after any failure is the same points (or those
 * after the last commit), and writing one twice is one upsert.
 */

/** A batch as a source answers it (core/collection/move.ts MoveBatchAnswer). */
export type BatchAnswer =
  | { done: true }
  | { done: false; token: string; collection: string; params: object; cursor: string; records: string[]; deletes: string[]; count: number; bytes: number };

/** What the mover asks of shards over the network (roles/coordinator/shard-client.ts implements it). */
export interface MoveClient {
  batch(url: string, body: { move: string; self: number; targets: readonly number[]; limit: number; lease_ms: number }): Promise<BatchAnswer>;
  commit(url: string, body: { move: string; token: string }): Promise<{ moved: number }>;
  apply(url: string, body: { collection: string; params: object; records: string[]; deletes: string[] }): Promise<{ applied: number; deleted: number }>;
}

export interface MoveSourceOptions {
  client: MoveClient;
  move: MoveRecord;
  source: { id: number; url: string };
  /** A target shard's URL by id (the map's). */
  urlOf(id: number): string;
  /** Points per batch (default 1000). */
  limit?: number;
  leaseMs?: number;
  /** Stops between batches. */
  signal?: AbortSignal;
  /** Told after each committed batch. */
  onBatch?(points: number, bytes: number): void;
  /**
   * How long one step answered `unavailable` is asked again before the move stops (default 30 s): a
   * consensus group's leader change (a second or two) and a shard's restart pass without the mover
   * forgetting what it knows (the ids of uncommitted batches). A batch or an apply asked again is
   * the same points; a commit asked again with its token is answered from the source's cursor.
   */
  retryMs?: number;
}

/** Waits before asking again: 100 ms doubling to 1 s. */
const RETRY_PAUSE_MS = [100, 200, 400, 800, 1000];

async function retrying<T>(o: MoveSourceOptions, fn: () => Promise<T>): Promise<T> {
  const until = performance.now() + (o.retryMs ?? 30_000);
  for (let i = 0; ; i++) {
    try {
      return await fn();
    } catch (e) {
      if (toSvcError(e).code !== 'unavailable' || performance.now() >= until || o.signal?.aborted === true) throw e;
      const ms = RETRY_PAUSE_MS[Math.min(i, RETRY_PAUSE_MS.length - 1)];
      await new Promise((r) => setTimeout(r, ms));
    }
  }
}

/** Most batches one call runs (each takes at least one point or advances the cursor by a scan). */
const BATCHES_MAX = 10_000_000;
/** Points per record in an apply body. */
const RECORD_POINTS_MAX = 1000;

/** Moves everything the source has to move; resolves once it answers done. */
export async function moveSource(o: MoveSourceOptions): Promise<void> {
  const { client, move, source } = o;
  let limit = o.limit ?? 1000;
  // By collection: ids of batches the source refused to commit (their lease had ended), which their
  // new owners may hold. The source names those deleted since, but only from memory: after a restart
  // of the source it cannot, and this list does. An id of it at or before a later batch's cursor that
  // the batch does not carry is gone from the source, so it goes from its new owner too.
  const unsure = new Map<string, Set<string>>();
  const paramsOf = new Map<string, object>();
  for (let i = 0; i < BATCHES_MAX; i++) {
    if (o.signal?.aborted === true) throw new SvcError('unavailable', 'the rebalance was stopped');
    const b = await retrying(o, () => client.batch(source.url, { move: move.id, self: source.id, targets: move.targets, limit, lease_ms: o.leaseMs ?? 5_000 }));
    if (b.done) {
      const left = [...unsure].filter(([, ids]) => ids.size > 0);
      if (left.length === 0) return;
      // Never sent again: every one of them is gone from the source.
      for (const [collection, ids] of left) await retrying(o, () => deleteOnOwners(o, collection, paramsOf.get(collection)!, [...ids]));
      unsure.clear();
      continue;
    }
    const carried = new Set(idsOf(b.records));
    const was = unsure.get(b.collection);
    const gone = was === undefined ? [] : [...was].filter((id) => id <= b.cursor && !carried.has(id));
    const groups = groupByOwner(b.records, [...new Set([...b.deletes, ...gone])], move.targets);
    await Promise.all([...groups].map(([to, g]) => retrying(o, () => client.apply(o.urlOf(to), { collection: b.collection, params: b.params, records: g.records, deletes: g.deletes }))));
    try {
      // Asked again with the same token while unanswered: a commit whose answer was lost (or that a
      // group's old leader proposed before it went) is answered from the source's cursor, never guessed.
      await retrying(o, () => client.commit(source.url, { move: move.id, token: b.token }));
    } catch (e) {
      // The lease ended first (the source let writes through): the next batch sends these points again
      // as they are now, and names those deleted meanwhile; smaller, so that it fits its lease.
      if (toSvcError(e).code === 'not_found') {
        limit = Math.max(1, Math.floor(limit / 2));
        paramsOf.set(b.collection, b.params);
        const set = unsure.get(b.collection) ?? new Set<string>();
        for (const id of carried) set.add(id);
        unsure.set(b.collection, set);
        continue;
      }
      throw e;
    }
    if (was !== undefined) for (const id of [...was]) if (id <= b.cursor) was.delete(id);
    o.onBatch?.(b.count, b.bytes);
  }
  throw new SvcError('internal', `source shard ${source.id} did not finish move ${move.id} within ${BATCHES_MAX} batches`);
}

/** The ids of a batch's records. */
function idsOf(records: readonly string[]): string[] {
  const out: string[] = [];
  for (const r of records) {
    const op = decodeOp(Buffer.from(r, 'base64'));
    if (op.t === 'upsert') for (const p of op.points) out.push(p.id);
    else if (op.t === 'upsert_docs') for (const d of op.docs) out.push(d.id);
  }
  return out;
}

/** Deletes ids on their owners in the target set (an apply with no records). */
async function deleteOnOwners(o: MoveSourceOptions, collection: string, params: object, ids: string[]): Promise<void> {
  const groups = groupByOwner([], ids, o.move.targets);
  await Promise.all([...groups].map(([to, g]) => o.client.apply(o.urlOf(to), { collection, params, records: [], deletes: g.deletes })));
}

/** A batch's records and deletes split by their owner in the target set, records re-encoded per owner. */
export function groupByOwner(records: readonly string[], deletes: readonly string[], targets: readonly number[]): Map<number, { records: string[]; deletes: string[] }> {
  const points = new Map<number, PointRecord[]>();
  const docs = new Map<number, DocRecord[]>();
  const push = <T>(m: Map<number, T[]>, k: number, v: T): void => {
    const l = m.get(k);
    if (l === undefined) m.set(k, [v]);
    else l.push(v);
  };
  for (const r of records) {
    const op = decodeOp(Buffer.from(r, 'base64'));
    if (op.t === 'upsert') for (const p of op.points) push(points, owner(p.id, targets), p);
    else if (op.t === 'upsert_docs') for (const d of op.docs) push(docs, owner(d.id, targets), d);
    else throw new SvcError('internal', `a move batch held a ${op.t} record`);
  }
  const out = new Map<number, { records: string[]; deletes: string[] }>();
  const group = (k: number) => {
    let g = out.get(k);
    if (g === undefined) out.set(k, g = { records: [], deletes: [] });
    return g;
  };
  const b64 = (bytes: Uint8Array): string => Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength).toString('base64');
  for (const [k, list] of points) for (let i = 0; i < list.length; i += RECORD_POINTS_MAX) group(k).records.push(b64(encodeOp({ t: 'upsert', points: list.slice(i, i + RECORD_POINTS_MAX) })));
  for (const [k, list] of docs) for (let i = 0; i < list.length; i += RECORD_POINTS_MAX) group(k).records.push(b64(encodeOp({ t: 'upsert_docs', docs: list.slice(i, i + RECORD_POINTS_MAX) })));
  for (const id of deletes) group(owner(id, targets)).deletes.push(id);
  return out;
}
