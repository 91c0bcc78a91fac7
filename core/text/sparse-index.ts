/**
 * An inverted index over slots (the dense internal point numbers) for BM25 and sparse dot products.
 *
 * Corpus statistics stay exact under every change: `set` of a new slot, `set` of an existing slot
 * (an update: the old document is taken out first) and `remove` adjust N, the total length and each
 * document frequency by exactly what the document contributed, so they always equal a recomputation
 * from scratch over the live documents.
 *
 * Postings are append-only arrays per term; an entry carries the slot's version at insertion, and an
 * entry whose version no longer matches is dead and skipped. A posting list is compacted when its dead
 * entries outnumber the live ones, so memory stays within twice the live postings.
 *
 * BM25 (Okapi, Lucene's idf): for each query term t with query count qtf,
 *   idf(t) = ln(1 + (N - df(t) + 0.5) / (df(t) + 0.5))
 *   score += qtf * idf(t) * tf * (k1 + 1) / (tf + k1 * (1 - b + b * dl / avgdl))
 * with k1 = 0.9 and b = 0.4 by default (Anserini's defaults, which the Cranfield reference figures use).
 * As in Lucene, N and avgdl count only documents with at least one term: a document that analyses to
 * nothing (all stop words) is not indexed. A repeated query term counts as many times as it is repeated
 * (Anserini's bag-of-words query); deduplicate before calling for "once each".
 * For a document from `__svc_sparse__`, BM25 reads the weights as term frequencies (weights <= 0 are
 * ignored by BM25) and its length is the sum of its positive weights.
 *
 * Results are best-first, ties broken by ascending slot.
 */
import { assert } from '../base/assert.js';
import { invalidArgument, limitExceeded } from '../base/errors.js';
import { growShared, growableShared } from '../base/growable.js';
import { textVector } from './tokenizer.js';

export interface Bm25Params {
  k1: number;
  b: number;
}

export const DEFAULT_BM25: Readonly<Bm25Params> = Object.freeze({ k1: 0.9, b: 0.4 });

export interface ScoredSlots {
  slots: Int32Array;
  scores: Float32Array;
}

export interface SparseStats {
  /** Number of indexed documents. */
  n: number;
  /** Average document length (0 when empty). */
  avgdl: number;
  /** Number of indexed documents containing `term`. */
  df(term: number): number;
}

/**
 * The corpus BM25 scores against: this index's own by default; for a collection split over shards, the
 * sums of every shard's (Elasticsearch's dfs phase), so each shard scores as one index of everything would.
 */
export interface Bm25Corpus {
  /** Documents with at least one term. */
  n: number;
  /** Sum of their lengths. */
  totalLength: number;
  /** Documents containing `term`. */
  df(term: number): number;
}

export interface SparseDoc {
  terms: Uint32Array;
  weights: Float32Array;
  length: number;
}

/**
 * What another thread needs to read a SparseIndex (a request loop's hybrid and text rankings, issue 20):
 * its buffers, all shared memory when the index was made `shared`.
 */
export interface SparseHandle {
  readonly header: SharedArrayBuffer;
  readonly table: SharedArrayBuffer;
  readonly slots: SharedArrayBuffer;
  readonly versions: SharedArrayBuffer;
  readonly weights: SharedArrayBuffer;
  readonly docVersions: SharedArrayBuffer;
  readonly docLengths: SharedArrayBuffer;
}

/**
 * A reader found the index changing under it (another thread writes it): its answer is worthless. Only a
 * reader on another thread sees it, and only while a write runs; the caller hands the query on.
 */
export class SparseTorn extends Error {
  constructor() {
    super('the sparse index changed during the read');
  }
}

/** Header words (int32); the total length is a float64 after them. */
const HW = {
  /** Term table entries (a power of two). */
  TABLE_CAP: 0,
  /** Entries in use (live terms and terms whose documents all went). */
  TABLE_USED: 1,
  /** Documents with at least one term. */
  DOCS: 2,
  /** Slots the per-slot arrays cover (a reader's bound on every slot it reads). */
  SLOTS: 3,
} as const;
const HEADER_BYTES = 64;
const TOTAL_AT = 4; // Float64Array index: byte 32

/**
 * Term table entry words: the term; its block's first posting + 1 (0: an empty entry); the block's
 * capacity; postings used (live and dead); live postings (the term's document frequency).
 */
const E_TERM = 0;
const E_AT = 1;
const E_CAP = 2;
const E_USED = 3;
const E_LIVE = 4;
const ENTRY_WORDS = 5;
const TABLE_MIN = 16;
const BLOCK_MIN = 4;
/** Posting arena garbage (entries of moved blocks) under this is never compacted. */
const ARENA_GARBAGE_MIN = 1 << 16;
/**
 * Bytes each buffer may reach (a growable shared buffer reserves that much address space up front, and
 * takes 4 GiB at most on Node 20): postings 2^30 entries (12 bytes each over three arrays), slots 2^29.
 */
const MAX_BYTES = {
  table: 2 ** 31, slots: 2 ** 32, versions: 2 ** 32, weights: 2 ** 32, docVersions: 2 ** 31, docLengths: 2 ** 32,
} as const;
type Grown = keyof typeof MAX_BYTES;
/** Postings the arena holds at most, and slots the per-slot arrays cover at most. */
const ARENA_MAX = MAX_BYTES.slots / 4;
const SLOTS_MAX = MAX_BYTES.docVersions / 4;

/**
 * A buffer of `bytes`: growable shared memory (other threads read it, so it grows in place, up to
 * `max`), or this thread's own, which grows by copy (no address space reserved).
 */
function buffer(bytes: number, max: number, shared: boolean): SharedArrayBuffer {
  return shared ? growableShared(bytes, max) : new ArrayBuffer(bytes) as unknown as SharedArrayBuffer;
}

const hashOf = (term: number, mask: number): number => (Math.imul(term | 0, 0x9e3779b1) >>> 0) & mask;

const isPow2 = (n: number): boolean => n > 0 && (n & (n - 1)) === 0;

/**
 * The index's arrays and everything that only reads them: BM25, sparse dot products and statistics. The
 * engine thread's SparseIndex is one; a request loop opens one over a SparseHandle of a shared index,
 * whose arrays track their buffers' growth (growable shared buffers are never moved). An index that is
 * not shared grows by copying into larger buffers of its own, so it reserves no address space; a
 * reader over its handle holds the buffers of that moment.
 *
 * Layout: an open-addressing term table (ENTRY_WORDS per entry) pointing into three parallel posting
 * arrays (slot, the slot's version at insertion, weight), one block per term, a block moved (doubled) to
 * the arena's end when full; per slot, its document's version (a posting of another version is dead) and
 * length. A reader on another thread reads without locks: every loop is bounded and every offset checked
 * (SparseTorn when one is out of range), and its caller keeps the answer only if no write of the
 * collection began meanwhile (shared-reads.ts).
 */
export class SparseReader {
  /** The buffers; this thread's own are replaced when they grow (shared ones grow in place). */
  protected readonly h: { -readonly [K in keyof SparseHandle]: SparseHandle[K] };
  protected readonly header: Int32Array;
  protected readonly total: Float64Array;
  // Views over the buffers: length-tracking over shared ones (grown in place); over this thread's own,
  // made again when a buffer is replaced by a larger one (SparseIndex.grow).
  protected table!: Int32Array;
  protected pSlots!: Int32Array;
  protected pVersions!: Int32Array;
  protected pWeights!: Float32Array;
  protected dVersions!: Int32Array;
  protected dLengths!: Float64Array;
  private scratch = new Float64Array(0);
  private touchedMark = new Uint8Array(0);

  constructor(h: SparseHandle) {
    this.h = h;
    this.header = new Int32Array(h.header, 0, HEADER_BYTES / 4);
    this.total = new Float64Array(h.header, 0, HEADER_BYTES / 8);
    this.rebind();
  }

  /** The views over `h`'s buffers (made again after this thread's own buffer was replaced). */
  protected rebind(): void {
    this.table = new Int32Array(this.h.table);
    this.pSlots = new Int32Array(this.h.slots);
    this.pVersions = new Int32Array(this.h.versions);
    this.pWeights = new Float32Array(this.h.weights);
    this.dVersions = new Int32Array(this.h.docVersions);
    this.dLengths = new Float64Array(this.h.docLengths);
  }

  /** Documents with at least one term. */
  get docs(): number {
    return this.header[HW.DOCS];
  }

  protected get totalLength(): number {
    return this.total[TOTAL_AT];
  }

  stats(): SparseStats {
    const n = this.docs;
    const total = this.totalLength;
    return {
      n,
      avgdl: n === 0 ? 0 : total / n,
      df: (term: number) => this.dfOf(term >>> 0),
    };
  }

  /** This index's part of a corpus: its document count, total length and each distinct term's df. */
  corpus(terms: Iterable<number>): { n: number; totalLength: number; df: Map<number, number> } {
    const df = new Map<number, number>();
    for (const t of terms) df.set(t >>> 0, this.dfOf(t >>> 0));
    return { n: this.docs, totalLength: this.totalLength, df };
  }

  private dfOf(term: number): number {
    const e = this.find(term);
    return e < 0 ? 0 : this.table[e + E_LIVE];
  }

  /** The entry (its first word) of `term`, or -1. */
  protected find(term: number): number {
    const cap = this.header[HW.TABLE_CAP];
    const t = this.table;
    if (!isPow2(cap) || cap * ENTRY_WORDS > t.length) throw new SparseTorn();
    const mask = cap - 1;
    for (let i = hashOf(term, mask), n = 0; n < cap; i = (i + 1) & mask, n++) {
      const e = i * ENTRY_WORDS;
      if (t[e + E_AT] === 0) return -1;
      if (t[e + E_TERM] === (term | 0)) return e;
    }
    return -1;
  }

  bm25(
    queryTerms: Uint32Array,
    k: number,
    accept?: (slot: number) => boolean,
    params: Bm25Params = DEFAULT_BM25,
    corpus?: Bm25Corpus,
    ties = false,
  ): ScoredSlots {
    const docs = this.docs;
    if (docs === 0 || k <= 0) return empty();
    const n = corpus?.n ?? docs;
    if (n === 0) return empty();
    const avgdl = (corpus?.totalLength ?? this.totalLength) / n;
    const qtf = new Map<number, number>();
    for (const t of queryTerms) qtf.set(t, (qtf.get(t) ?? 0) + 1);
    const touched: number[] = [];
    const bound = this.prepareScratch();
    const t = this.table;
    try {
      this.scoreBm25(qtf, n, avgdl, params, corpus, bound, touched, t);
    } catch (e) {
      // A torn read: the marks of what was touched go, or this reader would skip those slots from now on.
      for (const slot of touched) this.touchedMark[slot] = 0;
      throw e;
    }
    return this.collect(touched, k, accept, ties);
  }

  private scoreBm25(
    qtf: Map<number, number>, n: number, avgdl: number, params: Bm25Params, corpus: Bm25Corpus | undefined, bound: number, touched: number[], t: Int32Array,
  ): void {
    const { k1, b } = params;
    for (const [term, count] of qtf) {
      const e = this.find(term);
      if (e < 0) continue;
      const live = t[e + E_LIVE];
      const df = corpus === undefined ? live : corpus.df(term);
      const idf = Math.log(1 + (n - df + 0.5) / (df + 0.5));
      const [from, to] = this.block(e);
      for (let i = from; i < to; i++) {
        const slot = this.pSlots[i];
        const tf = this.pWeights[i];
        if (slot >>> 0 >= bound) throw new SparseTorn();
        if (this.pVersions[i] !== this.dVersions[slot] || tf <= 0) continue;
        const dl = this.dLengths[slot];
        const s = (count * idf * tf * (k1 + 1)) / (tf + k1 * (1 - b + (b * dl) / avgdl));
        this.accumulate(slot, s, touched);
      }
    }
  }

  /** Sparse dot product of the query with each stored vector; repeated query indices add up. */
  dot(indices: Uint32Array, values: Float32Array, k: number, accept?: (slot: number) => boolean, ties = false): ScoredSlots {
    assert(indices.length === values.length, 'indices and values are parallel');
    if (this.docs === 0 || k <= 0) return empty();
    const touched: number[] = [];
    const bound = this.prepareScratch();
    try {
      for (let q = 0; q < indices.length; q++) {
        const e = this.find(indices[q]);
        if (e < 0) continue;
        const v = values[q];
        const [from, to] = this.block(e);
        for (let i = from; i < to; i++) {
          const slot = this.pSlots[i];
          if (slot >>> 0 >= bound) throw new SparseTorn();
          if (this.pVersions[i] !== this.dVersions[slot]) continue;
          this.accumulate(slot, v * this.pWeights[i], touched);
        }
      }
    } catch (e) {
      for (const slot of touched) this.touchedMark[slot] = 0;
      throw e;
    }
    return this.collect(touched, k, accept, ties);
  }

  /** The postings entry `e`'s block holds: [first, end), checked against the arrays. */
  private block(e: number): [number, number] {
    const t = this.table;
    const from = t[e + E_AT] - 1;
    const used = t[e + E_USED];
    const end = from + used;
    if (from < 0 || used < 0 || used > t[e + E_CAP] || end > this.pSlots.length || end > this.pVersions.length || end > this.pWeights.length) {
      throw new SparseTorn();
    }
    return [from, end];
  }

  /** Sizes the scratch to the slots the index covers; returns that bound. */
  private prepareScratch(): number {
    const need = Math.min(this.header[HW.SLOTS], this.dVersions.length, this.dLengths.length);
    if (this.scratch.length < need) {
      const cap = Math.max(need, this.scratch.length * 2, 64);
      this.scratch = new Float64Array(cap);
      this.touchedMark = new Uint8Array(cap);
    }
    return need;
  }

  private accumulate(slot: number, s: number, touched: number[]): void {
    if (this.touchedMark[slot] === 0) {
      this.touchedMark[slot] = 1;
      this.scratch[slot] = 0;
      touched.push(slot);
    }
    this.scratch[slot] += s;
  }

  /**
   * Top k of the touched slots that pass `accept`; resets the scratch marks. `ties`: and every slot after
   * the k-th whose score equals its as a float32 (what callers compare): a caller that orders equal
   * scores by id needs the whole run at its cut, which it would otherwise ask for with ever larger k.
   */
  private collect(touched: number[], k: number, accept?: (slot: number) => boolean, ties = false): ScoredSlots {
    const cand: number[] = [];
    try {
      for (const slot of touched) if (accept === undefined || accept(slot)) cand.push(slot);
    } finally {
      for (const slot of touched) this.touchedMark[slot] = 0;
    }
    const scores = this.scratch;
    cand.sort((a, b) => scores[b] - scores[a] || a - b);
    let m = Math.min(k, cand.length);
    if (ties && m > 0) {
      const last = Math.fround(scores[cand[m - 1]]);
      while (m < cand.length && Math.fround(scores[cand[m]]) === last) m++;
    }
    const out = { slots: new Int32Array(m), scores: new Float32Array(m) };
    for (let i = 0; i < m; i++) {
      out.slots[i] = cand[i];
      out.scores[i] = scores[cand[i]];
    }
    return out;
  }
}

/**
 * The index itself, written by one thread (the engine's). `shared`: its arrays are shared memory, and
 * `handle()` lets request loops read it (SparseReader); otherwise they are this thread's.
 */
export class SparseIndex extends SparseReader {
  /** Each slot's document as given (its terms, to take it out again), on this thread only. */
  private readonly stored: (SparseDoc | undefined)[] = [];
  /** Posting entries the arena holds, and those of blocks moved away (garbage until a compaction). */
  private arenaEnd = 0;
  private garbage = 0;
  /** Arena compactions done (tests). */
  compactions = 0;
  private readonly garbageMin: number;

  /**
   * Documents left out of the index because they would take its buffers past their maxima (2^30
   * postings, 2^29 slots): stored, and found by vector and filter, but not by text.
   */
  unindexed = 0;
  private readonly shared: boolean;

  /** `arenaGarbageMin`: moved-away postings below it are never compacted (ARENA_GARBAGE_MIN; tests use less). */
  constructor(opts: { shared?: boolean; arenaGarbageMin?: number } = {}) {
    const shared = opts.shared === true;
    super({
      header: shared ? new SharedArrayBuffer(HEADER_BYTES) : new ArrayBuffer(HEADER_BYTES) as unknown as SharedArrayBuffer,
      table: buffer(TABLE_MIN * ENTRY_WORDS * 4, MAX_BYTES.table, shared),
      slots: buffer(1024, MAX_BYTES.slots, shared),
      versions: buffer(1024, MAX_BYTES.versions, shared),
      weights: buffer(1024, MAX_BYTES.weights, shared),
      docVersions: buffer(1024, MAX_BYTES.docVersions, shared),
      docLengths: buffer(2048, MAX_BYTES.docLengths, shared),
    });
    this.shared = shared;
    this.header[HW.TABLE_CAP] = TABLE_MIN;
    this.garbageMin = opts.arenaGarbageMin ?? ARENA_GARBAGE_MIN;
  }

  /** Buffer `key` holds at least `need` bytes: grown in place (shared), or replaced by a larger copy. */
  private grow(key: Grown, need: number): void {
    const buf = this.h[key];
    if (need <= buf.byteLength) return;
    assert(need <= MAX_BYTES[key], 'the sparse index stays within its buffers (checked before a document is indexed)');
    if (this.shared) {
      growShared(buf, need);
      return;
    }
    const next = new ArrayBuffer(Math.min(MAX_BYTES[key], Math.max(need, buf.byteLength * 2)));
    new Uint8Array(next).set(new Uint8Array(buf));
    this.h[key] = next as unknown as SharedArrayBuffer;
    this.rebind();
  }

  /**
   * Whether indexing these terms at `slot` keeps every buffer within its maximum, counting the most it
   * may take: a new block per new term, a doubled block per full one, the table rebuilt for them all.
   */
  private fits(slot: number, terms: Uint32Array): boolean {
    if (slot >= SLOTS_MAX) return false;
    const t = this.table;
    let need = this.arenaEnd;
    let fresh = 0;
    for (const term of terms) {
      const e = this.find(term);
      if (e < 0) {
        need += BLOCK_MIN;
        fresh++;
      } else if (t[e + E_USED] === t[e + E_CAP]) need += 2 * t[e + E_CAP];
    }
    if (need > ARENA_MAX) return false;
    let cap = this.header[HW.TABLE_CAP];
    if ((this.header[HW.TABLE_USED] + fresh) * 2 > cap) {
      cap = TABLE_MIN;
      while (cap < 4 * (this.header[HW.TABLE_USED] + fresh + 1)) cap *= 2;
    }
    return cap * ENTRY_WORDS * 4 <= MAX_BYTES.table;
  }

  /** Buffers for a reader on another thread (meaningful when made `shared`). */
  handle(): SparseHandle {
    return this.h;
  }

  /** Index (or replace) the document of `slot`. Terms must be distinct; weights parallel. */
  set(slot: number, terms: Uint32Array, weights: Float32Array): void {
    assert(Number.isInteger(slot) && slot >= 0, 'slot is a non-negative integer');
    assert(terms.length === weights.length, 'terms and weights are parallel');
    this.remove(slot);
    if (terms.length === 0) return;
    if (!this.fits(slot, terms)) {
      this.unindexed++;
      return;
    }
    this.coverSlot(slot);
    const version = (this.dVersions[slot] + 1) | 0;
    let length = 0;
    for (let i = 0; i < weights.length; i++) if (weights[i] > 0) length += weights[i];
    this.stored[slot] = { terms: terms.slice(), weights: weights.slice(), length };
    // The version and length first: a posting is read only once it is counted in its block.
    this.dLengths[slot] = length;
    this.dVersions[slot] = version;
    this.header[HW.DOCS]++;
    this.total[TOTAL_AT] += length;
    for (let i = 0; i < terms.length; i++) this.append(terms[i], slot, version, weights[i]);
  }

  /** Take `slot` out of the index; a slot that holds nothing is ignored. */
  remove(slot: number): void {
    const doc = this.stored[slot];
    if (doc === undefined) return;
    this.stored[slot] = undefined;
    this.dVersions[slot] = (this.dVersions[slot] + 1) | 0; // every posting of the old version is now dead
    const docs = --this.header[HW.DOCS];
    this.total[TOTAL_AT] = docs === 0 ? 0 : this.totalLength - doc.length; // no float residue on an empty index
    for (const term of doc.terms) {
      const e = this.find(term);
      assert(e >= 0, 'a stored term is in the table');
      const t = this.table;
      const live = --t[e + E_LIVE];
      if (t[e + E_USED] - live > live) this.compactBlock(e);
    }
    this.maybeCompactArena();
  }

  has(slot: number): boolean {
    return this.stored[slot] !== undefined;
  }

  /** The stored document of a slot (terms ascending only if they were given so). */
  get(slot: number): SparseDoc | undefined {
    return this.stored[slot];
  }

  private coverSlot(slot: number): void {
    if (slot < this.header[HW.SLOTS]) return;
    const n = Math.min(SLOTS_MAX, Math.max(slot + 1, this.header[HW.SLOTS] * 2, 256));
    this.grow('docVersions', n * 4);
    this.grow('docLengths', n * 8);
    this.header[HW.SLOTS] = Math.min(this.dVersions.length, this.dLengths.length);
  }

  private append(term: number, slot: number, version: number, weight: number): void {
    let e = this.find(term);
    if (e < 0) e = this.insert(term);
    const t = this.table;
    if (t[e + E_USED] === t[e + E_CAP]) this.moveBlock(e, t[e + E_CAP] * 2);
    const at = t[e + E_AT] - 1 + t[e + E_USED];
    this.pSlots[at] = slot;
    this.pVersions[at] = version;
    this.pWeights[at] = weight;
    t[e + E_USED]++;
    t[e + E_LIVE]++;
  }

  /** A new entry for `term` with an empty block (the table grown first when half full). */
  private insert(term: number): number {
    if ((this.header[HW.TABLE_USED] + 1) * 2 > this.header[HW.TABLE_CAP]) this.rehash();
    const cap = this.header[HW.TABLE_CAP];
    const mask = cap - 1;
    const t = this.table;
    let i = hashOf(term, mask);
    while (t[i * ENTRY_WORDS + E_AT] !== 0) i = (i + 1) & mask;
    const e = i * ENTRY_WORDS;
    const at = this.allocate(BLOCK_MIN);
    t[e + E_TERM] = term | 0;
    t[e + E_CAP] = BLOCK_MIN;
    t[e + E_USED] = 0;
    t[e + E_LIVE] = 0;
    t[e + E_AT] = at + 1;
    this.header[HW.TABLE_USED]++;
    return e;
  }

  /**
   * The table rebuilt at twice the live terms' room (a power of two, load at most a half): terms whose
   * documents all went are dropped, their blocks become garbage.
   */
  private rehash(): void {
    const old = this.table.slice(0, this.header[HW.TABLE_CAP] * ENTRY_WORDS);
    let terms = 0;
    for (let e = 0; e < old.length; e += ENTRY_WORDS) {
      if (old[e + E_AT] === 0) continue;
      if (old[e + E_LIVE] > 0) terms++;
      else this.garbage += old[e + E_CAP];
    }
    let cap = TABLE_MIN;
    while (cap < 4 * (terms + 1)) cap *= 2;
    const next = new Int32Array(cap * ENTRY_WORDS);
    const mask = cap - 1;
    for (let e = 0; e < old.length; e += ENTRY_WORDS) {
      if (old[e + E_AT] === 0 || old[e + E_LIVE] === 0) continue;
      let i = hashOf(old[e + E_TERM], mask);
      while (next[i * ENTRY_WORDS + E_AT] !== 0) i = (i + 1) & mask;
      next.set(old.subarray(e, e + ENTRY_WORDS), i * ENTRY_WORDS);
    }
    this.grow('table', next.byteLength);
    this.table.set(next);
    this.table.fill(0, next.length);
    this.header[HW.TABLE_CAP] = cap;
    this.header[HW.TABLE_USED] = terms;
  }

  /** Room for `n` postings at the arena's end; returns the first. */
  private allocate(n: number): number {
    const at = this.arenaEnd;
    const end = at + n;
    this.grow('slots', end * 4);
    this.grow('versions', end * 4);
    this.grow('weights', end * 4);
    this.arenaEnd = end;
    return at;
  }

  /** Entry `e`'s block copied to a new one of `cap` postings at the arena's end. */
  private moveBlock(e: number, cap: number): void {
    const t = this.table;
    const from = t[e + E_AT] - 1;
    const used = t[e + E_USED];
    const at = this.allocate(cap);
    this.pSlots.copyWithin(at, from, from + used);
    this.pVersions.copyWithin(at, from, from + used);
    this.pWeights.copyWithin(at, from, from + used);
    this.garbage += t[e + E_CAP];
    t[e + E_CAP] = cap;
    t[e + E_AT] = at + 1;
  }

  /** Entry `e`'s dead postings dropped in place (and its block shrunk when far too large). */
  private compactBlock(e: number): void {
    const t = this.table;
    const from = t[e + E_AT] - 1;
    const used = t[e + E_USED];
    let w = from;
    for (let i = from; i < from + used; i++) {
      if (this.pVersions[i] !== this.dVersions[this.pSlots[i]]) continue;
      this.pSlots[w] = this.pSlots[i];
      this.pVersions[w] = this.pVersions[i];
      this.pWeights[w] = this.pWeights[i];
      w++;
    }
    const live = w - from;
    assert(live === t[e + E_LIVE], 'live postings match the document frequency');
    t[e + E_USED] = live;
    if (t[e + E_CAP] > 4 * Math.max(live, BLOCK_MIN)) this.moveBlock(e, Math.max(live, BLOCK_MIN) * 2);
  }

  /**
   * Once the arena holds more moved-away blocks than postings in use, every block is copied to the
   * arena's start, in table order, each at its current capacity.
   */
  private maybeCompactArena(): void {
    if (this.garbage < this.garbageMin || 2 * this.garbage < this.arenaEnd) return;
    const t = this.table;
    const cap = this.header[HW.TABLE_CAP];
    let words = 0;
    for (let e = 0; e < cap * ENTRY_WORDS; e += ENTRY_WORDS) if (t[e + E_AT] !== 0) words += t[e + E_CAP];
    const slots = new Int32Array(words);
    const versions = new Int32Array(words);
    const weights = new Float32Array(words);
    let at = 0;
    for (let e = 0; e < cap * ENTRY_WORDS; e += ENTRY_WORDS) {
      if (t[e + E_AT] === 0) continue;
      const from = t[e + E_AT] - 1;
      const used = t[e + E_USED];
      slots.set(this.pSlots.subarray(from, from + used), at);
      versions.set(this.pVersions.subarray(from, from + used), at);
      weights.set(this.pWeights.subarray(from, from + used), at);
      t[e + E_AT] = at + 1;
      at += t[e + E_CAP];
    }
    this.pSlots.set(slots);
    this.pVersions.set(versions);
    this.pWeights.set(weights);
    this.arenaEnd = words;
    this.garbage = 0;
    this.compactions++;
  }
}

function empty(): ScoredSlots {
  return { slots: new Int32Array(0), scores: new Float32Array(0) };
}

const TEXT_KEY = '__svc_text__';
const SPARSE_KEY = '__svc_sparse__';
const F32_MAX = 3.4028234663852886e38;

/**
 * The sparse document a payload asks for: `__svc_sparse__` ({indices, values}) when present, else the
 * analysed `__svc_text__`, else null. Both keys present: the sparse vector wins (spec). Sparse terms
 * come back sorted by index. Errors: a malformed value is `invalid_argument`; more than `maxTerms`
 * sparse terms is `limit_exceeded` naming SVC_MAX_SPARSE_TERMS. A text is bounded by the payload size
 * limit instead. `null` under either key counts as absent.
 */
export function docFromPayload(payload: Record<string, unknown> | undefined | null, maxTerms: number): SparseDoc | null {
  if (payload === undefined || payload === null) return null;
  const sparse = payload[SPARSE_KEY];
  if (sparse !== undefined && sparse !== null) return validateSparse(sparse, maxTerms, SPARSE_KEY);
  const text = payload[TEXT_KEY];
  if (text === undefined || text === null) return null;
  if (typeof text !== 'string') throw invalidArgument(`${TEXT_KEY} must be a string`);
  return textVector(text);
}

/**
 * Validate a sparse vector given as parallel `indices` and `values` (also used for a query's
 * `sparse_indices`/`sparse_values`). Returns it sorted by index, length = sum of positive values.
 */
export function validateSparse(value: unknown, maxTerms: number, what = 'sparse vector'): SparseDoc {
  if (typeof value !== 'object' || value === null || Array.isArray(value)) {
    throw invalidArgument(`${what} must be an object {indices, values}`);
  }
  const { indices, values } = value as { indices?: unknown; values?: unknown };
  if (!Array.isArray(indices) || !Array.isArray(values)) {
    throw invalidArgument(`${what} needs two lists, indices and values`);
  }
  if (indices.length !== values.length) {
    throw invalidArgument(`${what}: indices (${indices.length}) and values (${values.length}) must have the same length`);
  }
  if (indices.length > maxTerms) throw limitExceeded('SVC_MAX_SPARSE_TERMS', maxTerms, indices.length, `${what} term count`);
  const order = indices.map((_, i) => i);
  for (let i = 0; i < indices.length; i++) {
    const ix = indices[i];
    if (typeof ix !== 'number' || !Number.isInteger(ix) || ix < 0 || ix > 0xffffffff) {
      throw invalidArgument(`${what}: indices[${i}] must be an integer from 0 to 4294967295`);
    }
    const v = values[i];
    if (typeof v !== 'number' || !Number.isFinite(v) || Math.abs(v) > F32_MAX) {
      throw invalidArgument(`${what}: values[${i}] must be a finite number within float32 range`);
    }
  }
  order.sort((a, b) => (indices[a] as number) - (indices[b] as number));
  const terms = new Uint32Array(order.length);
  const weights = new Float32Array(order.length);
  let length = 0;
  for (let j = 0; j < order.length; j++) {
    terms[j] = indices[order[j]] as number;
    weights[j] = values[order[j]] as number;
    if (j > 0 && terms[j] === terms[j - 1]) throw invalidArgument(`${what}: index ${terms[j]} appears more than once`);
    if (weights[j] > 0) length += weights[j];
  }
  return { terms, weights, length };
}
