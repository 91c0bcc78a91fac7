import { assert } from '../../base/assert.js';
import { xxh64 } from './xxh64.js';

/**
 * Rendezvous (highest random weight) hashing: a point belongs to the shard with the highest score
 * XXH64(shard id as 8 little-endian bytes || the point id's UTF-8 bytes, seed HRW_SEED). CONTRACT.md
 * section 11: shards are ranked by a hash of (shard id, point id), never of URLs, so a shard that moves
 * to another address keeps its data.
 *
 * - Adding a shard moves only the points the new shard wins (about 1/(n+1) of them); removing one moves
 *   only its own points, each to its next shard in `ranking` (which is why draining uses it).
 * - The answer depends on the set of shard ids only, never on their order.
 * - A point id is a string (core/base/names.ts: integer and UUID ids are imported as strings), hashed as
 *   its UTF-8 bytes: the same bytes the data directory stores.
 * - Equal scores (a 2^-64 event) go to the lower shard id, so the order is total.
 *
 * The shard ids are small non-negative integers issued by the coordinator and never reused.
 */

/** The fixed seed: changing it reassigns every point. ("svc-hrw1" as ASCII.) */
export const HRW_SEED_HI = 0x7376632d;
export const HRW_SEED_LO = 0x68727731;

const encoder = new TextEncoder();
/** 8 bytes of shard id, then the point id. Ids are at most 256 UTF-16 units (3 UTF-8 bytes each). */
let scratch = new Uint8Array(8 + 3 * 256);
const score = new Uint32Array(2);

/** Encodes the point id after the 8 shard-id bytes; returns the total length. */
function encodeId(id: string): number {
  if (8 + 3 * id.length > scratch.length) scratch = new Uint8Array(8 + 3 * id.length);
  const { read, written } = encoder.encodeInto(id, scratch.subarray(8));
  assert(read === id.length, 'a point id fits its UTF-8 scratch buffer');
  return 8 + written;
}

function checkShardId(s: number): void {
  assert(Number.isSafeInteger(s) && s >= 0, `a shard id is a non-negative integer (got ${s})`);
}

/** The score of one shard for the id already in `scratch`, in `score` (hi, lo). */
function scoreOf(shard: number, length: number): void {
  const lo = shard >>> 0;
  const hi = Math.floor(shard / 4294967296);
  scratch[0] = lo & 0xff; scratch[1] = (lo >>> 8) & 0xff; scratch[2] = (lo >>> 16) & 0xff; scratch[3] = lo >>> 24;
  scratch[4] = hi & 0xff; scratch[5] = (hi >>> 8) & 0xff; scratch[6] = (hi >>> 16) & 0xff; scratch[7] = hi >>> 24;
  xxh64(scratch, length, HRW_SEED_HI, HRW_SEED_LO, score);
}

/** Whether (ah, al, as) ranks before (bh, bl, bs): higher score first, then the lower shard id. */
function before(ah: number, al: number, as: number, bh: number, bl: number, bs: number): boolean {
  if (ah !== bh) return ah > bh;
  if (al !== bl) return al > bl;
  return as < bs;
}

/** The shard that owns `id` among `shardIds` (not empty). */
export function owner(id: string, shardIds: readonly number[]): number {
  assert(shardIds.length > 0, 'a point needs at least one shard to own it');
  const length = encodeId(id);
  let best = -1, bh = 0, bl = 0;
  for (const s of shardIds) {
    checkShardId(s);
    scoreOf(s, length);
    if (best < 0 || before(score[0], score[1], s, bh, bl, best)) {
      best = s; bh = score[0]; bl = score[1];
    }
  }
  return best;
}

/**
 * Every shard in the order it would own `id`: the owner first, then the next owner should the first go
 * (a drain), and so on. Duplicate ids in `shardIds` appear once.
 */
export function ranking(id: string, shardIds: readonly number[]): number[] {
  const length = encodeId(id);
  const scored: { s: number; h: number; l: number }[] = [];
  const seen = new Set<number>();
  for (const s of shardIds) {
    checkShardId(s);
    if (seen.has(s)) continue;
    seen.add(s);
    scoreOf(s, length);
    scored.push({ s, h: score[0], l: score[1] });
  }
  scored.sort((a, b) => (before(a.h, a.l, a.s, b.h, b.l, b.s) ? -1 : 1));
  return scored.map((x) => x.s);
}
