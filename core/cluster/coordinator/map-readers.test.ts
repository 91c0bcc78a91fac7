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

  it('keeps at most `max` routers, never dropping a live one: past that every move waits until they are forgotten', () => {
    const r = new MapReaders(100, 3);
    r.heard({ id: 'a', version: 1 }, 0);
    r.heard({ id: 'b', version: 1 }, 1);
    r.heard({ id: 'c', version: 1 }, 2);
    r.heard({ id: 'd', version: 1 }, 50); // not remembered: a, b and c are live
    r.heard({ id: 'a', version: 1 }, 60); // a known router is always heard
    const behind = r.behind(2, 70).map((x) => x.id);
    expect(behind.slice(0, 3)).toEqual(['b', 'c', 'a']);
    expect(behind[3]).toMatch(/not remembered/);
    expect(r.behind(1, 70).map((x) => x.id)).toEqual([expect.stringMatching(/not remembered/)]);
    // b and c past the forget time: d is remembered now; the overflow is waited for until it is too.
    r.heard({ id: 'd', version: 1 }, 140);
    expect(r.behind(1, 140).map((x) => x.id)).toEqual([expect.stringMatching(/not remembered/)]);
    expect(r.behind(1, 151)).toEqual([]);
    expect(r.count(151)).toBe(2);
  });

  it('takes a router on a later version than the map\'s for one behind (a coordinator whose state was reset)', () => {
    const r = new MapReaders(1000);
    r.heard({ id: 'a', version: 7 }, 0);
    expect(r.behind(2, 10).map((x) => [x.id, x.version])).toEqual([['a', 7]]);
    r.heard({ id: 'a', version: 2 }, 20);
    expect(r.behind(2, 30)).toEqual([]);
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
