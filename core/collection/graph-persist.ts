import type { Clock } from '../base/clock.js';
import { Hnsw, type HnswOptions } from '../index/hnsw/hnsw.js';
import type { VectorStore } from '../index/vector-store.js';
import type { GraphContents, GraphFileWriter, GraphMeta } from '../storage/graph-file.js';

/**
 * A collection's graph kept between opens (the file: core/storage/graph-file.ts). Slots are renumbered
 * by every recovery, so each node is written as the point it indexed (id, token index) and a fingerprint
 * of the vector, and read back onto the slot that holds that point with that vector now.
 */

/**
 * A graph file is used only when at most this share of its nodes has no slot now (deleted, or updated
 * since): each dropped node takes its links with it, and past a tenth the holes cost recall that a
 * rebuild would not.
 */
export const GRAPH_LOAD_DROPPED_SHARE_MAX = 0.1;
/**
 * Graphs of fewer nodes are not written: they rebuild quickly at open (in a worker), and a file would
 * cost a write for little.
 */
export const GRAPH_PERSIST_NODES_MIN = 1000;
/**
 * A graph is written again once this share of its nodes changed (inserted, deleted or updated) since
 * the last write: half the load bound, so the file on disk stays well inside it between writes.
 */
export const GRAPH_PERSIST_CHANGED_SHARE = 0.05;
/**
 * At most one background write per this many milliseconds (the close writes whatever changed): a
 * collection growing by small writes would otherwise rewrite its file every 5% of its size, which sums
 * to about twenty times the file's bytes over its growth.
 */
export const GRAPH_PERSIST_INTERVAL_MS = 30_000;

/** What the graph code needs of a collection's points. */
export interface GraphPoints {
  readonly store: VectorStore;
  /** The slot that holds token `tok` of point `id` (0 for a single-vector point), if any. */
  slotOfPoint(id: string, tok: number): number | undefined;
  /** The point of a live slot: its id and token index. */
  pointOfSlot(slot: number): { id: string; tok: number };
  isLive(slot: number): boolean;
}

/** The spec's side of a graph: a file built with anything else is not used. */
export interface GraphParams {
  m: number;
  efConstruction: number;
  kind: string;
  dim: number;
  quantization: string;
}

/**
 * A 64-bit fingerprint of a vector's bytes, as two 32-bit words (two multiply-rotate lanes over its
 * 32-bit words, each finished with murmur3's fmix32): tells an updated vector from the one a node indexed.
 * Not the routing hash (core/cluster/routing/xxh64.ts): its 64-bit arithmetic in 32-bit halves measured
 * about four times slower here, and this runs over every vector at each load and write of the file.
 */
export function vectorFingerprint(v: Float32Array, out: Uint32Array): void {
  const w = new Uint32Array(v.buffer, v.byteOffset, v.length);
  let a = 0x9747b28c ^ v.length;
  let b = 0x5bd1e995 ^ Math.imul(v.length, 0x27d4eb2f);
  for (let i = 0; i < w.length; i++) {
    const k = w[i];
    let k1 = Math.imul(k, 0xcc9e2d51);
    k1 = (k1 << 15) | (k1 >>> 17);
    a ^= Math.imul(k1, 0x1b873593);
    a = (a << 13) | (a >>> 19);
    a = (Math.imul(a, 5) + 0xe6546b64) | 0;
    let k2 = Math.imul(k ^ 0x85ebca6b, 0xc2b2ae35);
    k2 = (k2 << 17) | (k2 >>> 15);
    b ^= Math.imul(k2, 0x27d4eb2f);
    b = (b << 11) | (b >>> 21);
    b = (Math.imul(b, 9) + 0x165667b1) | 0;
  }
  a = fmix32(a ^ w.length);
  b = fmix32(b ^ Math.imul(w.length, 3));
  out[0] = (a + b) | 0;
  out[1] = (b + Math.imul(a, 0x2545f491)) | 0;
}

function fmix32(h: number): number {
  h ^= h >>> 16;
  h = Math.imul(h, 0x85ebca6b);
  h ^= h >>> 13;
  h = Math.imul(h, 0xc2b2ae35);
  return h ^ (h >>> 16);
}

/** Runs `step(i)` for i in [0, n), yielding to the event loop every `sliceMs`; false when `stop()` said so. */
async function sliced(n: number, clock: Clock, sliceMs: number, stop: () => boolean, step: (i: number) => void | Promise<void>): Promise<boolean> {
  let until = clock.monotonicMs() + sliceMs;
  for (let i = 0; i < n; i++) {
    if (stop()) return false;
    const r = step(i);
    if (r !== undefined) await r;
    if ((i & 63) === 63 && clock.monotonicMs() >= until) {
      await new Promise<void>((resolve) => setImmediate(resolve));
      until = clock.monotonicMs() + sliceMs;
    }
  }
  return !stop();
}

/**
 * Writes `graph`'s live nodes to `writer` in slices of the event loop. Nodes whose slot was deleted are
 * left out, and links to them. The graph may take inserts between slices: links to a node inserted
 * after the start are left out too (a reader inserts that point again). Resolves to the nodes written,
 * or null when `stop()` ended it (the writer is then aborted).
 */
export async function writeGraph(
  graph: Hnsw, points: GraphPoints, params: GraphParams, writer: GraphFileWriter,
  clock: Clock, sliceMs: number, stop: () => boolean,
): Promise<number | null> {
  const slots: number[] = [];
  const capacity = points.store.count;
  const nodeOf = new Int32Array(capacity).fill(-1);
  for (let s = 0; s < capacity; s++) {
    if (graph.has(s) && points.isLive(s)) {
      nodeOf[s] = slots.length;
      slots.push(s);
    }
  }
  const fp = new Uint32Array(2);
  let entry = -1;
  let entryLevel = -1;
  try {
    const done = await sliced(slots.length, clock, sliceMs, stop, (i) => {
      const s = slots[i];
      const level = graph.levelOf(s);
      if (level > entryLevel) {
        entry = i;
        entryLevel = level;
      }
      const links: number[][] = [];
      for (let l = 0; l <= level; l++) {
        const out: number[] = [];
        for (const to of graph.neighbors(s, l)) if (to < capacity && nodeOf[to] >= 0) out.push(nodeOf[to]);
        links.push(out);
      }
      const { id, tok } = points.pointOfSlot(s);
      vectorFingerprint(points.store.view(s), fp);
      return writer.addNode(id, tok, fp[0], fp[1], links);
    });
    if (!done) {
      await writer.abort();
      return null;
    }
    // The graph's own entry point when it is written, else a node of the highest level written.
    const own = graph.entryPoint;
    if (own >= 0 && own < capacity && nodeOf[own] >= 0) entry = nodeOf[own];
    await writer.finish({ entry, m: params.m, ef_construction: params.efConstruction, kind: params.kind, dim: params.dim, quantization: params.quantization });
    return slots.length;
  } catch (e) {
    await writer.abort();
    throw e;
  }
}

/**
 * The entry a restored graph gets: the file's own when it is mapped and of the top level mapped, else the
 * first mapped node of that level (-1 when none is mapped).
 */
function restoredEntry(file: GraphContents, slotOf: Int32Array): number {
  let top = -1;
  for (let i = 0; i < slotOf.length; i++) if (slotOf[i] >= 0 && (top < 0 || file.levels[i] > file.levels[top])) top = i;
  const own = file.meta.entry;
  return own >= 0 && own < slotOf.length && slotOf[own] >= 0 && file.levels[own] === file.levels[top] ? own : top;
}

/**
 * Unmaps (slotOf -1) the nodes a search from `entry` cannot reach, over the links between mapped nodes
 * at any level: the caller inserts their points again, with links both ways. A deleted point's node
 * stays in a graph in memory, and a point inserted next to it may link only to it; the file holds live
 * nodes only, so it kept that point with no link in or out, and searches missed it at every open after
 * (found by a review of the crash tests: seed 37 of graph-persist.test.ts's close). One walk, in slices
 * of the event loop. Resolves to how many were left out, or null when `stop()` ended it.
 */
async function leaveOutUnreachable(file: GraphContents, slotOf: Int32Array, entry: number, clock: Clock, sliceMs: number, stop: () => boolean): Promise<number | null> {
  const n = slotOf.length;
  if (entry < 0) return 0;
  const seen = new Uint8Array(n);
  const queue = new Int32Array(n);
  let head = 0;
  let tail = 0;
  seen[entry] = 1;
  queue[tail++] = entry;
  let until = clock.monotonicMs() + sliceMs;
  while (head < tail) {
    const i = queue[head++];
    let at = file.offsets[i];
    for (let l = 0; l <= file.levels[i]; l++) {
      const cnt = file.links[at++];
      for (let j = 0; j < cnt; j++) {
        const to = file.links[at + j];
        if (to < 0 || to >= n || seen[to] === 1 || slotOf[to] < 0) continue;
        seen[to] = 1;
        queue[tail++] = to;
      }
      at += cnt;
    }
    if ((head & 1023) === 0 && clock.monotonicMs() >= until) {
      if (stop()) return null;
      await new Promise<void>((resolve) => setImmediate(resolve));
      until = clock.monotonicMs() + sliceMs;
    }
  }
  let left = 0;
  for (let i = 0; i < n; i++) {
    if (slotOf[i] >= 0 && seen[i] === 0) {
      slotOf[i] = -1;
      left++;
    }
  }
  return stop() ? null : left;
}

export type GraphLoad =
  /** `dropped`: nodes with no point now; `unreachable`: nodes kept from the file but left out (leaveOutUnreachable). */
  | { ok: true; graph: Hnsw; nodes: number; dropped: number; unreachable: number }
  | { ok: false; reason: string };

/**
 * A graph read back onto the slots below `captured` (those `slots` lists, the live ones): each node
 * goes to the slot holding its point with the same vector, or is dropped, with the links to it. Refused
 * (ok false, with why) when the file was built with other parameters or too many nodes have no slot.
 * The graph returned lacks the live slots no node maps to; the caller inserts them.
 */
export async function loadGraph(
  file: GraphContents, points: GraphPoints, params: GraphParams, opts: HnswOptions, slots: Int32Array,
  clock: Clock, sliceMs: number, stop: () => boolean,
): Promise<GraphLoad> {
  const meta: GraphMeta = file.meta;
  const want = { m: params.m, ef_construction: params.efConstruction, kind: params.kind, dim: params.dim, quantization: params.quantization };
  const got = { m: meta.m, ef_construction: meta.ef_construction, kind: meta.kind, dim: meta.dim, quantization: meta.quantization };
  if (JSON.stringify(want) !== JSON.stringify(got)) return { ok: false, reason: `built with other parameters (${JSON.stringify(got)}, not ${JSON.stringify(want)})` };
  const n = meta.nodes;
  if (n === 0) return { ok: false, reason: 'the graph file is empty' };
  const captured = slots.length === 0 ? 0 : slots[slots.length - 1] + 1;
  const inCapture = new Uint8Array(captured);
  for (const s of slots) inCapture[s] = 1;
  const slotOf = new Int32Array(n).fill(-1);
  const claimed = new Uint8Array(captured);
  const fp = new Uint32Array(2);
  let dropped = 0;
  const mapped = await sliced(n, clock, sliceMs, stop, (i) => {
    const s = points.slotOfPoint(file.ids[i], file.toks[i]);
    if (s === undefined || s >= captured || inCapture[s] === 0 || claimed[s] === 1) {
      dropped++;
      return;
    }
    vectorFingerprint(points.store.view(s), fp);
    if (fp[0] !== file.fingerprints[2 * i] || fp[1] !== file.fingerprints[2 * i + 1]) {
      dropped++;
      return;
    }
    slotOf[i] = s;
    claimed[s] = 1;
  });
  if (!mapped) return { ok: false, reason: 'closed while loading' };
  if (dropped > n * GRAPH_LOAD_DROPPED_SHARE_MAX) return { ok: false, reason: `${dropped} of its ${n} nodes have no point now (more than ${GRAPH_LOAD_DROPPED_SHARE_MAX * 100}%)` };
  // Nodes no search reaches are inserted again, not counted as the file's holes: they were as unreachable
  // in the graph written (as built, 1,500 gaussian points of 64 leave none at m 16, 8% at m 4, a quarter at m 3).
  const entryNode = restoredEntry(file, slotOf);
  const unreachable = await leaveOutUnreachable(file, slotOf, entryNode, clock, sliceMs, stop);
  if (unreachable === null) return { ok: false, reason: 'closed while loading' };
  const kept = n - dropped - unreachable;
  // Inserting the live points the file lacks is cheaper than a rebuild only while they are the fewer.
  if (slots.length - kept > kept) return { ok: false, reason: `it holds ${kept} of ${slots.length} live points${unreachable > 0 ? ` (${unreachable} more unreachable)` : ''}` };
  const graph = new Hnsw(points.store, { ...opts, capacity: captured });
  const restored = await sliced(n, clock, sliceMs, stop, (i) => {
    const s = slotOf[i];
    if (s >= 0) graph.restoreNode(s, file.levels[i], file.links, file.offsets[i], slotOf);
  });
  if (!restored) return { ok: false, reason: 'closed while loading' };
  // The walk's start: mapped, of the top level mapped, and everything kept is reached from it.
  graph.finishRestore(slotOf[entryNode]);
  return { ok: true, graph, nodes: n, dropped, unreachable };
}
