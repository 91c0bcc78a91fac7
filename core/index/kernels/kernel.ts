import { WASM_BASE64 } from './distance.generated.js';
import { Wasm, type WasmMemory, type WasmModule } from './wasm-api.js';

/** Lower is better for both: `l2` is squared Euclidean, `ip` is the negative inner product. */
export type DistanceKind = 'l2' | 'ip';

/** dist(a, b) for vectors at byte offsets a and b of `n` floats (n a multiple of 4). */
export type DistFn = (a: number, b: number, n: number) => number;
/** out[i] = dist(q, base + ids[i] * stride) for i < cnt; every argument is a byte offset or a count. */
export type BatchFn = (q: number, base: number, stride: number, ids: number, cnt: number, out: number, n: number) => void;
/**
 * As BatchFn, keeping only distances below `bound`: their ids and distances are packed, in order, at the
 * front of `ids` and `out`; returns how many.
 */
export type BelowFn = (q: number, base: number, stride: number, ids: number, cnt: number, out: number, n: number, bound: number) => number;
/** out[i] = dist(q, base + (start + i) * stride) for i < cnt. */
export type RangeFn = (q: number, base: number, stride: number, start: number, cnt: number, out: number, n: number) => void;
/** Loads every cache line of the listed vectors so their misses overlap (a stand-in for prefetch). */
export type TouchFn = (base: number, stride: number, ids: number, cnt: number, bytes: number) => number;

export interface KindFns {
  readonly dist: DistFn;
  readonly batch: BatchFn;
  readonly below: BelowFn;
  readonly range: RangeFn;
}

/**
 * Distance kernels over one memory. The WASM SIMD kernel reads vectors in place; the TypeScript
 * fallback has the same API (and is the reference the WASM kernel is tested against).
 */
export interface Kernel {
  readonly isWasm: boolean;
  readonly memory: WasmMemory;
  fns(kind: DistanceKind): KindFns;
  readonly touch: TouchFn;
  /** Scalar-quantized rows (core/index/scalar-codes.ts): `n` int8 codes per row against int16 query weights. */
  readonly sq8: BelowFn;
}

let compiled: WasmModule | undefined;

/** The compiled module, once per thread (it is small, so a synchronous compile is fine). */
function wasmModule(): WasmModule {
  compiled ??= new Wasm.Module(Buffer.from(WASM_BASE64, 'base64'));
  return compiled;
}

interface WasmExports {
  l2: DistFn;
  nip: DistFn;
  l2_batch: BatchFn;
  nip_batch: BatchFn;
  l2_batch_below: BelowFn;
  nip_batch_below: BelowFn;
  l2_range: RangeFn;
  nip_range: RangeFn;
  touch: TouchFn;
  sq8_below: BelowFn;
}

export function wasmKernel(memory: WasmMemory): Kernel {
  const instance = new Wasm.Instance(wasmModule(), { env: { memory } });
  const e = instance.exports as unknown as WasmExports;
  const l2: KindFns = { dist: e.l2, batch: e.l2_batch, below: e.l2_batch_below, range: e.l2_range };
  const ip: KindFns = { dist: e.nip, batch: e.nip_batch, below: e.nip_batch_below, range: e.nip_range };
  return { isWasm: true, memory, fns: (kind) => (kind === 'l2' ? l2 : ip), touch: e.touch, sq8: e.sq8_below };
}

/** The plain TypeScript kernel with the same contract. Views are re-created when the memory grows. */
export function fallbackKernel(memory: WasmMemory): Kernel {
  let buf = memory.buffer;
  let f32 = new Float32Array(buf);
  let i32 = new Int32Array(buf);
  let i16 = new Int16Array(buf);
  let i8 = new Int8Array(buf);
  const refresh = (): void => {
    if (memory.buffer.byteLength !== buf.byteLength) {
      buf = memory.buffer;
      f32 = new Float32Array(buf);
      i32 = new Int32Array(buf);
      i16 = new Int16Array(buf);
      i8 = new Int8Array(buf);
    }
  };
  const l2d: DistFn = (a, b, n) => {
    refresh();
    const pa = a >>> 2;
    const pb = b >>> 2;
    let s = 0;
    for (let i = 0; i < n; i++) {
      const d = f32[pa + i] - f32[pb + i];
      s += d * d;
    }
    return Math.fround(s);
  };
  const nipd: DistFn = (a, b, n) => {
    refresh();
    const pa = a >>> 2;
    const pb = b >>> 2;
    let s = 0;
    for (let i = 0; i < n; i++) s += f32[pa + i] * f32[pb + i];
    return Math.fround(-s);
  };
  const batchOf = (d: DistFn): BatchFn => (q, base, stride, ids, cnt, out, n) => {
    refresh();
    for (let i = 0; i < cnt; i++) {
      const id = i32[(ids >>> 2) + i];
      f32[(out >>> 2) + i] = d(q, base + id * stride, n);
    }
  };
  const belowOf = (d: DistFn): BelowFn => (q, base, stride, ids, cnt, out, n, bound) => {
    refresh();
    let k = 0;
    for (let i = 0; i < cnt; i++) {
      const id = i32[(ids >>> 2) + i];
      const x = d(q, base + id * stride, n);
      if (x < bound) {
        i32[(ids >>> 2) + k] = id;
        f32[(out >>> 2) + k++] = x;
      }
    }
    return k;
  };
  const rangeOf = (d: DistFn): RangeFn => (q, base, stride, start, cnt, out, n) => {
    refresh();
    for (let i = 0; i < cnt; i++) f32[(out >>> 2) + i] = d(q, base + (start + i) * stride, n);
  };
  const l2: KindFns = { dist: l2d, batch: batchOf(l2d), below: belowOf(l2d), range: rangeOf(l2d) };
  const ip: KindFns = { dist: nipd, batch: batchOf(nipd), below: belowOf(nipd), range: rangeOf(nipd) };
  const sq8: BelowFn = (q, base, stride, ids, cnt, out, n, bound) => {
    refresh();
    const a = f32[q >>> 2];
    const b = f32[(q + 4) >>> 2];
    const w = (q + 16) >>> 1;
    let k = 0;
    for (let i = 0; i < cnt; i++) {
      const id = i32[(ids >>> 2) + i];
      const row = base + id * stride;
      let dot = 0;
      for (let d = 0; d < n; d++) dot += i16[w + d] * i8[row + d];
      const x = Math.fround(Math.fround(a * f32[(row + n) >>> 2]) + Math.fround(b * dot));
      i32[(ids >>> 2) + k] = id;
      f32[(out >>> 2) + k] = x;
      k += +(x < bound);
    }
    return k;
  };
  return { isWasm: false, memory, fns: (kind) => (kind === 'l2' ? l2 : ip), touch: () => 0, sq8 };
}

/** WASM SIMD when the engine supports it, else the fallback. */
export function createKernel(memory: WasmMemory, prefer: 'wasm' | 'js' = 'wasm'): Kernel {
  if (prefer === 'wasm' && wasmSupported()) return wasmKernel(memory);
  return fallbackKernel(memory);
}

let supported: boolean | undefined;
export function wasmSupported(): boolean {
  if (supported === undefined) {
    try {
      wasmModule();
      supported = true;
    } catch {
      supported = false;
    }
  }
  return supported;
}
