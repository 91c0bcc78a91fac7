/** A fixed-capacity bitset over internal slot numbers; filters produce these, indexes consume them. */
export class Bitset {
  readonly words: Uint32Array;
  readonly capacity: number;

  constructor(capacity: number, words?: Uint32Array) {
    this.capacity = capacity;
    this.words = words ?? new Uint32Array((capacity + 31) >>> 5);
  }

  has(i: number): boolean {
    return i < this.capacity && (this.words[i >>> 5] & (1 << (i & 31))) !== 0;
  }

  set(i: number): void {
    this.words[i >>> 5] |= 1 << (i & 31);
  }

  clear(i: number): void {
    this.words[i >>> 5] &= ~(1 << (i & 31));
  }

  count(): number {
    let n = 0;
    for (let w of this.words) {
      w = w - ((w >>> 1) & 0x55555555);
      w = (w & 0x33333333) + ((w >>> 2) & 0x33333333);
      n += (((w + (w >>> 4)) & 0x0f0f0f0f) * 0x01010101) >>> 24;
    }
    return n;
  }

  and(other: Bitset): Bitset {
    const out = new Bitset(this.capacity);
    const n = Math.min(this.words.length, other.words.length);
    for (let i = 0; i < n; i++) out.words[i] = this.words[i] & other.words[i];
    return out;
  }

  or(other: Bitset): Bitset {
    const out = new Bitset(Math.max(this.capacity, other.capacity));
    for (let i = 0; i < out.words.length; i++) out.words[i] = (this.words[i] ?? 0) | (other.words[i] ?? 0);
    return out;
  }

  /** Complement within [0, capacity). */
  not(): Bitset {
    const out = new Bitset(this.capacity);
    for (let i = 0; i < out.words.length; i++) out.words[i] = ~this.words[i];
    const tail = this.capacity & 31;
    if (tail !== 0) out.words[out.words.length - 1] &= (1 << tail) - 1;
    return out;
  }

  *[Symbol.iterator](): IterableIterator<number> {
    for (let w = 0; w < this.words.length; w++) {
      let bits = this.words[w];
      while (bits !== 0) {
        const t = bits & -bits;
        yield (w << 5) + (31 - Math.clz32(t));
        bits ^= t;
      }
    }
  }

  static full(capacity: number): Bitset {
    return new Bitset(capacity).not();
  }
}
