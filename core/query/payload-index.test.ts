import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { Bitset } from '../base/bitset.js';
import type { Filter, FilterableField, Payload } from '../base/model.js';
import { compileFilter, evaluate, type CompiledFilter } from './filter.js';
import { PayloadIndex } from './payload-index.js';

const FIELDS: FilterableField[] = [
  { path: 'k', field_type: 'keyword' },
  { path: 'n', field_type: 'numeric' },
  { path: 'a.b', field_type: 'keyword' },
  { path: 'a.x', field_type: 'numeric' },
];
const SLOTS = 96;
const CAPACITY = 100;

// Small domains so that filters and payloads collide often.
const STRINGS = ['red', 'blue', '', 'é', 'e\u0301', '🟥', 'true', '0'];
const NUMBERS = [0, -0, 1, -1, 2.5, 3, 1e9, -7.25, 0.1 + 0.2, 0.3];

const keywordValue = fc.oneof(fc.constantFrom(...STRINGS), fc.boolean());
const numberValue = fc.oneof(fc.constantFrom(...NUMBERS), fc.integer({ min: -5, max: 5 }), fc.double({ min: -10, max: 10, noNaN: true }));
const anyScalar = fc.oneof(keywordValue, numberValue, fc.constant(null));
/** A field value: usually the right type, sometimes an array (with mixed, duplicate or nested elements) or the wrong type. */
const fieldValue = (right: fc.Arbitrary<unknown>) =>
  fc.oneof(
    { weight: 4, arbitrary: right },
    { weight: 2, arbitrary: fc.array(fc.oneof(right, anyScalar, fc.array(right, { maxLength: 2 })), { maxLength: 4 }) },
    { weight: 1, arbitrary: anyScalar },
  );
const inner = fc.record({ b: fieldValue(keywordValue), x: fieldValue(numberValue) }, { requiredKeys: [] });
const payloadArb: fc.Arbitrary<Payload | undefined> = fc.option(
  fc.record(
    {
      k: fieldValue(keywordValue),
      n: fieldValue(numberValue),
      a: fc.oneof(inner, fc.array(inner, { maxLength: 3 }), anyScalar),
      other: anyScalar,
    },
    { requiredKeys: [] },
  ),
  { nil: undefined, freq: 8 },
);

const kwField = fc.constantFrom('k', 'a.b');
const numField = fc.constantFrom('n', 'a.x');
const leafArb: fc.Arbitrary<Filter> = fc.oneof(
  fc.record({ eq: fc.record({ field: kwField, value: keywordValue }) }),
  fc.record({ ne: fc.record({ field: kwField, value: keywordValue }) }),
  fc.record({ in: fc.record({ field: kwField, value: fc.array(keywordValue, { minLength: 1, maxLength: 3 }) }) }),
  fc.record({ eq: fc.record({ field: numField, value: numberValue }) }),
  fc.record({ ne: fc.record({ field: numField, value: numberValue }) }),
  fc.record({ in: fc.record({ field: numField, value: fc.array(numberValue, { minLength: 1, maxLength: 3 }) }) }),
  fc.record({ gt: fc.record({ field: numField, value: numberValue }) }),
  fc.record({ gte: fc.record({ field: numField, value: numberValue }) }),
  fc.record({ lt: fc.record({ field: numField, value: numberValue }) }),
  fc.record({ lte: fc.record({ field: numField, value: numberValue }) }),
);
const filterArb: fc.Arbitrary<Filter> = fc.letrec<{ f: Filter }>((tie) => ({
  f: fc.oneof(
    { depthSize: 'small', withCrossShrink: true },
    leafArb,
    fc.record({ and: fc.array(tie('f'), { maxLength: 3 }) }),
    fc.record({ or: fc.array(tie('f'), { maxLength: 3 }) }),
    fc.record({ not: tie('f') }),
  ),
})).f;

type Op = { kind: 'put'; slot: number; payload: Payload | undefined } | { kind: 'remove'; slot: number };
const opArb: fc.Arbitrary<Op> = fc.oneof(
  { weight: 3, arbitrary: fc.record({ kind: fc.constant('put' as const), slot: fc.nat(SLOTS - 1), payload: payloadArb }) },
  { weight: 1, arbitrary: fc.record({ kind: fc.constant('remove' as const), slot: fc.nat(SLOTS - 1) }) },
);

/** Applies ops to the index the way the collection does (remove the old payload first) and to a plain map. */
function replay(index: PayloadIndex, ops: Op[]): Map<number, Payload | undefined> {
  const live = new Map<number, Payload | undefined>();
  for (const op of ops) {
    if (live.has(op.slot)) {
      index.remove(op.slot, live.get(op.slot));
      live.delete(op.slot);
    }
    if (op.kind === 'put') {
      index.add(op.slot, op.payload);
      live.set(op.slot, op.payload);
    }
  }
  return live;
}

function universeOf(live: Map<number, unknown>): Bitset {
  const u = new Bitset(CAPACITY);
  for (const s of live.keys()) u.set(s);
  return u;
}

function reference(compiled: CompiledFilter, live: Map<number, Payload | undefined>): number[] {
  return [...live].filter(([, p]) => evaluate(compiled, p)).map(([s]) => s).sort((a, b) => a - b);
}

describe('PayloadIndex.match equals evaluate over every live payload', () => {
  it('for random payloads, filters and add/update/remove sequences', () => {
    fc.assert(
      fc.property(
        fc.array(opArb, { maxLength: 250 }),
        fc.array(filterArb, { minLength: 1, maxLength: 4 }),
        fc.constantFrom(1, 3, 256),
        (ops, filters, numericBufferMin) => {
          const index = new PayloadIndex(FIELDS, { numericBufferMin });
          const live = replay(index, ops);
          const universe = universeOf(live);
          for (const f of filters) {
            const compiled = compileFilter(f, FIELDS);
            const got = [...index.match(compiled, universe)];
            expect(got).toEqual(reference(compiled, live));
          }
        },
      ),
      { numRuns: 150 },
    );
  });

  it('restricts results to the universe it is given', () => {
    fc.assert(
      fc.property(fc.array(opArb, { maxLength: 120 }), filterArb, fc.array(fc.boolean(), { minLength: CAPACITY, maxLength: CAPACITY }), (ops, f, keep) => {
        const index = new PayloadIndex(FIELDS);
        const live = replay(index, ops);
        for (const s of [...live.keys()]) if (!keep[s]) live.delete(s);
        const compiled = compileFilter(f, FIELDS);
        expect([...index.match(compiled, universeOf(live))]).toEqual(reference(compiled, live));
      }),
      { numRuns: 100 },
    );
  });

  it('stays exact when a frequent value turns its posting list into a bitmap and back out', () => {
    const index = new PayloadIndex(FIELDS);
    const live = new Map<number, Payload>();
    const put = (slot: number, payload: Payload) => {
      if (live.has(slot)) index.remove(slot, live.get(slot));
      index.add(slot, payload);
      live.set(slot, payload);
    };
    for (let s = 0; s < 2000; s++) put(s, { k: s % 3 === 0 ? 'red' : 'blue', n: s % 10 });
    for (let s = 0; s < 2000; s += 7) put(s, { k: 'green', n: -s });
    const universe = new Bitset(2048);
    for (const s of live.keys()) universe.set(s);
    for (const f of [{ eq: { field: 'k', value: 'red' } }, { ne: { field: 'k', value: 'blue' } }, { lt: { field: 'n', value: 0 } }] as Filter[]) {
      const compiled = compileFilter(f, FIELDS);
      const got = [...index.match(compiled, universe)];
      expect(got).toEqual(reference(compiled, live));
      expect(index.estimate(compiled, live.size)).toBe(got.length);
    }
  });
});

describe('PayloadIndex.estimate', () => {
  /** Payloads whose fields hold one scalar each (or nothing): counts of in and ranges are exact there. */
  const scalarPayload = fc.option(
    fc.record({ k: keywordValue, n: numberValue, a: fc.record({ b: keywordValue, x: numberValue }, { requiredKeys: [] }) }, { requiredKeys: [] }),
    { nil: undefined, freq: 8 },
  );
  const scalarOps = fc.array(
    fc.oneof(
      { weight: 3, arbitrary: fc.record({ kind: fc.constant('put' as const), slot: fc.nat(SLOTS - 1), payload: scalarPayload }) },
      { weight: 1, arbitrary: fc.record({ kind: fc.constant('remove' as const), slot: fc.nat(SLOTS - 1) }) },
    ),
    { maxLength: 200 },
  );

  it('is exact for a single eq, ne, in or range condition', () => {
    fc.assert(
      fc.property(scalarOps, leafArb, fc.constantFrom(1, 256), (ops, f, numericBufferMin) => {
        const index = new PayloadIndex(FIELDS, { numericBufferMin });
        const live = replay(index, ops);
        const compiled = compileFilter(f, FIELDS);
        expect(index.estimate(compiled, live.size)).toBe(reference(compiled, live).length);
      }),
      { numRuns: 200 },
    );
  });

  it('is exact for single eq and ne even when fields hold arrays', () => {
    const eqOnly = leafArb.filter((f) => 'eq' in f || 'ne' in f);
    fc.assert(
      fc.property(fc.array(opArb, { maxLength: 200 }), eqOnly, (ops, f) => {
        const index = new PayloadIndex(FIELDS);
        const live = replay(index, ops);
        const compiled = compileFilter(f, FIELDS);
        expect(index.estimate(compiled, live.size)).toBe(reference(compiled, live).length);
      }),
      { numRuns: 150 },
    );
  });

  it('stays within bounds for combinations: and at most its smallest part, or between its largest part and their sum', () => {
    fc.assert(
      fc.property(scalarOps, fc.array(leafArb, { minLength: 1, maxLength: 4 }), (ops, leaves) => {
        const index = new PayloadIndex(FIELDS);
        const live = replay(index, ops);
        const parts = leaves.map((f) => reference(compileFilter(f, FIELDS), live).length);
        const and = index.estimate(compileFilter({ and: leaves }, FIELDS), live.size);
        const or = index.estimate(compileFilter({ or: leaves }, FIELDS), live.size);
        const not = index.estimate(compileFilter({ not: { and: leaves } }, FIELDS), live.size);
        expect(and).toBeGreaterThanOrEqual(0);
        expect(and).toBeLessThanOrEqual(Math.min(...parts));
        expect(or).toBeGreaterThanOrEqual(Math.max(...parts));
        expect(or).toBeLessThanOrEqual(Math.min(live.size, parts.reduce((a, b) => a + b, 0)));
        expect(not).toBe(live.size - and);
      }),
      { numRuns: 150 },
    );
  });

  it('is an upper bound clipped to the live count for in and ranges over arrays', () => {
    fc.assert(
      fc.property(fc.array(opArb, { maxLength: 200 }), leafArb, (ops, f) => {
        const index = new PayloadIndex(FIELDS);
        const live = replay(index, ops);
        const compiled = compileFilter(f, FIELDS);
        const est = index.estimate(compiled, live.size);
        const exact = reference(compiled, live).length;
        if (compiled.op === 'not') expect(est).toBeLessThanOrEqual(exact);
        else expect(est).toBeGreaterThanOrEqual(exact);
        expect(est).toBeLessThanOrEqual(live.size);
      }),
      { numRuns: 150 },
    );
  });
});
