import { describe, expect, it } from 'vitest';
import fc from 'fast-check';
import { Prng } from '../base/prng.js';
import { SvcError } from '../base/errors.js';
import { SparseIndex, SparseReader, SparseTorn, docFromPayload, validateSparse } from './sparse-index.js';
import { termId, textVector, queryTermIds } from './tokenizer.js';

/** A document as the tests keep it: term -> tf. */
type Doc = Map<number, number>;

function toArrays(doc: Doc): { terms: Uint32Array; weights: Float32Array } {
  const terms = Uint32Array.from(doc.keys());
  const weights = Float32Array.from(terms, (t) => doc.get(t) as number);
  return { terms, weights };
}

/** BM25 written straight from the formula, over a plain map of live documents. */
function naiveBm25(docs: Map<number, Doc>, query: number[], k1 = 0.9, b = 0.4): Map<number, number> {
  const live = [...docs].filter(([, d]) => d.size > 0);
  const n = live.length;
  const avgdl = live.reduce((s, [, d]) => s + [...d.values()].reduce((a, x) => a + x, 0), 0) / n;
  const out = new Map<number, number>();
  for (const [slot, d] of live) {
    const dl = [...d.values()].reduce((a, x) => a + x, 0);
    let score = 0;
    let hit = false;
    for (const t of query) {
      const tf = d.get(t);
      if (tf === undefined) continue;
      hit = true;
      const df = live.filter(([, e]) => e.has(t)).length;
      const idf = Math.log(1 + (n - df + 0.5) / (df + 0.5));
      score += (idf * tf * (k1 + 1)) / (tf + k1 * (1 - b + (b * dl) / avgdl));
    }
    if (hit) out.set(slot, score);
  }
  return out;
}

function ranked(scores: Map<number, number>, k: number): [number, number][] {
  return [...scores].sort((x, y) => y[1] - x[1] || x[0] - y[0]).slice(0, k);
}

function expectMatches(got: { slots: Int32Array; scores: Float32Array }, want: [number, number][]): void {
  expect(got.slots.length).toBe(want.length);
  for (let i = 0; i < want.length; i++) {
    expect(got.scores[i]).toBeCloseTo(want[i][1], 4);
  }
  // Same set of (slot, score) pairs; the order may differ only between (near-)tied scores.
  const gotMap = new Map(Array.from(got.slots, (s, i) => [s, got.scores[i]]));
  for (const [slot, score] of want) {
    if (gotMap.has(slot)) expect(gotMap.get(slot)).toBeCloseTo(score, 4);
  }
  for (let i = 1; i < got.scores.length; i++) expect(got.scores[i]).toBeLessThanOrEqual(got.scores[i - 1]);
}

function statsFromScratch(docs: Map<number, Doc>): { n: number; avgdl: number; df: Map<number, number> } {
  const live = [...docs.values()].filter((d) => d.size > 0);
  const df = new Map<number, number>();
  let total = 0;
  for (const d of live) {
    for (const [t, tf] of d) {
      df.set(t, (df.get(t) ?? 0) + 1);
      total += tf;
    }
  }
  return { n: live.length, avgdl: live.length === 0 ? 0 : total / live.length, df };
}

describe('SparseIndex BM25', () => {
  const corpus = [
    'the quick brown fox jumps over the lazy dog',
    'a quick brown dog outpaces a quick fox',
    'lazy dogs sleep all day',
    'foxes are quick and clever animals',
    'nothing in common here',
  ];

  it('scores a small corpus exactly as the formula says', () => {
    const idx = new SparseIndex();
    const docs = new Map<number, Doc>();
    corpus.forEach((text, slot) => {
      const v = textVector(text);
      idx.set(slot, v.terms, v.weights);
      docs.set(slot, new Map(Array.from(v.terms, (t, i) => [t, v.weights[i]])));
    });
    const q = queryTermIds('quick fox');
    expect(idx.stats().n).toBe(5);
    const got = idx.bm25(q, 10);
    expectMatches(got, ranked(naiveBm25(docs, Array.from(q)), 10));
    // hand check of the top document: doc 1 has quick x2 and fox x1
    expect(Array.from(got.slots)).toContain(1);
    expect(got.slots.length).toBe(3); // docs 0, 1, 3 contain quick or fox
  });

  it('stays exact after deletes and updates', () => {
    const idx = new SparseIndex();
    const docs = new Map<number, Doc>();
    const put = (slot: number, text: string): void => {
      const v = textVector(text);
      idx.set(slot, v.terms, v.weights);
      docs.set(slot, new Map(Array.from(v.terms, (t, i) => [t, v.weights[i]])));
    };
    corpus.forEach((t, i) => put(i, t));
    idx.remove(0);
    docs.delete(0);
    put(3, 'a fox a fox a fox, and a quick one');
    put(7, 'quick quick quick');
    const q = Array.from(queryTermIds('quick fox dog'));
    expectMatches(idx.bm25(Uint32Array.from(q), 10), ranked(naiveBm25(docs, q), 10));
    expect(idx.stats().df(termId('fox'))).toBe(2);
    expect(idx.has(0)).toBe(false);
  });

  it('honours k, accept and custom parameters, ties broken by slot', () => {
    const idx = new SparseIndex();
    for (let s = 0; s < 6; s++) idx.set(s, Uint32Array.of(5), Float32Array.of(1));
    const all = idx.bm25(Uint32Array.of(5), 10);
    expect(Array.from(all.slots)).toEqual([0, 1, 2, 3, 4, 5]);
    const some = idx.bm25(Uint32Array.of(5), 2, (s) => s % 2 === 1);
    expect(Array.from(some.slots)).toEqual([1, 3]);
    const docs = new Map<number, Doc>([[0, new Map([[1, 3]])], [1, new Map([[1, 1], [2, 5]])]]);
    const idx2 = new SparseIndex();
    for (const [s, d] of docs) {
      const a = toArrays(d);
      idx2.set(s, a.terms, a.weights);
    }
    expectMatches(idx2.bm25(Uint32Array.of(1), 5, undefined, { k1: 1.2, b: 0.75 }), ranked(naiveBm25(docs, [1], 1.2, 0.75), 5));
    expect(idx2.bm25(Uint32Array.of(99), 5).slots.length).toBe(0);
    expect(new SparseIndex().bm25(Uint32Array.of(1), 5).slots.length).toBe(0);
  });

  it('counts a repeated query term as often as it is repeated', () => {
    const idx = new SparseIndex();
    idx.set(0, Uint32Array.of(1), Float32Array.of(1));
    idx.set(1, Uint32Array.of(2), Float32Array.of(1));
    idx.set(2, Uint32Array.of(3), Float32Array.of(1));
    const once = idx.bm25(Uint32Array.of(1), 1).scores[0];
    const twice = idx.bm25(Uint32Array.of(1, 1), 1).scores[0];
    expect(twice).toBeCloseTo(2 * once, 5);
  });

  it('statistics equal a recomputation from scratch under random sets and removes', () => {
    const op = fc.oneof(
      fc.record({
        kind: fc.constant('set' as const),
        slot: fc.integer({ min: 0, max: 15 }),
        terms: fc.uniqueArray(fc.integer({ min: 0, max: 12 }), { maxLength: 6 }),
        tfs: fc.array(fc.integer({ min: 1, max: 4 }), { minLength: 6, maxLength: 6 }),
      }),
      fc.record({ kind: fc.constant('remove' as const), slot: fc.integer({ min: 0, max: 15 }) }),
    );
    fc.assert(
      fc.property(fc.array(op, { maxLength: 60 }), fc.uniqueArray(fc.integer({ min: 0, max: 12 }), { minLength: 1, maxLength: 4 }), (ops, query) => {
        const idx = new SparseIndex();
        const docs = new Map<number, Doc>();
        for (const o of ops) {
          if (o.kind === 'set') {
            const d: Doc = new Map(o.terms.map((t, i) => [t, o.tfs[i]]));
            const a = toArrays(d);
            idx.set(o.slot, a.terms, a.weights);
            if (d.size > 0) docs.set(o.slot, d);
            else docs.delete(o.slot);
          } else {
            idx.remove(o.slot);
            docs.delete(o.slot);
          }
        }
        const want = statsFromScratch(docs);
        const st = idx.stats();
        expect(st.n).toBe(want.n);
        expect(st.avgdl).toBeCloseTo(want.avgdl, 9);
        for (let t = 0; t <= 12; t++) expect(st.df(t)).toBe(want.df.get(t) ?? 0);
        for (let s = 0; s <= 15; s++) expect(idx.has(s)).toBe(docs.has(s));
        if (want.n > 0) expectMatches(idx.bm25(Uint32Array.from(query), 20), ranked(naiveBm25(docs, query), 20));
      }),
      { numRuns: 300 },
    );
  });

  it('handles a larger seeded corpus with heavy churn', () => {
    const rng = new Prng(7);
    const idx = new SparseIndex();
    const docs = new Map<number, Doc>();
    for (let step = 0; step < 3000; step++) {
      const slot = rng.int(400);
      if (rng.next() < 0.3) {
        idx.remove(slot);
        docs.delete(slot);
        continue;
      }
      const d: Doc = new Map();
      const len = 1 + rng.int(8);
      for (let i = 0; i < len; i++) d.set(rng.int(50), 1 + rng.int(3));
      const a = toArrays(d);
      idx.set(slot, a.terms, a.weights);
      docs.set(slot, d);
    }
    const want = statsFromScratch(docs);
    expect(idx.stats().n).toBe(want.n);
    for (let t = 0; t < 50; t++) expect(idx.stats().df(t)).toBe(want.df.get(t) ?? 0);
    const q = [3, 17, 42];
    expectMatches(idx.bm25(Uint32Array.from(q), 25), ranked(naiveBm25(docs, q), 25));
  });
});

describe('SparseIndex dot', () => {
  it('ranks by sparse inner product, best first, ties by slot', () => {
    const idx = new SparseIndex();
    idx.set(0, Uint32Array.of(1, 2), Float32Array.of(0.5, 2));
    idx.set(1, Uint32Array.of(2, 3), Float32Array.of(1, 4));
    idx.set(2, Uint32Array.of(7), Float32Array.of(1));
    idx.set(3, Uint32Array.of(1, 2), Float32Array.of(0.5, 2));
    const r = idx.dot(Uint32Array.of(2, 3), Float32Array.of(1, 0.5), 10);
    expect(Array.from(r.slots)).toEqual([1, 0, 3]);
    expect(Array.from(r.scores)).toEqual([3, 2, 2]);
    expect(Array.from(idx.dot(Uint32Array.of(2), Float32Array.of(1), 1, (s) => s !== 0).slots)).toEqual([3]);
    idx.set(1, Uint32Array.of(9), Float32Array.of(1));
    expect(Array.from(idx.dot(Uint32Array.of(2, 3), Float32Array.of(1, 0.5), 10).slots)).toEqual([0, 3]);
  });

  it('equals a brute-force dot product on random vectors', () => {
    const rng = new Prng(11);
    const idx = new SparseIndex();
    const vecs = new Map<number, Map<number, number>>();
    for (let s = 0; s < 200; s++) {
      const m = new Map<number, number>();
      for (let i = 0; i < 5; i++) m.set(rng.int(40), Math.fround(rng.gaussian()));
      vecs.set(s, m);
      idx.set(s, Uint32Array.from(m.keys()), Float32Array.from(m.values()));
    }
    const qi = [1, 5, 9, 33];
    const qv = [0.5, -1, 2, 0.25].map(Math.fround);
    const want = new Map<number, number>();
    for (const [s, m] of vecs) {
      let hit = false;
      let d = 0;
      qi.forEach((t, i) => {
        if (m.has(t)) {
          hit = true;
          d += qv[i] * (m.get(t) as number);
        }
      });
      if (hit) want.set(s, d);
    }
    expectMatches(idx.dot(Uint32Array.from(qi), Float32Array.from(qv), 30), ranked(want, 30));
  });
});

describe('SparseIndex ties at the cut', () => {
  it('gives the k best and, asked to, every one whose float32 score equals the k-th\'s: no larger k needed for the tie rule', () => {
    fc.assert(fc.property(
      fc.array(fc.uniqueArray(fc.integer({ min: 0, max: 5 }), { minLength: 1, maxLength: 3 }), { minLength: 1, maxLength: 40 }),
      fc.integer({ min: 1, max: 45 }),
      (docs, k) => {
        const idx = new SparseIndex();
        docs.forEach((terms, slot) => idx.set(slot, Uint32Array.from(terms), Float32Array.from(terms, (t) => 1 + (t % 2))));
        const query = Uint32Array.of(0, 1, 3);
        const all = idx.bm25(query, 1000);
        const plain = idx.bm25(query, k);
        const whole = idx.bm25(query, k, undefined, undefined, undefined, true);
        expect(Array.from(plain.slots)).toEqual(Array.from(all.slots.subarray(0, k)));
        // The reference: the first k, then all that tie with the k-th.
        let m = Math.min(k, all.slots.length);
        while (m > 0 && m < all.slots.length && all.scores[m] === all.scores[m - 1]) m++;
        expect(Array.from(whole.slots)).toEqual(Array.from(all.slots.subarray(0, m)));
        const dots = idx.dot(query, Float32Array.of(1, 1, 1), k, undefined, true);
        const allDots = idx.dot(query, Float32Array.of(1, 1, 1), 1000);
        let d = Math.min(k, allDots.slots.length);
        while (d > 0 && d < allDots.slots.length && allDots.scores[d] === allDots.scores[d - 1]) d++;
        expect(Array.from(dots.slots)).toEqual(Array.from(allDots.slots.subarray(0, d)));
      },
    ), { numRuns: 300 });
  });
});

describe('SparseIndex in shared memory (a request loop reads it, issue 20)', () => {
  /** Seeded churn: many terms (the table grows, terms whose documents went are dropped), blocks moved and compacted. */
  function churn(idx: SparseIndex, docs: Map<number, Doc>, seed: number, steps: number): void {
    const rng = new Prng(seed);
    for (let step = 0; step < steps; step++) {
      const slot = rng.int(600);
      if (rng.next() < 0.35) {
        idx.remove(slot);
        docs.delete(slot);
        continue;
      }
      const d: Doc = new Map();
      const len = 1 + rng.int(12);
      // Terms from a range that moves: old terms lose every document, new ones come.
      const base = Math.floor(step / 50);
      for (let i = 0; i < len; i++) d.set(base + rng.int(300), 1 + rng.int(4));
      const a = toArrays(d);
      idx.set(slot, a.terms, a.weights);
      docs.set(slot, d);
    }
  }

  for (const shared of [true, false]) {
    it(`a reader over its handle answers as the index does, through table growth and arena compactions (${shared ? 'shared' : 'this thread\'s'} memory)`, () => {
      const idx = new SparseIndex({ shared, arenaGarbageMin: 64 });
      // A shared index's reader follows its growth; one over this thread's own buffers holds those of its moment.
      let reader = new SparseReader(idx.handle());
      const docs = new Map<number, Doc>();
      const rng = new Prng(99);
      for (let round = 0; round < 8; round++) {
        churn(idx, docs, 1000 + round, 500);
        if (!shared) reader = new SparseReader(idx.handle());
        const want = statsFromScratch(docs);
        expect(reader.stats().n).toBe(want.n);
        expect(reader.stats().avgdl).toBeCloseTo(want.avgdl, 9);
        const base = Math.floor(500 / 50) * round;
        const q = Array.from({ length: 4 }, () => base + rng.int(300));
        for (const t of q) expect(reader.stats().df(t)).toBe(want.df.get(t) ?? 0);
        const mine = idx.bm25(Uint32Array.from(q), 40);
        const theirs = reader.bm25(Uint32Array.from(q), 40);
        expect(Array.from(theirs.slots)).toEqual(Array.from(mine.slots));
        expect(Array.from(theirs.scores)).toEqual(Array.from(mine.scores));
        expectMatches(theirs, ranked(naiveBm25(docs, q), 40));
        const values = Float32Array.from(q, () => Math.fround(rng.gaussian()));
        expect(Array.from(reader.dot(Uint32Array.from(q), values, 40).slots)).toEqual(Array.from(idx.dot(Uint32Array.from(q), values, 40).slots));
      }
      expect(idx.compactions).toBeGreaterThan(0);
      expect(idx.handle().header instanceof SharedArrayBuffer).toBe(shared);
    });
  }

  it('a reader that met a torn read answers in full afterwards (the slots it had touched are not skipped)', () => {
    const idx = new SparseIndex({ shared: true });
    for (let s = 0; s < 50; s++) idx.set(s, Uint32Array.of(1, 2), Float32Array.of(1, 1 + (s % 3)));
    const h = idx.handle();
    const reader = new SparseReader(h);
    const table = new Int32Array(h.table);
    const slots = new Int32Array(h.slots);
    const cap = new Int32Array(h.header)[0];
    const entryOf = (term: number) => { for (let i = 0; i < cap * 5; i += 5) if (table[i + 1] !== 0 && table[i] === term) return i; return -1; };
    for (const [term, read] of [[1, () => reader.bm25(Uint32Array.of(1, 2), 100)], [2, () => reader.dot(Uint32Array.of(1, 2), Float32Array.of(1, 1), 100)]] as const) {
      // Term `term`'s last posting names a slot out of range: the read throws after touching others.
      const e = entryOf(term);
      const last = table[e + 1] - 1 + table[e + 3] - 1;
      const slot = slots[last];
      slots[last] = 1 << 29;
      expect(read).toThrow(SparseTorn);
      slots[last] = slot;
      expect(read().slots.length).toBe(50);
      expect(Array.from(read().slots)).toEqual(Array.from(term === 1 ? idx.bm25(Uint32Array.of(1, 2), 100).slots : idx.dot(Uint32Array.of(1, 2), Float32Array.of(1, 1), 100).slots));
    }
  });

  it('leaves out of the index, and counts, a document that would take it past its buffers\' maxima: nothing else changes', () => {
    const idx = new SparseIndex({ shared: true });
    idx.set(0, Uint32Array.of(1), Float32Array.of(1));
    // A slot past the 2^29 the per-slot arrays cover: not indexed, and an earlier document of it goes.
    idx.set(2 ** 29, Uint32Array.of(1), Float32Array.of(1));
    expect(idx.unindexed).toBe(1);
    expect(idx.has(2 ** 29)).toBe(false);
    expect(idx.stats().n).toBe(1);
    expect(Array.from(idx.bm25(Uint32Array.of(1), 5).slots)).toEqual([0]);
    idx.set(3, Uint32Array.of(1, 2), Float32Array.of(1, 1));
    expect(idx.stats().n).toBe(2);
  });

  it('a reader that finds the arrays inconsistent throws SparseTorn instead of reading past them or looping', () => {
    const idx = new SparseIndex({ shared: true });
    for (let s = 0; s < 50; s++) idx.set(s, Uint32Array.of(1, 2, 3 + s), Float32Array.of(1, 2, 1));
    const h = idx.handle();
    const words = new Int32Array(h.header);
    const table = new Int32Array(h.table);
    const reader = new SparseReader(h);
    // A table capacity a write left half-changed.
    const cap = words[0];
    words[0] = cap * 1024;
    expect(() => reader.bm25(Uint32Array.of(1), 5)).toThrow(SparseTorn);
    words[0] = 3;
    expect(() => reader.stats().df(1)).toThrow(SparseTorn);
    words[0] = cap;
    // A block's count beyond its capacity, and a posting naming a slot the index does not cover.
    let e = -1;
    for (let i = 0; i < cap * 5; i += 5) if (table[i + 1] !== 0 && table[i] === 1) e = i;
    expect(e).toBeGreaterThanOrEqual(0);
    const used = table[e + 3];
    table[e + 3] = table[e + 2] + 1;
    expect(() => reader.bm25(Uint32Array.of(1), 5)).toThrow(SparseTorn);
    table[e + 3] = used;
    const slots = new Int32Array(h.slots);
    const at = table[e + 1] - 1;
    const slot = slots[at];
    slots[at] = 1 << 29;
    expect(() => reader.dot(Uint32Array.of(1), Float32Array.of(1), 5)).toThrow(SparseTorn);
    slots[at] = slot;
    expect(reader.bm25(Uint32Array.of(1), 100).slots.length).toBe(50);
  });
});

describe('docFromPayload', () => {
  it('prefers __svc_sparse__ over __svc_text__ and sorts by index', () => {
    const d = docFromPayload({ __svc_text__: 'hello world', __svc_sparse__: { indices: [9, 2], values: [1.5, 3] } }, 10);
    expect(d && Array.from(d.terms)).toEqual([2, 9]);
    expect(d && Array.from(d.weights)).toEqual([3, 1.5]);
    expect(d?.length).toBe(4.5);
  });

  it('tokenizes __svc_text__ when no sparse vector is given', () => {
    const d = docFromPayload({ __svc_text__: 'Flying flies fly', other: 1 }, 10);
    expect(d?.length).toBe(3);
    expect(docFromPayload({ other: 1 }, 10)).toBeNull();
    expect(docFromPayload(undefined, 10)).toBeNull();
    expect(docFromPayload({ __svc_sparse__: null, __svc_text__: 'x' }, 10)?.length).toBe(1);
  });

  const bad: [string, unknown][] = [
    ['not an object', [1, 2]],
    ['missing values', { indices: [1] }],
    ['length mismatch', { indices: [1, 2], values: [1] }],
    ['negative index', { indices: [-1], values: [1] }],
    ['fractional index', { indices: [1.5], values: [1] }],
    ['index above u32', { indices: [2 ** 32], values: [1] }],
    ['string index', { indices: ['1'], values: [1] }],
    ['NaN value', { indices: [1], values: [NaN] }],
    ['infinite value', { indices: [1], values: [Infinity] }],
    ['value beyond float32', { indices: [1], values: [1e39] }],
    ['duplicate index', { indices: [4, 2, 4], values: [1, 1, 1] }],
  ];
  for (const [name, value] of bad) {
    it(`rejects a sparse vector with ${name}`, () => {
      try {
        docFromPayload({ __svc_sparse__: value }, 10);
        expect.unreachable();
      } catch (e) {
        expect(e).toBeInstanceOf(SvcError);
        expect((e as SvcError).code).toBe('invalid_argument');
        expect((e as SvcError).message).toMatch(/__svc_sparse__/);
      }
    });
  }

  it('rejects a non-string text and too many sparse terms', () => {
    expect(() => docFromPayload({ __svc_text__: 5 }, 10)).toThrow(/__svc_text__ must be a string/);
    try {
      validateSparse({ indices: [1, 2, 3], values: [1, 1, 1] }, 2);
      expect.unreachable();
    } catch (e) {
      expect((e as SvcError).code).toBe('limit_exceeded');
      expect((e as SvcError).message).toMatch(/SVC_MAX_SPARSE_TERMS/);
    }
  });
});
