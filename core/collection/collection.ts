import { assert } from '../base/assert.js';
import type { Bitset } from '../base/bitset.js';
import type { Clock } from '../base/clock.js';
import { FetchOrder } from '../base/id-order.js';
import type { Limits } from '../base/limits.js';
import type { Payload } from '../base/model.js';
import type { SearchResult } from '../index/flat.js';
import { Hnsw, type HnswOptions } from '../index/hnsw/hnsw.js';
import type { DistanceKind } from '../index/kernels/kernel.js';
import { ScalarCodes } from '../index/scalar-codes.js';
import { VectorStore } from '../index/vector-store.js';
import { compileFilter, type CompiledFilter } from '../query/filter.js';
import { filterKey, PayloadIndex } from '../query/payload-index.js';
import { planFilteredSearch } from '../query/planner.js';
import type { DocRecord, Op, PayloadMode, PointRecord } from '../storage/codec.js';
import type { GraphContents, GraphFileWriter } from '../storage/graph-file.js';
import { docFromPayload, SparseIndex, type Bm25Corpus, type ScoredSlots } from '../text/sparse-index.js';
import {
  GRAPH_PERSIST_CHANGED_SHARE, GRAPH_PERSIST_INTERVAL_MS, GRAPH_PERSIST_NODES_MIN, loadGraph, writeGraph, type GraphParams, type GraphPoints,
} from './graph-persist.js';
import { LiveSet } from './live-set.js';
import { searchMulti, TokenSpans, type MultiReadable } from './multi-search.js';
import { SharedReadState, type MatchBits, type ReadViewHandle } from './shared-reads.js';
import { runDensePlan, type DensePlan } from './search-pool-plan.js';
import type { CollectionSpec } from './params.js';

/** Builds an HNSW graph over `slots` of `store`, normally in a worker thread (see core/index/hnsw). */
/**
 * Builds a graph over `slots`; `signal` aborts when the collection is closed or dropped (the build may
 * stop). With `from` (a graph read back from its file, holding some of `slots`), inserts the others
 * into it instead; a builder may also ignore it and build anew.
 */
export type IndexBuilder = (store: VectorStore, slots: Int32Array, opts: HnswOptions, signal?: AbortSignal, from?: Hnsw) => Promise<Hnsw>;

/**
 * Inserts `slots` at `levels` (drawn by `graph.drawLevels`, one per slot) into a copy of `graph`, which
 * keeps serving searches meanwhile unchanged, and resolves to the copy: the graph that `graph.insert` of
 * each slot in turn would have made (rebuild.ts: in a build worker, or inline for tests).
 */
export type GraphExtender = (store: VectorStore, graph: Hnsw, slots: Int32Array, levels: Int8Array, signal?: AbortSignal) => Promise<Hnsw>;

/** Where a collection's graph is kept between opens (DataDir: collections/<uid>/graph). */
export interface GraphFiles {
  /** Null when there is none; throws when it is damaged. */
  read(): Promise<GraphContents | null>;
  writer(): Promise<GraphFileWriter>;
}

export interface CollectionOptions {
  uid: string;
  spec: CollectionSpec;
  limits: Limits;
  clock: Clock;
  seed: number;
  buildIndex: IndexBuilder;
  /** Most milliseconds one slice of main-thread incremental inserts may take before yielding. */
  absorbSliceMs?: number;
  /** A tail of unindexed slots longer than this is rebuilt in a worker rather than inserted on the main thread. */
  absorbMax?: number;
  /**
   * Absorbs of more than ABSORB_INLINE_MAX slots insert into a copy of the graph off the main thread
   * (a read replica: its event loop applies the leader's records first). The graph is the one main-thread
   * inserts make: the same slots in the same order at the same levels. Absent: every absorb is inline.
   */
  extendGraph?: GraphExtender;
  onIndexError?: (e: unknown) => void;
  /** Absent: the graph is never written, and an open always rebuilds it. */
  graphFiles?: GraphFiles;
  /** A graph file not used, or not written (the collection rebuilds, and goes on). */
  onGraphFileWarning?: (message: string, detail: Record<string, unknown>) => void;
  /**
   * Ids, payloads, live slots and the graph's epoch kept in shared memory too, for request loops that
   * search the collection themselves (shared-reads.ts; a multi-loop `svc serve`). Absent: none of it.
   */
  sharedReads?: boolean;
}

const EMPTY: SearchResult = { slots: new Int32Array(0), dists: new Float32Array(0) };
/** With `extendGraph`: a tail up to this many slots is inserted on the main thread (a worker round trip costs more). */
export const ABSORB_INLINE_MAX = 32;
/** With `extendGraph`: most slots one off-thread absorb inserts before the graph is swapped (and copied again). */
export const ABSORB_BATCH_MAX = 4096;
/**
 * Scalar quantization learns each dimension's range once a collection holds this many live vectors
 * (searches traverse the float vectors before), and again from every rebuild's slots.
 */
export const SCALAR_TRAIN_MIN = 1024;
/** Distinct filters whose match bitsets a collection keeps between writes. */
const MATCH_CACHE_ENTRIES = 16;

/**
 * One collection in memory: slots of vectors in a shared VectorStore, their ids and payloads, the
 * payload and sparse indexes, and the HNSW graph with the spec's freshness state machine.
 *
 * Slots are append-only: an update takes a new slot and tombstones the old one. The graph covers the
 * slots below `indexedUpTo`; the tail above it is searched exactly, and tombstones are never accepted,
 * so every read sees every applied write even while the graph is stale (read-your-writes).
 */
export class Collection {
  readonly uid: string;
  readonly spec: CollectionSpec;
  readonly store: VectorStore;
  readonly payloadIndex: PayloadIndex;
  /** The BM25 and sparse-vector index: in shared memory with shared reads (request loops rank text too). */
  readonly sparse: SparseIndex;
  readonly kind: DistanceKind;
  /** The WAL sequence number of the last op applied. */
  appliedSeq = 0;
  /** Rebuilds completed (a metric). */
  rebuilds = 0;
  /** Graphs read back from the graph file instead of rebuilt (a metric; at most one per open). */
  graphLoads = 0;
  /** Graph files written. */
  graphWrites = 0;

  private readonly opts: CollectionOptions;
  private readonly ids: string[] = [];
  private readonly payloads: (Payload | null)[] = [];
  /** Point id -> its slot; for a multi-vector document, its first token's slot (which holds the payload). */
  private readonly idToSlot = new Map<string, number>();
  /** Multi-vector documents: id -> every token slot, first one first. */
  private readonly docTokens = new Map<string, Int32Array>();
  private readonly live: LiveSet;
  /** What request loops read (opts.sharedReads), or null. */
  readonly reads: SharedReadState | null;
  /** Multi-vector collections: the live first-token slots, one per document (the filter universe). */
  private readonly heads: LiveSet;
  /** Multi-vector collections with shared reads: each token's document, for request loops (multi-search.ts). */
  private readonly spans: TokenSpans | null;
  private graph: Hnsw | null = null;
  /** Scalar quantization: the codes graph searches traverse, written for every slot below `codedUpTo`. */
  private codes: ScalarCodes | null = null;
  private codedUpTo = 0;
  private indexedUpTo = 0;
  private stale = false;
  /** Counts writes the graph cannot absorb in place; a rebuild that saw it move leaves the collection stale. */
  private writeCounter = 0;
  private rebuilding: Promise<void> | null = null;
  private absorbing = false;
  /** The off-thread absorb in flight (extendGraph), if any: a rebuild waits for it (one build thread at a time). */
  private absorbBatch: Promise<void> | null = null;
  /** Slots off-thread absorbs inserted (a metric: read replicas). */
  absorbedOffThread = 0;
  private dropped = false;
  /** Aborted at drop (a close or a collection drop): a build in flight stops rather than run on unseen. */
  private readonly builds = new AbortController();
  /** The live ids in fetch order (points:fetch pages, a move's scan). */
  private readonly fetchOrder = new FetchOrder(() => this.idToSlot.keys());
  /** The next rebuild tries the graph file first (set once at open, by recovery). */
  private loadPending = false;
  /** Recovery is applying ops: no absorb (the rebuild at its end, or the graph file, covers them). */
  private recovering = false;
  private persisting: Promise<void> | null = null;
  /** Nodes of the graph file written or read in this process; -1: none known to be there. */
  private persistedNodes = -1;
  /** Graph nodes inserted, deleted or updated since that file (an estimate across rebuilds). */
  private graphChanges = 0;
  /** When the last background write of the graph file started. */
  private persistedAtMs = -Infinity;
  /** Ids changed since the last checkpoint capture: true = upserted, false = deleted. */
  private dirty = new Map<string, boolean>();
  private readonly waiters: (() => void)[] = [];
  /** Match bitsets of recent filters (least recently used first), valid at `matchCacheAt`. */
  private readonly matchCache = new Map<string, { bits: Bitset; count: number }>();
  private matchCacheAt = '';

  constructor(opts: CollectionOptions) {
    this.opts = opts;
    this.uid = opts.uid;
    this.spec = opts.spec;
    this.kind = opts.spec.metric === 'l2' ? 'l2' : 'ip';
    this.store = VectorStore.create({ dim: opts.spec.dim });
    this.payloadIndex = new PayloadIndex(opts.spec.filterable);
    this.reads = opts.sharedReads === true ? new SharedReadState() : null;
    this.live = this.reads !== null ? LiveSet.shared() : new LiveSet();
    this.heads = this.reads !== null && opts.spec.multivector ? LiveSet.shared() : new LiveSet();
    this.spans = this.reads !== null && opts.spec.multivector ? new TokenSpans() : null;
    this.sparse = new SparseIndex({ shared: this.reads !== null });
  }

  /** A request loop's handle on this collection (shared-reads.ts), or null without opts.sharedReads. */
  readHandle(): ReadViewHandle | null {
    if (this.reads === null || this.dropped) return null;
    this.publishGraph();
    const multi = this.spans === null ? null : { heads: this.heads.handle()!, spans: this.spans.buffer };
    return this.reads.handle(this.uid, this.spec, this.opts.limits, this.store.handle(), this.live.handle()!, this.sparse.handle(), multi);
  }

  /**
   * Thread `thread` ended without closing its views of this collection (a reader that died): the scratch
   * lanes it held in the store and in the codes readers open go back (lanes.ts); how many.
   */
  releaseLanesOf(thread: number): number {
    let n = this.store.releaseLanesOf(thread);
    for (const codes of new Set([this.codes, this.graph?.scalarCodes ?? null, this.reads?.codes ?? null])) n += codes?.releaseLanesOf(thread) ?? 0;
    return n;
  }

  /** Tells request loops the graph, its arrays or its indexed bound may have moved. */
  private publishGraph(): void {
    this.reads?.graphMoved(this.graph, this.indexedUpTo);
  }

  /** Points, or documents in a multi-vector collection. */
  get count(): number {
    return this.idToSlot.size;
  }

  get indexState(): 'current' | 'stale' {
    return this.isCurrent() ? 'current' : 'stale';
  }

  /** Current: the graph holds every live slot and no tombstone the rebuild has not accounted for. */
  isCurrent(): boolean {
    if (this.spec.index === 'flat') return true;
    return !this.stale && this.indexedUpTo >= this.store.count;
  }

  // ---------------------------------------------------------------- writes

  /**
   * Applies a durable op to memory. `bulk` ops are absorbed by a rebuild rather than inserts. Returns
   * the points (or documents) it wrote: for a delete or a payload update, those that were here.
   */
  apply(op: Op, seq: number, bulk = false): number {
    // Request loops' filtered searches hold their match bits only while no write runs or ran since.
    this.reads?.writeBegin();
    try {
      return this.applyNow(op, seq, bulk);
    } finally {
      this.reads?.writeEnd();
    }
  }

  private applyNow(op: Op, seq: number, bulk: boolean): number {
    let changed = 0;
    if (op.t === 'upsert') {
      for (const p of op.points) this.put(p);
      changed = op.points.length;
    } else if (op.t === 'upsert_docs') {
      for (const d of op.docs) this.putDoc(d);
      changed = op.docs.length;
    } else if (op.t === 'set_payload') {
      const updated = new Set<string>();
      for (const p of op.points) if (this.patchPayload(p.id, op.mode, p.payload)) updated.add(p.id);
      changed = updated.size;
    } else {
      for (const id of op.ids) {
        const slot = this.idToSlot.get(id);
        if (slot === undefined) continue;
        this.tombstone(slot);
        this.tombstoneTokens(id);
        this.idToSlot.delete(id);
        this.fetchOrder.remove(id);
        this.dirty.set(id, false);
        this.markUnabsorbable();
        changed++;
      }
    }
    if (bulk) this.markUnabsorbable();
    if (seq > this.appliedSeq) this.appliedSeq = seq;
    this.scheduleAbsorb();
    return changed;
  }

  /**
   * A point's payload replaced or merged (top-level keys of `patch` replace those keys) in place: same
   * slot, same vector, so the graph stays as it is; the payload and text indexes follow. False when the
   * point is not here.
   */
  private patchPayload(id: string, mode: PayloadMode, patch: Payload): boolean {
    const slot = this.idToSlot.get(id);
    if (slot === undefined) return false;
    const old = this.payloads[slot];
    // A new object: the old one may be held by a caller that read it.
    const next = mode === 'replace' ? { ...patch } : { ...(old ?? {}), ...patch };
    this.payloadIndex.remove(slot, old ?? undefined);
    this.payloads[slot] = next;
    this.reads?.payload(slot, next, this.liveSlots);
    this.payloadIndex.add(slot, next);
    if (!this.spec.multivector) {
      if (this.sparse.has(slot)) this.sparse.remove(slot);
      const doc = docFromPayload(next, Number.MAX_SAFE_INTEGER);
      if (doc !== null) this.sparse.set(slot, doc.terms, doc.weights);
    }
    this.dirty.set(id, true);
    return true;
  }

  /**
   * Scalar quantization: learns the ranges once there are enough vectors, writes the codes of every
   * new slot (before any graph can hold it) and has the graph traverse them.
   */
  private syncCodes(): void {
    if (this.spec.quantization !== 'scalar') return;
    const n = this.store.count;
    if (this.codes === null) {
      if (this.live.count < SCALAR_TRAIN_MIN) return;
      this.codes = ScalarCodes.train(this.store, this.live.slotsIn(0, n), this.kind);
      this.codedUpTo = 0;
    }
    if (this.codedUpTo < n) {
      this.codes.encodeRange(this.store, this.codedUpTo, n);
      this.codedUpTo = n;
    }
    if (this.graph !== null && this.graph.scalarCodes !== this.codes) {
      this.graph.attachCodes(this.codes);
      this.publishGraph();
    }
  }

  /**
   * A rebuild's codes: ranges learned again from the slots it indexes, written in slices of the event
   * loop while the graph is built in a worker. Slots appended meanwhile are written at the swap.
   */
  private async retrainCodes(slots: Int32Array, upTo: number): Promise<ScalarCodes | null> {
    if (this.spec.quantization !== 'scalar' || slots.length < SCALAR_TRAIN_MIN) return this.codes;
    const codes = ScalarCodes.train(this.store, slots, this.kind);
    const sliceMs = this.opts.absorbSliceMs ?? 4;
    let at = 0;
    while (at < upTo && !this.dropped) {
      const until = this.opts.clock.monotonicMs() + sliceMs;
      while (at < upTo) {
        codes.encode(at, this.store.view(at));
        at++;
        if ((at & 63) === 0 && this.opts.clock.monotonicMs() >= until) break;
      }
      if (at < upTo) await new Promise<void>((resolve) => setImmediate(resolve));
    }
    return codes;
  }

  private put(p: PointRecord): void {
    const old = this.idToSlot.get(p.id);
    const slot = this.store.add(p.vector);
    this.ids[slot] = p.id;
    this.payloads[slot] = p.payload;
    this.reads?.put(slot, p.id, p.payload);
    this.live.add(slot);
    // The old slot goes after the new one is live: a request loop reading meanwhile finds the point
    // (twice at most, which it hands to this thread), never not at all.
    if (old !== undefined) {
      this.tombstone(old);
      this.markUnabsorbable();
    }
    this.idToSlot.set(p.id, slot);
    if (old === undefined) this.fetchOrder.add(p.id);
    this.payloadIndex.add(slot, p.payload ?? undefined);
    const doc = docFromPayload(p.payload, Number.MAX_SAFE_INTEGER);
    if (doc !== null) this.sparse.set(slot, doc.terms, doc.weights);
    this.dirty.set(p.id, true);
  }

  /** A document is a group of token rows in the same store; the first token carries the payload. */
  private putDoc(d: DocRecord): void {
    const old = this.idToSlot.get(d.id);
    if (old !== undefined) {
      this.tombstone(old);
      this.tombstoneTokens(d.id);
      this.markUnabsorbable();
    }
    const dim = this.spec.dim;
    const slots = new Int32Array(d.count);
    for (let t = 0; t < d.count; t++) {
      const slot = this.store.add(d.vectors.subarray(t * dim, (t + 1) * dim));
      slots[t] = slot;
      this.ids[slot] = d.id;
      this.payloads[slot] = null;
    }
    const first = slots[0];
    this.payloads[first] = d.payload;
    if (this.spans !== null) {
      // Published before the tokens are live (a request loop reads a live token's document from them).
      assert(slots[d.count - 1] === first + d.count - 1, "a document's tokens are consecutive slots");
      this.spans.set(first, d.count);
      this.reads?.put(first, d.id, d.payload);
    }
    for (const slot of slots) this.live.add(slot);
    this.heads.add(first);
    this.idToSlot.set(d.id, first);
    if (old === undefined) this.fetchOrder.add(d.id);
    this.docTokens.set(d.id, slots);
    this.payloadIndex.add(first, d.payload ?? undefined);
    this.dirty.set(d.id, true);
  }

  private tombstoneTokens(id: string): void {
    const tokens = this.docTokens.get(id);
    if (tokens === undefined) return;
    for (const t of tokens) this.live.remove(t);
    this.heads.remove(tokens[0]);
    this.docTokens.delete(id);
  }

  private tombstone(slot: number): void {
    if (this.graph !== null) this.graphChanges++;
    this.live.remove(slot);
    this.payloadIndex.remove(slot, this.payloads[slot] ?? undefined);
    if (this.sparse.has(slot)) this.sparse.remove(slot);
    this.payloads[slot] = null;
    // Its shared id and payload records stay: a request loop that found the slot live just before
    // reads them after (as the vector stays in the store), until a compaction of the records.
    this.reads?.dead(slot, this.liveSlots);
  }

  /** The live slots now (a compaction of the shared records copies theirs). */
  private readonly liveSlots = (): Int32Array => this.live.slotsIn(0, this.store.count);

  private markUnabsorbable(): void {
    if (this.spec.index === 'flat') return;
    this.writeCounter++;
    if (this.graph !== null) this.stale = true;
  }

  // ---------------------------------------------------------------- index freshness

  /**
   * Called on a read: a stale collection starts one rebuild (never two at once) and the read is served
   * at once from the prior graph plus an exact scan of the tail.
   */
  onRead(): void {
    if (this.spec.index === 'flat' || this.dropped) return;
    const tail = this.store.count - this.indexedUpTo;
    // A failed build is reported through onIndexError; the read goes on with the prior graph.
    if (this.stale || (tail > this.absorbMax() && this.live.count > 0)) void this.rebuild().catch(() => undefined);
    else this.scheduleAbsorb();
  }

  /** Whether more new points wait for the graph than it absorbs in place (a bulk load): a rebuild's job. */
  bulkTailPending(): boolean {
    return this.spec.index !== 'flat' && this.store.count - this.indexedUpTo > this.absorbMax() && this.live.count > 0;
  }

  /** Resolves when the graph holds every write applied before the call (consistency: strong). */
  async settle(): Promise<void> {
    const target = this.store.count;
    while (!this.dropped && this.spec.index !== 'flat' && (this.stale || this.indexedUpTo < target)) {
      if (this.stale || target - this.indexedUpTo > this.absorbMax()) await this.rebuild();
      else {
        this.scheduleAbsorb();
        await new Promise<void>((resolve) => this.waiters.push(resolve));
      }
    }
  }

  /**
   * Until the graph holds every slot written before this call; later writes, and a rebuild a delete
   * made due, may still wait. Ends under a steady write load, where settle() may not (a follower's
   * readiness while its stream goes on).
   */
  async settleUpToNow(): Promise<void> {
    const target = this.store.count;
    while (!this.dropped && this.spec.index !== 'flat' && this.indexedUpTo < target) {
      // A rebuild in flight (or due) captures at least `target` slots by the time it ends or starts;
      // waiting for an absorb meanwhile could wait for as long as writes keep the collection stale.
      const running = this.rebuilding;
      if (running !== null || this.stale || target - this.indexedUpTo > this.absorbMax() || (this.graph === null && this.indexedUpTo > 0)) {
        const failed = await (running ?? this.rebuild()).then(() => false, () => true);
        if (failed) return; // reported by the rebuild; reads stay exact over the unindexed tail
        continue;
      }
      this.scheduleAbsorb();
      await new Promise<void>((resolve) => this.waiters.push(resolve));
    }
  }

  /** Starts (or joins) the one rebuild of this collection. */
  rebuild(): Promise<void> {
    if (this.rebuilding !== null) return this.rebuilding;
    this.recovering = false;
    const counterAtStart = this.writeCounter;
    const captured = this.store.count;
    const slots = this.live.slotsIn(0, captured);
    const o = this.spec.index_params;
    const opts: HnswOptions = { m: o.m, efConstruction: o.ef_construction, kind: this.kind, seed: this.opts.seed };
    this.rebuilding = (async () => {
      try {
        // An off-thread absorb in flight ends first (its graph is dropped: this one replaces it), so a
        // rebuild's workers never run beside it and take more of the store's scratch lanes.
        if (this.absorbBatch !== null) await this.absorbBatch;
        const loaded = this.loadPending ? await this.graphFromFile(slots, opts) : null;
        this.loadPending = false;
        const built = this.opts.buildIndex(this.store, slots, opts, this.builds.signal, loaded?.graph);
        // Awaited below; a build that fails while the codes are written must not count as unhandled.
        built.catch(() => undefined);
        const codes = await this.retrainCodes(slots, captured);
        const graph = await built;
        if (this.dropped) return;
        // The swap: a few assignments, no await between them.
        if (codes !== null) {
          if (codes !== this.codes) {
            codes.encodeRange(this.store, captured, this.store.count);
            this.codes = codes;
            this.codedUpTo = this.store.count;
          }
          graph.attachCodes(codes);
        }
        this.graph = graph;
        this.indexedUpTo = captured;
        this.publishGraph();
        this.stale = this.writeCounter !== counterAtStart;
        if (loaded !== null) {
          this.graphLoads++;
          this.persistedNodes = loaded.nodes;
          // Against the file: its dropped nodes, and the points inserted to complete it (what an absorb
          // did meanwhile went into the graph this one replaces).
          this.graphChanges = loaded.dropped + (slots.length - (loaded.nodes - loaded.dropped - loaded.unreachable));
        } else {
          this.rebuilds++;
          if (this.persistedNodes >= 0) this.graphChanges = Math.max(this.graphChanges, Math.abs(graph.size - this.persistedNodes));
        }
        this.maybePersist();
      } catch (e) {
        if (!this.dropped) this.opts.onIndexError?.(e);
        throw e;
      } finally {
        this.rebuilding = null;
      }
      if (this.stale) void this.rebuild().catch(() => undefined);
      else this.scheduleAbsorb();
    })();
    return this.rebuilding;
  }

  // ---------------------------------------------------------------- the graph file

  /** Whether the graph is kept in a file: not for a flat index, whose searches never read it. */
  private persists(): boolean {
    return this.opts.graphFiles !== undefined && this.spec.index !== 'flat';
  }

  /**
   * Recovery applies the segments and the WAL tail: until `endRecovery`, or the rebuild it starts, no
   * absorb runs. An absorb there ran on the main thread between the segment reads (every await gave it
   * a slice) and built a graph the rebuild, or the graph file, then replaced.
   */
  beginRecovery(): void {
    this.recovering = true;
  }

  /** Recovery is done and starts no rebuild (an empty collection): writes are absorbed again. */
  endRecovery(): void {
    this.recovering = false;
    this.scheduleAbsorb();
  }

  /** The next rebuild (recovery's) starts from the graph file when it can (graph-persist.ts). */
  expectGraphFile(): void {
    if (this.persists()) this.loadPending = true;
  }

  private graphParams(): GraphParams {
    const o = this.spec.index_params;
    return { m: o.m, efConstruction: o.ef_construction, kind: this.kind, dim: this.spec.dim, quantization: this.spec.quantization ?? 'none' };
  }

  private graphPoints(): GraphPoints {
    return {
      store: this.store,
      slotOfPoint: (id, tok) => {
        if (this.spec.multivector) return this.docTokens.get(id)?.[tok];
        return tok === 0 ? this.idToSlot.get(id) : undefined;
      },
      pointOfSlot: (slot) => {
        const id = this.ids[slot];
        const first = this.spec.multivector ? this.docTokens.get(id)?.[0] : undefined;
        return { id, tok: first === undefined ? 0 : slot - first };
      },
      isLive: (slot) => this.live.has(slot),
    };
  }

  /**
   * The graph file read back onto the captured slots, or null (none, damaged, of other parameters, or
   * too far from the points now: then the caller builds, as without a file). Never throws.
   */
  private async graphFromFile(slots: Int32Array, opts: HnswOptions): Promise<{ graph: Hnsw; nodes: number; dropped: number; unreachable: number } | null> {
    const files = this.opts.graphFiles;
    if (files === undefined) return null;
    const warn = (message: string, detail: Record<string, unknown>) => {
      if (!this.dropped) this.opts.onGraphFileWarning?.(`${message}; rebuilding the graph`, detail);
    };
    try {
      const file = await files.read();
      if (file === null || this.dropped) return null;
      const r = await loadGraph(file, this.graphPoints(), this.graphParams(), opts, slots, this.opts.clock, this.opts.absorbSliceMs ?? 4, () => this.dropped);
      if (r.ok) return r;
      warn('graph file not used', { reason: r.reason });
    } catch (e) {
      warn('graph file unreadable', { error: e instanceof Error ? e.message : String(e) });
    }
    return null;
  }

  /** Writes the graph when it changed enough since the file (or there is none), in the background. */
  private maybePersist(): void {
    const g = this.graph;
    if (!this.persists() || g === null || this.persisting !== null || this.dropped || this.loadPending) return;
    if (g.size < GRAPH_PERSIST_NODES_MIN) return;
    if (this.persistedNodes >= 0 && this.graphChanges < Math.max(1, this.persistedNodes * GRAPH_PERSIST_CHANGED_SHARE)) return;
    const now = this.opts.clock.monotonicMs();
    if (now - this.persistedAtMs < GRAPH_PERSIST_INTERVAL_MS) return;
    this.persistedAtMs = now;
    void this.persistGraph();
  }

  /**
   * At close: writes the graph if anything changed since the file (waiting for a write under way first).
   * Never throws (a failed write is a warning: the next open rebuilds).
   */
  async persistGraphAtClose(): Promise<void> {
    if (this.persisting !== null) await this.persisting;
    const g = this.graph;
    if (!this.persists() || g === null || this.dropped || g.size < GRAPH_PERSIST_NODES_MIN) return;
    if (this.persistedNodes >= 0 && this.graphChanges === 0) return;
    await this.persistGraph();
  }

  /** Writes the graph searches use now (the file: graph-file.ts), in slices of the event loop. Never rejects. */
  private persistGraph(): Promise<void> {
    if (this.persisting !== null) return this.persisting;
    const g = this.graph;
    const files = this.opts.graphFiles;
    if (g === null || files === undefined) return Promise.resolve();
    const changesAtStart = this.graphChanges;
    this.persisting = (async () => {
      try {
        const writer = await files.writer();
        const nodes = await writeGraph(g, this.graphPoints(), this.graphParams(), writer, this.opts.clock, this.opts.absorbSliceMs ?? 4, () => this.dropped);
        if (nodes !== null) {
          this.persistedNodes = nodes;
          this.graphChanges -= changesAtStart;
          this.graphWrites++;
        }
      } catch (e) {
        if (!this.dropped) this.opts.onGraphFileWarning?.('graph file not written', { error: e instanceof Error ? e.message : String(e) });
      } finally {
        this.persisting = null;
      }
    })();
    return this.persisting;
  }

  private absorbMax(): number {
    return this.opts.absorbMax ?? 5000;
  }

  /**
   * Inserts the small unindexed tail into the graph on the main thread, in bounded slices (or, with
   * extendGraph, in batches off it). Once started, an absorb goes on until the graph holds every slot,
   * whatever the tail grows to meanwhile.
   */
  private scheduleAbsorb(): void {
    if (this.dropped) return;
    // Every slot a graph may take has its codes first (a running absorb takes slots appended since it
    // started; an op that failed partway still added some).
    this.syncCodes();
    if (this.spec.index === 'flat' || this.absorbing || this.rebuilding !== null || this.recovering) return;
    const tail = this.store.count - this.indexedUpTo;
    if (tail === 0) {
      this.wake();
      return;
    }
    if (tail > this.absorbMax() || (this.graph === null && this.indexedUpTo > 0)) return; // a rebuild's job
    this.absorbing = true;
    setImmediate(this.absorbStep);
  }

  /** One slice of an absorb (absorbing is set), then the next one, until the tail is empty. */
  private readonly absorbStep = (): void => {
    if (this.dropped || this.rebuilding !== null) {
      this.absorbing = false;
      return;
    }
    if (this.graph === null) {
      const o = this.spec.index_params;
      this.graph = new Hnsw(this.store, { m: o.m, efConstruction: o.ef_construction, kind: this.kind, seed: this.opts.seed });
      this.graph.attachCodes(this.codes);
    }
    const extend = this.opts.extendGraph;
    if (extend !== undefined && this.graph.size > 0 && this.store.count - this.indexedUpTo > ABSORB_INLINE_MAX) {
      this.absorbBatch = this.absorbOffThread(extend, this.graph).finally(() => {
        this.absorbBatch = null;
      });
      return;
    }
    const until = this.opts.clock.monotonicMs() + (this.opts.absorbSliceMs ?? 4);
    while (this.indexedUpTo < this.store.count) {
      const slot = this.indexedUpTo;
      if (this.live.has(slot)) {
        this.graph.insert(slot);
        this.graphChanges++;
      }
      this.indexedUpTo++;
      // Checked after every insert: one insert of a high-dimensional point can take a millisecond or
      // more on a busy machine, and sixteen of them were enough to stall a replication stream's sends.
      if (this.opts.clock.monotonicMs() >= until) break;
    }
    this.publishGraph();
    this.absorbNext();
  };

  /** After a slice or a batch: the next one, or the absorb is done (waiters woken, the file maybe written). */
  private absorbNext(): void {
    if (this.indexedUpTo < this.store.count) {
      setImmediate(this.absorbStep);
    } else {
      this.absorbing = false;
      this.wake();
      this.maybePersist();
    }
  }

  /**
   * One batch of the tail inserted into a copy of `graph` off the main thread, then swapped in, and the
   * absorb goes on. The levels are drawn here from `graph`'s stream, in slot order, as inline inserts
   * draw them: both make the same graph. A rebuild started meanwhile supersedes the copy (and absorbs
   * again when it ends); a failure leaves the collection stale (the next read rebuilds it), reported.
   * Never rejects.
   */
  private async absorbOffThread(extend: GraphExtender, graph: Hnsw): Promise<void> {
    const from = this.indexedUpTo;
    const to = Math.min(this.store.count, from + ABSORB_BATCH_MAX);
    const slots = this.live.slotsIn(from, to);
    const levels = graph.drawLevels(slots.length);
    let next: Hnsw;
    try {
      next = await extend(this.store, graph, slots, levels, this.builds.signal);
    } catch (e) {
      this.absorbing = false;
      if (this.dropped) return;
      this.stale = true;
      this.opts.onIndexError?.(e);
      this.wake(); // a strong read waiting on this absorb starts the rebuild instead
      return;
    }
    if (this.dropped || this.rebuilding !== null || this.graph !== graph) {
      this.absorbing = false;
      return;
    }
    // The swap, a few assignments. Every slot below `to` had its codes before the batch began.
    next.attachCodes(this.codes);
    this.graph = next;
    this.indexedUpTo = to;
    this.publishGraph();
    this.graphChanges += slots.length;
    this.absorbedOffThread += slots.length;
    this.absorbNext();
  }

  private wake(): void {
    for (const w of this.waiters.splice(0)) w();
  }

  // ---------------------------------------------------------------- reads

  has(id: string): boolean {
    return this.idToSlot.has(id);
  }

  point(id: string): { slot: number; payload: Payload } | undefined {
    const slot = this.idToSlot.get(id);
    if (slot === undefined) return undefined;
    return { slot, payload: this.payloads[slot] ?? {} };
  }

  idOf(slot: number): string {
    return this.ids[slot];
  }

  payloadOf(slot: number): Payload {
    return this.payloads[slot] ?? {};
  }

  vectorOf(slot: number): number[] {
    return Array.from(this.store.view(slot));
  }

  /**
   * A filter's match bits for a request loop's searches (shared-reads.ts MatchBits), with the token
   * they hold at; null without shared reads. Throws what compiling the filter throws.
   */
  matchBits(filter: unknown): MatchBits | null {
    if (this.reads === null) return null;
    const { bits, count } = this.matching(compileFilter(filter, this.spec.filterable));
    // A copy: the bits may be the live set's own shared words, which move with the next write.
    return { words: bits.words.slice(), capacity: bits.capacity, count, token: this.reads.writes, journalAt: this.reads.journalHead };
  }

  /** Live slots matching a filter, or null for "every live slot". */
  matching(filter: CompiledFilter | undefined): { bits: ReturnType<LiveSet['bitset']>; count: number } {
    const universe = this.spec.multivector ? this.heads : this.live;
    const liveBits = universe.bitset();
    if (filter === undefined) return { bits: liveBits, count: universe.count };
    // Repeated filters reuse their match bitset while no payload (so no live slot) changed: every write
    // goes through payloadIndex.add/remove, which move its version. Callers only read the bitset.
    const at = `${this.payloadIndex.version}/${universe.count}/${liveBits.capacity}`;
    if (at !== this.matchCacheAt) {
      this.matchCache.clear();
      this.matchCacheAt = at;
    }
    const key = filterKey(filter);
    const hit = this.matchCache.get(key);
    if (hit !== undefined) {
      this.matchCache.delete(key);
      this.matchCache.set(key, hit);
      return hit;
    }
    const bits = this.payloadIndex.match(filter, liveBits);
    const entry = { bits, count: bits.count() };
    if (this.matchCache.size >= MATCH_CACHE_ENTRIES) this.matchCache.delete(this.matchCache.keys().next().value!);
    this.matchCache.set(key, entry);
    return entry;
  }

  /**
   * k nearest live slots (lower distance first). With a filter the planner picks an exact scan of the
   * matching slots or a filtered graph traversal; either way the result holds min(k, matches) hits.
   */
  searchDense(query: Float32Array, k: number, ef: number, filter?: CompiledFilter): SearchResult {
    // The common case, in this thread: no filter, no tombstone anywhere and no unindexed tail, so every
    // graph node is an answer and the traversal needs no accept test per node.
    const graph = this.graph;
    const n = this.store.count;
    if (filter === undefined && graph !== null && this.spec.index !== 'flat' && !this.spec.multivector
      && this.live.count === n && this.indexedUpTo === n && n > Math.max(ef, k)) {
      const r = graph.search(query, k, Math.max(ef, k));
      if (r.slots.length >= Math.min(k, n)) return r;
    }
    const plan = this.planDense(k, ef, filter);
    return plan === null ? EMPTY : runDensePlan(this.store, this.kind, this.graph, query, plan);
  }

  /**
   * The main thread's half of a dense search: the accept set, the planner's choice and the graph
   * bound, or null when nothing can match. `runDensePlan` executes it here or in a search worker.
   */
  planDense(k: number, ef: number, filter?: CompiledFilter): DensePlan | null {
    const { bits, count } = this.matching(filter);
    if (count === 0 || k === 0) return null;
    const want = Math.min(k, count);
    // Every slot below count is an answer: no filter, no tombstone, no multi-vector head set.
    const acceptAll = filter === undefined && !this.spec.multivector && this.live.count === this.store.count;
    const base = { bits, acceptAll, k, want, indexedUpTo: this.indexedUpTo, count: this.store.count };
    if (this.graph === null || this.spec.index === 'flat') return { ...base, mode: 'exact', ef: 0 };
    let graphEf = Math.max(ef, k);
    if (filter !== undefined) {
      const plan = planFilteredSearch({ matches: count, live: this.live.count, k, ef: graphEf }, { efMax: this.opts.limits.maxEfSearch });
      if (plan.kind === 'exact') return { ...base, mode: 'exact', ef: 0 };
      graphEf = Math.max(plan.ef, k);
    } else if (this.live.count <= graphEf) {
      return { ...base, mode: 'exact', ef: 0 };
    }
    return { ...base, mode: 'graph', ef: graphEf };
  }

  /**
   * Bytes of vectors (every slot written, at the store's padded width, until a compaction drops the
   * dead ones) and of the index searches read besides them: the graph (0 without one) and, with scalar
   * quantization, the codes. Payloads, ids and the text index live on the JavaScript heap and are not
   * counted.
   */
  memoryBytes(): { vectors: number; graph: number } {
    const codes = this.codes === null ? 0 : this.codes.bytesFor(this.codedUpTo);
    return { vectors: this.store.count * this.store.strideBytes, graph: (this.graph?.memoryBytes() ?? 0) + codes };
  }

  /** The graph searches read (null before the first build), for the search pool. */
  get searchGraph(): Hnsw | null {
    return this.graph;
  }

  /** Live points (or documents' token rows): what a search scans at most. */
  get liveCount(): number {
    return this.live.count;
  }

  /** Whether a slot is still live (a hit computed off-thread is checked against later deletes). */
  isLive(slot: number): boolean {
    return this.live.has(slot);
  }

  /** A document's token vectors (multi-vector collections). */
  tokensOf(id: string): number[][] {
    return [...(this.docTokens.get(id) ?? [])].map((slot) => Array.from(this.store.view(slot)));
  }

  /** Multi-vector search (multi-search.ts), over the live documents matching `filter`. */
  searchMulti(queries: Float32Array[], k: number, ef: number, filter?: CompiledFilter): { ids: string[]; scores: number[] } {
    return searchMulti(this.multiSource, this.matching(filter), queries, k, ef);
  }

  /** This collection as multi-search.ts reads it. */
  private readonly multiSource: MultiReadable = ((col: Collection): MultiReadable => ({
    get graph() { return col.graph; },
    get store() { return col.store; },
    get kind() { return col.kind; },
    get dim() { return col.spec.dim; },
    get flat() { return col.spec.index === 'flat'; },
    get maxEfSearch() { return col.opts.limits.maxEfSearch; },
    tokenLive: (slot) => col.live.has(slot),
    tail: () => col.live.slotsIn(col.indexedUpTo, col.store.count),
    headOf: (slot) => col.idToSlot.get(col.ids[slot])!,
    tokens: (head) => col.docTokens.get(col.ids[head])!,
    idOf: (head) => col.ids[head],
  }))(this);

  /**
   * BM25 over this collection's own corpus, or over `corpus` (the whole collection's, when it is
   * sharded): the k best, and every one tied with the k-th (SparseReader.collect).
   */
  searchBm25(terms: Uint32Array, k: number, filter?: CompiledFilter, corpus?: Bm25Corpus): ScoredSlots {
    const { bits } = this.matching(filter);
    return this.sparse.bm25(terms, k, (s) => bits.has(s), undefined, corpus, true);
  }

  /** The k best sparse dot products, and every one tied with the k-th. */
  searchSparseDot(indices: Uint32Array, values: Float32Array, k: number, filter?: CompiledFilter): ScoredSlots {
    const { bits } = this.matching(filter);
    return this.sparse.dot(indices, values, k, (s) => bits.has(s), true);
  }

  /** Contract score from an internal distance: cosine similarity, inner product, or Euclidean distance. */
  score(dist: number): number {
    return this.kind === 'l2' ? Math.sqrt(Math.max(0, dist)) : -dist;
  }

  /** The live ids in fetch order (the cursor's), kept up through insertions and deletions (FetchOrder). */
  idsSorted(): readonly string[] {
    return this.fetchOrder.ids();
  }

  slotOf(id: string): number | undefined {
    return this.idToSlot.get(id);
  }

  // ---------------------------------------------------------------- checkpoints

  /** Takes the ops that bring the last checkpoint up to `appliedSeq`; `restore` puts them back if the write fails. */
  captureDelta(): { ops: Op[]; uptoSeq: number; restore: () => void } {
    const taken = this.dirty;
    this.dirty = new Map();
    const upserts: string[] = [];
    const deletes: string[] = [];
    for (const [id, upserted] of taken) {
      if (upserted && this.idToSlot.has(id)) upserts.push(id);
      else deletes.push(id);
    }
    const ops: Op[] = [];
    if (deletes.length > 0) ops.push({ t: 'delete', ids: deletes });
    for (let i = 0; i < upserts.length; i += 1000) ops.push(this.upsertOp(upserts.slice(i, i + 1000)));
    return {
      ops,
      uptoSeq: this.appliedSeq,
      restore: () => {
        for (const [id, v] of taken) if (!this.dirty.has(id)) this.dirty.set(id, v);
      },
    };
  }

  /** Every live point, for a compacting checkpoint. */
  *captureAll(): Generator<Op> {
    let batch: string[] = [];
    for (const id of this.idToSlot.keys()) {
      batch.push(id);
      if (batch.length === 1000) {
        yield this.upsertOp(batch);
        batch = [];
      }
    }
    if (batch.length > 0) yield this.upsertOp(batch);
  }

  /** The whole records of these points (or documents), all here: what a rebalance batch sends. */
  recordsOf(ids: string[]): Op {
    return this.upsertOp(ids);
  }

  private upsertOp(ids: string[]): Op {
    if (this.spec.multivector) return { t: 'upsert_docs', docs: ids.map((id) => this.docRecord(id)) };
    return { t: 'upsert', points: ids.map((id) => this.record(this.idToSlot.get(id)!)) };
  }

  /** Everything applied so far is in the segments (recovery, after reading them). */
  markCheckpointed(): void {
    this.dirty.clear();
  }

  get dirtyCount(): number {
    return this.dirty.size;
  }

  private record(slot: number): PointRecord {
    return { id: this.ids[slot], vector: this.store.view(slot), payload: this.payloads[slot] };
  }

  private docRecord(id: string): DocRecord {
    const tokens = this.docTokens.get(id)!;
    const dim = this.spec.dim;
    const vectors = new Float32Array(tokens.length * dim);
    tokens.forEach((slot, t) => vectors.set(this.store.view(slot), t * dim));
    return { id, count: tokens.length, vectors, payload: this.payloads[tokens[0]] };
  }

  drop(): void {
    this.dropped = true;
    this.reads?.retire();
    this.builds.abort();
    this.wake();
    this.store.close();
  }
}
