import { describe, expect, it } from 'vitest';
import { SvcError } from '../base/errors.js';
import type { FilterableField } from '../base/model.js';
import { FILTER_LIMITS, checkFilterableFields, compileFilter, evaluate, leafCount } from './filter.js';

const FIELDS: FilterableField[] = [
  { path: 'color', field_type: 'keyword' },
  { path: 'price', field_type: 'numeric' },
  { path: 'meta.lang', field_type: 'keyword' },
  { path: 'meta.year', field_type: 'numeric' },
  { path: 'tags', field_type: 'keyword' },
  { path: 'items.qty', field_type: 'numeric' },
  { path: 'flag', field_type: 'keyword' },
];

const matches = (filter: unknown, payload: Record<string, unknown> | undefined) =>
  evaluate(compileFilter(filter, FIELDS), payload);

function rejects(filter: unknown, message: RegExp): void {
  let err: unknown;
  try {
    compileFilter(filter, FIELDS);
  } catch (e) {
    err = e;
  }
  expect(err).toBeInstanceOf(SvcError);
  expect((err as SvcError).code).toBe('invalid_argument');
  expect((err as SvcError).message).toMatch(message);
}

const nest = (depth: number): unknown => (depth <= 1 ? { eq: { field: 'color', value: 'red' } } : { not: nest(depth - 1) });

describe('compileFilter rejects bad filters with invalid_argument', () => {
  it('an unknown operator', () => {
    rejects({ match: { field: 'color', value: 'red' } }, /unknown filter operator 'match'/);
    rejects({ and: [{ range: { field: 'price', value: 1 } }] }, /unknown filter operator 'range'/);
  });

  it('a wrong shape', () => {
    rejects(null, /must be an object/);
    rejects('color = red', /must be an object/);
    rejects([{ eq: { field: 'color', value: 'red' } }], /must be an object/);
    rejects({}, /exactly one operator key, got none/);
    rejects({ eq: { field: 'color', value: 'red' }, ne: { field: 'color', value: 'b' } }, /exactly one operator key/);
    rejects({ and: { eq: { field: 'color', value: 'red' } } }, /'and' takes a list/);
    rejects({ or: 'x' }, /'or' takes a list/);
    rejects({ eq: { field: 'color' } }, /takes an object \{field, value\}/);
    rejects({ eq: ['color', 'red'] }, /takes an object \{field, value\}/);
    rejects({ eq: { field: 7, value: 'red' } }, /takes an object \{field, value\}/);
    rejects({ eq: { field: 'color', value: 'red', boost: 2 } }, /only \{field, value\}, not 'boost'/);
    rejects({ not: [] }, /must be an object/);
  });

  it('a field that is not declared filterable', () => {
    rejects({ eq: { field: 'x', value: 'a' } }, /field 'x' is not declared filterable/);
    rejects({ gte: { field: 'meta', value: 1 } }, /field 'meta' is not declared filterable/);
    rejects({ eq: { field: '__proto__', value: 'a' } }, /field '__proto__' is not declared filterable/);
  });

  it('a type mismatch', () => {
    rejects({ gt: { field: 'color', value: 3 } }, /needs a numeric field, but field 'color' is declared keyword/);
    rejects({ gte: { field: 'price', value: '3' } }, /takes a finite number/);
    rejects({ lt: { field: 'price', value: Infinity } }, /takes a finite number/);
    rejects({ lte: { field: 'price', value: NaN } }, /takes a finite number/);
    rejects({ eq: { field: 'color', value: 3 } }, /keyword field 'color' takes a string or a boolean/);
    rejects({ eq: { field: 'color', value: null } }, /keyword field 'color' takes a string or a boolean/);
    rejects({ ne: { field: 'color', value: { a: 1 } } }, /keyword field 'color'/);
    rejects({ eq: { field: 'price', value: '3' } }, /numeric field 'price' takes a finite number/);
    rejects({ eq: { field: 'price', value: true } }, /numeric field 'price' takes a finite number/);
    rejects({ in: { field: 'color', value: ['a', 1] } }, /takes strings or booleans/);
    rejects({ in: { field: 'price', value: [1, '2'] } }, /takes finite numbers/);
  });

  it('an in list that is not a non-empty list of bounded length', () => {
    rejects({ in: { field: 'color', value: 'red' } }, /list of 1 to 1024 values/);
    rejects({ in: { field: 'color', value: [] } }, /list of 1 to 1024 values/);
    const long = Array.from({ length: FILTER_LIMITS.inValuesMax + 1 }, (_, i) => `v${i}`);
    rejects({ in: { field: 'color', value: long } }, /list of 1 to 1024 values/);
    expect(() => compileFilter({ in: { field: 'color', value: long.slice(1) } }, FIELDS)).not.toThrow();
  });

  it('nesting deeper than the bound', () => {
    expect(() => compileFilter(nest(FILTER_LIMITS.depthMax), FIELDS)).not.toThrow();
    rejects(nest(FILTER_LIMITS.depthMax + 1), /nested deeper than 16 levels/);
  });

  it('more conditions than the bound', () => {
    const leaves = (n: number) => ({ and: Array.from({ length: n }, () => ({ eq: { field: 'color', value: 'red' } })) });
    expect(() => compileFilter(leaves(FILTER_LIMITS.conditionsMax - 1), FIELDS)).not.toThrow();
    rejects(leaves(FILTER_LIMITS.conditionsMax), /more than 256 conditions/);
  });

  it('an overlong keyword value', () => {
    rejects({ eq: { field: 'color', value: 'x'.repeat(FILTER_LIMITS.keywordCharsMax + 1) } }, /longer than 65536 characters/);
  });

  it('reports a deep problem from inside combinators', () => {
    rejects({ and: [{ eq: { field: 'color', value: 'red' } }, { or: [{ not: { gt: { field: 'nope', value: 1 } } }] }] }, /field 'nope'/);
  });
});

describe('checkFilterableFields', () => {
  it('accepts good declarations and refuses bad ones', () => {
    expect(checkFilterableFields(FIELDS)).toEqual(FIELDS);
    for (const bad of [
      'color',
      [{ path: 'a', field_type: 'text' }],
      [{ path: '', field_type: 'keyword' }],
      [{ path: 'a..b', field_type: 'keyword' }],
      [{ path: 'a.', field_type: 'numeric' }],
      [{ path: 'a', field_type: 'keyword' }, { path: 'a', field_type: 'numeric' }],
      [{ path: 'x'.repeat(300), field_type: 'keyword' }],
    ]) {
      expect(() => checkFilterableFields(bad)).toThrowError(expect.objectContaining({ code: 'invalid_argument' }));
    }
  });
});

describe('evaluate', () => {
  const p = { color: 'red', price: 10, meta: { lang: 'en', year: 2020 }, tags: ['a', 'b'], items: [{ qty: 1 }, { qty: 5 }], flag: true };

  it('compares keyword values', () => {
    expect(matches({ eq: { field: 'color', value: 'red' } }, p)).toBe(true);
    expect(matches({ eq: { field: 'color', value: 'Red' } }, p)).toBe(false);
    expect(matches({ ne: { field: 'color', value: 'blue' } }, p)).toBe(true);
    expect(matches({ in: { field: 'color', value: ['blue', 'red'] } }, p)).toBe(true);
    expect(matches({ in: { field: 'color', value: ['blue', 'green'] } }, p)).toBe(false);
  });

  it('keeps booleans and strings apart', () => {
    expect(matches({ eq: { field: 'flag', value: true } }, p)).toBe(true);
    expect(matches({ eq: { field: 'flag', value: 'true' } }, p)).toBe(false);
    expect(matches({ eq: { field: 'flag', value: false } }, p)).toBe(false);
    expect(matches({ eq: { field: 'flag', value: true } }, { flag: 'true' })).toBe(false);
  });

  it('compares numbers with every range operator and at the bounds', () => {
    expect(matches({ gt: { field: 'price', value: 10 } }, p)).toBe(false);
    expect(matches({ gte: { field: 'price', value: 10 } }, p)).toBe(true);
    expect(matches({ lt: { field: 'price', value: 10 } }, p)).toBe(false);
    expect(matches({ lte: { field: 'price', value: 10 } }, p)).toBe(true);
    expect(matches({ lt: { field: 'price', value: 10.5 } }, p)).toBe(true);
    expect(matches({ eq: { field: 'price', value: 10 } }, p)).toBe(true);
    expect(matches({ in: { field: 'price', value: [1, 10] } }, p)).toBe(true);
  });

  it('treats -0 and 0 as equal', () => {
    expect(matches({ eq: { field: 'price', value: 0 } }, { price: -0 })).toBe(true);
    expect(matches({ eq: { field: 'price', value: -0 } }, { price: 0 })).toBe(true);
    expect(matches({ gt: { field: 'price', value: -0 } }, { price: 0 })).toBe(false);
    expect(matches({ gte: { field: 'price', value: 0 } }, { price: -0 })).toBe(true);
  });

  it('walks dotted paths into nested objects and arrays of objects', () => {
    expect(matches({ eq: { field: 'meta.lang', value: 'en' } }, p)).toBe(true);
    expect(matches({ gte: { field: 'meta.year', value: 2020 } }, p)).toBe(true);
    expect(matches({ gt: { field: 'items.qty', value: 4 } }, p)).toBe(true);
    expect(matches({ gt: { field: 'items.qty', value: 5 } }, p)).toBe(false);
    expect(matches({ eq: { field: 'meta.lang', value: 'en' } }, { meta: [{ lang: 'fr' }, { lang: 'en' }] })).toBe(true);
    expect(matches({ eq: { field: 'meta.lang', value: 'en' } }, { 'meta.lang': 'en' })).toBe(false);
  });

  it('matches an array value when any element matches', () => {
    expect(matches({ eq: { field: 'tags', value: 'b' } }, p)).toBe(true);
    expect(matches({ ne: { field: 'tags', value: 'b' } }, p)).toBe(false);
    expect(matches({ in: { field: 'tags', value: ['z', 'a'] } }, p)).toBe(true);
    expect(matches({ eq: { field: 'tags', value: 'a' } }, { tags: [['a']] })).toBe(false);
    expect(matches({ and: [{ gt: { field: 'price', value: 1 } }, { lt: { field: 'price', value: 3 } }] }, { price: [0, 5] })).toBe(true);
  });

  it('never matches a positive condition on a missing field or a value of another type; ne and not match', () => {
    for (const payload of [{}, undefined, { color: null }, { color: 3 }, { color: { x: 'red' } }, { meta: 'en' }]) {
      expect(matches({ eq: { field: 'color', value: 'red' } }, payload)).toBe(false);
      expect(matches({ ne: { field: 'color', value: 'red' } }, payload)).toBe(true);
      expect(matches({ not: { eq: { field: 'color', value: 'red' } } }, payload)).toBe(true);
      expect(matches({ gt: { field: 'meta.year', value: -1e300 } }, payload)).toBe(false);
      expect(matches({ not: { lte: { field: 'meta.year', value: 0 } } }, payload)).toBe(true);
    }
    expect(matches({ gt: { field: 'price', value: 1 } }, { price: '5' })).toBe(false);
  });

  it('reads own properties only', () => {
    const fields: FilterableField[] = [
      { path: 'constructor', field_type: 'keyword' },
      { path: '__proto__.x', field_type: 'numeric' },
    ];
    const f1 = compileFilter({ ne: { field: 'constructor', value: 'x' } }, fields);
    expect(evaluate(f1, {})).toBe(true);
    const f2 = compileFilter({ gte: { field: '__proto__.x', value: 0 } }, fields);
    expect(evaluate(f2, {})).toBe(false);
    expect(evaluate(f2, JSON.parse('{"__proto__": {"x": 1}}'))).toBe(true);
  });

  it('matches unicode strings exactly, without normalisation', () => {
    expect(matches({ eq: { field: 'color', value: 'café' } }, { color: 'café' })).toBe(true);
    expect(matches({ eq: { field: 'color', value: 'café' } }, { color: 'cafe\u0301' })).toBe(false);
    expect(matches({ eq: { field: 'color', value: '🟥' } }, { color: ['🟦', '🟥'] })).toBe(true);
  });

  it('combines with and, or, not; empty and is true, empty or is false', () => {
    expect(matches({ and: [] }, p)).toBe(true);
    expect(matches({ or: [] }, p)).toBe(false);
    expect(matches({ and: [{ eq: { field: 'color', value: 'red' } }, { lt: { field: 'price', value: 5 } }] }, p)).toBe(false);
    expect(matches({ or: [{ eq: { field: 'color', value: 'blue' } }, { lt: { field: 'price', value: 50 } }] }, p)).toBe(true);
    expect(matches({ not: { or: [{ eq: { field: 'color', value: 'blue' } }] } }, p)).toBe(true);
    expect(leafCount(compileFilter({ and: [{ eq: { field: 'color', value: 'red' } }, { not: { gt: { field: 'price', value: 1 } } }] }, FIELDS))).toBe(2);
  });
});
