import type { Bitset } from '../base/bitset.js';
import { growShared, growableShared } from '../base/growable.js';
import { flatSearch, type SearchResult } from '../index/flat.js';
import type { Hnsw } from '../index/hnsw/hnsw.js';
import type { DistanceKind } from '../index/kernels/kernel.js';
import type { VectorStore } from '../index/vector-store.js';

/**
 * Multi-vector (MaxSim) search over a collection's token rows, written once for the engine thread
 * (Collection) and a request loop (shared-reads.ts ReadView), so that both answer alike.
 *
 * A document is a run of consecutive token slots; its first is its head, which carries its id and payload
 * and is what filters and the live documents count.
 */
export interface MultiReadable {
  readonly graph: Hnsw | null;
  readonly store: VectorStore;
  readonly kind: DistanceKind;
  readonly dim: number;
  /** A flat index: every matching document is scored. */
  readonly flat: boolean;
  readonly maxEfSearch: number;
  /** Whether a token slot is live. */
  tokenLive(slot: number): boolean;
  /** Live token slots the graph does not hold yet (from its indexed bound to the store's count). */
  tail(): Int32Array;
  /** The head of the document token `slot` belongs to. */
  headOf(slot: number): number;
  /** The token slots of the document whose head is `head`. */
  tokens(head: number): ArrayLike<number>;
  idOf(head: number): string;
}

/** Documents matching below this many are all scored exactly (no graph candidates). */
const EXACT_BELOW = 2000;
const EMPTY: SearchResult = { slots: new Int32Array(0), dists: new Float32Array(0) };

/**
 * Candidates from the token pool (each query token's nearest tokens in the graph and in the tail), or
 * every matching document when few match, the index is flat or there is no graph yet; re-ranked by exact
 * MaxSim (for each query token the best-matching document token, summed over query tokens). `matching`:
 * the heads the query may answer (live, and matching its filter). Best first, then id; each with its head.
 */
export function searchMulti(
  src: MultiReadable, matching: { bits: Bitset; count: number }, queries: Float32Array[], k: number, ef: number,
): { ids: string[]; scores: number[]; heads: number[] } {
  const { bits, count } = matching;
  if (count === 0) return { ids: [], scores: [], heads: [] };
  let candidates: Iterable<number>;
  const graph = src.graph;
  if (graph === null || count <= EXACT_BELOW || src.flat) {
    candidates = bits;
  } else {
    const pool = new Set<number>();
    const perToken = Math.min(src.maxEfSearch, Math.max(16 * k, 256));
    const tokenAccept = (s: number): boolean => src.tokenLive(s);
    const tail = src.tail();
    for (const q of queries) {
      const fromGraph = graph.search(q, perToken, Math.max(ef, perToken), tokenAccept);
      const fromTail = tail.length === 0 ? EMPTY : flatSearch(src.store, src.store.kernel, q, perToken, src.kind, tail);
      for (const r of [fromGraph, fromTail]) {
        for (const s of r.slots) {
          const head = src.headOf(s);
          if (bits.has(head)) pool.add(head);
        }
      }
    }
    candidates = pool;
  }
  const scored: [string, number, number][] = [];
  for (const head of candidates) scored.push([src.idOf(head), maxSim(src, queries, src.tokens(head)), head]);
  scored.sort((a, b) => b[1] - a[1] || (a[0] < b[0] ? -1 : a[0] > b[0] ? 1 : 0));
  const top = scored.slice(0, k);
  return { ids: top.map((t) => t[0]), scores: top.map((t) => t[1]), heads: top.map((t) => t[2]) };
}

/** Similarity per token pair: inner product (cosine vectors are unit length) or, for l2, minus the distance. */
function maxSim(src: MultiReadable, queries: Float32Array[], tokens: ArrayLike<number>): number {
  let total = 0;
  const dim = src.dim;
  for (const q of queries) {
    let best = -Infinity;
    for (let t = 0; t < tokens.length; t++) {
      const v = src.store.view(tokens[t]);
      let sim = 0;
      if (src.kind === 'l2') {
        for (let i = 0; i < dim; i++) sim += (q[i] - v[i]) ** 2;
        sim = -Math.sqrt(sim);
      } else {
        for (let i = 0; i < dim; i++) sim += q[i] * v[i];
      }
      if (sim > best) best = sim;
    }
    total += best;
  }
  return total;
}

/** Bytes a TokenSpans may reach (2^29 token slots); reserved address space, committed as it grows. */
const SPANS_MAX_BYTES = 2 ** 31;

/**
 * Per token slot, its document's shape, in shared memory for request loops (a multi-vector collection
 * with shared reads): a head holds its token count (> 0), every other token minus its distance from the
 * head (< 0), a slot never written 0. Written by the engine thread before the tokens are made live.
 */
export class TokenSpans {
  readonly buffer: SharedArrayBuffer;
  private readonly words: Int32Array;

  constructor(buffer?: SharedArrayBuffer) {
    this.buffer = buffer ?? growableShared(4096, SPANS_MAX_BYTES);
    this.words = new Int32Array(this.buffer);
  }

  /** Writer: the document whose head is `head` has `count` consecutive tokens. */
  set(head: number, count: number): void {
    growShared(this.buffer, (head + count) * 4);
    for (let t = count - 1; t > 0; t--) Atomics.store(this.words, head + t, -t);
    Atomics.store(this.words, head, count);
  }

  /** The head of token `slot`'s document, or -1 (a slot not written: only a torn read sees one). */
  headOf(slot: number): number {
    const v = slot < this.words.length ? Atomics.load(this.words, slot) : 0;
    return v > 0 ? slot : v < 0 ? slot + v : -1;
  }

  /** The token slots of the document at `head` (none when `head` is not one). */
  tokens(head: number): Int32Array {
    const n = head >= 0 && head < this.words.length ? Atomics.load(this.words, head) : 0;
    const out = new Int32Array(Math.max(0, n));
    for (let t = 0; t < out.length; t++) out[t] = head + t;
    return out;
  }
}
