import { Bitset } from '../base/bitset.js';

/** The live slots of a collection: a bitset that grows as slots are appended. */
export class LiveSet {
  private words = new Uint32Array(1024);
  private size = 0;
  count = 0;

  has(slot: number): boolean {
    return slot < this.size && (this.words[slot >>> 5] & (1 << (slot & 31))) !== 0;
  }

  add(slot: number): void {
    if (slot >= this.size) {
      const need = (slot >>> 5) + 1;
      if (need > this.words.length) {
        const grown = new Uint32Array(Math.max(need, this.words.length * 2));
        grown.set(this.words);
        this.words = grown;
      }
      this.size = slot + 1;
    }
    if (!this.has(slot)) {
      this.words[slot >>> 5] |= 1 << (slot & 31);
      this.count++;
    }
  }

  remove(slot: number): void {
    if (this.has(slot)) {
      this.words[slot >>> 5] &= ~(1 << (slot & 31));
      this.count--;
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
}
