import { Worker } from 'node:worker_threads';
import { SvcError } from '../base/errors.js';
import type { SearchResult } from '../index/flat.js';
import type { Hnsw, HnswData } from '../index/hnsw/hnsw.js';
import type { DistanceKind } from '../index/kernels/kernel.js';
import type { VectorStore, VectorStoreHandle } from '../index/vector-store.js';
import { workerEntry } from '../index/worker-url.js';
import type { DensePlan } from './search-pool-plan.js';

/** What the pool needs of a collection (Collection satisfies it). */
export interface PoolCollection {
  readonly uid: string;
  readonly kind: DistanceKind;
  readonly store: VectorStore;
  readonly searchGraph: Hnsw | null;
}

export interface SearchPoolOptions {
  /** Worker threads (at least 1). */
  workers: number;
  /** Requests in flight per worker; when every worker is this busy the caller runs the search itself. */
  queueMax?: number;
}

/** Main thread -> worker. */
export type PoolMessage =
  | { t: 'open'; uid: string; store: VectorStoreHandle }
  | { t: 'graph'; uid: string; data: HnswData | null }
  | { t: 'forget'; uid: string }
  | { t: 'close' }
  | {
      t: 'search';
      id: number;
      uid: string;
      /**
       * [plan: PLAN_WORDS i32, see PlanWord][query: dim f32][accept words: ceil(cap/32) u32]
       * [result slots: k i32][result dists: k f32]. The plan travels in the shared buffer rather than
       * as message fields: a message's cost on both threads grows with its fields.
       */
      buf: SharedArrayBuffer;
    };

/** Words of a search buffer's plan header (int32 each). */
export const PlanWord = {
  /** 0: l2, 1: ip. */
  Kind: 0,
  /** 0: exact, 1: graph. */
  Mode: 1,
  /** Bits in the accept set (0 when acceptAll: none are sent). */
  Cap: 2,
  AcceptAll: 3,
  K: 4,
  Ef: 5,
  Want: 6,
  IndexedUpTo: 7,
  Count: 8,
  Entry: 9,
  MaxLevel: 10,
  Size: 11,
} as const;
/** Bytes before the query in a search buffer (the plan header, padded to 16). */
export const PLAN_BYTES = 64;

/** Worker -> main thread. */
export type PoolReply = { t: 'done'; id: number; n: number } | { t: 'failed'; id: number; error: string } | { t: 'closed' };

interface Pending {
  resolve: (r: SearchResult) => void;
  reject: (e: unknown) => void;
  buf: SharedArrayBuffer;
  k: number;
  outAt: number;
  /** Runs the plan on the calling thread (a crashed worker's requests are answered this way). */
  fallback: () => SearchResult;
}

/** One published state of a graph (its arrays and codes): a new one means a new epoch for the workers. */
interface Epoch {
  graph: Hnsw | null;
  /** The graph's arraysVersion when published. */
  version: number;
}

class PoolWorker {
  readonly worker: Worker;
  readonly pending = new Map<number, Pending>();
  /** Per collection uid: the graph epoch this worker was last sent. */
  readonly epochs = new Map<string, Epoch>();
  alive = true;
  exited: Promise<void>;

  constructor(onReply: (w: PoolWorker, r: PoolReply) => void, onDeath: (w: PoolWorker, e: unknown) => void) {
    const entry = workerEntry(import.meta.url, 'search-pool-worker');
    this.worker = new Worker(entry.filename, { eval: entry.eval });
    this.worker.on('message', (r: PoolReply) => onReply(this, r));
    this.worker.on('error', (e) => onDeath(this, e));
    this.exited = new Promise((resolve) => this.worker.once('exit', () => {
      onDeath(this, new Error('search worker exited'));
      resolve();
    }));
  }
}

const SIZE_CLASSES_MIN = 4096;

/** The pool's workers and counters (Database.searchPoolStats; /metrics). */
export interface SearchPoolStats {
  /** Workers alive. */
  workers: number;
  /** Requests in flight over all workers. */
  inFlight: number;
  /** Searches answered by a worker. */
  dispatched: number;
  /** Searches run by the caller because every worker was full. */
  overflow: number;
  /** Searches answered by the caller because their worker died. */
  fallbacks: number;
}

/**
 * Dense searches spread over worker threads that read the collections' shared vector memory and HNSW
 * arrays in place. The main thread keeps owning writes, the payload index and planning: it makes the
 * plan (Collection.planDense), copies the query and the accept set into a pooled SharedArrayBuffer,
 * and posts a small message to the least-loaded worker, which runs the same `runDensePlan` as the
 * in-thread path and writes the hits back into that buffer.
 *
 * Epochs: before a request, a worker that has not seen the collection's current graph arrays (after a
 * rebuild swap or an array growth) is sent them first; the entry point, top level and size travel with
 * every request, so a worker reads the graph as it was when the query was planned.
 *
 * Concurrent inserts: the main thread may insert into the shared graph while a worker traverses it
 * (absorb slices). The worker may see a neighbour list mid-rewrite (every id in it is a valid node) or
 * a node inserted after the plan: that can only change which candidates the beam visits, never the
 * answer's validity, because hits are restricted to the plan's accept set (a snapshot copied at
 * planning) and to slots below the plan's graph bound, distances are recomputed from the vectors, and
 * the tail above the bound is scanned exactly. Arrays a growth replaced are never written again, so a
 * worker still on them reads a consistent older graph.
 */
export class SearchPool {
  private readonly workers: PoolWorker[] = [];
  private readonly queueMax: number;
  private readonly current = new Map<string, Epoch>();
  private readonly free = new Map<number, SharedArrayBuffer[]>();
  private nextId = 1;
  private turn = 0;
  private closed = false;
  /** Searches answered by a worker / run by the caller because every worker was full (metrics, tests). */
  readonly counters = { dispatched: 0, overflow: 0, fallbacks: 0 };

  constructor(opts: SearchPoolOptions) {
    if (!Number.isInteger(opts.workers) || opts.workers < 1) throw new SvcError('invalid_argument', `search workers must be a positive integer, got ${opts.workers}`);
    this.queueMax = opts.queueMax ?? 64;
    for (let i = 0; i < opts.workers; i++) {
      this.workers.push(new PoolWorker((w, r) => this.onReply(w, r), (w, e) => this.onDeath(w, e)));
    }
  }

  /** Workers alive. */
  get size(): number {
    return this.workers.filter((w) => w.alive).length;
  }

  /** Requests in flight over all workers. */
  get inFlight(): number {
    return this.workers.reduce((n, w) => n + w.pending.size, 0);
  }

  /**
   * Runs a plan in a worker. When the pool is closed, every worker has died, or every worker already
   * holds `queueMax` requests, the plan runs on the calling thread instead (the answer is the same).
   */
  search(col: PoolCollection, query: Float32Array, plan: DensePlan, runHere: () => SearchResult): Promise<SearchResult> {
    const w = this.pick();
    if (w === null) {
      this.counters.overflow++;
      return Promise.resolve(runHere());
    }
    const dim = col.store.dim;
    // Accept-all plans send no bitset: copying a million-slot live set would cost more than the search.
    const cap = plan.acceptAll ? 0 : plan.bits.capacity;
    const nWords = (cap + 31) >>> 5;
    const wordsAt = PLAN_BYTES + dim * 4;
    const outAt = wordsAt + nWords * 4;
    const buf = this.take(outAt + plan.k * 8);
    new Float32Array(buf, PLAN_BYTES, dim).set(query.subarray(0, dim));
    if (nWords > 0) new Uint32Array(buf, wordsAt, nWords).set(plan.bits.words.subarray(0, nWords));
    this.publish(w, col);
    const graph = col.searchGraph;
    const h = new Int32Array(buf, 0, PLAN_BYTES / 4);
    h[PlanWord.Kind] = col.kind === 'l2' ? 0 : 1;
    h[PlanWord.Mode] = plan.mode === 'graph' ? 1 : 0;
    h[PlanWord.Cap] = cap;
    h[PlanWord.AcceptAll] = plan.acceptAll ? 1 : 0;
    h[PlanWord.K] = plan.k;
    h[PlanWord.Ef] = plan.ef;
    h[PlanWord.Want] = plan.want;
    h[PlanWord.IndexedUpTo] = plan.indexedUpTo;
    h[PlanWord.Count] = plan.count;
    h[PlanWord.Entry] = graph === null ? -1 : graph.entryPoint;
    h[PlanWord.MaxLevel] = graph === null ? -1 : graph.topLevel;
    h[PlanWord.Size] = graph === null ? 0 : graph.size;
    const id = this.nextId++;
    const msg: PoolMessage = { t: 'search', id, uid: col.uid, buf };
    this.counters.dispatched++;
    return new Promise((resolve, reject) => {
      w.pending.set(id, { resolve, reject, buf, k: plan.k, outAt, fallback: runHere });
      w.worker.postMessage(msg);
    });
  }

  /** A dropped collection: workers release their view of its store (its scratch lane). */
  forget(uid: string): void {
    this.current.delete(uid);
    for (const w of this.workers) {
      if (w.alive && w.epochs.delete(uid)) w.worker.postMessage({ t: 'forget', uid } satisfies PoolMessage);
    }
  }

  /** Waits for requests in flight, then stops every worker (each releases its lanes first). */
  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    await Promise.all(this.workers.map(async (w) => {
      if (!w.alive) return;
      await Promise.all([...w.pending.values()].map((p) => new Promise<void>((res) => {
        const { resolve, reject } = p;
        p.resolve = (r) => { resolve(r); res(); };
        p.reject = (e) => { reject(e); res(); };
      })));
      w.worker.postMessage({ t: 'close' } satisfies PoolMessage);
      const timer = setTimeout(() => void w.worker.terminate(), 5000);
      await w.exited;
      clearTimeout(timer);
    }));
  }

  /** The least-loaded live worker with room, ties taken in turn (so light load still uses every worker). */
  private pick(): PoolWorker | null {
    if (this.closed) return null;
    const n = this.workers.length;
    const start = this.turn++ % n;
    let best: PoolWorker | null = null;
    for (let i = 0; i < n; i++) {
      const w = this.workers[(start + i) % n];
      if (w.alive && w.pending.size < this.queueMax && (best === null || w.pending.size < best.pending.size)) best = w;
    }
    return best;
  }

  /** Sends a worker the collection's store (once) and its current graph arrays when they changed. */
  private publish(w: PoolWorker, col: PoolCollection): void {
    const graph = col.searchGraph;
    const version = graph === null ? 0 : graph.arraysVersion;
    let cur = this.current.get(col.uid);
    if (cur === undefined || cur.graph !== graph || cur.version !== version) {
      cur = { graph, version };
      this.current.set(col.uid, cur);
    }
    const seen = w.epochs.get(col.uid);
    if (seen === cur) return;
    if (seen === undefined) w.worker.postMessage({ t: 'open', uid: col.uid, store: col.store.handle() } satisfies PoolMessage);
    w.epochs.set(col.uid, cur);
    w.worker.postMessage({ t: 'graph', uid: col.uid, data: graph === null ? null : graph.serialize() } satisfies PoolMessage);
  }

  private onReply(w: PoolWorker, r: PoolReply): void {
    if (r.t === 'closed') {
      void w.worker.terminate();
      return;
    }
    const p = w.pending.get(r.id);
    if (p === undefined) return;
    w.pending.delete(r.id);
    if (r.t === 'failed') {
      this.give(p.buf);
      p.reject(new SvcError('internal', `search worker failed: ${r.error}`));
      return;
    }
    const slots = new Int32Array(r.n);
    const dists = new Float32Array(r.n);
    slots.set(new Int32Array(p.buf, p.outAt, r.n));
    dists.set(new Float32Array(p.buf, p.outAt + p.k * 4, r.n));
    this.give(p.buf);
    p.resolve({ slots, dists });
  }

  /** A worker that crashed or exited: its requests in flight are answered on the main thread. */
  private onDeath(w: PoolWorker, _e: unknown): void {
    if (!w.alive) return;
    w.alive = false;
    for (const p of w.pending.values()) {
      this.counters.fallbacks++;
      try {
        p.resolve(p.fallback());
      } catch (e) {
        p.reject(e);
      }
    }
    w.pending.clear();
  }

  private take(bytes: number): SharedArrayBuffer {
    let size = SIZE_CLASSES_MIN;
    while (size < bytes) size *= 2;
    return this.free.get(size)?.pop() ?? new SharedArrayBuffer(size);
  }

  private give(buf: SharedArrayBuffer): void {
    const list = this.free.get(buf.byteLength);
    if (list === undefined) this.free.set(buf.byteLength, [buf]);
    else if (list.length < 64) list.push(buf);
  }
}
