/**
 * A set of slots for one keyword value. Small sets are a sorted Int32Array (4 bytes a slot); once a set
 * holds more than 1/32 of the slot range it becomes a growable bitmap (1 bit a slot), so that frequent
 * values (a category over a million points) add and remove in O(1) instead of moving a long array.
 */
import { assert } from '../base/assert.js';
import type { Bitset } from '../base/bitset.js';

const ARRAY_MIN_CAPACITY = 4;
/** Below this many slots a list stays an array whatever the slot range. */
const BITS_MIN_SIZE = 64;

export class PostingList {
  private arr: Int32Array | null = new Int32Array(ARRAY_MIN_CAPACITY);
  private words: Uint32Array | null = null;
  private n = 0;

  get size(): number {
    return this.n;
  }

  add(slot: number): void {
    if (this.words !== null) {
      const w = slot >>> 5;
      if (w >= this.words.length) this.growWords(w + 1);
      const bit = 1 << (slot & 31);
      assert((this.words[w] & bit) === 0, `slot ${slot} added twice to a posting list`);
      this.words[w] |= bit;
      this.n++;
      return;
    }
    let arr = this.arr!;
    if (this.n === arr.length) {
      const bigger = new Int32Array(arr.length * 2);
      bigger.set(arr);
      this.arr = arr = bigger;
    }
    // Slots are mostly handed out in increasing order: appending is the common case.
    if (this.n === 0 || arr[this.n - 1] < slot) {
      arr[this.n++] = slot;
    } else {
      const pos = lowerBound(arr, this.n, slot);
      assert(arr[pos] !== slot, `slot ${slot} added twice to a posting list`);
      arr.copyWithin(pos + 1, pos, this.n);
      arr[pos] = slot;
      this.n++;
    }
    if (this.n >= BITS_MIN_SIZE && this.n * 32 > arr[this.n - 1] + 1) this.toBits();
  }

  remove(slot: number): void {
    if (this.words !== null) {
      const w = slot >>> 5;
      const bit = 1 << (slot & 31);
      assert(w < this.words.length && (this.words[w] & bit) !== 0, `slot ${slot} is not in the posting list`);
      this.words[w] &= ~bit;
      this.n--;
      return;
    }
    const arr = this.arr!;
    const pos = lowerBound(arr, this.n, slot);
    assert(pos < this.n && arr[pos] === slot, `slot ${slot} is not in the posting list`);
    arr.copyWithin(pos, pos + 1, this.n);
    this.n--;
  }

  /** Sets this list's slots in `out` (slots at or beyond out.capacity are ignored). */
  orInto(out: Bitset): void {
    if (this.words !== null) {
      const n = Math.min(this.words.length, out.words.length);
      for (let i = 0; i < n; i++) out.words[i] |= this.words[i];
      const tail = out.capacity & 31;
      if (tail !== 0 && n === out.words.length) out.words[n - 1] &= (1 << tail) - 1;
      return;
    }
    const arr = this.arr!;
    for (let i = 0; i < this.n; i++) {
      const s = arr[i];
      if (s >= out.capacity) break; // sorted
      out.set(s);
    }
  }

  private toBits(): void {
    const arr = this.arr!;
    this.words = new Uint32Array(Math.max(4, ((arr[this.n - 1] >>> 5) + 1) * 2));
    for (let i = 0; i < this.n; i++) this.words[arr[i] >>> 5] |= 1 << (arr[i] & 31);
    this.arr = null;
  }

  private growWords(min: number): void {
    const bigger = new Uint32Array(Math.max(min, this.words!.length * 2));
    bigger.set(this.words!);
    this.words = bigger;
  }
}

/** First index in arr[0, n) whose value is >= x. */
function lowerBound(arr: Int32Array, n: number, x: number): number {
  let lo = 0;
  let hi = n;
  while (lo < hi) {
    const mid = (lo + hi) >>> 1;
    if (arr[mid] < x) lo = mid + 1;
    else hi = mid;
  }
  return lo;
}
