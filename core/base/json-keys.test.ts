import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { checkJsonKeys } from './json-keys.js';

const refused = (v: unknown): string | null => {
  try {
    checkJsonKeys(v, 'payload');
    return null;
  } catch (e) {
    expect(e).toMatchObject({ code: 'invalid_argument' });
    return (e as Error).message;
  }
};

describe('checkJsonKeys', () => {
  it('refuses __proto__ and constructor.prototype anywhere, naming where', () => {
    expect(refused(JSON.parse('{"__proto__":{"admin":true}}'))).toMatch(/^payload has the key "__proto__"/);
    expect(refused(JSON.parse('{"a":[1,{"b":{"__proto__":1}}]}'))).toMatch(/^payload\.a\[1\]\.b has the key "__proto__"/);
    expect(refused(JSON.parse('{"constructor":{"prototype":{"admin":true}}}'))).toMatch(/"constructor" holding "prototype"/);
    expect(refused(JSON.parse('[{"x":{"constructor":{"prototype":null}}}]'))).toMatch(/^payload\[0\]\.x has the key "constructor"/);
  });

  it('accepts what secure-json-parse accepts: constructor without prototype, prototype alone', () => {
    expect(refused({ constructor: 'x', prototype: { a: 1 }, nested: { constructor: { a: 1 } }, list: [1, 'a', null] })).toBeNull();
    expect(refused(JSON.parse('{"constructor":{"prototype":1}}'))).not.toBeNull();
  });

  it('finds the key at any depth without overflowing the stack', () => {
    let deep: unknown = JSON.parse('{"__proto__":1}');
    for (let i = 0; i < 100_000; i++) deep = i % 2 === 0 ? [deep] : { a: deep };
    expect(refused(deep)).toMatch(/__proto__/);
  });

  it('never refuses a value without those keys', () => {
    fc.assert(fc.property(fc.jsonValue(), (v) => {
      fc.pre(!JSON.stringify(v).includes('"__proto__"') && !JSON.stringify(v).includes('"constructor"'));
      expect(refused(v)).toBeNull();
    }));
  });
});
