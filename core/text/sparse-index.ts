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

interface Posting {
  slots: Int32Array;
  versions: Uint32Array;
  weights: Float32Array;
  /** Entries used (live and dead). */
  used: number;
  /** Live entries: the term's document frequency. */
  live: number;
}

interface StoredDoc extends SparseDoc {
  version: number;
}

export class SparseIndex {
  private readonly postings = new Map<number, Posting>();
  private readonly docs: (StoredDoc | undefined)[] = [];
  private readonly versions: number[] = [];
  private docCount = 0;
  private totalLength = 0;
  private scratch = new Float64Array(0);
  private touchedMark = new Uint8Array(0);

  /** Index (or replace) the document of `slot`. Terms must be distinct; weights parallel. */
  set(slot: number, terms: Uint32Array, weights: Float32Array): void {
    assert(Number.isInteger(slot) && slot >= 0, 'slot is a non-negative integer');
    assert(terms.length === weights.length, 'terms and weights are parallel');
    this.remove(slot);
    if (terms.length === 0) return;
    const version = (this.versions[slot] ?? 0) + 1;
    this.versions[slot] = version;
    let length = 0;
    for (let i = 0; i < weights.length; i++) if (weights[i] > 0) length += weights[i];
    const doc: StoredDoc = { terms: terms.slice(), weights: weights.slice(), length, version };
    this.docs[slot] = doc;
    this.docCount++;
    this.totalLength += length;
    for (let i = 0; i < terms.length; i++) this.append(terms[i], slot, version, weights[i]);
  }

  /** Take `slot` out of the index; a slot that holds nothing is ignored. */
  remove(slot: number): void {
    const doc = this.docs[slot];
    if (doc === undefined) return;
    this.docs[slot] = undefined;
    this.versions[slot] = doc.version + 1; // every posting of the old version is now dead
    this.docCount--;
    this.totalLength -= doc.length;
    if (this.docCount === 0) this.totalLength = 0; // no float residue on an empty index
    for (const t of doc.terms) {
      const p = this.postings.get(t) as Posting;
      p.live--;
      if (p.live === 0) this.postings.delete(t);
      else if (p.used - p.live > p.live) this.compact(p);
    }
  }

  has(slot: number): boolean {
    return this.docs[slot] !== undefined;
  }

  /** The stored document of a slot (terms ascending only if they were given so). */
  get(slot: number): SparseDoc | undefined {
    const d = this.docs[slot];
    return d === undefined ? undefined : { terms: d.terms, weights: d.weights, length: d.length };
  }

  stats(): SparseStats {
    const n = this.docCount;
    return {
      n,
      avgdl: n === 0 ? 0 : this.totalLength / n,
      df: (term: number) => this.postings.get(term >>> 0)?.live ?? 0,
    };
  }

  /** This index's part of a corpus: its document count, total length and each distinct term's df. */
  corpus(terms: Iterable<number>): { n: number; totalLength: number; df: Map<number, number> } {
    const df = new Map<number, number>();
    for (const t of terms) df.set(t >>> 0, this.postings.get(t >>> 0)?.live ?? 0);
    return { n: this.docCount, totalLength: this.totalLength, df };
  }

  bm25(
    queryTerms: Uint32Array,
    k: number,
    accept?: (slot: number) => boolean,
    params: Bm25Params = DEFAULT_BM25,
    corpus?: Bm25Corpus,
  ): ScoredSlots {
    if (this.docCount === 0 || k <= 0) return empty();
    const n = corpus?.n ?? this.docCount;
    if (n === 0) return empty();
    const avgdl = (corpus?.totalLength ?? this.totalLength) / n;
    const { k1, b } = params;
    const qtf = new Map<number, number>();
    for (const t of queryTerms) qtf.set(t, (qtf.get(t) ?? 0) + 1);
    const touched: number[] = [];
    this.prepareScratch();
    for (const [term, count] of qtf) {
      const p = this.postings.get(term);
      if (p === undefined) continue;
      const df = corpus === undefined ? p.live : corpus.df(term);
      const idf = Math.log(1 + (n - df + 0.5) / (df + 0.5));
      for (let i = 0; i < p.used; i++) {
        const slot = p.slots[i];
        const tf = p.weights[i];
        if (p.versions[i] !== this.versions[slot] || tf <= 0) continue;
        const dl = (this.docs[slot] as StoredDoc).length;
        const s = (count * idf * tf * (k1 + 1)) / (tf + k1 * (1 - b + (b * dl) / avgdl));
        this.accumulate(slot, s, touched);
      }
    }
    return this.collect(touched, k, accept);
  }

  /** Sparse dot product of the query with each stored vector; repeated query indices add up. */
  dot(indices: Uint32Array, values: Float32Array, k: number, accept?: (slot: number) => boolean): ScoredSlots {
    assert(indices.length === values.length, 'indices and values are parallel');
    if (this.docCount === 0 || k <= 0) return empty();
    const touched: number[] = [];
    this.prepareScratch();
    for (let q = 0; q < indices.length; q++) {
      const p = this.postings.get(indices[q]);
      if (p === undefined) continue;
      const v = values[q];
      for (let i = 0; i < p.used; i++) {
        const slot = p.slots[i];
        if (p.versions[i] !== this.versions[slot]) continue;
        this.accumulate(slot, v * p.weights[i], touched);
      }
    }
    return this.collect(touched, k, accept);
  }

  private append(term: number, slot: number, version: number, weight: number): void {
    let p = this.postings.get(term);
    if (p === undefined) {
      p = { slots: new Int32Array(4), versions: new Uint32Array(4), weights: new Float32Array(4), used: 0, live: 0 };
      this.postings.set(term, p);
    }
    if (p.used === p.slots.length) grow(p, p.used * 2);
    p.slots[p.used] = slot;
    p.versions[p.used] = version;
    p.weights[p.used] = weight;
    p.used++;
    p.live++;
  }

  private compact(p: Posting): void {
    let w = 0;
    for (let i = 0; i < p.used; i++) {
      if (p.versions[i] !== this.versions[p.slots[i]]) continue;
      p.slots[w] = p.slots[i];
      p.versions[w] = p.versions[i];
      p.weights[w] = p.weights[i];
      w++;
    }
    assert(w === p.live, 'live postings match the document frequency');
    p.used = w;
    if (p.slots.length > 4 * Math.max(w, 4)) grow(p, Math.max(w, 4) * 2);
  }

  private prepareScratch(): void {
    const need = this.docs.length;
    if (this.scratch.length < need) {
      const cap = Math.max(need, this.scratch.length * 2, 64);
      this.scratch = new Float64Array(cap);
      this.touchedMark = new Uint8Array(cap);
    }
  }

  private accumulate(slot: number, s: number, touched: number[]): void {
    if (this.touchedMark[slot] === 0) {
      this.touchedMark[slot] = 1;
      this.scratch[slot] = 0;
      touched.push(slot);
    }
    this.scratch[slot] += s;
  }

  /** Top k of the touched slots that pass `accept`; resets the scratch marks. */
  private collect(touched: number[], k: number, accept?: (slot: number) => boolean): ScoredSlots {
    const cand: number[] = [];
    for (const slot of touched) {
      this.touchedMark[slot] = 0;
      if (accept === undefined || accept(slot)) cand.push(slot);
    }
    const scores = this.scratch;
    cand.sort((a, b) => scores[b] - scores[a] || a - b);
    const m = Math.min(k, cand.length);
    const out = { slots: new Int32Array(m), scores: new Float32Array(m) };
    for (let i = 0; i < m; i++) {
      out.slots[i] = cand[i];
      out.scores[i] = scores[cand[i]];
    }
    return out;
  }
}

function grow(p: Posting, cap: number): void {
  const slots = new Int32Array(cap);
  const versions = new Uint32Array(cap);
  const weights = new Float32Array(cap);
  slots.set(p.slots.subarray(0, p.used));
  versions.set(p.versions.subarray(0, p.used));
  weights.set(p.weights.subarray(0, p.used));
  p.slots = slots;
  p.versions = versions;
  p.weights = weights;
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
