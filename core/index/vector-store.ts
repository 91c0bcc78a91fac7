import { assert } from '../base/assert.js';
import { SvcError, invalidArgument } from '../base/errors.js';
import { createKernel, type Kernel } from './kernels/kernel.js';
import { Wasm, type WasmMemory } from './kernels/wasm-api.js';

const PAGE_BYTES = 65_536;
const MAGIC = 0x53564353; // "SVCS"
/** Most distances one kernel call computes; lanes are sized for it. */
export const BATCH_MAX = 1024;
/**
 * Per-thread scratch lanes: one per open view of the store. ENGINE_LANES of them for the engine's own
 * threads (main thread, search workers, build workers: rebuild.ts plans within them), the rest for
 * request loops that search the collection themselves (core/collection/shared-reads.ts); a loop that
 * finds none free hands its searches to the engine thread. The lane bitmap is one int32 word.
 */
const LANES = 32;
/** Lanes 0..15: the engine's threads, which plan their counts within them (rebuild.ts buildWorkersMax). */
export const ENGINE_LANES = 16;
/** Which lanes a view claims: the engine's threads', or request loops' (lanes ENGINE_LANES and up). */
export type LaneSet = 'engine' | 'loop';
const HEADER_BYTES = 64;
// Header words (Int32 index).
const H_MAGIC = 0;
const H_DIM = 1;
const H_PADDED = 2;
const H_COUNT = 3;
const H_LANE_BYTES = 4;
const H_VECTORS_BASE = 5;
const H_LANE_BITS = 6;
const H_MAX_PAGES = 7;

export interface VectorStoreOptions {
  dim: number;
  /**
   * Upper bound of the memory in bytes, declared up front (a shared memory must declare its maximum).
   * 32-bit WebAssembly memory caps a store at 4 GiB, about 1.36M vectors of 784 floats: plan one store
   * per segment for more. Default 4 GiB (address space is reserved, not committed).
   */
  maxBytes?: number;
  /** Slots to make room for at creation (the memory grows geometrically after). */
  initialSlots?: number;
  /** 'js' forces the TypeScript kernel (tests, or engines without WASM SIMD). */
  kernel?: 'wasm' | 'js';
}

/** What a worker thread needs to re-open the same store: the shared memory (postMessage-able). */
export interface VectorStoreHandle {
  memory: WasmMemory;
}

/** Byte offsets of this view's scratch lane: a query, slot ids and distances for batched kernel calls. */
export interface Lane {
  readonly index: number;
  readonly q: number;
  readonly ids: number;
  readonly out: number;
  /** Views over the lane (valid across memory.grow: a shared buffer is never detached). */
  readonly qF32: Float32Array;
  readonly idsI32: Int32Array;
  readonly outF32: Float32Array;
}

const roundUp = (n: number, m: number): number => Math.ceil(n / m) * m;

/**
 * Dense, append-only vector slots in a shared WasmMemory, each padded to a multiple of 4 floats
 * so the SIMD kernel reads them in place. Layout: a 64-byte header, LANES scratch lanes, then vectors at
 * `vectorsBase + slot * strideBytes`. Normalisation for cosine is the caller's job (see `normalize`).
 */
export class VectorStore {
  readonly memory: WasmMemory;
  readonly dim: number;
  readonly paddedDim: number;
  readonly strideBytes: number;
  readonly vectorsBase: number;
  readonly readOnly: boolean;
  readonly kernel: Kernel;
  readonly lane: Lane;
  private readonly header: Int32Array;
  private closed = false;

  private constructor(memory: WasmMemory, readOnly: boolean, kernel: 'wasm' | 'js', lanes: LaneSet = 'engine') {
    this.memory = memory;
    this.readOnly = readOnly;
    this.header = new Int32Array(memory.buffer, 0, HEADER_BYTES / 4);
    assert(Atomics.load(this.header, H_MAGIC) === MAGIC, 'memory does not hold a vector store');
    this.dim = this.header[H_DIM];
    this.paddedDim = this.header[H_PADDED];
    this.strideBytes = this.paddedDim * 4;
    this.vectorsBase = this.header[H_VECTORS_BASE];
    this.kernel = createKernel(memory, kernel);
    this.lane = this.claimLane(lanes);
  }

  static create(opts: VectorStoreOptions): VectorStore {
    const { dim } = opts;
    if (!Number.isInteger(dim) || dim < 1) throw invalidArgument(`dim must be a positive integer, got ${dim}`);
    const paddedDim = roundUp(dim, 4);
    const laneBytes = roundUp(paddedDim * 4, 64) + BATCH_MAX * 8;
    const vectorsBase = HEADER_BYTES + LANES * laneBytes;
    const maxPages = Math.min(65_536, Math.floor((opts.maxBytes ?? 4 * 1024 ** 3) / PAGE_BYTES));
    const initialBytes = vectorsBase + Math.max(1, opts.initialSlots ?? 1024) * paddedDim * 4;
    const initialPages = Math.ceil(initialBytes / PAGE_BYTES);
    if (initialPages > maxPages) {
      throw invalidArgument(`initial store size ${initialBytes} B is above maxBytes ${opts.maxBytes}`);
    }
    const memory = new Wasm.Memory({ initial: initialPages, maximum: maxPages, shared: true });
    const h = new Int32Array(memory.buffer, 0, HEADER_BYTES / 4);
    h[H_DIM] = dim;
    h[H_PADDED] = paddedDim;
    h[H_LANE_BYTES] = laneBytes;
    h[H_VECTORS_BASE] = vectorsBase;
    h[H_MAX_PAGES] = maxPages;
    Atomics.store(h, H_MAGIC, MAGIC);
    return new VectorStore(memory, false, opts.kernel ?? 'wasm');
  }

  /** Re-open a store from its handle (in a worker): read-only, with its own scratch lane. */
  /** `lanes`: 'loop' for a request loop's view (shared-reads.ts), which never takes an engine thread's lane. */
  static open(handle: VectorStoreHandle, opts: { kernel?: 'wasm' | 'js'; lanes?: LaneSet } = {}): VectorStore {
    return new VectorStore(handle.memory, true, opts.kernel ?? 'wasm', opts.lanes ?? 'engine');
  }

  handle(): VectorStoreHandle {
    return { memory: this.memory };
  }

  /** Slots written so far; read from the shared header, so a read-only view sees the writer's appends. */
  get count(): number {
    return Atomics.load(this.header, H_COUNT);
  }

  /** Slots that fit before the memory must grow. */
  get capacity(): number {
    return Math.floor((this.memory.buffer.byteLength - this.vectorsBase) / this.strideBytes);
  }

  /** Copies `vec` into the next slot (zero padding) and returns the slot. */
  add(vec: Float32Array | ArrayLike<number>): number {
    assert(!this.readOnly, 'add on a read-only view of a vector store');
    if (vec.length !== this.dim) throw invalidArgument(`vector has ${vec.length} dimensions, expected ${this.dim}`);
    const slot = this.count;
    this.reserve(slot + 1);
    const v = new Float32Array(this.memory.buffer, this.offsetOf(slot), this.paddedDim);
    for (let i = 0; i < this.dim; i++) v[i] = vec[i];
    // Atomics.store publishes the vector before the count (sequentially consistent).
    Atomics.store(this.header, H_COUNT, slot + 1);
    return slot;
  }

  /** Makes room for `slots` slots in total, growing the memory geometrically. */
  reserve(slots: number): void {
    growMemory(this.memory, this.vectorsBase + slots * this.strideBytes, this.maxPages(), `vector store is full: ${slots} slots`);
  }

  /** A fresh view of a slot's `dim` floats over the current buffer (views never outlive a grow). */
  view(slot: number): Float32Array {
    assert(slot >= 0 && slot < this.count, `slot ${slot} out of range`);
    return new Float32Array(this.memory.buffer, this.offsetOf(slot), this.dim);
  }

  /** Byte offset of a slot in the memory (what the kernels take). */
  offsetOf(slot: number): number {
    return this.vectorsBase + slot * this.strideBytes;
  }

  /** Copies a query into this view's lane (padding zeroed) and returns its byte offset. */
  loadQuery(query: ArrayLike<number>): number {
    if (query.length !== this.dim) throw invalidArgument(`query has ${query.length} dimensions, expected ${this.dim}`);
    const q = this.lane.qF32;
    for (let i = 0; i < this.dim; i++) q[i] = query[i];
    for (let i = this.dim; i < this.paddedDim; i++) q[i] = 0;
    return this.lane.q;
  }

  /** Releases this view's scratch lane. */
  close(): void {
    if (this.closed) return;
    this.closed = true;
    Atomics.and(this.header, H_LANE_BITS, ~(1 << this.lane.index));
  }

  private maxPages(): number {
    return this.header[H_MAX_PAGES];
  }

  private claimLane(lanes: LaneSet): Lane {
    const i = claimLaneBit(this.header, H_LANE_BITS, 'vector store', lanes);
    const laneBytes = this.header[H_LANE_BYTES];
    const q = HEADER_BYTES + i * laneBytes;
    const ids = q + roundUp(this.paddedDim * 4, 64);
    const out = ids + BATCH_MAX * 4;
    const buf = this.memory.buffer;
    return {
      index: i,
      q,
      ids,
      out,
      qF32: new Float32Array(buf, q, this.paddedDim),
      idsI32: new Int32Array(buf, ids, BATCH_MAX),
      outF32: new Float32Array(buf, out, BATCH_MAX),
    };
  }
}

/**
 * Grows a shared memory to hold `need` bytes, geometrically (at least doubling), up to `maxPages`;
 * beyond that a limit_exceeded error starting with `what`.
 */
export function growMemory(memory: WasmMemory, need: number, maxPages: number, what: string): void {
  const have = memory.buffer.byteLength;
  if (need <= have) return;
  const maxBytes = maxPages * PAGE_BYTES;
  if (need > maxBytes) throw new SvcError('limit_exceeded', `${what} need ${need} B, maximum ${maxBytes} B`, { maxBytes });
  const target = Math.min(maxBytes, Math.max(need, have * 2));
  memory.grow(Math.ceil((target - have) / PAGE_BYTES));
}

/** Scratch lanes per shared memory: one per open view (main thread, workers, request loops). */
export const LANES_PER_MEMORY = LANES;

/**
 * Claims a free lane in the bitmap word `word` of a shared header (lock-free, compare-and-exchange)
 * and returns its index; release with `Atomics.and(header, word, ~(1 << index))`.
 */
export function claimLaneBit(header: Int32Array, word: number, what: string, lanes: LaneSet = 'engine'): number {
  const [from, to] = lanes === 'engine' ? [0, ENGINE_LANES] : [ENGINE_LANES, LANES];
  for (let i = from; i < to; i++) {
    const bits = Atomics.load(header, word);
    const bit = 1 << i;
    if ((bits & bit) === 0 && Atomics.compareExchange(header, word, bits, bits | bit) === bits) return i;
    if ((bits & bit) !== 0) continue;
    i--; // lost a race for this lane: look again
  }
  throw new SvcError('limit_exceeded', `every ${to - from} scratch lanes of the ${what} for ${lanes === 'engine' ? "the engine's threads" : 'request loops'} are in use`, { lanes: to - from });
}

/** Scales a vector to unit length in place (cosine collections store and query unit vectors). */
export function normalize(vec: Float32Array): Float32Array {
  let s = 0;
  for (let i = 0; i < vec.length; i++) s += vec[i] * vec[i];
  if (s > 0) {
    const inv = 1 / Math.sqrt(s);
    for (let i = 0; i < vec.length; i++) vec[i] *= inv;
  }
  return vec;
}
