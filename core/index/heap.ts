/**
 * Binary heaps of (distance, slot) pairs in typed arrays: no object per entry, no allocation unless a
 * heap outgrows its capacity (it doubles). Ties on distance are broken by slot, so results are
 * deterministic.
 */
export class MaxHeap {
  d: Float32Array;
  id: Int32Array;
  size = 0;

  constructor(capacity = 64) {
    this.d = new Float32Array(capacity);
    this.id = new Int32Array(capacity);
  }

  clear(): void {
    this.size = 0;
  }

  topD(): number {
    return this.d[0];
  }

  topId(): number {
    return this.id[0];
  }

  push(dist: number, slot: number): void {
    if (this.size === this.d.length) this.grow();
    const d = this.d;
    const id = this.id;
    let i = this.size++;
    while (i > 0) {
      const p = (i - 1) >> 1;
      if (d[p] > dist || (d[p] === dist && id[p] > slot)) break;
      d[i] = d[p];
      id[i] = id[p];
      i = p;
    }
    d[i] = dist;
    id[i] = slot;
  }

  pop(): void {
    const n = --this.size;
    if (n > 0) this.siftDown(this.d[n], this.id[n], n);
  }

  /** Replaces the top (the worst) with a better pair. */
  replaceTop(dist: number, slot: number): void {
    this.siftDown(dist, slot, this.size);
  }

  private siftDown(dist: number, slot: number, n: number): void {
    const d = this.d;
    const id = this.id;
    let i = 0;
    while (true) {
      let c = 2 * i + 1;
      if (c >= n) break;
      const r = c + 1;
      if (r < n && (d[r] > d[c] || (d[r] === d[c] && id[r] > id[c]))) c = r;
      if (d[c] < dist || (d[c] === dist && id[c] < slot)) break;
      d[i] = d[c];
      id[i] = id[c];
      i = c;
    }
    d[i] = dist;
    id[i] = slot;
  }

  private grow(): void {
    const d = new Float32Array(this.d.length * 2);
    const id = new Int32Array(this.id.length * 2);
    d.set(this.d);
    id.set(this.id);
    this.d = d;
    this.id = id;
  }
}

export class MinHeap {
  d: Float32Array;
  id: Int32Array;
  size = 0;

  constructor(capacity = 64) {
    this.d = new Float32Array(capacity);
    this.id = new Int32Array(capacity);
  }

  clear(): void {
    this.size = 0;
  }

  topD(): number {
    return this.d[0];
  }

  topId(): number {
    return this.id[0];
  }

  push(dist: number, slot: number): void {
    if (this.size === this.d.length) this.grow();
    const d = this.d;
    const id = this.id;
    let i = this.size++;
    while (i > 0) {
      const p = (i - 1) >> 1;
      if (d[p] < dist || (d[p] === dist && id[p] < slot)) break;
      d[i] = d[p];
      id[i] = id[p];
      i = p;
    }
    d[i] = dist;
    id[i] = slot;
  }

  pop(): void {
    const n = --this.size;
    if (n <= 0) return;
    const dist = this.d[n];
    const slot = this.id[n];
    const d = this.d;
    const id = this.id;
    let i = 0;
    while (true) {
      let c = 2 * i + 1;
      if (c >= n) break;
      const r = c + 1;
      if (r < n && (d[r] < d[c] || (d[r] === d[c] && id[r] < id[c]))) c = r;
      if (d[c] > dist || (d[c] === dist && id[c] > slot)) break;
      d[i] = d[c];
      id[i] = id[c];
      i = c;
    }
    d[i] = dist;
    id[i] = slot;
  }

  private grow(): void {
    const d = new Float32Array(this.d.length * 2);
    const id = new Int32Array(this.id.length * 2);
    d.set(this.d);
    id.set(this.id);
    this.d = d;
    this.id = id;
  }
}

/** Drains a max-heap into ascending (distance, slot) arrays. */
export function drainAscending(heap: MaxHeap): { slots: Int32Array; dists: Float32Array } {
  const n = heap.size;
  const slots = new Int32Array(n);
  const dists = new Float32Array(n);
  for (let i = n - 1; i >= 0; i--) {
    slots[i] = heap.topId();
    dists[i] = heap.topD();
    heap.pop();
  }
  return { slots, dists };
}

/**
 * The k nearest entries of a max-heap (a search's ef results), nearest first, by insertion into a
 * sorted k-array in one pass over the heap's arrays (empties the heap): popping the ef - k others one
 * by one cost about 5% of a GloVe-100 query at ef 128. Ties keep the entry met first.
 */
export function nearestAscending(top: MaxHeap, k: number): { slots: Int32Array; dists: Float32Array } {
  const n = top.size;
  const m = Math.min(k, n);
  const slots = new Int32Array(m);
  const dists = new Float32Array(m);
  const hd = top.d;
  const hi = top.id;
  let len = 0;
  for (let i = 0; i < n; i++) {
    const d = hd[i];
    if (len === m && d >= dists[m - 1]) continue;
    let j = len < m ? len++ : m - 1;
    while (j > 0 && dists[j - 1] > d) {
      dists[j] = dists[j - 1];
      slots[j] = slots[j - 1];
      j--;
    }
    dists[j] = d;
    slots[j] = hi[i];
  }
  top.size = 0;
  return { slots, dists };
}
