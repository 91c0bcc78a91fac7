/**
 * Payload indexes over a collection's declared filterable fields: an inverted list per keyword value
 * and an ordered (value, slot) index per numeric field. `match` answers a compiled filter exactly with
 * bitset algebra; `estimate` gives a cardinality cheap enough to ask per query (for the planner).
 *
 * The index holds exactly the live slots: the collection calls `remove(slot, oldPayload)` before a slot's
 * payload changes or the slot is dropped, and `add(slot, payload)` for the new one.
 */
import { assert } from '../base/assert.js';
import { Bitset } from '../base/bitset.js';
import type { FieldType, FilterableField, Payload } from '../base/model.js';
import { keywordKeysAt, numbersAt, splitPath, type CompiledFilter, type CompiledLeaf } from './filter.js';
import { NumericIndex } from './payload-index-numeric.js';
import { PostingList } from './payload-index-posting.js';

interface FieldIndex {
  type: FieldType;
  parts: string[];
  keyword: Map<string, PostingList>;
  numeric: NumericIndex;
}

export interface PayloadIndexOptions {
  /** Smallest insert/tombstone buffer of a numeric index before it merges (default 256). */
  numericBufferMin?: number;
}

/**
 * A string that is equal for two compiled filters exactly when they select the same condition tree
 * (cache key for match results). Infinite range bounds are spelled out (JSON would write null).
 */
export function filterKey(compiled: CompiledFilter): string {
  return JSON.stringify(compiled, (_k, v: unknown) => (typeof v === 'number' && !Number.isFinite(v) ? `${v}` : v));
}

export class PayloadIndex {
  private readonly fields = new Map<string, FieldIndex>();
  private mutations = 0;

  /** Moves on every add and remove: a match result computed at one version holds until it moves. */
  get version(): number {
    return this.mutations;
  }

  constructor(fields: readonly FilterableField[], options: PayloadIndexOptions = {}) {
    for (const f of fields) {
      this.fields.set(f.path, {
        type: f.field_type,
        parts: splitPath(f.path),
        keyword: new Map(),
        numeric: new NumericIndex(options.numericBufferMin),
      });
    }
  }

  add(slot: number, payload: Payload | undefined): void {
    assert(Number.isInteger(slot) && slot >= 0, `slot ${slot} must be a non-negative integer`);
    this.mutations++;
    for (const f of this.fields.values()) {
      if (f.type === 'keyword') {
        const keys = keywordKeysAt(payload, f.parts);
        for (const k of keys) {
          let list = f.keyword.get(k);
          if (list === undefined) f.keyword.set(k, (list = new PostingList()));
          list.add(slot);
        }
      } else {
        const nums = numbersAt(payload, f.parts);
        for (const v of nums) f.numeric.add(v, slot);
      }
    }
  }

  /** `payload` must be the one `add` was given for this slot. */
  remove(slot: number, payload: Payload | undefined): void {
    this.mutations++;
    for (const f of this.fields.values()) {
      if (f.type === 'keyword') {
        const keys = keywordKeysAt(payload, f.parts);
        for (const k of keys) {
          const list = f.keyword.get(k);
          assert(list !== undefined, `slot ${slot}: removing a keyword value that was never added`);
          list.remove(slot);
          if (list.size === 0) f.keyword.delete(k);
        }
      } else {
        const nums = numbersAt(payload, f.parts);
        for (const v of nums) f.numeric.remove(v, slot);
      }
    }
  }

  /** The exact set of slots in `universe` (the live slots) that match the filter. */
  match(compiled: CompiledFilter, universe: Bitset): Bitset {
    switch (compiled.op) {
      case 'and': {
        let acc = copy(universe);
        for (const c of compiled.children) {
          acc = acc.and(this.match(c, universe));
          if (isEmpty(acc)) break;
        }
        return acc;
      }
      case 'or': {
        let acc = new Bitset(universe.capacity);
        for (const c of compiled.children) acc = acc.or(this.match(c, universe));
        return acc;
      }
      case 'not':
        return universe.and(this.match(compiled.child, universe).not());
      default:
        return universe.and(this.leafBits(compiled, universe.capacity));
    }
  }

  /**
   * Estimated number of live slots matching. Exact for one eq/ne/in/range condition on a field whose
   * values are scalars (and for eq/ne always); where a field holds arrays, in and range count a slot once
   * per matching element (an upper bound). Combinations assume independent conditions.
   */
  estimate(compiled: CompiledFilter, liveCount: number): number {
    if (liveCount <= 0) return 0;
    switch (compiled.op) {
      case 'and': {
        let sel = 1;
        for (const c of compiled.children) sel *= this.estimate(c, liveCount) / liveCount;
        return clampCount(sel * liveCount, liveCount);
      }
      case 'or': {
        let miss = 1;
        for (const c of compiled.children) miss *= 1 - this.estimate(c, liveCount) / liveCount;
        return clampCount((1 - miss) * liveCount, liveCount);
      }
      case 'not':
        return clampCount(liveCount - this.estimate(compiled.child, liveCount), liveCount);
      default:
        return clampCount(this.leafCount(compiled), liveCount);
    }
  }

  private field(leaf: CompiledLeaf): FieldIndex {
    const f = this.fields.get(leaf.field);
    assert(f !== undefined, `filter field '${leaf.field}' has no payload index (compiled against other fields?)`);
    assert((f.type === 'keyword') === (leaf.op === 'keyword'), `filter field '${leaf.field}' compiled for another type`);
    return f;
  }

  private leafBits(leaf: CompiledLeaf, capacity: number): Bitset {
    const f = this.field(leaf);
    const out = new Bitset(capacity);
    const set = (s: number) => {
      if (s < capacity) out.set(s);
    };
    switch (leaf.op) {
      case 'keyword':
        for (const k of leaf.keys) f.keyword.get(k)?.orInto(out);
        break;
      case 'numeric_in':
        for (const v of leaf.values) f.numeric.forEach(point(v), set);
        break;
      case 'range':
        f.numeric.forEach(leaf, set);
        break;
    }
    return out;
  }

  private leafCount(leaf: CompiledLeaf): number {
    const f = this.field(leaf);
    switch (leaf.op) {
      case 'keyword': {
        let n = 0;
        for (const k of leaf.keys) n += f.keyword.get(k)?.size ?? 0;
        return n;
      }
      case 'numeric_in': {
        let n = 0;
        for (const v of leaf.values) n += f.numeric.count(point(v));
        return n;
      }
      case 'range':
        return f.numeric.count(leaf);
    }
  }
}

function point(v: number) {
  return { lo: v, loInclusive: true, hi: v, hiInclusive: true };
}

function copy(b: Bitset): Bitset {
  return new Bitset(b.capacity, b.words.slice());
}

function isEmpty(b: Bitset): boolean {
  for (const w of b.words) if (w !== 0) return false;
  return true;
}

function clampCount(x: number, liveCount: number): number {
  return Math.min(liveCount, Math.max(0, Math.round(x)));
}
