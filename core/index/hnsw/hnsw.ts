import { assert } from '../../base/assert.js';
import { invalidArgument } from '../../base/errors.js';
import { Prng } from '../../base/prng.js';
import type { SearchResult } from '../flat.js';
import { MaxHeap, MinHeap, nearestAscending } from '../heap.js';
import type { BatchFn, BelowFn, DistanceKind, DistFn, TouchFn } from '../kernels/kernel.js';
import type { CodeSpace, ScalarCodes, ScalarCodesHandle } from '../scalar-codes.js';
import type { VectorIndex } from '../vector-index.js';
import { BATCH_MAX, type VectorStore } from '../vector-store.js';

export interface HnswOptions {
  /** Links per node on upper levels; level 0 keeps 2m (hnswlib's M). */
  m: number;
  efConstruction: number;
  kind: DistanceKind;
  seed: number;
  /** Slots to size the graph for up front (it grows by doubling). */
  capacity?: number;
  /**
   * Load each candidate's cache lines before scoring a batch (default true; measured in bench/). Even
   * when on, a store under TOUCH_MIN_BYTES is not touched: it sits in cache and the pass only costs.
   */
  touch?: boolean;
}

/** The graph as typed arrays over SharedArrayBuffers: posting it to another thread copies nothing. */
export interface HnswData {
  m: number;
  efConstruction: number;
  kind: DistanceKind;
  seed: number;
  entry: number;
  maxLevel: number;
  size: number;
  upperUsed: number;
  /** capacity * (2m + 1): [count, links...] per slot. */
  level0: Int32Array;
  /** Level of each slot, -1 when the slot is not in the graph. */
  levels: Int8Array;
  /** Start of each slot's upper-level links in `upper` (levels 1..L, m + 1 ints each). */
  upperOffset: Int32Array;
  upper: Int32Array;
  /** The scalar codes searches traverse (null: the float vectors). */
  codes?: ScalarCodesHandle | null;
}

/** What a traversal reads: a scratch lane, the rows' layout and the kernel that scores them. */
interface Space extends CodeSpace {
  readonly below: BelowFn;
  readonly touch: TouchFn;
}

/** Both kinds of Space from one literal, so they share a hidden class and the search loop's loads stay monomorphic. */
function space(l: CodeSpace, below: BelowFn, touch: TouchFn): Space {
  return { ids: l.ids, out: l.out, idsI32: l.idsI32, outF32: l.outF32, base: l.base, stride: l.stride, n: l.n, below, touch };
}

const MAX_LEVEL = 30;

/**
 * Below this many bytes of vectors the touch pass is skipped. GloVe-100 (cosine, M 16) here: without
 * it +3-4% QPS at 2,000 vectors (0.8 MB), even at 10,000 (4 MB), -50% at 100,000 (40 MB).
 */
const TOUCH_MIN_BYTES = 4 << 20;
const META_LOCK = 0;
const META_ENTRY = 1;
const META_MAX_LEVEL = 2;
const META_SIZE = 3;
const META_WORDS = 4;

/** What the threads of a parallel build share besides the graph: a global lock word and per-node locks. */
export interface SharedSync {
  /** [global lock, entry, max level, size]. */
  meta: Int32Array;
  locks: Int32Array;
}

function spinLock(a: Int32Array, i: number): void {
  while (Atomics.compareExchange(a, i, 0, 1) !== 0) {
    // Contention is short (one list rewrite); yield the core briefly rather than burn it.
    Atomics.wait(a, i, 1, 0.01);
  }
}

function spinUnlock(a: Int32Array, i: number): void {
  Atomics.store(a, i, 0);
}

function sharedI32(n: number): Int32Array {
  return new Int32Array(new SharedArrayBuffer(Math.max(1, n) * 4));
}

/**
 * HNSW in flat memory, after hnswlib's hnswalg.h: nodes are store slots, level-0 links live in one
 * Int32Array, upper levels in a compact side array, visited marks are epoch-stamped, heaps are typed
 * arrays, and each expansion scores all unvisited neighbours in one batched kernel call.
 */
export class Hnsw implements VectorIndex {
  readonly store: VectorStore;
  readonly m: number;
  readonly efConstruction: number;
  readonly kind: DistanceKind;
  readonly seed: number;
  private readonly maxM0: number;
  private readonly l0Stride: number;
  private readonly levelMult: number;
  private readonly prng: Prng;
  private readonly touchOn: boolean;
  private entry = -1;
  private maxLevel = -1;
  private sizeNodes = 0;
  private capacityNodes = 0;
  private level0: Int32Array;
  private levels: Int8Array;
  private upperOffset: Int32Array;
  private upper: Int32Array;
  private upperUsed = 0;
  private visited: Uint16Array;
  private epoch = 0;
  /** Where searchLayer leaves its early loads (see there), so the JIT cannot drop them. */
  private sink = 0;
  private readonly top = new MaxHeap(256);
  private readonly cand = new MinHeap(256);
  private readonly shrink = new MaxHeap(64);
  private readonly selected: Int32Array;
  /** Per-node spin locks, only during a parallel build. */
  private locks: Int32Array | undefined;
  private orderId = new Int32Array(256);
  private orderD = new Float32Array(256);
  private readonly dist: DistFn;
  private readonly batch: BatchFn;
  /** The float vectors: builds always, searches without codes. */
  private readonly f32: Space;
  private codes: ScalarCodes | null = null;
  private codeSpace: Space | null = null;
  /** Moves whenever an array `serialize` hands out is replaced (see `arraysVersion`). */
  private arrays = 0;

  constructor(store: VectorStore, opts: HnswOptions) {
    const { m, efConstruction } = opts;
    if (!Number.isInteger(m) || m < 2 || 2 * m > BATCH_MAX) throw invalidArgument(`m must be in 2..${BATCH_MAX / 2}, got ${m}`);
    if (!Number.isInteger(efConstruction) || efConstruction < 1) {
      throw invalidArgument(`efConstruction must be a positive integer, got ${efConstruction}`);
    }
    this.store = store;
    this.m = m;
    this.efConstruction = efConstruction;
    this.kind = opts.kind;
    this.seed = opts.seed;
    this.maxM0 = 2 * m;
    this.l0Stride = 2 * m + 1;
    this.levelMult = 1 / Math.log(m);
    this.prng = new Prng(opts.seed);
    this.touchOn = opts.touch ?? true;
    const cap = Math.max(16, opts.capacity ?? store.count);
    this.level0 = sharedI32(cap * this.l0Stride);
    this.levels = new Int8Array(new SharedArrayBuffer(cap)).fill(-1);
    this.upperOffset = sharedI32(cap);
    this.upper = sharedI32(Math.max(64, cap >> 2));
    this.visited = new Uint16Array(cap);
    this.capacityNodes = cap;
    this.selected = new Int32Array(this.maxM0 + 1);
    const fns = store.kernel.fns(opts.kind);
    this.dist = fns.dist;
    this.batch = fns.batch;
    const lane = store.lane;
    this.f32 = space(
      { ids: lane.ids, out: lane.out, idsI32: lane.idsI32, outF32: lane.outF32, base: store.vectorsBase, stride: store.strideBytes, n: store.paddedDim },
      fns.below,
      store.kernel.touch,
    );
  }

  /**
   * Searches from now on traverse `codes` (scalar quantization; null: the float vectors) and re-score
   * their ef candidates exactly. Every slot the graph holds must have its codes written first.
   */
  attachCodes(codes: ScalarCodes | null): void {
    assert(codes === null || (codes.dim === this.store.dim && codes.kind === this.kind), 'scalar codes do not match the graph');
    this.codes = codes;
    this.arrays++;
    this.codeSpace = codes === null ? null : space(codes.space, codes.kernel.sq8, codes.kernel.touch);
  }

  /** The codes searches traverse, if any. */
  get scalarCodes(): ScalarCodes | null {
    return this.codes;
  }

  /** Nodes in the graph. */
  get size(): number {
    return this.sizeNodes;
  }

  /**
   * Changes whenever one of the arrays (or the codes) `serialize` hands out is replaced by a growth: a
   * reader on another thread holding the old ones needs the new ones (search-pool.ts).
   */
  get arraysVersion(): number {
    return this.arrays;
  }

  /** The entry point (-1 when empty) and its level: what a reader adopts with `adoptTop`. */
  get entryPoint(): number {
    return this.entry;
  }

  get topLevel(): number {
    return this.maxLevel;
  }

  has(slot: number): boolean {
    return slot >= 0 && slot < this.capacityNodes && this.levels[slot] >= 0;
  }

  /** Inserts builds the graph one slot at a time (hnswlib's addPoint). */
  static build(store: VectorStore, slots: Int32Array, opts: HnswOptions): Hnsw {
    let max = -1;
    for (let i = 0; i < slots.length; i++) if (slots[i] > max) max = slots[i];
    const h = new Hnsw(store, { ...opts, capacity: Math.max(opts.capacity ?? 0, max + 1) });
    for (let i = 0; i < slots.length; i++) h.insert(slots[i]);
    return h;
  }

  insert(slot: number): void {
    this.insertAtLevel(slot, this.drawLevel());
  }

  /**
   * `insert` with the level drawn beforehand (`drawLevels`): what a thread extending a copy of this
   * graph does, so that the copy becomes the graph `insert` would have made here.
   */
  insertAtLevel(slot: number, level: number): void {
    assert(slot >= 0 && slot < this.store.count, `slot ${slot} is not in the store`);
    assert(Number.isInteger(level) && level >= 0 && level <= MAX_LEVEL, `level ${level} out of range`);
    this.ensureCapacity(slot + 1);
    assert(this.levels[slot] < 0, `slot ${slot} is already in the graph`);
    this.allocUpper(slot, level);
    this.levels[slot] = level;
    this.level0[slot * this.l0Stride] = 0;
    this.sizeNodes++;
    if (this.entry < 0) {
      this.entry = slot;
      this.maxLevel = level;
      return;
    }
    this.link(slot, level, this.entry, this.maxLevel);
    if (level > this.maxLevel) {
      this.entry = slot;
      this.maxLevel = level;
    }
  }

  /** Space for a node's upper-level links (levels 1..level), zeroed. */
  private allocUpper(slot: number, level: number): void {
    if (level <= 0) return;
    const need = level * (this.m + 1);
    if (this.upperUsed + need > this.upper.length) {
      const bigger = sharedI32(Math.max(this.upper.length * 2, this.upperUsed + need));
      bigger.set(this.upper);
      this.upper = bigger;
      this.arrays++;
    }
    this.upperOffset[slot] = this.upperUsed;
    this.upper.fill(0, this.upperUsed, this.upperUsed + need);
    this.upperUsed += need;
  }

  /** A slot's level in the graph, -1 when it is not in it. */
  levelOf(slot: number): number {
    return this.has(slot) ? this.levels[slot] : -1;
  }

  /**
   * A graph read back from a file (core/collection/graph-persist.ts), one node at a time into an empty
   * graph: `slot` at `level`, its links at `src[at..]` as they are kept in memory (per level 0..level a
   * count, then node numbers), each node number mapped to its slot by `slotOf` (-1: the node was
   * dropped, and so is the link). Returns where the next node's links start. Throws on a list that does
   * not fit this graph's parameters. `finishRestore` sets the entry point once every node is in.
   */
  restoreNode(slot: number, level: number, src: Int32Array, at: number, slotOf: Int32Array): number {
    assert(slot >= 0 && slot < this.store.count && this.levels[slot] < 0, `slot ${slot} cannot take a restored node`);
    assert(level >= 0 && level <= MAX_LEVEL, `level ${level} out of range`);
    this.ensureCapacity(slot + 1);
    this.allocUpper(slot, level);
    this.levels[slot] = level;
    for (let l = 0; l <= level; l++) {
      const cnt = src[at++];
      assert(cnt >= 0 && cnt <= (l === 0 ? this.maxM0 : this.m), `a restored list of ${cnt} links at level ${l}`);
      const [arr, off] = this.linksAt(slot, l);
      let kept = 0;
      for (let j = 0; j < cnt; j++) {
        const to = slotOf[src[at + j]];
        if (to >= 0 && to !== slot) arr[off + 1 + kept++] = to;
      }
      arr[off] = kept;
      at += cnt;
    }
    this.sizeNodes++;
    return at;
  }

  /** The entry point of a restored graph (a node of the top level). */
  finishRestore(entry: number): void {
    assert(this.has(entry), 'the entry point of a restored graph is in it');
    this.entry = entry;
    this.maxLevel = this.levels[entry];
  }

  /**
   * Parallel build (see build-worker.ts): inserts `slot` with a pre-drawn level into a graph whose
   * arrays several threads share. Upper-level space was laid out up front; neighbour lists are changed
   * under a per-node spin lock (Atomics), and the entry point under a global one, held for the whole
   * insert when the node raises the top level (as hnswlib does). Readers do not lock: a list being
   * rewritten holds valid slots throughout, and its count is published last with Atomics.store.
   */
  insertConcurrent(slot: number, level: number, sync: SharedSync): void {
    const meta = sync.meta;
    this.locks = sync.locks;
    this.level0[slot * this.l0Stride] = 0;
    Atomics.store(this.levels, slot, level);
    spinLock(meta, META_LOCK);
    const entry = meta[META_ENTRY];
    const maxLevel = meta[META_MAX_LEVEL];
    const raises = level > maxLevel;
    if (!raises) spinUnlock(meta, META_LOCK);
    try {
      if (entry >= 0) this.link(slot, level, entry, maxLevel);
      if (raises) {
        meta[META_ENTRY] = slot;
        meta[META_MAX_LEVEL] = level;
      }
      Atomics.add(meta, META_SIZE, 1);
    } finally {
      if (raises) spinUnlock(meta, META_LOCK);
    }
  }

  /** Draws levels for `n` inserts from this graph's seeded stream (what `insert` would draw). */
  drawLevels(n: number): Int8Array {
    const out = new Int8Array(new SharedArrayBuffer(Math.max(1, n)));
    for (let i = 0; i < n; i++) out[i] = this.drawLevel();
    return out;
  }

  /**
   * Prepares an empty graph for a parallel build of `slots` with pre-drawn `levels`: sizes every array
   * so nothing grows while threads share them, and lays out the upper-level links.
   */
  prepareShared(slots: Int32Array, levels: Int8Array): SharedSync {
    assert(this.sizeNodes === 0, 'a parallel build starts from an empty graph');
    let max = 0;
    let need = 0;
    for (let i = 0; i < slots.length; i++) {
      max = Math.max(max, slots[i]);
      need += levels[i] * (this.m + 1);
    }
    this.ensureCapacity(max + 1);
    this.upper = sharedI32(need);
    this.arrays++;
    let at = 0;
    for (let i = 0; i < slots.length; i++) {
      if (levels[i] > 0) {
        this.upperOffset[slots[i]] = at;
        at += levels[i] * (this.m + 1);
      }
    }
    this.upperUsed = need;
    const meta = sharedI32(META_WORDS);
    meta[META_ENTRY] = -1;
    meta[META_MAX_LEVEL] = -1;
    return { meta, locks: sharedI32(this.capacityNodes) };
  }

  /** Adopts the entry point and size a parallel build left in `sync`. */
  finishShared(sync: SharedSync): void {
    this.entry = Atomics.load(sync.meta, META_ENTRY);
    this.maxLevel = Atomics.load(sync.meta, META_MAX_LEVEL);
    this.sizeNodes = Atomics.load(sync.meta, META_SIZE);
    this.locks = undefined;
  }

  private drawLevel(): number {
    let u = this.prng.next();
    if (u === 0) u = 1e-12;
    return Math.min(MAX_LEVEL, Math.floor(-Math.log(u) * this.levelMult));
  }

  /** Links a node whose level is set into the graph below `entry` (hnswlib's addPoint, after the level draw). */
  private link(slot: number, level: number, entry: number, maxLevel: number): void {
    const q = this.store.offsetOf(slot);
    let cur = entry;
    let curDist = this.dist(q, this.store.offsetOf(cur), this.store.paddedDim);
    if (level < maxLevel) [cur, curDist] = this.greedy(this.f32, q, cur, curDist, maxLevel, level + 1);
    for (let l = Math.min(level, maxLevel); l >= 0; l--) {
      this.searchLayer(this.f32, q, cur, curDist, this.efConstruction, l, undefined);
      const nSel = this.selectHeuristic(this.top, this.m);
      this.connect(slot, l, nSel);
      // hnswlib continues from the closest selected neighbour.
      cur = this.selected[0];
      curDist = this.dist(q, this.store.offsetOf(cur), this.store.paddedDim);
    }
  }

  /**
   * k nearest accepted slots, nearest first. With `accept` the filter runs inside the traversal:
   * rejected nodes are still expanded (they keep the graph connected) but never enter the results,
   * and the search continues until it holds ef accepted nodes or runs out of frontier.
   */
  search(query: Float32Array, k: number, ef: number, accept?: (slot: number) => boolean): SearchResult {
    if (!Number.isInteger(k) || k < 0) throw invalidArgument(`k must be a non-negative integer, got ${k}`);
    const top = this.top;
    top.clear();
    if (this.entry < 0 || k === 0) return nearestAscending(top, k);
    const codes = this.codes;
    const sp = this.codeSpace ?? this.f32;
    const q = codes === null ? this.store.loadQuery(query) : codes.loadQuery(query);
    let cur = this.entry;
    sp.idsI32[0] = cur;
    sp.below(q, sp.base, sp.stride, sp.ids, 1, sp.out, sp.n, Infinity);
    let curDist = sp.outF32[0];
    if (this.maxLevel > 0) [cur, curDist] = this.greedy(sp, q, cur, curDist, this.maxLevel, 1);
    this.searchLayer(sp, q, cur, curDist, Math.max(ef, k), 0, accept);
    if (codes !== null) this.rescore(query);
    return nearestAscending(top, k);
  }

  /**
   * Replaces the approximate distances in `this.top` by exact ones over the float vectors, in kernel
   * calls of at most BATCH_MAX (a lane's size; ef and k may be larger).
   */
  private rescore(query: Float32Array): void {
    const top = this.top;
    const n = top.size;
    this.orderScratch(n);
    const cands = this.orderId;
    cands.set(top.id.subarray(0, n));
    top.clear();
    const store = this.store;
    const { ids, out, idsI32, outF32 } = store.lane;
    const q = store.loadQuery(query);
    // The candidates' float rows are scattered: start every miss before the kernel reads them in turn
    // (MNIST 60k, ef 14: +3%).
    const touch = this.touchOn && store.count * store.strideBytes >= TOUCH_MIN_BYTES;
    for (let from = 0; from < n; from += BATCH_MAX) {
      const cnt = Math.min(BATCH_MAX, n - from);
      for (let i = 0; i < cnt; i++) idsI32[i] = cands[from + i];
      if (touch && cnt > 1) this.f32.touch(store.vectorsBase, store.strideBytes, ids, cnt, store.strideBytes);
      this.batch(q, store.vectorsBase, store.strideBytes, ids, cnt, out, store.paddedDim);
      for (let i = 0; i < cnt; i++) top.push(outF32[i], idsI32[i]);
    }
  }

  /**
   * Bytes this graph holds: its link arrays as allocated (capacity grows by doubling, so up to twice
   * what the nodes use), the upper-level links in use, and the visited marks. The vectors are the
   * store's.
   */
  memoryBytes(): number {
    return this.level0.byteLength + this.levels.byteLength + this.upperOffset.byteLength + this.upperUsed * 4 + this.visited.byteLength;
  }

  /** Neighbours of a slot at a level (for tests and diagnostics). */
  neighbors(slot: number, level = 0): Int32Array {
    if (!this.has(slot) || this.levels[slot] < level) return new Int32Array(0);
    const [arr, off] = this.linksAt(slot, level);
    return arr.slice(off + 1, off + 1 + arr[off]);
  }

  serialize(): HnswData {
    return {
      m: this.m,
      efConstruction: this.efConstruction,
      kind: this.kind,
      seed: this.seed,
      entry: this.entry,
      maxLevel: this.maxLevel,
      size: this.sizeNodes,
      upperUsed: this.upperUsed,
      level0: this.level0,
      levels: this.levels,
      upperOffset: this.upperOffset,
      upper: this.upper,
      codes: this.codes?.handle() ?? null,
    };
  }

  /**
   * The level stream continues where `from`'s is (a graph that replaces `from`, extended from a copy of
   * it with levels `from` drew): later inserts draw what they would have drawn in `from`.
   */
  continueLevelsOf(from: Hnsw): void {
    this.prng.copyFrom(from.prng);
  }

  /** Copies of the arrays (a thread may extend them while readers keep the originals). */
  static copyData(data: HnswData): HnswData {
    const copy = <T extends Int32Array | Int8Array>(a: T): T => {
      const out = new (a.constructor as new (b: SharedArrayBuffer) => T)(new SharedArrayBuffer(a.byteLength));
      out.set(a);
      return out;
    };
    return { ...data, level0: copy(data.level0), levels: copy(data.levels), upperOffset: copy(data.upperOffset), upper: copy(data.upper) };
  }

  /** Wraps serialized arrays without copying; later inserts continue with a fresh seeded level stream. */
  static deserialize(store: VectorStore, data: HnswData, opts: { touch?: boolean } = {}): Hnsw {
    const cap = data.levels.length;
    assert(data.level0.length === cap * (2 * data.m + 1), 'hnsw data: level0 length does not match capacity');
    assert(data.upperOffset.length === cap, 'hnsw data: upperOffset length does not match capacity');
    const h = new Hnsw(store, {
      m: data.m,
      efConstruction: data.efConstruction,
      kind: data.kind,
      seed: (data.seed + data.size) | 0,
      capacity: 1,
      touch: opts.touch,
    });
    h.level0 = data.level0;
    h.levels = data.levels;
    h.upperOffset = data.upperOffset;
    h.upper = data.upper;
    h.upperUsed = data.upperUsed;
    h.entry = data.entry;
    h.maxLevel = data.maxLevel;
    h.sizeNodes = data.size;
    h.capacityNodes = cap;
    h.visited = new Uint16Array(cap);
    return h;
  }

  /**
   * A reader over a writer's shared arrays (a search worker, core/collection/search-pool.ts) takes the
   * writer's entry point, top level and size as they were when a query was planned.
   */
  adoptTop(entry: number, maxLevel: number, size: number): void {
    this.entry = entry;
    this.maxLevel = maxLevel;
    this.sizeNodes = size;
  }

  // --- internals -------------------------------------------------------------------------------

  /** [array, offset of the count word] of a slot's links at a level. */
  private linksAt(slot: number, level: number): [Int32Array, number] {
    if (level === 0) return [this.level0, slot * this.l0Stride];
    return [this.upper, this.upperOffset[slot] + (level - 1) * (this.m + 1)];
  }

  /** Greedy descent with ef = 1 from level `from` down to level `to`. */
  private greedy(sp: Space, q: number, cur: number, curDist: number, from: number, to: number): [number, number] {
    const { ids, out, idsI32, outF32, base, stride, n, below } = sp;
    const upper = this.upper;
    const mp1 = this.m + 1;
    for (let level = from; level >= to; level--) {
      let changed = true;
      while (changed) {
        changed = false;
        const off = this.upperOffset[cur] + (level - 1) * mp1;
        const cnt = upper[off];
        for (let j = 0; j < cnt; j++) idsI32[j] = upper[off + 1 + j];
        const got = below(q, base, stride, ids, cnt, out, n, curDist);
        for (let j = 0; j < got; j++) {
          if (outF32[j] < curDist) {
            curDist = outF32[j];
            cur = idsI32[j];
            changed = true;
          }
        }
      }
    }
    return [cur, curDist];
  }

  private nextEpoch(): number {
    if (++this.epoch === 0x10000) {
      this.visited.fill(0);
      this.epoch = 1;
    }
    return this.epoch;
  }

  /**
   * Best-first search of one level; leaves up to ef results in `this.top`. The two heaps are worked on
   * inline over their typed arrays, without a tie-break on equal distances (as hnswlib): this loop is
   * where a query spends its time, and at low dimension the heap work costs as much as the distances.
   */
  private searchLayer(
    sp: Space,
    q: number,
    ep: number,
    epDist: number,
    ef: number,
    level: number,
    accept: ((slot: number) => boolean) | undefined,
  ): void {
    const { ids, out, idsI32, outF32, base, stride, n, below } = sp;
    const touch = this.touchOn && this.store.count * stride >= TOUCH_MIN_BYTES ? sp.touch : undefined;
    const visited = this.visited;
    const epoch = this.nextEpoch();
    const top = this.top;
    const cand = this.cand;
    if (top.d.length <= ef) {
      top.d = new Float32Array(ef + 1);
      top.id = new Int32Array(ef + 1);
    }
    // top: a max-heap of the best ef so far (tD, tI, tn); cand: a min-heap of the frontier (cD, cI, cn).
    const tD = top.d;
    const tI = top.id;
    let tn = 0;
    let cD = cand.d;
    let cI = cand.id;
    let cn = 0;
    visited[ep] = epoch;
    if (!accept || accept(ep)) {
      tD[0] = epDist;
      tI[0] = ep;
      tn = 1;
    }
    cD[0] = epDist;
    cI[0] = ep;
    cn = 1;
    let lowerBound = tn > 0 ? epDist : Infinity;
    let sink = 0;
    const links = level === 0 ? this.level0 : this.upper;
    const l0Stride = this.l0Stride;
    const mp1 = this.m + 1;
    const upperOffset = this.upperOffset;
    while (cn > 0) {
      const cd = cD[0];
      if (cd > lowerBound && (tn >= ef || !accept)) break;
      const c = cI[0];
      // Pop the nearest candidate: sift the last entry down from the root.
      if (--cn > 0) {
        // Bottom-up: the hole at the root goes down to a leaf along the nearer children (chosen
        // without a branch), then the last entry sifts up from there (it rarely climbs far).
        const ld = cD[cn];
        const li = cI[cn];
        let i = 0;
        let ch = 1;
        while (ch + 1 < cn) {
          ch += +(cD[ch + 1] < cD[ch]);
          cD[i] = cD[ch];
          cI[i] = cI[ch];
          i = ch;
          ch = 2 * i + 1;
        }
        if (ch < cn) {
          cD[i] = cD[ch];
          cI[i] = cI[ch];
          i = ch;
        }
        while (i > 0) {
          const p = (i - 1) >> 1;
          if (cD[p] <= ld) break;
          cD[i] = cD[p];
          cI[i] = cI[p];
          i = p;
        }
        cD[i] = ld;
        cI[i] = li;
      }
      const off = level === 0 ? c * l0Stride : upperOffset[c] + (level - 1) * mp1;
      const deg = links[off];
      let cnt = 0;
      // Branch-free: whether a neighbour was seen is a coin flip the CPU cannot predict.
      for (let j = 1; j <= deg; j++) {
        const nb = links[off + j];
        const fresh = visited[nb] ^ epoch;
        visited[nb] = epoch;
        idsI32[cnt] = nb;
        cnt += +(fresh !== 0);
      }
      if (cnt === 0) continue;
      // Load the head of the likely next expansion's link list now, so its cache miss overlaps the
      // kernel work below (JavaScript has no prefetch; the loaded word goes to a sink field).
      if (level === 0 && cn > 0) sink ^= links[cI[0] * l0Stride];
      if (touch !== undefined && cnt > 1) touch(base, stride, ids, cnt, stride);
      // Only candidates nearer than the current worst result can enter (the bound only tightens), so
      // the kernel packs those at the front and this loop skips the rest without a branch each.
      cnt = below(q, base, stride, ids, cnt, out, n, tn < ef ? Infinity : lowerBound);
      for (let j = 0; j < cnt; j++) {
        const d = outF32[j];
        if (tn < ef || d < lowerBound) {
          const nb = idsI32[j];
          // Push onto the frontier.
          if (cn === cD.length) {
            cand.size = cn;
            cand.push(d, nb); // grows the arrays
            cD = cand.d;
            cI = cand.id;
            cn = cand.size;
          } else {
            let i = cn++;
            while (i > 0) {
              const p = (i - 1) >> 1;
              if (cD[p] <= d) break;
              cD[i] = cD[p];
              cI[i] = cI[p];
              i = p;
            }
            cD[i] = d;
            cI[i] = nb;
          }
          if (!accept || accept(nb)) {
            if (tn < ef) {
              let i = tn++;
              while (i > 0) {
                const p = (i - 1) >> 1;
                if (tD[p] >= d) break;
                tD[i] = tD[p];
                tI[i] = tI[p];
                i = p;
              }
              tD[i] = d;
              tI[i] = nb;
            } else {
              // Replace the worst, bottom-up as in the pop above.
              let i = 0;
              let ch = 1;
              while (ch + 1 < tn) {
                ch += +(tD[ch + 1] > tD[ch]);
                tD[i] = tD[ch];
                tI[i] = tI[ch];
                i = ch;
                ch = 2 * i + 1;
              }
              if (ch < tn) {
                tD[i] = tD[ch];
                tI[i] = tI[ch];
                i = ch;
              }
              while (i > 0) {
                const p = (i - 1) >> 1;
                if (tD[p] >= d) break;
                tD[i] = tD[p];
                tI[i] = tI[p];
                i = p;
              }
              tD[i] = d;
              tI[i] = nb;
            }
            lowerBound = tD[0];
          }
        }
      }
    }
    top.size = tn;
    cand.size = 0;
    this.sink = sink;
  }

  /** Makes the ordering scratch arrays hold at least `n` entries. */
  private orderScratch(n: number): void {
    if (this.orderId.length >= n) return;
    this.orderId = new Int32Array(n * 2);
    this.orderD = new Float32Array(n * 2);
  }

  /**
   * hnswlib's getNeighborsByHeuristic2: walk candidates nearest first and keep one only if it is closer
   * to the base than to every neighbour kept so far. Consumes `heap`; leaves the kept slots, nearest
   * first, in `this.selected` and returns how many.
   */
  private selectHeuristic(heap: MaxHeap, mMax: number): number {
    const sel = this.selected;
    const store = this.store;
    const cnt = heap.size;
    this.orderScratch(cnt);
    const oId = this.orderId;
    const oD = this.orderD;
    for (let i = cnt - 1; i >= 0; i--) {
      oId[i] = heap.topId();
      oD[i] = heap.topD();
      heap.pop();
    }
    if (cnt <= mMax) {
      for (let i = 0; i < cnt; i++) sel[i] = oId[i];
      return cnt;
    }
    const { ids, out, idsI32, outF32 } = store.lane;
    const base = store.vectorsBase;
    const stride = store.strideBytes;
    const n = store.paddedDim;
    let nSel = 0;
    for (let i = 0; i < cnt && nSel < mMax; i++) {
      const e = oId[i];
      const de = oD[i];
      let good = true;
      if (nSel > 0) {
        this.batch(store.offsetOf(e), base, stride, ids, nSel, out, n);
        for (let j = 0; j < nSel; j++) {
          if (outF32[j] < de) {
            good = false;
            break;
          }
        }
      }
      if (good) idsI32[nSel++] = e;
    }
    for (let i = 0; i < nSel; i++) sel[i] = idsI32[i];
    return nSel;
  }

  /** Links `slot` to the selected neighbours at `level` and back, shrinking full lists heuristically. */
  private connect(slot: number, level: number, nSel: number): void {
    const locks = this.locks;
    const [arr, off] = this.linksAt(slot, level);
    // Copy: selectHeuristic below reuses this.selected while shrinking.
    // A concurrent insert can make a node reachable from itself: never link a node to itself.
    const chosen = this.selected.slice(0, nSel).filter((x) => x !== slot);
    nSel = chosen.length;
    const maxM = level === 0 ? this.maxM0 : this.m;
    const { idsI32 } = this.store.lane;
    if (locks) spinLock(locks, slot);
    let cnt = 0;
    for (let i = 0; i < nSel; i++) idsI32[cnt++] = chosen[i];
    // The list is empty here but in a parallel build, where an insert that reached this node before its
    // own list was written linked itself in. Overwriting would drop that link and could leave the other
    // node with no way in; it stays beside this node's own choice (the heuristic prunes when too many).
    const had = arr[off];
    for (let j = 0; j < had; j++) {
      const x = arr[off + 1 + j];
      if (x !== slot && !chosen.includes(x)) idsI32[cnt++] = x;
    }
    this.keepNearest(slot, arr, off, cnt, maxM);
    if (locks) spinUnlock(locks, slot);
    for (let i = 0; i < nSel; i++) {
      const nb = chosen[i];
      const [na, no] = this.linksAt(nb, level);
      if (locks) spinLock(locks, nb);
      const deg = na[no];
      if (deg < maxM) {
        na[no + 1 + deg] = slot;
        Atomics.store(na, no, deg + 1);
      } else {
        for (let j = 0; j < deg; j++) idsI32[j] = na[no + 1 + j];
        idsI32[deg] = slot;
        this.keepNearest(nb, na, no, deg + 1, maxM);
      }
      if (locks) spinUnlock(locks, nb);
    }
    this.selected.set(chosen);
  }

  /**
   * Writes `node`'s link list at (arr, off) from the `cnt` candidates in the scratch lane's ids: all of
   * them when they fit in maxM, else the ones hnswlib's heuristic keeps. The caller holds the node's lock.
   */
  private keepNearest(node: number, arr: Int32Array, off: number, cnt: number, maxM: number): void {
    const store = this.store;
    const { ids, out, idsI32, outF32 } = store.lane;
    if (cnt <= maxM) {
      for (let j = 0; j < cnt; j++) arr[off + 1 + j] = idsI32[j];
      Atomics.store(arr, off, cnt);
      return;
    }
    this.batch(store.offsetOf(node), store.vectorsBase, store.strideBytes, ids, cnt, out, store.paddedDim);
    const heap = this.shrink;
    heap.clear();
    for (let j = 0; j < cnt; j++) heap.push(outF32[j], idsI32[j]);
    const kept = this.selectHeuristic(heap, maxM);
    for (let j = 0; j < kept; j++) arr[off + 1 + j] = this.selected[j];
    Atomics.store(arr, off, kept);
  }

  private ensureCapacity(slots: number): void {
    if (slots <= this.capacityNodes) return;
    const cap = Math.max(slots, this.capacityNodes * 2);
    const l0 = sharedI32(cap * this.l0Stride);
    l0.set(this.level0);
    this.level0 = l0;
    const lv = new Int8Array(new SharedArrayBuffer(cap)).fill(-1);
    lv.set(this.levels);
    this.levels = lv;
    const uo = sharedI32(cap);
    uo.set(this.upperOffset);
    this.upperOffset = uo;
    this.arrays++;
    const vis = new Uint16Array(cap);
    vis.set(this.visited);
    this.visited = vis;
    this.capacityNodes = cap;
  }
}
