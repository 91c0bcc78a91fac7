/**
 * An ordered index of (value, slot) pairs for one numeric field, answering range queries.
 *
 * Layout: a main run sorted by (value, slot) in two typed arrays; inserts go to an unsorted pending
 * buffer and removals of main entries to a sorted list of tombstoned positions. Both are bounded by
 * `bufferMax()` (about 4 sqrt(n)): when one overflows, a merge rebuilds the main run in O(n + B log B).
 * So an insert costs O(n / B) amortised, a removal O(log n + B), and a range query
 * O(log n + B + matches): bounded work per operation at any size.
 */
import { assert } from '../base/assert.js';

const MAIN_MIN_CAPACITY = 16;
const BUFFER_MIN = 256;

export interface NumericRange {
  lo: number;
  loInclusive: boolean;
  hi: number;
  hiInclusive: boolean;
}

export class NumericIndex {
  private vals = new Float64Array(MAIN_MIN_CAPACITY);
  private slots = new Int32Array(MAIN_MIN_CAPACITY);
  private len = 0;
  /** Sorted positions in the main run whose entries were removed. */
  private dead: number[] = [];
  private pendVals: number[] = [];
  private pendSlots: number[] = [];

  /** `bufferMin` is the smallest pending/tombstone buffer before a merge (tests make it tiny to merge often). */
  constructor(private readonly bufferMin = BUFFER_MIN) {
    assert(Number.isInteger(bufferMin) && bufferMin >= 1, 'bufferMin must be a positive integer');
  }

  /** Number of live (value, slot) pairs. */
  get size(): number {
    return this.len - this.dead.length + this.pendVals.length;
  }

  add(value: number, slot: number): void {
    assert(Number.isFinite(value), 'numeric index takes finite values');
    this.pendVals.push(value === 0 ? 0 : value);
    this.pendSlots.push(slot);
    if (this.pendVals.length > this.bufferMax()) this.merge();
  }

  remove(value: number, slot: number): void {
    const v = value === 0 ? 0 : value;
    for (let i = 0; i < this.pendVals.length; i++) {
      if (this.pendVals[i] === v && this.pendSlots[i] === slot) {
        const last = this.pendVals.length - 1;
        this.pendVals[i] = this.pendVals[last];
        this.pendSlots[i] = this.pendSlots[last];
        this.pendVals.pop();
        this.pendSlots.pop();
        return;
      }
    }
    const pos = this.lowerBoundPair(v, slot);
    assert(pos < this.len && this.vals[pos] === v && this.slots[pos] === slot, `(${v}, slot ${slot}) is not in the numeric index`);
    const at = lowerBoundNum(this.dead, pos);
    assert(this.dead[at] !== pos, `(${v}, slot ${slot}) removed twice from the numeric index`);
    this.dead.splice(at, 0, pos);
    if (this.dead.length > this.bufferMax()) this.merge();
  }

  /** Number of live pairs whose value lies in the range (a slot holding two such values counts twice). */
  count(r: NumericRange): number {
    const [start, end] = this.span(r);
    let n = end - start - (lowerBoundNum(this.dead, end) - lowerBoundNum(this.dead, start));
    for (const v of this.pendVals) if (within(v, r)) n++;
    return n;
  }

  /** Calls fn(slot) for every live pair whose value lies in the range. */
  forEach(r: NumericRange, fn: (slot: number) => void): void {
    const [start, end] = this.span(r);
    let d = lowerBoundNum(this.dead, start);
    for (let i = start; i < end; i++) {
      if (d < this.dead.length && this.dead[d] === i) {
        d++;
        continue;
      }
      fn(this.slots[i]);
    }
    for (let i = 0; i < this.pendVals.length; i++) if (within(this.pendVals[i], r)) fn(this.pendSlots[i]);
  }

  private bufferMax(): number {
    return Math.max(this.bufferMin, 4 * Math.ceil(Math.sqrt(this.len)));
  }

  /** Positions [start, end) of the main run inside the range. */
  private span(r: NumericRange): [number, number] {
    const start = r.loInclusive ? this.firstWhere((v) => v >= r.lo) : this.firstWhere((v) => v > r.lo);
    const end = r.hiInclusive ? this.firstWhere((v) => v > r.hi) : this.firstWhere((v) => v >= r.hi);
    return [start, Math.max(start, end)];
  }

  /** First position whose value satisfies a predicate that is monotone over the sorted run. */
  private firstWhere(pred: (v: number) => boolean): number {
    let lo = 0;
    let hi = this.len;
    while (lo < hi) {
      const mid = (lo + hi) >>> 1;
      if (pred(this.vals[mid])) hi = mid;
      else lo = mid + 1;
    }
    return lo;
  }

  private lowerBoundPair(v: number, slot: number): number {
    let lo = 0;
    let hi = this.len;
    while (lo < hi) {
      const mid = (lo + hi) >>> 1;
      const mv = this.vals[mid];
      if (mv < v || (mv === v && this.slots[mid] < slot)) lo = mid + 1;
      else hi = mid;
    }
    return lo;
  }

  /** Rebuilds the main run: live main entries merged with the sorted pending buffer. */
  private merge(): void {
    const p = this.pendVals.length;
    const order = Array.from({ length: p }, (_, i) => i);
    order.sort((a, b) => this.pendVals[a] - this.pendVals[b] || this.pendSlots[a] - this.pendSlots[b]);
    const total = this.size;
    const cap = Math.max(MAIN_MIN_CAPACITY, total);
    const vals = new Float64Array(cap);
    const slots = new Int32Array(cap);
    let out = 0;
    let d = 0;
    let j = 0;
    for (let i = 0; i <= this.len; i++) {
      if (i < this.len && d < this.dead.length && this.dead[d] === i) {
        d++;
        continue;
      }
      // Pending entries that sort before main entry i (or all that remain, at the end).
      while (j < p) {
        const pv = this.pendVals[order[j]];
        const ps = this.pendSlots[order[j]];
        if (i < this.len && (pv > this.vals[i] || (pv === this.vals[i] && ps > this.slots[i]))) break;
        vals[out] = pv;
        slots[out++] = ps;
        j++;
      }
      if (i < this.len) {
        vals[out] = this.vals[i];
        slots[out++] = this.slots[i];
      }
    }
    assert(out === total, 'numeric index merge lost entries');
    this.vals = vals;
    this.slots = slots;
    this.len = total;
    this.dead = [];
    this.pendVals = [];
    this.pendSlots = [];
  }
}

function within(v: number, r: NumericRange): boolean {
  return (r.loInclusive ? v >= r.lo : v > r.lo) && (r.hiInclusive ? v <= r.hi : v < r.hi);
}

function lowerBoundNum(arr: readonly number[], x: number): number {
  let lo = 0;
  let hi = arr.length;
  while (lo < hi) {
    const mid = (lo + hi) >>> 1;
    if (arr[mid] < x) lo = mid + 1;
    else hi = mid;
  }
  return lo;
}
