import { assert } from '../base/assert.js';
import { SvcError, invalidArgument } from '../base/errors.js';
import { createKernel, type Kernel } from './kernels/kernel.js';
import { Wasm, type WasmMemory } from './kernels/wasm-api.js';
import { claimLane, LANE_OWNER_WORDS, LANES_PER_MEMORY, releaseLane, releaseLanesOf, type LaneSet } from './lanes.js';

const roundUp = (n: number, m: number): number => Math.ceil(n / m) * m;

const PAGE_BYTES = 65_536;
const MAGIC = 0x53564353; // "SVCS"
/** Most distances one kernel call computes; lanes are sized for it. */
export const BATCH_MAX = 1024;
export { ENGINE_LANES, LANES_PER_MEMORY, type LaneSet } from './lanes.js';
// Header words (Int32 index).
const H_MAGIC = 0;
const H_DIM = 1;
const H_PADDED = 2;
const H_COUNT = 3;
const H_LANE_BYTES = 4;
const H_VECTORS_BASE = 5;
const H_MAX_PAGES = 6;
/** LANES_PER_MEMORY words from here: each scratch lane's owner (lanes.ts). */
const H_LANE_OWNERS = 7;
/** The words above, rounded up to 64 bytes (the lanes after it stay aligned). In-process memory only: never persisted. */
const HEADER_BYTES = roundUp((H_LANE_OWNERS + LANE_OWNER_WORDS) * 4, 64);

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

/**
 * Dense, append-only vector slots in a shared WasmMemory, each padded to a multiple of 4 floats
 * so the SIMD kernel reads them in place. Layout: a header (with each scratch lane's owner, lanes.ts), LANES_PER_MEMORY scratch lanes, then vectors at
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
  /** The thread this view's lane is claimed for (lanes.ts). */
  private readonly thread: number | undefined;
  private closed = false;

  private constructor(memory: WasmMemory, readOnly: boolean, kernel: 'wasm' | 'js', lanes: LaneSet = 'engine', thread?: number) {
    this.memory = memory;
    this.readOnly = readOnly;
    this.header = new Int32Array(memory.buffer, 0, HEADER_BYTES / 4);
    assert(Atomics.load(this.header, H_MAGIC) === MAGIC, 'memory does not hold a vector store');
    this.dim = this.header[H_DIM];
    this.paddedDim = this.header[H_PADDED];
    this.strideBytes = this.paddedDim * 4;
    this.vectorsBase = this.header[H_VECTORS_BASE];
    this.kernel = createKernel(memory, kernel);
    this.lane = this.claimLane(lanes, thread);
    this.thread = thread;
  }

  static create(opts: VectorStoreOptions): VectorStore {
    const { dim } = opts;
    if (!Number.isInteger(dim) || dim < 1) throw invalidArgument(`dim must be a positive integer, got ${dim}`);
    const paddedDim = roundUp(dim, 4);
    const laneBytes = roundUp(paddedDim * 4, 64) + BATCH_MAX * 8;
    const vectorsBase = HEADER_BYTES + LANES_PER_MEMORY * laneBytes;
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

  /**
   * Re-open a store from its handle (in a worker): read-only, with its own scratch lane. `lanes`: 'loop'
   * for a request loop's view (shared-reads.ts), which never takes an engine thread's lane. `thread`: the
   * lane's owner, this thread unless given (tests stand in for other threads).
   */
  static open(handle: VectorStoreHandle, opts: { kernel?: 'wasm' | 'js'; lanes?: LaneSet; thread?: number } = {}): VectorStore {
    return new VectorStore(handle.memory, true, opts.kernel ?? 'wasm', opts.lanes ?? 'engine', opts.thread);
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
    releaseLane(this.header, H_LANE_OWNERS, this.lane.index, this.thread);
  }

  /**
   * Gives back every scratch lane thread `thread` holds in this memory (a thread that ended without
   * closing its views, lanes.ts); how many.
   */
  releaseLanesOf(thread: number): number {
    return releaseLanesOf(this.header, H_LANE_OWNERS, thread);
  }

  private maxPages(): number {
    return this.header[H_MAX_PAGES];
  }

  private claimLane(lanes: LaneSet, thread: number | undefined): Lane {
    const i = claimLane(this.header, H_LANE_OWNERS, 'vector store', lanes, thread);
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
