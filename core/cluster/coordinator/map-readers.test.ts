import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { SvcError } from '../../base/errors.js';
import { MapReaders, parseMapReader } from './map-readers.js';

describe('MapReaders', () => {
  it('names the routers behind a version until they say they route by it, and forgets the silent ones', () => {
    const r = new MapReaders(1000);
    r.heard({ id: 'a', version: 3 }, 0);
    r.heard({ id: 'b', version: -1 }, 100);
    expect(r.behind(4, 200).map((x) => [x.id, x.version, x.agoMs])).toEqual([['a', 3, 200], ['b', -1, 100]]);
    r.heard({ id: 'a', version: 4 }, 300);
    expect(r.behind(4, 400).map((x) => x.id)).toEqual(['b']);
    expect(r.count(400)).toBe(2);
    // b is not heard from again: after forgetMs it is no longer waited for.
    expect(r.behind(4, 1101).map((x) => x.id)).toEqual([]);
    expect(r.count(1101)).toBe(1);
    expect(r.behind(5, 1300).map((x) => x.id)).toEqual(['a']);
    expect(r.behind(5, 1301)).toEqual([]);
  });

  it('keeps at most `max` routers, forgetting the one heard from longest ago', () => {
    fc.assert(fc.property(fc.array(fc.integer({ min: 0, max: 20 }), { maxLength: 200 }), (ids) => {
      const r = new MapReaders(1e9, 5);
      const order: string[] = [];
      ids.forEach((n, t) => {
        const id = `r${n}`;
        r.heard({ id, version: 0 }, t);
        order.splice(order.indexOf(id) >>> 0, order.includes(id) ? 1 : 0);
        order.push(id);
      });
      const kept = order.slice(-5);
      expect(r.behind(1, ids.length).map((x) => x.id)).toEqual(kept);
    }));
  });

  it('reads a router\'s headers, none from a client that sends no id, and refuses malformed ones', () => {
    expect(parseMapReader(undefined, undefined)).toBeNull();
    expect(parseMapReader(undefined, '3')).toBeNull();
    expect(parseMapReader('9f3a_b-1', undefined)).toEqual({ id: '9f3a_b-1', version: -1 });
    expect(parseMapReader('9f3a', '0')).toEqual({ id: '9f3a', version: 0 });
    expect(parseMapReader('9f3a', '12')).toEqual({ id: '9f3a', version: 12 });
    for (const [id, version] of [['', '1'], ['a b', '1'], ['x'.repeat(65), '1'], [['a', 'b'], '1'], ['a', '-1'], ['a', '01'], ['a', '1.5'], ['a', ''], ['a', ['1', '2']], ['a', '99999999999999999']]) {
      let caught: unknown;
      try {
        parseMapReader(id, version);
      } catch (e) {
        caught = e;
      }
      expect(caught instanceof SvcError && caught.code === 'invalid_argument', JSON.stringify([id, version])).toBe(true);
    }
  });
});
