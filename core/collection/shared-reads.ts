import { Bitset } from '../base/bitset.js';
import { growShared, growableShared } from '../base/growable.js';
import type { Limits } from '../base/limits.js';
import type { CountQuery, FetchQuery, GetOptions, Hit, HybridQuery, MultiVectorQuery, Payload, PointOutput, SearchQuery } from '../base/model.js';
import { after, compareFetchIds, mergeInFetchOrder } from '../base/id-order.js';
import { checkPointId } from '../base/names.js';
import { SharedIds, type SharedIdsHandle } from './shared-ids.js';
import { BODIES, bodyKeys } from '../base/bodies.js';
import type { SearchResult } from '../index/flat.js';
import { Hnsw, type HnswData } from '../index/hnsw/hnsw.js';
import type { DistanceKind } from '../index/kernels/kernel.js';
import { ScalarCodes } from '../index/scalar-codes.js';
import { VectorStore, type VectorStoreHandle } from '../index/vector-store.js';
import { SharedLiveView, type LiveSetHandle } from './live-set.js';
import type { CollectionSpec } from './params.js';
import { parseTokens, parseVector } from './points.js';
import { searchMulti, TokenSpans, type MultiReadable } from './multi-search.js';
import {
  checkObject, decodeCursor, encodeCursor, fusionDepth, parseBool, parseConsistency, parseDepth, parseEf, parseFetchLimit, parseK, parseQueryTerms, parseRrfK0,
} from './queries.js';
import { checkTextStats, corpusOf, fuseRankings, type Ranked, type Rankings, type RankingsBody } from '../query/ranking.js';
import { SparseReader, SparseTorn, validateSparse, type Bm25Corpus, type SparseDoc, type SparseHandle } from '../text/sparse-index.js';
import { compileFilter, evaluate, type CompiledFilter } from '../query/filter.js';
import { filterKey } from '../query/payload-index.js';
import { planFilteredSearch } from '../query/planner.js';
import { ExactScanRefused, runDensePlan, type DensePlan } from './search-pool-plan.js';
import { multiTiesById, tieAtCut, tiesById, widenTiesNow } from './ties.js';

/**
 * A collection read from another thread (issue 20): a request loop of a multi-loop server answers a plain
 * dense search itself, over shared memory, instead of handing it to the engine thread and back.
 *
 * The engine thread stays the only writer. What a search reads is already shared or is made so here:
 * - the vectors (VectorStore, a shared WebAssembly memory) and the graph's arrays (HnswData, as the search
 *   workers get them, search-pool.ts), published per graph epoch;
 * - the live slots (LiveSet.shared(), atomically written);
 * - each slot's id and payload as bytes (SharedRecords: an append-only arena and a per-slot index);
 * - a header: the graph epoch and what a plan needs of it (indexedUpTo, entry, top level, size) under a
 *   sequence lock, and a retired flag set when the collection is dropped or the database closes.
 *
 * Order of publication, per written slot: vector (the store's count), id and payload records (an atomic
 * index store each), then the live bit (an atomic or). A reader that sees a slot live with an atomic load
 * therefore sees its id and payload; a hit is taken only if its slot is still live after the search
 * (else the whole search goes to the engine thread), so no answer holds a deleted or replaced point.
 * A filter needs its match bits from the engine thread (MatchBits, asked for by the caller when a search
 * declines with 'filter'), which hold while no write has begun since they were computed: the header
 * counts writes begun and ended, and a filtered search checks both before and after it reads. After
 * writes, a view patches the bits it holds from the journal of slots the writes wrote (each slot's
 * liveness and payload read again, every filter tested on it), between writes, checked the same way.
 * Whatever a view cannot answer exactly as the engine would (a filter without current bits, a strong
 * read, a stale epoch, a retired collection, any input the engine would refuse) is answered by the
 * engine thread instead: `ReadView.search` returns null.
 */

/** Bytes the arena and the index may reach; reserved address space, committed as they grow. */
const ARENA_MAX_BYTES = 2 ** 31 - 2 ** 16;
/** Garbage (replaced payloads, dead slots' records) below this is never compacted away. */
const COMPACT_MIN_BYTES = 64 << 20;
const INDEX_MAX_BYTES = 2 ** 31;

/** What another thread needs to read a SharedRecords. */
export interface RecordsHandle {
  readonly index: SharedArrayBuffer;
  readonly arena: SharedArrayBuffer;
  /** [0]: bytes used in the arena (the writer's end). */
  readonly used: SharedArrayBuffer;
}

/**
 * Per-slot byte records, written by one thread and read by others: an append-only arena of
 * `len u32 | bytes` (4-aligned) and an index of one int32 per slot, the record's offset + 1 (0: none),
 * stored atomically after the record's bytes. A replaced record's bytes stay (see `garbageBytes`).
 */
export class SharedRecords {
  private readonly index: Int32Array;
  private readonly bytes: Uint8Array;
  private readonly lens: DataView;
  private readonly usedCell: Int32Array;
  private readonly h: RecordsHandle;
  private live = 0;

  constructor(h?: RecordsHandle) {
    this.h = h ?? {
      index: growableShared(4096, INDEX_MAX_BYTES),
      arena: growableShared(1 << 16, ARENA_MAX_BYTES),
      used: new SharedArrayBuffer(4),
    };
    this.index = new Int32Array(this.h.index);
    this.bytes = new Uint8Array(this.h.arena);
    this.lens = new DataView(this.h.arena);
    this.usedCell = new Int32Array(this.h.used);
  }

  handle(): RecordsHandle {
    return this.h;
  }

  /** Bytes the arena holds, live or replaced. */
  get arenaBytes(): number {
    return Atomics.load(this.usedCell, 0) >>> 0;
  }

  /** Arena bytes no slot names any more (replaced payloads, records of dead slots are counted by the caller). */
  get garbageBytes(): number {
    return this.arenaBytes - this.live;
  }

  /** Arena bytes `slot`'s record takes (0: none). */
  recordBytes(slot: number): number {
    if (slot * 4 >= this.index.byteLength) return 0;
    const at = Atomics.load(this.index, slot);
    return at === 0 ? 0 : roundUp4(4 + this.lens.getUint32(at - 1, true));
  }

  /** Writer: `slot`'s record is `data` from now on (null: none). */
  set(slot: number, data: Uint8Array | null): void {
    const need = (slot + 1) * 4;
    growShared(this.h.index, need);
    const prev = Atomics.load(this.index, slot);
    if (prev !== 0) this.live -= roundUp4(4 + this.lens.getUint32(prev - 1, true));
    if (data === null) {
      Atomics.store(this.index, slot, 0);
      return;
    }
    const at = this.arenaBytes;
    const size = roundUp4(4 + data.length);
    const end = at + size;
    growShared(this.h.arena, end);
    this.lens.setUint32(at, data.length, true);
    this.bytes.set(data, at + 4);
    Atomics.store(this.usedCell, 0, end | 0);
    this.live += size;
    // Published after its bytes: a reader that loads this offset reads them whole.
    Atomics.store(this.index, slot, at + 1);
  }

  /** Reader (or writer): `slot`'s record now, or null. The bytes are a view: copy before keeping them. */
  get(slot: number): Uint8Array | null {
    if (slot * 4 >= this.index.byteLength) return null;
    const at = Atomics.load(this.index, slot);
    if (at === 0) return null;
    const len = this.lens.getUint32(at - 1, true);
    return this.bytes.subarray(at + 3, at + 3 + len);
  }
}

const roundUp4 = (n: number): number => (n + 3) & ~3;

/** Header words (int32). */
const H = {
  /** Sequence lock over EPOCH..SIZE: odd while the writer changes them. */
  SEQ: 0,
  EPOCH: 1,
  INDEXED_UP_TO: 2,
  ENTRY: 3,
  MAX_LEVEL: 4,
  SIZE: 5,
  /** 1: dropped or closed; readers answer nothing from this view again. */
  RETIRED: 6,
  /**
   * Writes (Collection.apply calls) begun and ended: equal while none runs. A filtered search's match
   * bits hold while both stay at the value they were computed at (MatchBits.token).
   */
  WRITES_BEGUN: 7,
  WRITES_ENDED: 8,
  /**
   * Slots the writes wrote (the journal): entries appended, ever (wrapping as an int32). Entry `i` is at
   * `i & (JOURNAL_SLOTS - 1)` of the journal buffer. A loop patches match bits from the slots written
   * since their token instead of letting them go.
   */
  JOURNAL_HEAD: 9,
} as const;
const HEADER_WORDS = 16;
/**
 * Journal entries (a power of two): bits older than this many slot writes are let go, not patched. A
 * patch reads each slot written since once (its liveness and payload) and tests every filter held on
 * it: at most this many payloads parsed per view and write burst.
 */
const JOURNAL_SLOTS = 4096;
/**
 * A loop's time one patch may take, ms: it is checked after every payload read and filter test (a test
 * of a filter of hundreds of conditions on a payload of large arrays can take milliseconds by itself).
 * Filters are patched one after another, the most recently used first; past the bound the patch stops,
 * and the bits of the filters it did not finish go (the engine thread's are asked for again).
 */
const PATCH_BUDGET_MS = 4;
/** A slot a patch found not live (its bit is 0 for every filter). */
const NOT_LIVE = Symbol('not live');

/** Match bits a view holds: a MatchBits brought up to the view's token, and the filter they are for. */
interface HeldBits {
  words: Uint32Array;
  capacity: number;
  count: number;
  readonly filter: CompiledFilter;
}

/** Sets or clears `slot` in `h`, keeping its count; words grow (by an eighth more) for a slot past their end. */
function setBit(h: HeldBits, slot: number, on: boolean): void {
  const w = slot >>> 5;
  if (w >= h.words.length) {
    if (!on) return;
    const words = new Uint32Array(w + 1 + (w >>> 3));
    words.set(h.words);
    h.words = words;
  }
  const mask = 1 << (slot & 31);
  const was = (h.words[w] & mask) !== 0;
  if (was === on) return;
  h.words[w] ^= mask;
  h.count += on ? 1 : -1;
  if (slot >= h.capacity) h.capacity = slot + 1;
}

/** Everything a reader needs, posted once per collection (structured-clonable: shared memory only). */
export interface ReadViewHandle {
  readonly uid: string;
  readonly spec: CollectionSpec;
  readonly limits: Limits;
  readonly store: VectorStoreHandle;
  readonly live: LiveSetHandle;
  readonly ids: RecordsHandle;
  readonly payloads: RecordsHandle;
  readonly header: SharedArrayBuffer;
  /** The journal (H.JOURNAL_HEAD): an Int32Array of JOURNAL_SLOTS slots. */
  readonly journal: SharedArrayBuffer;
  /** The BM25 and sparse-vector index (Collection.sparse, in shared memory). */
  readonly sparse: SparseHandle;
  /** Each point's id to its slot (SharedIds): a loop finds a point by id. */
  readonly idIndex: SharedIdsHandle;
  /** A multi-vector collection's live documents (their heads) and each token's document (TokenSpans). */
  readonly multi: { readonly heads: LiveSetHandle; readonly spans: SharedArrayBuffer } | null;
  /** The graph epoch when the handle was made. */
  readonly graph: ReadGraph;
}

/**
 * A filter's matching live slots as the engine thread computed them (Collection.matching), for a loop
 * to search with: valid while no write has begun since `token` (the header's writes ended, then), and
 * patched from the journal after later writes (`journalAt`: the journal's head at `token`).
 */
export interface MatchBits {
  readonly words: Uint32Array;
  readonly capacity: number;
  readonly count: number;
  readonly token: number;
  readonly journalAt: number;
}

/** A graph epoch for readers: its arrays (null: no graph yet). */
export interface ReadGraph {
  readonly epoch: number;
  readonly data: HnswData | null;
}

const encoder = new TextEncoder();
const encodePayload = (p: object | null): Uint8Array | null => (p === null ? null : encoder.encode(JSON.stringify(p)));

/**
 * The writer's side (Collection, on the engine thread): the records and the header. The Collection calls
 * `put` for every slot it writes (before the slot's live bit), `payload` for an in-place payload change,
 * `graphMoved` whenever its graph, graph arrays or indexed bound may have changed, `retire` at drop.
 */
export class SharedReadState {
  private ids = new SharedRecords();
  private payloads = new SharedRecords();
  /** Ids to slots, comparing ids with the current records (a compaction keeps slots, so the table stays). */
  private readonly idIndex = new SharedIds((slot) => this.ids.get(slot));
  private header = new Int32Array(new SharedArrayBuffer(HEADER_WORDS * 4));
  private readonly journal = new Int32Array(new SharedArrayBuffer(JOURNAL_SLOTS * 4));
  /** Arena bytes of tombstoned slots' records (their ids and last payloads), which no new reader needs. */
  private deadBytes = 0;
  /** Compactions done (a metric and a test's handle). */
  compactions = 0;
  private graph: Hnsw | null = null;
  private graphVersion = -1;
  private epoch = 0;
  private top = { indexedUpTo: -1, entry: -1, maxLevel: -1, size: -1 };
  /**
   * Set when a record could not be written (an arena at its maximum): the view is retired for good, and
   * every search of the collection goes to the engine thread. A write to the collection never fails here.
   */
  private broken = false;

  /** `compactMinBytes`: garbage below it is never compacted (COMPACT_MIN_BYTES; tests use less). */
  constructor(private readonly compactMinBytes = COMPACT_MIN_BYTES) {}

  /**
   * A slot tombstoned. Its records stay (a loop that found it live just before reads them after), and
   * count as garbage: once the arenas hold more garbage than live bytes (and COMPACT_MIN_BYTES), the
   * live slots' records are copied into new arenas under a new header and the old header is retired,
   * so every loop drops its view and asks for the new one (`live`: the live slots, for the copy).
   */
  dead(slot: number, live: () => Int32Array): void {
    this.wrote(slot);
    this.guard(() => {
      const id = this.ids.get(slot);
      if (id !== null) this.idIndex.remove(id, slot);
      this.deadBytes += this.ids.recordBytes(slot) + this.payloads.recordBytes(slot);
      this.compactIfWorth(live);
    });
  }

  /** Compacts once garbage passes compactMinBytes and what is live (half the arenas). */
  private compactIfWorth(live: () => Int32Array): void {
    const garbage = this.deadBytes + this.ids.garbageBytes + this.payloads.garbageBytes;
    if (garbage > this.compactMinBytes && 2 * garbage > this.ids.arenaBytes + this.payloads.arenaBytes) this.compact(live());
  }

  /** Copies the live slots' records into new arenas and retires every view of the old ones. */
  private compact(live: Int32Array): void {
    const ids = new SharedRecords();
    const payloads = new SharedRecords();
    for (const s of live) {
      ids.set(s, this.ids.get(s));
      payloads.set(s, this.payloads.get(s));
    }
    const header = new Int32Array(new SharedArrayBuffer(HEADER_WORDS * 4));
    header.set(this.header);
    Atomics.store(header, H.SEQ, 0);
    const old = this.header;
    this.ids = ids;
    this.payloads = payloads;
    this.header = header;
    this.deadBytes = 0;
    this.compactions++;
    Atomics.store(old, H.RETIRED, 1);
  }

  /**
   * Around every write of the collection (Collection.apply): a loop's filtered search uses match bits
   * only while no write has begun since they were computed, and none is in progress.
   */
  writeBegin(): void {
    Atomics.add(this.header, H.WRITES_BEGUN, 1);
  }

  writeEnd(): void {
    Atomics.add(this.header, H.WRITES_ENDED, 1);
  }

  /** The token match bits computed now carry (on the engine thread, between writes). */
  get writes(): number {
    return Atomics.load(this.header, H.WRITES_ENDED);
  }

  /** The journal's head: what match bits computed now carry as `journalAt`. */
  get journalHead(): number {
    return Atomics.load(this.header, H.JOURNAL_HEAD);
  }

  /** A slot whose liveness or payload a write changes (inside writeBegin/writeEnd): journaled. */
  private wrote(slot: number): void {
    const head = Atomics.load(this.header, H.JOURNAL_HEAD);
    Atomics.store(this.journal, head & (JOURNAL_SLOTS - 1), slot);
    Atomics.store(this.header, H.JOURNAL_HEAD, (head + 1) | 0);
  }

  put(slot: number, id: string, payload: object | null): void {
    this.wrote(slot);
    this.guard(() => {
      const bytes = encoder.encode(id);
      this.ids.set(slot, bytes);
      this.payloads.set(slot, encodePayload(payload));
      // After its record: a lookup compares the id with it.
      this.idIndex.set(bytes, slot);
    });
  }

  payload(slot: number, payload: object | null, live: () => Int32Array): void {
    this.wrote(slot);
    this.guard(() => {
      this.payloads.set(slot, encodePayload(payload));
      this.compactIfWorth(live);
    });
  }

  private guard(write: () => void): void {
    if (this.broken) return;
    try {
      write();
    } catch {
      this.broken = true;
      this.retire();
    }
  }

  /** The graph readers should use: a new epoch when it or its arrays changed; the bound and top always. */
  graphMoved(graph: Hnsw | null, indexedUpTo: number): void {
    const version = graph === null ? 0 : graph.arraysVersion;
    const entry = graph === null ? -1 : graph.entryPoint;
    const maxLevel = graph === null ? -1 : graph.topLevel;
    const size = graph === null ? 0 : graph.size;
    const moved = graph !== this.graph || version !== this.graphVersion;
    const t = this.top;
    if (!moved && t.indexedUpTo === indexedUpTo && t.entry === entry && t.maxLevel === maxLevel && t.size === size) return;
    if (moved) {
      this.graph = graph;
      this.graphVersion = version;
      this.epoch++;
    }
    this.top = { indexedUpTo, entry, maxLevel, size };
    const h = this.header;
    Atomics.add(h, H.SEQ, 1);
    Atomics.store(h, H.EPOCH, this.epoch);
    Atomics.store(h, H.INDEXED_UP_TO, indexedUpTo);
    Atomics.store(h, H.ENTRY, entry);
    Atomics.store(h, H.MAX_LEVEL, maxLevel);
    Atomics.store(h, H.SIZE, size);
    Atomics.add(h, H.SEQ, 1);
  }

  /** The codes of the graph readers are given now (whose lanes their views claim), if any. */
  get codes(): ScalarCodes | null {
    return this.graph?.scalarCodes ?? null;
  }

  /** The current epoch's graph, for a reader that saw a newer epoch than it holds. */
  currentGraph(): ReadGraph {
    return { epoch: this.epoch, data: this.graph === null ? null : this.graph.serialize() };
  }

  retire(): void {
    Atomics.store(this.header, H.RETIRED, 1);
  }

  handle(
    uid: string, spec: CollectionSpec, limits: Limits, store: VectorStoreHandle, live: LiveSetHandle, sparse: SparseHandle, multi: ReadViewHandle['multi'],
  ): ReadViewHandle | null {
    if (this.broken) return null;
    return {
      uid, spec, limits, store, live, ids: this.ids.handle(), payloads: this.payloads.handle(), header: this.header.buffer as SharedArrayBuffer,
      journal: this.journal.buffer as SharedArrayBuffer, sparse, idIndex: this.idIndex.h, multi, graph: this.currentGraph(),
    };
  }
}

const SEARCH_KEYS = bodyKeys(BODIES.search);
const HYBRID_KEYS = bodyKeys(BODIES.hybridSearch);
const MULTI_KEYS = bodyKeys(BODIES.searchMultiVector);
const COUNT_KEYS = bodyKeys(BODIES.count);
const FETCH_KEYS = bodyKeys(BODIES.fetch);
const RANKINGS_KEYS = bodyKeys(BODIES.rankings);
const EMPTY: SearchResult = { slots: new Int32Array(0), dists: new Float32Array(0) };
/** Scores (best first) as a SearchResult, whose tie rule reads equal values alike. */
const scored = (r: { slots: Int32Array; scores: Float32Array }): SearchResult => ({ slots: r.slots, dists: r.scores });
const decoder = new TextDecoder();

/** A live point (a document's head) in a view's fetch order. */
interface OrderEntry {
  readonly id: string;
  readonly slot: number;
}
const byId = (e: OrderEntry): string => e.id;
/**
 * Most slots written since a view's last page that are spliced into its order one by one (each a binary
 * search and a move of the entries after it); more are merged in one pass over the whole order.
 */
const SPLICE_MAX = 256;

/** Why a view passed a search to the engine thread (a metric: what the loops could not answer). */
export type Declined = 'shape' | 'retired' | 'epoch' | 'moved' | 'scan' | 'filter' | 'absent';

/** Filters whose match bits a view keeps, and their bytes at most (least recently used goes first). */
const MATCHES_MAX = 64;
const MATCHES_MAX_BYTES = 8 << 20;

/**
 * Most slots a loop scans exactly (no graph yet, a flat index, fewer live points than the beam, a graph
 * answer that came back short, ties widened into a scan): a longer scan would hold the loop's other
 * connections; the engine thread hands it to a search worker. Checked at every plan a search runs
 * (DensePlan.exactAllowed), not only its first.
 */
const LOOP_SCAN_MAX = 20_000;

/**
 * Most live points (documents) whose fetch order a loop keeps, as LOOP_SCAN_MAX bounds its scans: a
 * view's first page reads every id and sorts them (about 16 ms at 20,000 here, 100 at 100,000). Past it
 * pages are the engine thread's, whose one order serves every loop.
 */
const FETCH_ORDER_MAX = 20_000;
/** Sweeps (about a second each) a view keeps its fetch order with no page read: a client paging slowly keeps it. */
const ORDER_IDLE_SWEEPS = 30;

/**
 * The reader's side, in a request loop: answers `search` as Database.search would for what it can
 * answer exactly (see the file's comment), or null.
 */
export class ReadView {
  readonly uid: string;
  readonly spec: CollectionSpec;
  private readonly limits: Limits;
  private readonly store: VectorStore;
  private readonly kind: DistanceKind;
  private readonly live: SharedLiveView;
  private readonly ids: SharedRecords;
  private readonly payloads: SharedRecords;
  private readonly header: Int32Array;
  private readonly sparse: SparseReader;
  private readonly idIndex: SharedIds;
  /** A multi-vector collection's live documents and token spans; null for a point collection. */
  private readonly multi: { readonly heads: SharedLiveView; readonly spans: TokenSpans } | null;
  private graph: Hnsw | null = null;
  private graphEpoch = -1;
  private readonly journal: Int32Array;
  /**
   * Match bits of recent filters, by filterKey, all at the token `matchesToken`, whose journal head was
   * `matchesJournal`: patched when the token moves (bitsCurrent), let go when they cannot be.
   */
  private readonly matches = new Map<string, HeldBits>();
  private matchesToken = -1;
  private matchesJournal = 0;
  private matchesBytes = 0;
  /** Patches after writes that brought at least one filter's bits up (tests): how many, and the slots they read. */
  patched = { times: 0, slots: 0 };
  /** A filtered search ran since the last sweep (sweep). */
  private filteredSinceSweep = false;
  /**
   * The live points (a multi-vector collection's documents) in fetch order with their slots, as of the
   * write count `token` and the journal head `journal` (fetchOrder); null until a page is asked for.
   */
  private order: { token: number; journal: number; entries: OrderEntry[] } | null = null;
  /** Sweeps since a page was last read: past ORDER_IDLE_SWEEPS the order goes. */
  private sweepsSincePage = 0;
  /** What the last null answer was for (tests and metrics). */
  declined: Declined | null = null;
  /**
   * Set with a 'filter' decline: the filter whose match bits this view lacks (or holds from before a
   * write), for the caller to ask the engine thread for (adoptBits).
   */
  wantBits: { key: string; filter: unknown } | null = null;

  /** Most accepted slots one search of this view scans exactly (LOOP_SCAN_MAX; tests set fewer). */
  private readonly scanMax: number;
  /** Most live points this view pages through itself (FETCH_ORDER_MAX; tests set fewer). */
  private readonly fetchOrderMax: number;
  /** A patch's time bound, ms (PATCH_BUDGET_MS; tests that count patches set none, one sets 0). */
  private readonly patchBudgetMs: number;
  /** The clock a patch's bound is measured on (performance.now; tests step it). */
  private readonly now: () => number;

  /** Throws when the store has no scratch lane left for this thread (the caller then keeps no view). */
  constructor(h: ReadViewHandle, opts: { scanMax?: number; fetchOrderMax?: number; patchBudgetMs?: number; now?: () => number } = {}) {
    this.scanMax = opts.scanMax ?? LOOP_SCAN_MAX;
    this.fetchOrderMax = opts.fetchOrderMax ?? FETCH_ORDER_MAX;
    this.patchBudgetMs = opts.patchBudgetMs ?? PATCH_BUDGET_MS;
    this.now = opts.now ?? (() => performance.now());
    this.uid = h.uid;
    this.spec = h.spec;
    this.limits = h.limits;
    this.store = VectorStore.open(h.store, { lanes: 'loop' });
    this.kind = h.spec.metric === 'l2' ? 'l2' : 'ip';
    this.live = new SharedLiveView(h.live);
    this.ids = new SharedRecords(h.ids);
    this.payloads = new SharedRecords(h.payloads);
    this.header = new Int32Array(h.header);
    this.journal = new Int32Array(h.journal);
    this.sparse = new SparseReader(h.sparse);
    this.idIndex = new SharedIds((slot) => this.ids.get(slot), h.idIndex);
    this.multi = h.multi === null ? null : { heads: new SharedLiveView(h.multi.heads), spans: new TokenSpans(h.multi.spans) };
    try {
      this.adoptGraph(h.graph);
    } catch (e) {
      this.store.close();
      throw e;
    }
  }

  get retired(): boolean {
    return Atomics.load(this.header, H.RETIRED) === 1;
  }

  /** The epoch the header names (a reader holding another asks the writer for it: ReadGraph). */
  get epoch(): number {
    return Atomics.load(this.header, H.EPOCH);
  }

  get heldEpoch(): number {
    return this.graphEpoch;
  }

  adoptGraph(g: ReadGraph): void {
    if (g.epoch < this.graphEpoch) return;
    // The old codes' lane goes back first (a new epoch often keeps the same codes memory, and a loop
    // holds one lane of it at a time); until the new graph is whole the view holds none and declines.
    this.graph?.scalarCodes?.close();
    this.graph = null;
    this.graphEpoch = -1;
    const codes = g.data?.codes ? ScalarCodes.open(g.data.codes, { lanes: 'loop' }) : null;
    try {
      const graph = g.data === null ? null : Hnsw.deserialize(this.store, g.data);
      graph?.attachCodes(codes);
      this.graph = graph;
      this.graphEpoch = g.epoch;
    } catch (e) {
      codes?.close();
      throw e;
    }
  }

  close(): void {
    this.graph?.scalarCodes?.close();
    this.graph = null;
    this.clearBits();
    this.store.close();
  }

  /**
   * The engine thread's match bits for `want` (the filter a search declined for, as wantBits named it),
   * brought up to now from the journal when writes came after them; false when they cannot be (a write
   * runs, or more slots were written since than the journal holds). Takes `m`'s words: they are patched
   * in place from here on.
   */
  adoptBits(want: { key: string; filter: unknown }, m: MatchBits): boolean {
    if (!this.bitsCurrent()) return false;
    let filter: CompiledFilter;
    try {
      filter = compileFilter(want.filter, this.spec.filterable);
    } catch {
      return false;
    }
    if (filterKey(filter) !== want.key) return false;
    // The view's from here on (the engine thread sent a copy): patches change the words in place.
    const held: HeldBits = { words: m.words, capacity: m.capacity, count: m.count, filter };
    if (m.token !== this.matchesToken) {
      if (this.patch([held], m.journalAt, this.matchesJournal) < 1 || this.writesSettled() !== this.matchesToken) return false;
    }
    this.forgetBits(want.key);
    while (this.matches.size > 0 && (this.matches.size >= MATCHES_MAX || this.matchesBytes + held.words.byteLength > MATCHES_MAX_BYTES)) {
      this.forgetBits(this.matches.keys().next().value!);
    }
    this.matches.set(want.key, held);
    this.matchesBytes += held.words.byteLength;
    return true;
  }

  /**
   * A loop's sweep (every second): bits from before a write are patched if a filtered search ran since
   * the last sweep, else let go, so that a view searched no more with a filter holds no bits; the fetch
   * order goes after ORDER_IDLE_SWEEPS with no page read.
   */
  sweep(): void {
    const patch = this.filteredSinceSweep;
    this.filteredSinceSweep = false;
    this.bitsCurrent(patch);
    // A view no page was read from for a while holds no order (an id and a slot per point).
    if (++this.sweepsSincePage > ORDER_IDLE_SWEEPS) this.order = null;
  }

  /**
   * Whether no write runs now. The bits held from before the last writes are patched from the journal
   * (`patch` false: let go).
   */
  bitsCurrent(patch = true): boolean {
    const token = this.writesSettled();
    if (token === null) return false;
    if (token === this.matchesToken) return true;
    const head = Atomics.load(this.header, H.JOURNAL_HEAD);
    if (this.matches.size > 0) {
      // The most recently used first (the map's last): those a patch cut short are the ones that go.
      const order = [...this.matches].reverse();
      const done = patch ? this.patch(order.map(([, h]) => h), this.matchesJournal, head) : 0;
      for (let i = Math.max(done, 0); i < order.length; i++) this.forgetBits(order[i][0]);
    }
    // Words grown for slots past their end: counted, and the least recently used go past the bound.
    this.matchesBytes = 0;
    for (const h of this.matches.values()) this.matchesBytes += h.words.byteLength;
    while (this.matches.size > 1 && this.matchesBytes > MATCHES_MAX_BYTES) this.forgetBits(this.matches.keys().next().value!);
    // The head read, and the bits patched, belong to `token` only if no write began meanwhile.
    if (this.writesSettled() !== token || this.retired) {
      this.clearBits();
      this.matchesToken = -1;
      return false;
    }
    this.matchesToken = token;
    this.matchesJournal = head;
    return true;
  }

  /**
   * Brings `held` (in this order) from journal position `from` to `to`: every slot written in between
   * is read again (its live bit, its payload) and its bit set to whether it is live and its payload
   * matches, exactly what the engine thread's payload index answers for it (filter.ts `evaluate`, the
   * index's reference). Returns how many of `held` were brought up whole, the first ones: fewer when
   * the patch ran past PATCH_BUDGET_MS (the one it stopped in is part patched, so it goes too), 0 when
   * the journal no longer holds `from`. The caller checks that no write began meanwhile (the head it
   * read may hold a write's first slots before that write changed them: only that check makes the
   * patch safe).
   */
  private patch(held: HeldBits[], from: number, to: number): number {
    const n = (to - from) | 0;
    if (n < 0 || n > JOURNAL_SLOTS) return 0;
    if (n === 0) return held.length;
    const written = new Set<number>();
    for (let i = 0; i < n; i++) written.add(Atomics.load(this.journal, (from + i) & (JOURNAL_SLOTS - 1)));
    // A bound on the loop's time: past it the engine thread's bits are asked for again instead.
    const until = this.now() + this.patchBudgetMs;
    // Each slot read once, for every filter held.
    const slots = [...written];
    const payloads: (Payload | undefined | typeof NOT_LIVE)[] = new Array(slots.length);
    try {
      for (let i = 0; i < slots.length; i++) {
        payloads[i] = this.live.has(slots[i]) ? this.payloadOf(slots[i]) ?? undefined : NOT_LIVE;
        if (this.now() > until) return 0;
      }
    } catch {
      // Records read while a write ran (the caller's check would refuse them anyway): let the bits go.
      return 0;
    }
    let done = 0;
    for (const h of held) {
      let cut = false;
      for (let i = 0; i < slots.length && !cut; i++) {
        const p = payloads[i];
        setBit(h, slots[i], p !== NOT_LIVE && evaluate(h.filter, p));
        cut = i + 1 < slots.length && this.now() > until;
      }
      if (cut) break;
      done++;
      if (done < held.length && this.now() > until) break;
    }
    if (done > 0) {
      this.patched.times++;
      this.patched.slots += slots.length;
    }
    return done;
  }

  private clearBits(): void {
    this.matches.clear();
    this.matchesBytes = 0;
  }

  private forgetBits(key: string): void {
    const had = this.matches.get(key);
    if (had === undefined) return;
    this.matches.delete(key);
    this.matchesBytes -= had.words.byteLength;
  }

  /** The writes ended when none is in progress, else null. */
  private writesSettled(): number | null {
    const ended = Atomics.load(this.header, H.WRITES_ENDED);
    return Atomics.load(this.header, H.WRITES_BEGUN) === ended ? ended : null;
  }

  /** The engine's answer to `query`, or null when the engine thread must give it. */
  search(query: SearchQuery): { hits: Hit[] } | null {
    this.declined = null;
    this.wantBits = null;
    if (this.retired) return this.decline('retired');
    if (this.spec.multivector) return this.decline('shape');
    let k: number;
    let ef: number;
    let vector: Float32Array;
    let withPayload: boolean;
    let withVector: boolean;
    let filter: CompiledFilter | undefined;
    let rawFilter: unknown;
    try {
      const q = checkObject(query, 'search body', SEARCH_KEYS);
      if (parseConsistency(q.consistency) !== 'eventual') return this.decline('shape');
      k = parseK(q.k, this.limits);
      ef = parseEf(q.ef_search, this.limits, this.spec.index_params.ef_search);
      vector = parseVector(q.vector, this.spec.dim, this.spec.metric, this.limits, 'query vector');
      if (q.filter !== undefined && q.filter !== null) filter = compileFilter(rawFilter = q.filter, this.spec.filterable);
      withPayload = parseBool(q.with_payload, 'with_payload', true);
      withVector = parseBool(q.with_vector, 'with_vector', false);
    } catch {
      // The engine thread refuses it, with its message.
      return this.decline('shape');
    }
    // A filter: its match bits from the engine thread, brought up to the last write, and no write now.
    let match: HeldBits | null = null;
    let token = 0;
    if (filter !== undefined) {
      const held = this.heldMatch(filter, rawFilter);
      if (held === null) return null;
      ({ match, token } = held);
    }
    const top = this.readTop();
    if (top === 'busy') return this.decline('moved');
    if (top === null) return this.decline('epoch');
    // Exact plans, and the unindexed tail a graph plan scans (a bulk load before its rebuild).
    if (match === null) {
      const scans = this.graph === null || this.spec.index === 'flat' || this.live.count <= Math.max(ef, k + 1);
      if ((scans ? this.store.count : this.store.count - top.indexedUpTo) > this.scanMax) return this.decline('scan');
    } else {
      const plan = this.filteredPlan(k + 1, ef, top, match);
      if (plan !== null && (plan.mode === 'exact' ? match.count : plan.count - plan.indexedUpTo) > this.scanMax) return this.decline('scan');
    }
    const run = (n: number): SearchResult => (match === null ? this.searchDense(vector, n, ef, top) : this.searchFiltered(vector, n, ef, top, match));
    let r: SearchResult;
    try {
      r = run(k + 1);
      if (tieAtCut(r.dists, k, k + 1)) r = widenTiesNow(r, k, k + 1, this.live.count, (n) => run(n));
    } catch (e) {
      // A graph answer that came back short, or ties widened into an exact plan, would scan more than a
      // loop does: the engine thread's search workers do it.
      if (e instanceof ExactScanRefused) return this.decline('scan');
      throw e;
    }
    // Every hit still live now: else a write raced the search, and the engine thread answers it.
    for (const s of r.slots) if (!this.live.has(s)) return this.decline('moved');
    const slots = tiesById((s) => this.idOf(s), r, k);
    // An update publishes the new slot before it tombstones the old (Collection.put): a search between
    // the two may hold both. Then the engine thread answers, which never sees the two at once.
    const seen = new Set<string>();
    for (let i = 0; i < Math.min(k, slots.length); i++) {
      const id = this.idOf(slots[i]);
      if (seen.has(id)) return this.decline('moved');
      seen.add(id);
    }
    const hits: Hit[] = [];
    for (let i = 0; i < Math.min(k, slots.length); i++) {
      const slot = slots[i];
      const d = r.dists[i];
      const h: Hit = { id: this.idOf(slot), rank: i, score: this.kind === 'l2' ? Math.sqrt(Math.max(0, d)) : -d };
      if (withPayload) h.payload = this.payloadOf(slot) ?? {};
      if (withVector) h.vector = Array.from(this.store.view(slot));
      hits.push(h);
    }
    // A payload replaced after the liveness check is newer data for a live point: still an answer. A view
    // retired meanwhile (a drop, or records that could not be written) answers nothing.
    if (this.retired) return this.decline('retired');
    // Filtered: no write began since the bits were computed, so every hit matched throughout, with the
    // payload read (a payload changed meanwhile might no longer match).
    if (match !== null && this.writesSettled() !== token) return this.decline('moved');
    return { hits };
  }

  /**
   * Database.get's answer for a point that is here (its id found in the shared id table, its slot live),
   * between two writes; null otherwise ('absent': the engine thread answers not_found, or `moved` for an
   * id a rebalance took).
   */
  get(id: unknown, opts: GetOptions | undefined): PointOutput | null {
    this.declined = null;
    this.wantBits = null;
    if (this.retired) return this.decline('retired');
    let pid: string;
    let withVector: boolean;
    try {
      pid = checkPointId(id);
      // As Database.get reads its options (a null one throws there: the engine thread answers it).
      if (opts === null) return this.decline('shape');
      withVector = parseBool(opts?.with_vector, 'with_vector', false);
    } catch {
      return this.decline('shape');
    }
    const token = this.writesSettled();
    if (token === null) return this.decline('moved');
    const slot = this.idIndex.find(encoder.encode(pid));
    if (slot < 0 || !this.live.has(slot)) return this.decline('absent');
    const out: PointOutput = { id: pid, payload: this.payloadOf(slot) ?? {} };
    if (withVector) {
      if (this.multi !== null) out.vectors = Array.from(this.multi.spans.tokens(slot), (s) => Array.from(this.store.view(s)));
      else out.vector = Array.from(this.store.view(slot));
    }
    if (this.retired) return this.decline('retired');
    if (this.writesSettled() !== token) return this.decline('moved');
    return out;
  }

  /**
   * Database.fetch's answer (a page of points in fetch order after the cursor, those matching the filter),
   * read between two writes; or null. A filter needs its match bits, as a search does.
   */
  fetch(query: FetchQuery | undefined): { points: PointOutput[]; next_cursor: string | null } | null {
    this.declined = null;
    this.wantBits = null;
    if (this.retired) return this.decline('retired');
    let limit: number;
    let cursor: string | null;
    let withVector: boolean;
    let filter: CompiledFilter | undefined;
    let rawFilter: unknown;
    try {
      const q = checkObject(query === undefined ? {} : query, 'fetch body', FETCH_KEYS);
      // A consensus member's strong read waits for its read barrier, on the engine thread.
      if (parseConsistency(q.consistency) !== 'eventual') return this.decline('shape');
      limit = parseFetchLimit(q.limit, this.limits);
      cursor = decodeCursor(q.cursor);
      withVector = parseBool(q.with_vector, 'with_vector', false);
      if (q.filter !== undefined && q.filter !== null) filter = compileFilter(rawFilter = q.filter, this.spec.filterable);
    } catch {
      return this.decline('shape');
    }
    // Past the bound the engine thread's order answers (one for every loop, kept up the same way).
    if ((this.multi === null ? this.live : this.multi.heads).count > this.fetchOrderMax) return this.decline('scan');
    let token: number | null;
    let accept: (slot: number) => boolean = () => true;
    if (filter !== undefined) {
      const held = this.heldMatch(filter, rawFilter);
      if (held === null) return null;
      const m = held.match;
      token = held.token;
      accept = (s) => s >>> 5 < m.words.length && (m.words[s >>> 5] & (1 << (s & 31))) !== 0;
    } else token = this.writesSettled();
    if (token === null) return this.decline('moved');
    this.sweepsSincePage = 0;
    const entries = this.fetchOrder(token);
    if (entries === null) return this.decline('moved');
    const points: PointOutput[] = [];
    let more = false;
    for (let i = after(entries, cursor ?? undefined, byId); i < entries.length; i++) {
      const { id, slot } = entries[i];
      if (!accept(slot)) continue;
      if (points.length === limit) {
        more = true;
        break;
      }
      const out: PointOutput = { id, payload: this.payloadOf(slot) ?? {} };
      if (withVector) {
        if (this.multi !== null) out.vectors = Array.from(this.multi.spans.tokens(slot), (t) => Array.from(this.store.view(t)));
        else out.vector = Array.from(this.store.view(slot));
      }
      points.push(out);
    }
    if (this.retired) return this.decline('retired');
    if (this.writesSettled() !== token) return this.decline('moved');
    return { points, next_cursor: more ? encodeCursor(points[points.length - 1].id) : null };
  }

  /**
   * The live points' ids and slots in fetch order at write count `token` (no write running), or null
   * when a write began meanwhile. Kept from the last page: brought up from the journal when it still
   * holds every slot written since (each written slot's entry goes, and goes back in, in order, if the
   * slot is live), else sorted whole.
   */
  private fetchOrder(token: number): OrderEntry[] | null {
    const had = this.order;
    if (had !== null && had.token === token) return had.entries;
    const heads = this.multi === null ? this.live : this.multi.heads;
    const head = Atomics.load(this.header, H.JOURNAL_HEAD);
    const n = had === null ? -1 : (head - had.journal) | 0;
    let entries: OrderEntry[];
    if (had !== null && n >= 0 && n <= JOURNAL_SLOTS) {
      const written = new Set<number>();
      for (let i = 0; i < n; i++) written.add(Atomics.load(this.journal, (had.journal + i) & (JOURNAL_SLOTS - 1)));
      if (written.size <= SPLICE_MAX) {
        // A few slots: each found by its id (a slot's id record stays once it is dead) and spliced out,
        // then each live one spliced in, on a copy (a write racing this keeps the order held).
        entries = had.entries.slice();
        const ids = [...written].map((slot) => ({ slot, id: this.idOf(slot) }));
        for (const { slot, id } of ids) {
          for (let i = after(entries, id, byId) - 1; i >= 0 && entries[i].id === id; i--) {
            if (entries[i].slot === slot) entries.splice(i, 1);
          }
        }
        for (const e of ids) if (heads.has(e.slot)) entries.splice(after(entries, e.id, byId), 0, e);
      } else {
        const added: OrderEntry[] = [];
        for (const slot of written) if (heads.has(slot)) added.push({ id: this.idOf(slot), slot });
        added.sort((a, b) => compareFetchIds(a.id, b.id));
        entries = mergeInFetchOrder(had.entries.filter((e) => !written.has(e.slot)), added, byId);
      }
    } else {
      entries = [];
      const count = this.store.count;
      for (let slot = 0; slot < count; slot++) if (heads.has(slot)) entries.push({ id: this.idOf(slot), slot });
      entries.sort((a, b) => compareFetchIds(a.id, b.id));
    }
    // Read between the same two writes, and whole: one entry per live point. Otherwise the order held
    // stays, for the next page to bring up (a write that races a patch costs no whole sort).
    if (this.writesSettled() !== token || entries.length !== heads.count) return null;
    this.order = { token, journal: head, entries };
    return entries;
  }

  /**
   * Database.count's answer: the live points (a multi-vector collection's documents), or those matching
   * the filter (its match bits' count), between two writes; or null.
   */
  count(query: CountQuery): { count: number } | null {
    this.declined = null;
    this.wantBits = null;
    if (this.retired) return this.decline('retired');
    let filter: CompiledFilter | undefined;
    let rawFilter: unknown;
    try {
      const q = checkObject(query === undefined ? {} : query, 'count body', COUNT_KEYS);
      if (q.filter !== undefined && q.filter !== null) filter = compileFilter(rawFilter = q.filter, this.spec.filterable);
    } catch {
      return this.decline('shape');
    }
    if (filter !== undefined) {
      const held = this.heldMatch(filter, rawFilter);
      return held === null ? null : { count: held.match.count };
    }
    const token = this.writesSettled();
    if (token === null) return this.decline('moved');
    const count = this.multi === null ? this.live.count : this.multi.heads.count;
    if (this.retired) return this.decline('retired');
    if (this.writesSettled() !== token) return this.decline('moved');
    return { count };
  }

  /**
   * Database.searchMultiVector's answer (a multi-vector collection: MaxSim over token rows,
   * multi-search.ts, the engine's code), or null. Read between two writes, as a hybrid is (`rank`).
   */
  searchMultiVector(query: MultiVectorQuery): { hits: Hit[] } | null {
    this.declined = null;
    this.wantBits = null;
    if (this.retired) return this.decline('retired');
    const multi = this.multi;
    if (multi === null) return this.decline('shape');
    let k: number;
    let ef: number;
    let tokens: Float32Array[];
    let filter: CompiledFilter | undefined;
    let rawFilter: unknown;
    let withPayload: boolean;
    let withVector: boolean;
    try {
      const q = checkObject(query, 'multi-vector query', MULTI_KEYS);
      k = parseK(q.k, this.limits);
      ef = parseEf(q.ef_search, this.limits, this.spec.index_params.ef_search);
      tokens = parseTokens(q.vectors, this.spec, this.limits, 'vectors');
      if (q.filter !== undefined && q.filter !== null) filter = compileFilter(rawFilter = q.filter, this.spec.filterable);
      withPayload = parseBool(q.with_payload, 'with_payload', true);
      withVector = parseBool(q.with_vector, 'with_vector', false);
      if (parseConsistency(q.consistency) !== 'eventual') return this.decline('shape');
    } catch {
      return this.decline('shape');
    }
    let matching: { bits: Bitset; count: number };
    let token: number;
    if (filter !== undefined) {
      const held = this.heldMatch(filter, rawFilter);
      if (held === null) return null;
      token = held.token;
      matching = { bits: new Bitset(held.match.capacity, held.match.words), count: held.match.count };
    } else {
      const settled = this.writesSettled();
      if (settled === null) return this.decline('moved');
      token = settled;
      const words = multi.heads.copy();
      matching = { bits: new Bitset(Math.min(this.store.count, words.length * 32), words), count: multi.heads.count };
    }
    const top = this.readTop();
    if (top === 'busy') return this.decline('moved');
    if (top === null) return this.decline('epoch');
    const graph = this.graph;
    const count = this.store.count;
    const indexedUpTo = Math.min(top.indexedUpTo, count);
    // Every matching document scored exactly, or a tail of tokens scanned: past the bound, the engine thread.
    const exact = graph === null || matching.count <= 2000 || this.spec.index === 'flat';
    if ((exact ? matching.count : count - indexedUpTo) > this.scanMax) return this.decline('scan');
    if (graph !== null) graph.adoptTop(top.entry, top.maxLevel, top.size);
    const src: MultiReadable = {
      graph, store: this.store, kind: this.kind, dim: this.spec.dim, flat: this.spec.index === 'flat', maxEfSearch: this.limits.maxEfSearch,
      tokenLive: (slot) => this.live.has(slot),
      tail: () => {
        const out: number[] = [];
        for (let s = indexedUpTo; s < count; s++) if (this.live.has(s)) out.push(s);
        return Int32Array.from(out);
      },
      headOf: (slot) => multi.spans.headOf(slot),
      tokens: (head) => multi.spans.tokens(head),
      idOf: (head) => this.idOf(head),
    };
    // Database.searchMultiVector's tie rule: one more than k, doubled while the cut falls in a tie.
    const liveCount = this.live.count;
    let found = searchMulti(src, matching, tokens, k + 1, Math.max(ef, k + 1));
    for (let n = 2 * (k + 1); tieAtCut(found.scores, k, n / 2) && n / 2 <= liveCount; n *= 2) found = searchMulti(src, matching, tokens, n, Math.max(ef, n));
    const heads = new Map(found.ids.map((id, i) => [id, found.heads[i]]));
    const r = multiTiesById(found, k);
    const hits: Hit[] = r.ids.map((id, rank) => {
      const head = heads.get(id)!;
      const h: Hit = { id, rank, score: r.scores[rank] };
      if (withPayload) h.payload = this.payloadOf(head) ?? {};
      if (withVector) h.vectors = Array.from(multi.spans.tokens(head), (slot) => Array.from(this.store.view(slot)));
      return h;
    });
    if (this.retired) return this.decline('retired');
    if (this.writesSettled() !== token) return this.decline('moved');
    return { hits };
  }

  /**
   * `filter`'s match bits, brought up to the last write, and their token; null (declined: 'filter' with
   * wantBits set when the view lacks them, 'moved' while a write runs).
   */
  private heldMatch(filter: CompiledFilter, raw: unknown): { match: HeldBits; token: number } | null {
    const key = filterKey(filter);
    this.filteredSinceSweep = true;
    // Used now: the most recently used, so a patch cut short by its time bound keeps it first.
    const had = this.matches.get(key);
    if (had !== undefined) {
      this.matches.delete(key);
      this.matches.set(key, had);
    }
    if (!this.bitsCurrent()) return this.decline('moved');
    const m = this.matches.get(key);
    if (m === undefined) {
      this.wantBits = { key, filter: raw };
      return this.decline('filter');
    }
    return { match: m, token: this.matchesToken };
  }

  /**
   * Engine.hybridSearch's answer with this collection as the engine's one shard (a single node), or null
   * when the engine thread must give it: the rankings as `rankings` computes them, fused by RRF.
   */
  hybrid(query: HybridQuery): { hits: Hit[] } | null {
    this.declined = null;
    this.wantBits = null;
    if (this.retired) return this.decline('retired');
    let k: number;
    let k0: number;
    let rest: Record<string, unknown>;
    try {
      const { k: rawK, rrf_k0: rawK0, ...q } = checkObject(query, 'hybrid body', HYBRID_KEYS);
      k = parseK(rawK, this.limits);
      k0 = parseRrfK0(rawK0);
      rest = q;
    } catch {
      return this.decline('shape');
    }
    const r = this.rank(rest, fusionDepth(k, this.limits), undefined);
    if (r === null) return null;
    return { hits: fuseRankings([r.dense, r.sparse, r.text].filter((l) => l !== undefined), k, k0) };
  }

  /** Database.rankings' answer (a router's ask of a shard, for a hybrid or text query), or null. */
  rankings(body: RankingsBody): Rankings | null {
    this.declined = null;
    this.wantBits = null;
    if (this.retired) return this.decline('retired');
    let depth: number;
    let corpus: Bm25Corpus | undefined;
    let rest: Record<string, unknown>;
    try {
      const { depth: d, text_stats: stats, ...q } = checkObject(body, 'rankings body', RANKINGS_KEYS);
      depth = parseDepth(d, this.limits);
      corpus = stats === undefined || stats === null ? undefined : corpusOf(checkTextStats(stats, this.limits.maxSparseTerms));
      rest = q;
    } catch {
      return this.decline('shape');
    }
    return this.rank(rest, depth, corpus);
  }

  /**
   * Database.rankingsOf, here: each ranking the query asks for, `depth` deep, ties by id. Every ranking
   * is read between the same two writes: the header's write count is the same before and after (with a
   * filter, the match bits' token), so the lists hold the same live points, as the engine thread's do
   * (computed in one synchronous stretch). A write begun meanwhile, and the engine thread answers.
   */
  private rank(q: Record<string, unknown>, depth: number, corpus: Bm25Corpus | undefined): Rankings | null {
    if (this.spec.multivector) return this.decline('shape');
    let ef: number;
    let filter: CompiledFilter | undefined;
    let rawFilter: unknown;
    let withPayload: boolean;
    let withVector: boolean;
    let dense: Float32Array | null;
    let sparse: SparseDoc | null;
    let terms: Uint32Array | null;
    try {
      if (parseConsistency(q.consistency) !== 'eventual') return this.decline('shape');
      ef = parseEf(q.ef_search, this.limits, this.spec.index_params.ef_search);
      if (q.filter !== undefined && q.filter !== null) filter = compileFilter(rawFilter = q.filter, this.spec.filterable);
      withPayload = parseBool(q.with_payload, 'with_payload', true);
      withVector = parseBool(q.with_vector, 'with_vector', false);
      dense = q.vector === undefined || q.vector === null ? null : parseVector(q.vector, this.spec.dim, this.spec.metric, this.limits, 'query vector');
      const hasSparse = q.sparse_indices !== undefined || q.sparse_values !== undefined;
      sparse = hasSparse ? validateSparse({ indices: q.sparse_indices ?? [], values: q.sparse_values ?? [] }, this.limits.maxSparseTerms, 'sparse query') : null;
      terms = q.query_text === undefined || q.query_text === null ? null : parseQueryTerms(q.query_text, this.limits);
    } catch {
      return this.decline('shape');
    }
    if (dense === null && sparse === null && terms === null) return this.decline('shape');
    let match: HeldBits | null = null;
    let token: number;
    if (filter !== undefined) {
      const held = this.heldMatch(filter, rawFilter);
      if (held === null) return null;
      ({ match, token } = held);
    } else {
      const settled = this.writesSettled();
      if (settled === null) return this.decline('moved');
      token = settled;
    }
    const m = match;
    const accept = m === null ? (s: number) => this.live.has(s) : (s: number) => s >>> 5 < m.words.length && (m.words[s >>> 5] & (1 << (s & 31))) !== 0;
    const out: Rankings = {};
    try {
      if (dense !== null) {
        const top = this.readTop();
        if (top === 'busy') return this.decline('moved');
        if (top === null) return this.decline('epoch');
        if (m === null) {
          const scans = this.graph === null || this.spec.index === 'flat' || this.live.count <= Math.max(ef, depth + 1);
          if ((scans ? this.store.count : this.store.count - top.indexedUpTo) > this.scanMax) return this.decline('scan');
        } else {
          const plan = this.filteredPlan(depth + 1, ef, top, m);
          if (plan !== null && (plan.mode === 'exact' ? m.count : plan.count - plan.indexedUpTo) > this.scanMax) return this.decline('scan');
        }
        const run = (n: number): SearchResult => (m === null
          ? this.searchDense(dense!, n, Math.max(ef, n), top)
          : this.searchFiltered(dense!, n, Math.max(ef, n), top, m));
        out.dense = this.ranked(run, depth, (d) => (this.kind === 'l2' ? Math.sqrt(Math.max(0, d)) : -d), withPayload, withVector);
      }
      // Scores best first: as negated "distances", so the tie rule reads them the same way.
      if (sparse !== null) {
        out.sparse = this.ranked((n) => scored(this.sparse.dot(sparse!.terms, sparse!.weights, n, accept, true)), depth, (x) => x, withPayload, withVector, true);
      }
      // BM25 where some document has text: a text query over a collection without any is its dense ranking.
      if (terms !== null && (corpus?.n ?? this.sparse.docs) > 0) {
        out.text = this.ranked((n) => scored(this.sparse.bm25(terms!, n, accept, undefined, corpus, true)), depth, (x) => x, withPayload, withVector, true);
      } else if (terms !== null) out.text = [];
    } catch (e) {
      // A plan that would scan more than a loop does; arrays a write changed under the read.
      if (e instanceof ExactScanRefused) return this.decline('scan');
      if (e instanceof SparseTorn) return this.decline('moved');
      throw e;
    }
    if (this.retired) return this.decline('retired');
    if (this.writesSettled() !== token) return this.decline('moved');
    return out;
  }

  /**
   * One ranking `depth` deep with the tie rule at its cut (Database.rankingsOf's `ranked`); `whole`: `run`
   * gives every entry tied with its last already.
   */
  private ranked(run: (n: number) => SearchResult, depth: number, score: (x: number) => number, withPayload: boolean, withVector: boolean, whole = false): Ranked[] {
    let r = run(depth + 1);
    if (!whole && tieAtCut(r.dists, depth, depth + 1)) r = widenTiesNow(r, depth, depth + 1, this.live.count, run);
    const dists = r.dists.subarray(0, Math.min(depth, r.dists.length));
    const slots = tiesById((s) => this.idOf(s), r, dists.length).subarray(0, dists.length);
    return Array.from(slots, (slot, i) => {
      const e: Ranked = { id: this.idOf(slot), score: score(dists[i]) };
      if (withPayload) e.payload = this.payloadOf(slot) ?? {};
      if (withVector) e.vector = Array.from(this.store.view(slot));
      return e;
    });
  }

  private decline(why: Declined): null {
    this.declined = why;
    return null;
  }

  private idOf(slot: number): string {
    const b = this.ids.get(slot);
    return b === null ? '' : decoder.decode(b);
  }

  /** A slot's payload from the shared records; null when it has none. */
  private payloadOf(slot: number): Payload | null {
    const b = this.payloads.get(slot);
    return b === null ? null : JSON.parse(decoder.decode(b)) as Payload;
  }

  /**
   * The header's graph bound and top, consistent with each other and with the graph held; null when the
   * header names another epoch; 'busy' when the writer kept changing it.
   */
  private readTop(): { indexedUpTo: number; entry: number; maxLevel: number; size: number } | null | 'busy' {
    const h = this.header;
    for (let tries = 0; tries < 4; tries++) {
      const s1 = Atomics.load(h, H.SEQ);
      if ((s1 & 1) === 1) continue;
      const epoch = Atomics.load(h, H.EPOCH);
      const top = { indexedUpTo: Atomics.load(h, H.INDEXED_UP_TO), entry: Atomics.load(h, H.ENTRY), maxLevel: Atomics.load(h, H.MAX_LEVEL), size: Atomics.load(h, H.SIZE) };
      if (Atomics.load(h, H.SEQ) !== s1) continue;
      return epoch === this.graphEpoch ? top : null;
    }
    return 'busy';
  }

  /**
   * Collection.planDense with a filter, over the engine thread's match bits (null: nothing matches).
   * The counts it reads are those of the bits' token: no write has begun since (checked again after).
   */
  private filteredPlan(k: number, ef: number, top: { indexedUpTo: number }, m: HeldBits): DensePlan | null {
    if (m.count === 0 || k === 0) return null;
    const count = this.store.count;
    const base = {
      bits: new Bitset(m.capacity, m.words), acceptAll: false, k, want: Math.min(k, m.count), indexedUpTo: Math.min(top.indexedUpTo, count), count,
      exactAllowed: m.count <= this.scanMax,
    };
    if (this.graph === null || this.spec.index === 'flat') return { ...base, mode: 'exact', ef: 0 };
    const graphEf = Math.max(ef, k);
    const plan = planFilteredSearch({ matches: m.count, live: this.live.count, k, ef: graphEf }, { efMax: this.limits.maxEfSearch });
    return plan.kind === 'exact' ? { ...base, mode: 'exact', ef: 0 } : { ...base, mode: 'graph', ef: Math.max(plan.ef, k) };
  }

  private searchFiltered(vector: Float32Array, k: number, ef: number, top: { indexedUpTo: number; entry: number; maxLevel: number; size: number }, m: HeldBits): SearchResult {
    const plan = this.filteredPlan(k, ef, top, m);
    if (plan === null) return EMPTY;
    const graph = this.graph;
    if (graph !== null) graph.adoptTop(top.entry, top.maxLevel, top.size);
    return runDensePlan(this.store, this.kind, graph, vector, plan);
  }

  /**
   * Collection.planDense without a filter, run here (search-pool-plan.ts), as a search worker would.
   * With no tombstone below the count every slot is an answer and no bit is read (a slot tombstoned
   * during the search is found by the liveness check after it). Otherwise the search runs over a copy
   * of the live bits taken before the count is read (SharedLiveView.copy): an update racing the search
   * shows its point in the old slot or the new one, never in neither.
   */
  private searchDense(vector: Float32Array, k: number, ef: number, top: { indexedUpTo: number; entry: number; maxLevel: number; size: number }): SearchResult {
    const liveCount = this.live.count;
    let count = this.store.count;
    if (liveCount === 0 || k === 0) return EMPTY;
    const acceptAll = liveCount === count;
    let bits: Bitset;
    if (acceptAll) bits = new Bitset(0);
    else {
      const words = this.live.copy();
      count = this.store.count;
      bits = new Bitset(Math.min(count, words.length * 32), words);
    }
    const graph = this.graph;
    const base: Omit<DensePlan, 'mode' | 'ef'> = {
      bits, acceptAll, k, want: Math.min(k, liveCount), indexedUpTo: Math.min(top.indexedUpTo, count), count,
      exactAllowed: (acceptAll ? count : liveCount) <= this.scanMax,
    };
    let plan: DensePlan;
    const graphEf = Math.max(ef, k);
    if (graph === null || this.spec.index === 'flat' || liveCount <= graphEf) plan = { ...base, mode: 'exact', ef: 0 };
    else plan = { ...base, mode: 'graph', ef: graphEf };
    if (graph !== null) graph.adoptTop(top.entry, top.maxLevel, top.size);
    return runDensePlan(this.store, this.kind, graph, vector, plan);
  }
}
