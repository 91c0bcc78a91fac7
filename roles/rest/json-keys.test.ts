import fc from 'fast-check';
import Fastify from 'fastify';
import { describe, expect, it } from 'vitest';
import { checkJsonKeys } from '../../core/base/json-keys.js';

/**
 * REST refuses prototype-poisoning keys while parsing (fastify's JSON parser, as roles/rest/server.ts
 * configures it); every other transport hands the engine parsed values, which core/base/json-keys.ts
 * checks. The two must refuse exactly the same bodies.
 */
type Tree = { obj: [string, Tree][] } | { arr: Tree[] } | { leaf: null | number | string | boolean };

const keyArb = fc.constantFrom('__proto__', 'constructor', 'prototype', 'a', 'b');
const { tree } = fc.letrec<{ tree: Tree }>((tie) => ({
  tree: fc.oneof(
    { depthSize: 'small', withCrossShrink: true },
    fc.record({ leaf: fc.oneof(fc.constant(null), fc.integer(), fc.string({ maxLength: 3 }), fc.boolean()) }),
    fc.record({ obj: fc.array(fc.tuple(keyArb, tie('tree')), { maxLength: 3 }) }),
    fc.record({ arr: fc.array(tie('tree'), { maxLength: 3 }) }),
  ),
}));

/** The JSON text of a tree, written by hand so a `__proto__` key is text, never a JS assignment. */
function text(t: Tree): string {
  if ('leaf' in t) return JSON.stringify(t.leaf);
  if ('arr' in t) return `[${t.arr.map(text).join(',')}]`;
  return `{${t.obj.map(([k, v]) => `${JSON.stringify(k)}:${text(v)}`).join(',')}}`;
}

describe('one rule for prototype keys', () => {
  it('the engine check refuses exactly the JSON bodies the REST parser refuses', async () => {
    const app = Fastify();
    const parse = app.getDefaultJsonParser('error', 'error') as unknown as (req: unknown, body: string, done: (err: Error | null) => void) => void;
    const restRefuses = (body: string): boolean => {
      let refused = false;
      parse({}, body, (err) => { refused = err !== null; });
      return refused;
    };
    const engineRefuses = (body: string): boolean => {
      try {
        checkJsonKeys(JSON.parse(body), 'body');
        return false;
      } catch {
        return true;
      }
    };
    let refusals = 0;
    fc.assert(fc.property(fc.record({ obj: fc.array(fc.tuple(keyArb, tree), { maxLength: 4 }) }), (t) => {
      const body = text(t);
      const rest = restRefuses(body);
      if (rest) refusals++;
      expect(engineRefuses(body), body).toBe(rest);
    }), { numRuns: 1000 });
    expect(refusals).toBeGreaterThan(50);
    await app.close();
  });
});
