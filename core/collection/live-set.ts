import { Bitset } from '../base/bitset.js';
import { growShared, growableShared } from '../base/growable.js';

/** Words a shared live set may grow to: 2^31 slots. Address space is reserved, not committed. */
const SHARED_MAX_BYTES = 2 ** 28;

/** What another thread needs to read a shared live set (SharedLiveView). */
export interface LiveSetHandle {
  /** Growable: its length is the writer's words so far. */
  readonly words: SharedArrayBuffer;
  /** [0]: the live count. */
  readonly count: SharedArrayBuffer;
}

/**
 * The live slots of a collection: a bitset that grows as slots are appended. A shared one
 * (`LiveSet.shared()`) keeps its words and count in shared memory, written with atomics, so a request
 * loop reading the collection (shared-reads.ts) sees a slot live only after what the writer published
 * before it (its id and payload records).
 */
export class LiveSet {
  private words: Uint32Array;
  private size = 0;
  private readonly sab: SharedArrayBuffer | null;
  private readonly countCell: Int32Array | null;
  private n = 0;

  constructor(shared?: LiveSetHandle) {
    if (shared === undefined) {
      this.sab = null;
      this.countCell = null;
      this.words = new Uint32Array(1024);
    } else {
      this.sab = shared.words;
      this.countCell = new Int32Array(shared.count);
      this.words = new Uint32Array(this.sab);
    }
  }

  static shared(): LiveSet {
    return new LiveSet({ words: growableShared(4096, SHARED_MAX_BYTES), count: new SharedArrayBuffer(4) });
  }

  handle(): LiveSetHandle | null {
    return this.sab === null ? null : { words: this.sab, count: this.countCell!.buffer as SharedArrayBuffer };
  }

  get count(): number {
    return this.n;
  }

  has(slot: number): boolean {
    return slot < this.size && (this.words[slot >>> 5] & (1 << (slot & 31))) !== 0;
  }

  add(slot: number): void {
    if (slot >= this.size) {
      const need = (slot >>> 5) + 1;
      if (need > this.words.length) this.grow(need);
      this.size = slot + 1;
    }
    if (!this.has(slot)) {
      const bit = 1 << (slot & 31);
      if (this.countCell === null) this.words[slot >>> 5] |= bit;
      else Atomics.or(this.words, slot >>> 5, bit);
      this.setCount(this.n + 1);
    }
  }

  remove(slot: number): void {
    if (this.has(slot)) {
      const bit = 1 << (slot & 31);
      if (this.countCell === null) this.words[slot >>> 5] &= ~bit;
      else Atomics.and(this.words, slot >>> 5, ~bit);
      this.setCount(this.n - 1);
    }
  }

  /** A bitset view over the slots appended so far (shares memory: do not keep it across writes). */
  bitset(): Bitset {
    return new Bitset(this.size, this.words.subarray(0, (this.size + 31) >>> 5));
  }

  /** Live slots in [from, to), ascending. */
  slotsIn(from: number, to: number): Int32Array {
    const end = Math.min(to, this.size);
    const out: number[] = [];
    for (let s = from; s < end; s++) if (this.has(s)) out.push(s);
    return Int32Array.from(out);
  }

  private setCount(n: number): void {
    this.n = n;
    if (this.countCell !== null) Atomics.store(this.countCell, 0, n);
  }

  private grow(need: number): void {
    const words = Math.max(need, this.words.length * 2);
    if (this.sab === null) {
      const grown = new Uint32Array(words);
      grown.set(this.words);
      this.words = grown;
      return;
    }
    // In place: a length-tracking view follows, here and in every reader.
    growShared(this.sab, need * 4);
  }
}

/** A reader's view of a shared live set (another thread's LiveSet.shared()). */
export class SharedLiveView {
  private readonly words: Uint32Array;
  private readonly countCell: Int32Array;

  constructor(h: LiveSetHandle) {
    this.words = new Uint32Array(h.words);
    this.countCell = new Int32Array(h.count);
  }

  get count(): number {
    return Atomics.load(this.countCell, 0);
  }

  /** Whether `slot` is live now (an atomic read: what the writer published before it is visible). */
  has(slot: number): boolean {
    const w = slot >>> 5;
    return w < this.words.length && (Atomics.load(this.words, w) & (1 << (slot & 31))) !== 0;
  }

  /**
   * A copy of the words, each read atomically, in ascending order, until the set stops growing. A slot
   * appended after another (an update's new slot) is at a higher position: if the copy shows the older
   * slot dead, the tombstone came after the newer slot was made live, so the copy shows the newer one.
   * A search over the copy therefore never misses a point being updated (shared-reads.ts).
   */
  copy(): Uint32Array {
    let out = new Uint32Array(this.words.length);
    let at = 0;
    for (;;) {
      for (; at < out.length; at++) out[at] = Atomics.load(this.words, at);
      const n = this.words.length;
      if (n === out.length) return out;
      const grown = new Uint32Array(n);
      grown.set(out);
      out = grown;
    }
  }
}
