import { assert } from '../base/assert.js';
import type { DistanceKind, Kernel } from './kernels/kernel.js';
import { createKernel } from './kernels/kernel.js';
import { Wasm, type WasmMemory } from './kernels/wasm-api.js';
import { claimLane, LANE_OWNER_WORDS, LANES_PER_MEMORY, releaseLane, releaseLanesOf, type LaneSet } from './lanes.js';
import { BATCH_MAX, growMemory, type VectorStore } from './vector-store.js';

const roundUp = (n: number, m: number): number => Math.ceil(n / m) * m;

const PAGE_BYTES = 65_536;
const MAGIC = 0x53513843; // "SQ8C"
const H_MAGIC = 0;
const H_DIM = 1;
const H_N = 2;
const H_KIND = 3;
const H_LANE_BYTES = 4;
const H_LANES_BASE = 5;
const H_ROWS_BASE = 6;
const H_MAX_PAGES = 7;
/** LANES_PER_MEMORY words from here: each scratch lane's owner (lanes.ts). */
const H_LANE_OWNERS = 8;
/** The words above, rounded up to 64 bytes. In-process memory only: never persisted. */
const HEADER_BYTES = roundUp((H_LANE_OWNERS + LANE_OWNER_WORDS) * 4, 64);
/** Vectors the range of each dimension is learned from (an even spread over the slots given). */
const TRAIN_SAMPLE = 20_000;
/** Largest |query weight|: i16, and n * weight * 128 must stay inside an i32 (the kernel's sum). */
const WEIGHT_MAX = 16_383;

/** What a worker needs to open the same codes: the shared memory (postMessage-able). */
export interface ScalarCodesHandle {
  memory: WasmMemory;
}

/** A view's side of a batched kernel call: its scratch lane (ids in, distances out) and the rows' layout. */
export interface CodeSpace {
  readonly ids: number;
  readonly out: number;
  readonly idsI32: Int32Array;
  readonly outF32: Float32Array;
  readonly base: number;
  readonly stride: number;
  readonly n: number;
}

/**
 * Scalar quantization (the spec's `quantization: scalar`): one signed byte per dimension for every
 * slot of a VectorStore, in its own shared WebAssembly memory (the same slot numbers), so a graph
 * traversal reads about a quarter of the bytes. Each dimension d has its own range [lo_d, hi_d],
 * learned from the vectors (min and max over a sample), cut into 255 steps:
 * `code = round((x - lo_d) / step_d) - 128`, clamped, so a value outside the learned range saturates.
 *
 * Distances need no per-dimension float work at query time: the query becomes integer weights
 * `w_d ~ q_d * step_d / s`, and the kernel sums `w_d * code_d` exactly in int32. Up to a constant
 * per query, the inner product with the decoded vector is `s * sum`; squared Euclidean distance is
 * `|x^|^2 - 2 s * sum`, with `|x^|^2` stored beside each row. Those approximate distances only steer
 * the traversal: Hnsw re-scores its candidates against the full-precision vectors.
 *
 * Row layout: `n` codes (dim rounded up to 16) then the f32 `|x^|^2`, padded to 16 bytes.
 * Memory layout: a header (with each scratch lane's owner, lanes.ts), the ranges (lo and step per dimension), LANES_PER_MEMORY scratch lanes (query
 * coefficients and weights, ids, distances), then the rows.
 */
export class ScalarCodes {
  readonly memory: WasmMemory;
  readonly dim: number;
  readonly n: number;
  readonly stride: number;
  readonly kind: DistanceKind;
  readonly kernel: Kernel;
  readonly space: CodeSpace;
  readonly readOnly: boolean;
  private readonly header: Int32Array;
  private readonly lo: Float32Array;
  private readonly step: Float32Array;
  /** 1 / step (0 for an empty range), so encoding multiplies. */
  private readonly invStep: Float64Array;
  private readonly laneIndex: number;
  /** The thread this view's lane is claimed for (lanes.ts). */
  private readonly thread: number | undefined;
  private readonly laneQ: number;
  /** This view's query: float weights (scratch), then the lane's int16 weights and two coefficients. */
  private readonly weights: Float64Array;
  private readonly q16: Int16Array;
  private readonly coef: Float32Array;
  /** Whole-memory views for encode, re-made after a grow. */
  private rows8: Int8Array;
  private rowsF32: Float32Array;
  private closed = false;

  private constructor(memory: WasmMemory, readOnly: boolean, kernel: 'wasm' | 'js', lanes: LaneSet = 'engine', thread?: number) {
    this.memory = memory;
    this.readOnly = readOnly;
    this.header = new Int32Array(memory.buffer, 0, HEADER_BYTES / 4);
    assert(Atomics.load(this.header, H_MAGIC) === MAGIC, 'memory does not hold scalar codes');
    this.dim = this.header[H_DIM];
    this.n = this.header[H_N];
    this.stride = this.n + 16;
    this.kind = this.header[H_KIND] === 0 ? 'l2' : 'ip';
    this.lo = new Float32Array(memory.buffer, HEADER_BYTES, this.dim);
    this.step = new Float32Array(memory.buffer, HEADER_BYTES + this.dim * 4, this.dim);
    this.invStep = Float64Array.from(this.step, (x) => (x > 0 ? 1 / x : 0));
    this.kernel = createKernel(memory, kernel);
    this.laneIndex = claimLane(this.header, H_LANE_OWNERS, 'scalar codes', lanes, thread);
    this.thread = thread;
    const laneBytes = this.header[H_LANE_BYTES];
    this.laneQ = this.header[H_LANES_BASE] + this.laneIndex * laneBytes;
    this.weights = new Float64Array(this.dim);
    // The padding past dim stays zero: only the first dim weights are ever written.
    this.q16 = new Int16Array(memory.buffer, this.laneQ + 16, this.n).fill(0);
    this.coef = new Float32Array(memory.buffer, this.laneQ, 2);
    const ids = this.laneQ + roundUp(16 + this.n * 2, 64);
    const out = ids + BATCH_MAX * 4;
    this.space = {
      ids,
      out,
      idsI32: new Int32Array(memory.buffer, ids, BATCH_MAX),
      outF32: new Float32Array(memory.buffer, out, BATCH_MAX),
      base: this.header[H_ROWS_BASE],
      stride: this.stride,
      n: this.n,
    };
    this.rows8 = new Int8Array(memory.buffer);
    this.rowsF32 = new Float32Array(memory.buffer);
  }

  /**
   * Learns each dimension's range from `slots` of `store` (an even sample of at most 20,000) and
   * returns empty codes sized for the store's slots; nothing is encoded yet (see `encode`).
   */
  static train(store: VectorStore, slots: ArrayLike<number>, kind: DistanceKind, opts: { kernel?: 'wasm' | 'js' } = {}): ScalarCodes {
    const dim = store.dim;
    const lo = new Float32Array(dim).fill(Infinity);
    const hi = new Float32Array(dim).fill(-Infinity);
    const every = Math.max(1, slots.length / TRAIN_SAMPLE);
    for (let i = 0; i < slots.length; i += every) {
      const v = store.view(slots[Math.floor(i)]);
      for (let d = 0; d < dim; d++) {
        const x = v[d];
        if (x < lo[d]) lo[d] = x;
        if (x > hi[d]) hi[d] = x;
      }
    }
    const n = roundUp(dim, 16);
    const paramsBytes = roundUp(dim * 8, 64);
    const laneBytes = roundUp(16 + n * 2, 64) + BATCH_MAX * 8;
    const lanesBase = HEADER_BYTES + paramsBytes;
    const rowsBase = lanesBase + LANES_PER_MEMORY * laneBytes;
    const maxPages = 65_536;
    const initialBytes = rowsBase + Math.max(1024, store.count) * (n + 16);
    const memory = new Wasm.Memory({ initial: Math.ceil(initialBytes / PAGE_BYTES), maximum: maxPages, shared: true });
    const buf = memory.buffer;
    const h = new Int32Array(buf, 0, HEADER_BYTES / 4);
    h[H_DIM] = dim;
    h[H_N] = n;
    h[H_KIND] = kind === 'l2' ? 0 : 1;
    h[H_LANE_BYTES] = laneBytes;
    h[H_LANES_BASE] = lanesBase;
    h[H_ROWS_BASE] = rowsBase;
    h[H_MAX_PAGES] = maxPages;
    const pLo = new Float32Array(buf, HEADER_BYTES, dim);
    const pStep = new Float32Array(buf, HEADER_BYTES + dim * 4, dim);
    for (let d = 0; d < dim; d++) {
      // No sample (an empty store): an empty range; every later value saturates at one end.
      const a = Number.isFinite(lo[d]) ? lo[d] : 0;
      const b = Number.isFinite(hi[d]) ? hi[d] : 0;
      pLo[d] = a;
      pStep[d] = b > a ? (b - a) / 255 : 0;
    }
    Atomics.store(h, H_MAGIC, MAGIC);
    return new ScalarCodes(memory, false, opts.kernel ?? 'wasm');
  }

  /** Re-opens codes from a handle (in a worker): read-only, with its own scratch lane (VectorStore.open's options). */
  static open(handle: ScalarCodesHandle, opts: { kernel?: 'wasm' | 'js'; lanes?: LaneSet; thread?: number } = {}): ScalarCodes {
    return new ScalarCodes(handle.memory, true, opts.kernel ?? 'wasm', opts.lanes ?? 'engine', opts.thread);
  }

  handle(): ScalarCodesHandle {
    return { memory: this.memory };
  }

  /** Slots that fit before the memory must grow. */
  get capacity(): number {
    return Math.floor((this.memory.buffer.byteLength - this.space.base) / this.stride);
  }

  /** Bytes the rows of `slots` slots take (what a traversal reads instead of the float vectors). */
  bytesFor(slots: number): number {
    return slots * this.stride;
  }

  /** Writes the codes of `vec` (dim floats) at `slot`, growing the memory when needed. */
  encode(slot: number, vec: ArrayLike<number>): void {
    assert(!this.readOnly, 'encode on a read-only view of scalar codes');
    this.reserve(slot + 1);
    if (this.rows8.byteLength !== this.memory.buffer.byteLength) {
      this.rows8 = new Int8Array(this.memory.buffer);
      this.rowsF32 = new Float32Array(this.memory.buffer);
    }
    const row = this.space.base + slot * this.stride;
    const codes = this.rows8;
    const lo = this.lo;
    const step = this.step;
    let term = 0;
    const inv = this.invStep;
    for (let d = 0; d < this.dim; d++) {
      let c = (vec[d] - lo[d]) * inv[d];
      c = c > 0 ? (c < 255 ? Math.round(c) : 255) : 0;
      codes[row + d] = c - 128;
      const x = lo[d] + step[d] * c;
      term += x * x;
    }
    for (let d = this.dim; d < this.n; d++) codes[row + d] = 0;
    this.rowsF32[(row + this.n) >>> 2] = this.kind === 'l2' ? term : 0;
  }

  /** Encodes slots [from, to) of `store`. */
  encodeRange(store: VectorStore, from: number, to: number): void {
    for (let s = from; s < to; s++) this.encode(s, store.view(s));
  }

  /** The vector a slot's codes stand for (tests, diagnostics). */
  decode(slot: number): Float32Array {
    const codes = new Int8Array(this.memory.buffer, this.space.base + slot * this.stride, this.dim);
    const out = new Float32Array(this.dim);
    for (let d = 0; d < this.dim; d++) out[d] = this.lo[d] + this.step[d] * (codes[d] + 128);
    return out;
  }

  /**
   * Writes a query's coefficients and integer weights into this view's lane and returns its byte
   * offset, for the `sq8` kernel: lower is nearer, ordered as the true distance to the decoded vectors.
   */
  loadQuery(query: ArrayLike<number>): number {
    const dim = this.dim;
    const w = this.weights;
    let max = 0;
    for (let d = 0; d < dim; d++) {
      const x = query[d] * this.step[d];
      w[d] = x;
      const a = Math.abs(x);
      if (a > max) max = a;
    }
    const wMax = Math.min(WEIGHT_MAX, Math.floor(16_777_215 / this.n));
    const scale = max > 0 ? max / wMax : 1;
    const q16 = this.q16;
    const inv = 1 / scale;
    for (let d = 0; d < dim; d++) q16[d] = Math.round(w[d] * inv);
    const coef = this.coef;
    coef[0] = this.kind === 'l2' ? 1 : 0;
    coef[1] = this.kind === 'l2' ? -2 * scale : -scale;
    return this.laneQ;
  }

  /** Releases this view's scratch lane. */
  close(): void {
    if (this.closed) return;
    this.closed = true;
    releaseLane(this.header, H_LANE_OWNERS, this.laneIndex, this.thread);
  }

  /** Gives back every scratch lane thread `thread` holds in this memory (VectorStore.releaseLanesOf); how many. */
  releaseLanesOf(thread: number): number {
    return releaseLanesOf(this.header, H_LANE_OWNERS, thread);
  }

  private reserve(slots: number): void {
    growMemory(this.memory, this.space.base + slots * this.stride, this.header[H_MAX_PAGES], `scalar codes are full: ${slots} slots`);
  }
}
