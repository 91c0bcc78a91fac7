/**
 * The order of point ids (CONTRACT.md section 1): ascending by their UTF-8 bytes, which is code point
 * order. JavaScript's `<` compares UTF-16 units instead, and the two differ only where a code point above
 * U+FFFF (a surrogate pair, D800-DFFF) meets a unit in E000-FFFF: in UTF-8 the first sorts after.
 * No allocation, unlike comparing Buffer.from of each id. Ids are valid Unicode (names.ts).
 */
export function compareIdsUtf8(a: string, b: string): number {
  const n = Math.min(a.length, b.length);
  for (let i = 0; i < n; i++) {
    const x = a.charCodeAt(i);
    const y = b.charCodeAt(i);
    if (x === y) continue;
    const xs = x >= 0xd800 && x <= 0xdfff;
    const ys = y >= 0xd800 && y <= 0xdfff;
    if (xs !== ys) return xs ? 1 : -1;
    return x - y;
  }
  return a.length - b.length;
}

/**
 * The order of `points:fetch` pages, their cursors and a rebalance move's scan: JavaScript's string order
 * (UTF-16 units), the same on every shard, router and request loop, so one cursor pages through them all.
 */
export function compareFetchIds(a: string, b: string): number {
  return a < b ? -1 : a > b ? 1 : 0;
}

/** First index of `items` (in fetch order of their ids) whose id sorts after `id`; 0 for none. */
export function after<T = string>(items: readonly T[], id: string | undefined, idOf: (t: T) => string = (t) => t as unknown as string): number {
  if (id === undefined) return 0;
  let lo = 0;
  let hi = items.length;
  while (lo < hi) {
    const mid = (lo + hi) >>> 1;
    if (idOf(items[mid]) <= id) lo = mid + 1;
    else hi = mid;
  }
  return lo;
}

/** `a` and `b`, each in fetch order of their ids and with no id in both, merged in that order. */
export function mergeInFetchOrder<T>(a: readonly T[], b: readonly T[], idOf: (t: T) => string): T[] {
  const out: T[] = new Array(a.length + b.length);
  let i = 0;
  let j = 0;
  let k = 0;
  while (i < a.length && j < b.length) out[k++] = idOf(a[i]) < idOf(b[j]) ? a[i++] : b[j++];
  while (i < a.length) out[k++] = a[i++];
  while (j < b.length) out[k++] = b[j++];
  return out;
}

/**
 * A set of ids in fetch order, kept up as ids come and go once it has been asked for: the order is merged
 * from the last one (the kept ids, and the new ones sorted) when asked for again, O(n + m log m) for m
 * changes, instead of sorting all n again after each write that adds or removes one. Until it is first
 * asked for, and after more changes than half its ids, it holds nothing and sorts `all()` when asked.
 */
export class FetchOrder {
  /** The order as last asked for; null: none kept (the changes are not tracked). */
  private sorted: string[] | null = null;
  /** Ids not in `sorted`, to go in. */
  private readonly added = new Set<string>();
  /** Ids in `sorted`, to go out. */
  private readonly removed = new Set<string>();

  /** `all`: every id in the set now, in any order. */
  constructor(private readonly all: () => Iterable<string>) {}

  /** An id that was not in the set. */
  add(id: string): void {
    if (this.sorted === null) return;
    if (!this.removed.delete(id)) this.added.add(id);
    this.bound();
  }

  /** An id that was in the set. */
  remove(id: string): void {
    if (this.sorted === null) return;
    if (!this.added.delete(id)) this.removed.add(id);
    this.bound();
  }

  ids(): readonly string[] {
    if (this.sorted === null) this.sorted = [...this.all()].sort(compareFetchIds);
    else if (this.added.size > 0 || this.removed.size > 0) {
      const kept = this.removed.size === 0 ? this.sorted : this.sorted.filter((id) => !this.removed.has(id));
      this.sorted = mergeInFetchOrder(kept, [...this.added].sort(compareFetchIds), (id) => id);
    }
    this.added.clear();
    this.removed.clear();
    return this.sorted;
  }

  /** More changes than half the order: sorting again when asked is as cheap, and holds nothing meanwhile. */
  private bound(): void {
    if (this.added.size + this.removed.size > Math.max(1024, this.sorted!.length >>> 1)) {
      this.sorted = null;
      this.added.clear();
      this.removed.clear();
    }
  }
}
