import { Worker } from 'node:worker_threads';
import { systemClock, type Clock } from '../base/clock.js';
import { SvcError } from '../base/errors.js';
import type { SearchResult } from '../index/flat.js';
import type { Hnsw, HnswData } from '../index/hnsw/hnsw.js';
import type { DistanceKind } from '../index/kernels/kernel.js';
import type { VectorStore, VectorStoreHandle } from '../index/vector-store.js';
import { workerEntry } from '../index/worker-url.js';
import { runDensePlan, type DensePlan } from './search-pool-plan.js';

/** What the pool needs of a collection (Collection satisfies it). */
export interface PoolCollection {
  readonly uid: string;
  readonly kind: DistanceKind;
  readonly store: VectorStore;
  readonly searchGraph: Hnsw | null;
  /** Gives back every scratch lane thread `thread` held in the collection's shared memories; how many. */
  releaseLanesOf(thread: number): number;
}

/** Searches in flight per worker by default: enough to hide a round trip's latency behind the worker's work. */
export const IN_FLIGHT_PER_WORKER = 8;
/**
 * Searches that may wait for a worker slot, per worker, by default. At about 100 µs a search (MNIST,
 * ef 16) that is some 25 ms of queueing: a burst is absorbed, a sustained overload is answered early.
 */
export const WAITING_PER_WORKER = 256;
/**
 * Replacements of dead workers, per worker, within RESPAWN_WINDOW_MS by default. A worker that dies
 * now and then (an out-of-memory, a bug one query hits) is replaced every time; one that dies as soon
 * as it starts is replaced this many times a minute at most, rather than spinning a core on starts.
 */
export const RESPAWNS_PER_WORKER = 4;
export const RESPAWN_WINDOW_MS = 60_000;

export interface SearchPoolOptions {
  /** Worker threads (at least 1). */
  workers: number;
  /** Searches in flight per worker (default IN_FLIGHT_PER_WORKER). */
  inFlightPerWorker?: number;
  /**
   * Searches waiting, over the pool, for a worker slot when every worker holds `inFlightPerWorker`
   * (default WAITING_PER_WORKER per worker). Past it a search is refused with `rate_limited`.
   */
  waitingMax?: number;
  /** Replacements of dead workers within `respawnWindowMs` at most (default RESPAWNS_PER_WORKER per worker). */
  respawnsMax?: number;
  /** The window `respawnsMax` counts in (default RESPAWN_WINDOW_MS). */
  respawnWindowMs?: number;
  /** Reads the time for the respawn window (default systemClock). */
  clock?: Clock;
  /** Where a worker's death, its lanes' release and its replacement (or not) are told (default: nowhere). */
  log?: (level: 'info' | 'error', message: string, detail?: Record<string, unknown>) => void;
}

/** Main thread -> worker. */
export type PoolMessage =
  | { t: 'open'; uid: string; store: VectorStoreHandle }
  | { t: 'graph'; uid: string; data: HnswData | null }
  | { t: 'forget'; uid: string }
  | { t: 'close' }
  | {
      t: 'search';
      /**
       * Every search handed to this worker in one turn of the main thread: a message's fixed cost on
       * both threads (clone, event, wake-up) is paid once per batch. Search i is `ids[i]` on
       * collection `uids[i]`, in the buffer numbered `bufIds[i]`: [plan: PLAN_WORDS i32, see
       * PlanWord][query: dim f32][accept words: ceil(cap/32) u32][result slots: k i32][result dists:
       * k f32]. The plan travels in the shared buffer rather than as message fields: a message's cost
       * grows with its fields. A buffer travels once (`fresh`); the worker keeps it by number.
       */
      ids: number[];
      uids: string[];
      bufIds: number[];
      fresh: { id: number; buf: SharedArrayBuffer }[];
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
/** Worker -> main thread: answers in batches (`ns[i]` hits for `ids[i]`), failures one by one. */
export type PoolReply = { t: 'done'; ids: number[]; ns: number[] } | { t: 'failed'; id: number; error: string } | { t: 'closed' };

/** A pooled search buffer and the number workers know it by. */
interface Buf {
  id: number;
  buf: SharedArrayBuffer;
  /** Views of the whole buffer, made once (views per search were a good part of the hand-off's garbage). */
  i32: Int32Array;
  f32: Float32Array;
}

interface Pending {
  resolve: (r: SearchResult) => void;
  reject: (e: unknown) => void;
  buf: Buf;
  k: number;
  outAt: number;
  /** Runs the plan on the calling thread (a crashed worker's requests are answered this way). */
  fallback: () => SearchResult;
}

/** A search waiting for a worker slot: planned only when it gets one, so it reads the state it is sent with. */
interface Waiting {
  col: PoolCollection;
  query: Float32Array;
  makePlan: () => DensePlan | null;
  resolve: (r: SearchResult) => void;
  reject: (e: unknown) => void;
}

const EMPTY: SearchResult = { slots: new Int32Array(0), dists: new Float32Array(0) };

/** One published state of a graph (its arrays and codes): a new one means a new epoch for the workers. */
interface Epoch {
  graph: Hnsw | null;
  /** The graph's arraysVersion when published. */
  version: number;
}

class PoolWorker {
  readonly worker: Worker;
  /** Its thread's id, read at start (a thread that has ended answers -1): the owner its lanes name. */
  readonly thread: number;
  readonly pending = new Map<number, Pending>();
  /** Per collection uid: the graph epoch this worker was last sent. */
  readonly epochs = new Map<string, Epoch>();
  /** Buffers this worker holds (sent once). */
  readonly known = new Set<number>();
  /** Searches handed to this worker in this turn, posted together at its end (flushOutbox). */
  outbox: Extract<PoolMessage, { t: 'search' }> | null = null;
  alive = true;
  /** Its thread has ended (after `alive` went false): its place may take a new worker. */
  ended = false;
  exited: Promise<void>;

  /**
   * `onDeath` as soon as the worker is known to be dead (an 'error' comes before its 'exit'); `onExit`
   * once its thread has ended, when nothing can claim a lane for it any more.
   */
  constructor(onReply: (w: PoolWorker, r: PoolReply) => void, onDeath: (w: PoolWorker, e: unknown) => void, onExit: (w: PoolWorker, code: number) => void) {
    const entry = workerEntry(import.meta.url, 'search-pool-worker');
    this.worker = new Worker(entry.filename, { eval: entry.eval });
    this.thread = this.worker.threadId;
    this.worker.on('message', (r: PoolReply) => onReply(this, r));
    this.worker.on('error', (e) => onDeath(this, e));
    this.exited = new Promise((resolve) => this.worker.once('exit', (code) => {
      onDeath(this, new Error('search worker exited'));
      this.ended = true;
      onExit(this, code);
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
  /**
   * Searches run by the caller because every worker was full: always 0 since searches wait for a slot
   * instead (kept for the metric svc_search_worker_overflow_total).
   */
  overflow: number;
  /** Searches answered by the caller because their worker died (or every worker had). */
  fallbacks: number;
  /** Searches waiting for a worker slot now. */
  waiting?: number;
  /** Searches that waited for a slot before going to a worker. */
  waited?: number;
  /** Searches refused with `rate_limited` because `waitingMax` searches were already waiting. */
  rejected?: number;
  /** Messages that carried searches to workers, and answer messages back (a hand-off's cost is per message). */
  messages?: number;
  replies?: number;
  /** Workers that died outside the pool's close (crashed, exited, terminated). */
  deaths?: number;
  /** Dead workers replaced: deaths less these are those left dead by the respawn bound. */
  replaced?: number;
}

/** A first-in first-out queue of waiting searches (an array with a moving head, compacted now and then). */
class Fifo<T> {
  private items: (T | undefined)[] = [];
  private head = 0;

  get length(): number {
    return this.items.length - this.head;
  }

  push(x: T): void {
    this.items.push(x);
  }

  shift(): T | undefined {
    if (this.head >= this.items.length) return undefined;
    const x = this.items[this.head];
    this.items[this.head++] = undefined;
    if (this.head >= 1024 && this.head * 2 >= this.items.length) {
      this.items = this.items.slice(this.head);
      this.head = 0;
    }
    return x;
  }

  /** Takes out, in order, the items `drop` picks; the others keep their order. */
  removeWhere(drop: (x: T) => boolean): T[] {
    const keep: T[] = [];
    const out: T[] = [];
    for (let i = this.head; i < this.items.length; i++) {
      const x = this.items[i] as T;
      (drop(x) ? out : keep).push(x);
    }
    this.items = keep;
    this.head = 0;
    return out;
  }
}

const closingError = (): SvcError => new SvcError('not_ready', 'the database is closing: a search waiting for a search worker was cancelled');

/**
 * Dense searches spread over worker threads that read the collections' shared vector memory and HNSW
 * arrays in place. The main thread keeps owning writes, the payload index and planning: it makes the
 * plan (Collection.planDense), copies the query and the accept set into a pooled SharedArrayBuffer,
 * and posts a small message to the least-loaded worker, which runs the same `runDensePlan` as the
 * in-thread path and writes the hits back into that buffer.
 *
 * Backpressure: each worker holds at most `inFlightPerWorker` searches. When every worker is that busy
 * a search waits, first in first out, and is planned and sent when a worker answers one; it never runs
 * on the calling thread instead (that thread is the one that hands searches off, parses requests and
 * writes answers: spilling searches onto it starved the workers it feeds, so one worker was no faster
 * than none). Past `waitingMax` waiting searches a search is refused with `rate_limited` (the
 * contract's overload code: 429 / RESOURCE_EXHAUSTED, with a retry-after), so the queue, and the
 * latency it adds, stay bounded. Only a pool with no live worker answers on the calling thread.
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
 *
 * A worker that dies (an uncaught error, `process.exit` in it, a terminate) outside `close`: its searches
 * in flight are answered on the calling thread; once its thread has ended, the scratch lanes it held in
 * every collection it was sent are given back (it never closed its views: without this each death kept
 * one of a store's 16 engine lanes for good, and the 16th replacement could open nothing), then a new
 * worker takes its place, sent each collection on its first search there as the others were. At most
 * `respawnsMax` replacements happen within `respawnWindowMs`: a worker that dies as it starts is not
 * restarted forever, and past the bound the pool runs with fewer workers (with none, on the calling
 * thread) until a search after the window has moved on fills the places again (refill).
 */
export class SearchPool {
  private readonly workers: PoolWorker[] = [];
  private readonly inFlightPerWorker: number;
  private readonly waitingMax: number;
  private readonly waiting = new Fifo<Waiting>();
  private readonly current = new Map<string, Epoch>();
  /**
   * Idle search buffers by size. None is ever dropped (the workers hold every buffer they were sent):
   * at most inFlightPerWorker x workers exist per size, since each is in flight or here.
   */
  private readonly free = new Map<number, Buf[]>();
  private nextBufId = 1;
  private nextId = 1;
  private turn = 0;
  private closed = false;
  /**
   * The collections workers were sent, by uid, until forgotten: those whose shared memories a dead
   * worker may hold lanes in.
   */
  private readonly opened = new Map<string, PoolCollection>();
  private readonly respawnsMax: number;
  private readonly respawnWindowMs: number;
  private readonly clock: Clock;
  private readonly log: NonNullable<SearchPoolOptions['log']>;
  /** When each replacement within the respawn window started (monotonic ms, oldest first). */
  private readonly respawns: number[] = [];
  /** Places whose worker's thread ended and no new one took yet. */
  private vacant = 0;
  /** The respawn bound was met (told once, until a worker is started again). */
  private bounded = false;
  /**
   * Searches answered by a worker, waited for a slot, refused, or answered here after a worker died;
   * workers that died outside close, and those replaced (metrics, tests).
   */
  readonly counters = { dispatched: 0, overflow: 0, fallbacks: 0, waited: 0, rejected: 0, messages: 0, replies: 0, deaths: 0, replaced: 0 };
  /** Workers alive and requests in flight, kept as counts: read on every search. */
  private alive = 0;
  private pendingTotal = 0;

  constructor(opts: SearchPoolOptions) {
    if (!Number.isInteger(opts.workers) || opts.workers < 1) throw new SvcError('invalid_argument', `search workers must be a positive integer, got ${opts.workers}`);
    this.inFlightPerWorker = opts.inFlightPerWorker ?? IN_FLIGHT_PER_WORKER;
    this.waitingMax = opts.waitingMax ?? WAITING_PER_WORKER * opts.workers;
    if (!Number.isInteger(this.inFlightPerWorker) || this.inFlightPerWorker < 1) throw new SvcError('invalid_argument', `inFlightPerWorker must be a positive integer, got ${this.inFlightPerWorker}`);
    if (!Number.isInteger(this.waitingMax) || this.waitingMax < 0) throw new SvcError('invalid_argument', `waitingMax must be a non-negative integer, got ${this.waitingMax}`);
    this.respawnsMax = opts.respawnsMax ?? RESPAWNS_PER_WORKER * opts.workers;
    this.respawnWindowMs = opts.respawnWindowMs ?? RESPAWN_WINDOW_MS;
    if (!Number.isInteger(this.respawnsMax) || this.respawnsMax < 0) throw new SvcError('invalid_argument', `respawnsMax must be a non-negative integer, got ${this.respawnsMax}`);
    if (!(this.respawnWindowMs >= 0)) throw new SvcError('invalid_argument', `respawnWindowMs must be non-negative, got ${this.respawnWindowMs}`);
    this.clock = opts.clock ?? systemClock;
    this.log = opts.log ?? (() => undefined);
    for (let i = 0; i < opts.workers; i++) this.workers.push(this.spawn());
    this.alive = opts.workers;
  }

  /** The live workers' threads, for tests that make one die. */
  workersForTests(): Worker[] {
    return this.workers.filter((w) => w.alive).map((w) => w.worker);
  }

  /** Workers alive. */
  get size(): number {
    return this.alive;
  }

  /** Requests in flight over all workers. */
  get inFlight(): number {
    return this.pendingTotal;
  }

  /** Searches waiting for a worker slot. */
  get waitingCount(): number {
    return this.waiting.length;
  }

  /**
   * Runs a plan in a worker: at once when one has room, else after the searches already waiting (the
   * plan is made when the search is sent, so a waiting search reads the collection as it is then).
   * Rejects with `rate_limited` when `waitingMax` searches already wait, with `not_ready` once the pool
   * is closing. Only when every worker has died does the plan run on the calling thread.
   */
  search(col: PoolCollection, query: Float32Array, makePlan: () => DensePlan | null): Promise<SearchResult> {
    if (this.closed) return Promise.reject(closingError());
    // Places left empty at the respawn bound are filled again once it allows (on demand: no timer).
    if (this.vacant > 0) this.refill();
    if (this.size === 0) return this.runHere(col, query, makePlan);
    const w = this.waiting.length === 0 ? this.pick() : null;
    if (w !== null) return new Promise((resolve, reject) => this.send(w, { col, query, makePlan, resolve, reject }));
    if (this.waiting.length >= this.waitingMax) {
      this.counters.rejected++;
      return Promise.reject(new SvcError('rate_limited', `the search pool is overloaded: ${this.waiting.length} searches already wait for a worker; retry in 1 s`, { retryAfterSeconds: 1 }));
    }
    this.counters.waited++;
    return new Promise((resolve, reject) => this.waiting.push({ col, query, makePlan, resolve, reject }));
  }

  /**
   * A dropped collection: its searches still waiting are refused (`not_found`: planning them would
   * reopen its store in a worker), and workers release their view of its store (its scratch lane).
   */
  forget(uid: string): void {
    for (const s of this.waiting.removeWhere((x) => x.col.uid === uid)) {
      s.reject(new SvcError('not_found', 'the collection was dropped while the search waited for a search worker'));
    }
    this.current.delete(uid);
    this.opened.delete(uid);
    for (const w of this.workers) {
      if (!w.alive || !w.epochs.delete(uid)) continue;
      // Searches already handed to this worker go first: they run before its view is released.
      this.flushOutbox(w);
      w.worker.postMessage({ t: 'forget', uid } satisfies PoolMessage);
    }
  }

  /**
   * Refuses new searches and cancels those waiting for a slot (`not_ready`), waits for the requests in
   * flight, then stops every worker (each releases its lanes first).
   */
  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    for (let s = this.waiting.shift(); s !== undefined; s = this.waiting.shift()) s.reject(closingError());
    await Promise.all(this.workers.map(async (w) => {
      if (!w.alive) {
        // Dead ('error') but its thread not ended yet: close waits for it too.
        if (!w.ended) {
          const timer = setTimeout(() => void w.worker.terminate(), 5000);
          await w.exited;
          clearTimeout(timer);
        }
        return;
      }
      await Promise.all([...w.pending.values()].map((p) => new Promise<void>((res) => {
        const { resolve, reject } = p;
        p.resolve = (r) => { resolve(r); res(); };
        p.reject = (e) => { reject(e); res(); };
      })));
      this.flushOutbox(w);
      w.worker.postMessage({ t: 'close' } satisfies PoolMessage);
      const timer = setTimeout(() => void w.worker.terminate(), 5000);
      await w.exited;
      clearTimeout(timer);
    }));
  }

  /** The least-loaded live worker with room, ties taken in turn (so light load still uses every worker). */
  private pick(): PoolWorker | null {
    const n = this.workers.length;
    const start = this.turn++ % n;
    let best: PoolWorker | null = null;
    for (let i = 0; i < n; i++) {
      const w = this.workers[(start + i) % n];
      if (w.alive && w.pending.size < this.inFlightPerWorker && (best === null || w.pending.size < best.pending.size)) best = w;
    }
    return best;
  }

  /** Plans a search and posts it to `w` (which has room). */
  private send(w: PoolWorker, s: Waiting): void {
    let plan: DensePlan | null;
    try {
      plan = s.makePlan();
    } catch (e) {
      s.reject(e);
      return;
    }
    if (plan === null) {
      s.resolve(EMPTY);
      return;
    }
    const { col, query } = s;
    const dim = col.store.dim;
    // Accept-all plans send no bitset: copying a million-slot live set would cost more than the search.
    const cap = plan.acceptAll ? 0 : plan.bits.capacity;
    const nWords = (cap + 31) >>> 5;
    const wordsAt = PLAN_BYTES + dim * 4;
    const outAt = wordsAt + nWords * 4;
    const slot = this.take(outAt + plan.k * 8);
    slot.f32.set(query.length === dim ? query : query.subarray(0, dim), PLAN_BYTES / 4);
    // Int32Array.set keeps a Uint32 word's bits.
    if (nWords > 0) slot.i32.set(plan.bits.words.subarray(0, nWords), wordsAt / 4);
    this.publish(w, col);
    const graph = col.searchGraph;
    const h = slot.i32;
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
    const fixed = plan;
    this.counters.dispatched++;
    this.pendingTotal++;
    w.pending.set(id, { resolve: s.resolve, reject: s.reject, buf: slot, k: plan.k, outAt, fallback: () => runDensePlan(col.store, col.kind, col.searchGraph, query, fixed) });
    let out = w.outbox;
    if (out === null) {
      out = { t: 'search', ids: [], uids: [], bufIds: [], fresh: [] };
      w.outbox = out;
      queueMicrotask(() => this.flushOutbox(w));
    }
    out.ids.push(id);
    out.uids.push(col.uid);
    out.bufIds.push(slot.id);
    if (!w.known.has(slot.id)) {
      w.known.add(slot.id);
      out.fresh.push({ id: slot.id, buf: slot.buf });
    }
  }

  /** Posts the searches handed to `w` so far as one message (before any other message to it: order matters). */
  private flushOutbox(w: PoolWorker): void {
    const out = w.outbox;
    if (out === null) return;
    w.outbox = null;
    if (!w.alive) return;
    this.counters.messages++;
    w.worker.postMessage(out);
  }

  /** Sends waiting searches to workers with room, in arrival order. */
  private pump(): void {
    while (this.waiting.length > 0) {
      const w = this.pick();
      if (w === null) return;
      this.send(w, this.waiting.shift()!);
    }
  }

  /** No live worker: the plan runs here (answered as a fallback, never as overflow). */
  private runHere(col: PoolCollection, query: Float32Array, makePlan: () => DensePlan | null): Promise<SearchResult> {
    this.counters.fallbacks++;
    try {
      const plan = makePlan();
      return Promise.resolve(plan === null ? EMPTY : runDensePlan(col.store, col.kind, col.searchGraph, query, plan));
    } catch (e) {
      return Promise.reject(e);
    }
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
    // Searches planned against the previous epoch go first: the worker reads them with its graph.
    this.flushOutbox(w);
    if (seen === undefined) {
      w.worker.postMessage({ t: 'open', uid: col.uid, store: col.store.handle() } satisfies PoolMessage);
      this.opened.set(col.uid, col);
    }
    w.epochs.set(col.uid, cur);
    w.worker.postMessage({ t: 'graph', uid: col.uid, data: graph === null ? null : graph.serialize() } satisfies PoolMessage);
  }

  private onReply(w: PoolWorker, r: PoolReply): void {
    if (r.t === 'closed') {
      void w.worker.terminate();
      return;
    }
    this.counters.replies++;
    if (r.t === 'failed') {
      const p = w.pending.get(r.id);
      if (p === undefined) return;
      w.pending.delete(r.id);
      this.pendingTotal--;
      this.give(p.buf);
      p.reject(new SvcError('internal', `search worker failed: ${r.error}`));
    } else {
      for (let i = 0; i < r.ids.length; i++) {
        const p = w.pending.get(r.ids[i]);
        if (p === undefined) continue;
        w.pending.delete(r.ids[i]);
        this.pendingTotal--;
        const n = r.ns[i];
        // slice: one allocation and copy each, the buffer going back to the pool at once.
        const at = p.outAt >>> 2;
        const slots = p.buf.i32.slice(at, at + n);
        const dists = p.buf.f32.slice(at + p.k, at + p.k + n);
        this.give(p.buf);
        p.resolve({ slots, dists });
      }
    }
    this.pump();
  }

  /**
   * A worker that crashed or exited: its requests in flight are answered on the main thread; when no
   * worker is left, so are the searches waiting.
   */
  private onDeath(w: PoolWorker, _e: unknown): void {
    if (!w.alive) return;
    w.alive = false;
    this.alive--;
    this.pendingTotal -= w.pending.size;
    for (const p of w.pending.values()) {
      this.counters.fallbacks++;
      try {
        p.resolve(p.fallback());
      } catch (e) {
        p.reject(e);
      }
    }
    w.pending.clear();
    if (this.size > 0 || this.closed) return;
    for (let s = this.waiting.shift(); s !== undefined; s = this.waiting.shift()) {
      const { resolve, reject } = s;
      this.runHere(s.col, s.query, s.makePlan).then(resolve, reject);
    }
  }

  private spawn(): PoolWorker {
    return new PoolWorker((w, r) => this.onReply(w, r), (w, e) => this.onDeath(w, e), (w, code) => this.onExit(w, code));
  }

  /**
   * A worker's thread has ended: the lanes it held go back, then, unless the pool is closing, a new
   * worker takes its place within the respawn bound (refill).
   */
  private onExit(w: PoolWorker, code: number): void {
    // Also at close: a worker terminated after close's grace period never released its own.
    this.releaseLanes(w);
    if (this.closed) return;
    this.counters.deaths++;
    this.vacant++;
    this.tell('error', 'a search worker ended', { exit_code: code, workers: this.alive });
    this.refill();
  }

  /**
   * Starts a worker in each ended one's place while the respawn bound allows (at most respawnsMax
   * within respawnWindowMs), then hands it the searches waiting for a slot. Past the bound the places
   * stay empty until a later search finds the window moved on: a worker that dies as it starts cannot
   * spin a core, and the pool is whole again once the deaths stop.
   */
  private refill(): void {
    if (this.closed) return;
    for (let i = 0; i < this.workers.length && this.vacant > 0; i++) {
      if (!this.workers[i].ended) continue;
      const now = this.clock.monotonicMs();
      while (this.respawns.length > 0 && now - this.respawns[0] >= this.respawnWindowMs) this.respawns.shift();
      if (this.respawns.length >= this.respawnsMax) {
        if (!this.bounded) this.tell('error', 'search workers not replaced for now: too many ended lately', { replaced: this.respawns.length, window_ms: this.respawnWindowMs, workers: this.alive });
        this.bounded = true;
        break;
      }
      let next: PoolWorker;
      try {
        next = this.spawn();
      } catch (e) {
        this.tell('error', 'a search worker could not be started in place of one that ended', { error: String(e), workers: this.alive });
        break;
      }
      this.bounded = false;
      this.respawns.push(now);
      this.counters.replaced++;
      // In the dead one's place: the array stays one entry per worker the pool was sized for.
      this.workers[i] = next;
      this.vacant--;
      this.alive++;
      this.tell('info', 'a search worker started in place of one that ended', { workers: this.alive });
    }
    this.pump();
  }

  /**
   * Gives back every scratch lane a dead worker's thread held in the collections it was sent. Never in
   * the way of its replacement: a failure is logged, and the other collections are still freed.
   */
  private releaseLanes(w: PoolWorker): void {
    if (w.thread < 0) return;
    let lanes = 0;
    for (const col of this.opened.values()) {
      try {
        lanes += col.releaseLanesOf(w.thread);
      } catch (e) {
        this.tell('error', "a search worker's scratch lanes could not be given back", { collection: col.uid, thread: w.thread, error: String(e) });
      }
    }
    if (lanes > 0) this.tell('info', "a search worker's scratch lanes went back", { thread: w.thread, lanes });
  }

  /** Logs, never throwing (a log that fails must not stop a worker's replacement). */
  private tell(level: 'info' | 'error', message: string, detail: Record<string, unknown>): void {
    try {
      this.log(level, message, detail);
    } catch {
      // nowhere left to tell it
    }
  }

  private take(bytes: number): Buf {
    let size = SIZE_CLASSES_MIN;
    while (size < bytes) size *= 2;
    const found = this.free.get(size)?.pop();
    if (found !== undefined) return found;
    const buf = new SharedArrayBuffer(size);
    return { id: this.nextBufId++, buf, i32: new Int32Array(buf), f32: new Float32Array(buf) };
  }

  private give(b: Buf): void {
    const list = this.free.get(b.buf.byteLength);
    if (list === undefined) this.free.set(b.buf.byteLength, [b]);
    else list.push(b);
  }
}
