import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { drain, EMPTY_STATE, parseRegister, register, remove, scaleOut, seedState, shardIdOf, standbyLeft, type CoordinatorState } from './state.js';

const seeded = (): CoordinatorState => seedState(['http://s0:6333', 'http://s1:6333'], new Map([[1, ['http://r1:6333']]]));
const code = (fn: () => unknown): string => {
  try {
    fn();
  } catch (e) {
    return (e as { code: string }).code;
  }
  return 'ok';
};

describe('coordinator state', () => {
  it('seeds SVC_CLUSTER_SHARDS as ids 0, 1, ... in list order, active, with their replicas', () => {
    const s = seeded();
    expect(s).toEqual({
      version: 1, nextId: 2, lastScaleOutMs: null, move: null, nextMove: 0,
      shards: [
        { id: 0, url: 'http://s0:6333', replicas: [], state: 'active' },
        { id: 1, url: 'http://s1:6333', replicas: ['http://r1:6333'], state: 'active' },
      ],
    });
    expect(seedState([])).toBe(EMPTY_STATE);
  });

  it('registers with the next id: joining beside active shards, active in an empty map', () => {
    const first = register(EMPTY_STATE, parseRegister({ url: 'HTTP://A:6333/' }));
    expect(first.id).toBe(0);
    expect(first.state.shards[0]).toEqual({ id: 0, url: 'http://a:6333', replicas: [], state: 'active' });
    const second = register(first.state, parseRegister({ url: 'http://b:6333', replicas: ['https://b2:443'] }));
    expect(second.id).toBe(1);
    expect(second.state.shards[1]).toEqual({ id: 1, url: 'http://b:6333', replicas: ['https://b2'], state: 'joining' });
    expect(second.state.version).toBe(first.state.version + 1);
    expect(EMPTY_STATE.shards).toHaveLength(0); // inputs untouched
  });

  it('refuses malformed bodies and URLs with invalid_argument, and a URL already in the map with already_exists', () => {
    const s = seeded();
    for (const body of [null, [], 'x', {}, { url: 'nope' }, { url: 'ftp://a:1' }, { url: 'http://a:1/path' }, { url: 'http://a:1?q' },
      { url: 'http://u:p@a:1' }, { url: 'http://a:1', extra: 1 }, { url: 'http://a:1', replicas: 'http://b:1' },
      { url: 'http://a:1', replicas: ['http://a:1'] }, { url: 'http://a:1', replicas: ['http://b:1', 'http://B:1/'] }, { url: 42 }]) {
      expect(code(() => register(s, parseRegister(body))), JSON.stringify(body)).toBe('invalid_argument');
    }
    expect(code(() => register(s, parseRegister({ url: 'http://S0:6333' })))).toBe('already_exists');
    expect(code(() => register(s, parseRegister({ url: 'http://r1:6333' })))).toBe('already_exists');
    expect(code(() => register(s, parseRegister({ url: 'http://new:1', replicas: ['http://s1:6333'] })))).toBe('already_exists');
    try {
      parseRegister({ url: 'http://user:secret@a:1' });
    } catch (e) {
      expect((e as Error).message).not.toContain('secret');
    }
  });

  it('drains: unknown id is not_found, a bad id invalid_argument, the last active shard is refused, twice is the same', () => {
    const s = seeded();
    expect(code(() => shardIdOf(s, '7'))).toBe('not_found');
    for (const bad of ['-1', 'x', '01', '1.0', '', '99999999999']) expect(code(() => shardIdOf(s, bad)), bad).toBe('invalid_argument');
    const d = drain(s, 0);
    expect(d.shards[0].state).toBe('draining');
    expect(d.version).toBe(s.version + 1);
    expect(drain(d, 0)).toBe(d);
    expect(code(() => drain(d, 1))).toBe('invalid_argument');
    // A joining shard does not own points yet: it cannot take the last active one's place.
    const j = register(d, parseRegister({ url: 'http://j:1' })).state;
    expect(j.shards[2].state).toBe('joining');
    expect(code(() => drain(j, 1))).toBe('invalid_argument');
    expect(drain(j, 2).shards[2].state).toBe('draining');
  });

  it('removes only a draining shard that holds no point (shard_not_drained otherwise); ids are never reused', () => {
    let s = seeded();
    expect(code(() => remove(s, 0, 0))).toBe('shard_not_drained');
    s = drain(s, 0);
    expect(code(() => remove(s, 0, 3))).toBe('shard_not_drained');
    expect(code(() => remove(s, 9, 0))).toBe('not_found');
    s = remove(s, 0, 0);
    expect(s.shards.map((x) => x.id)).toEqual([1]);
    const again = register(s, parseRegister({ url: 'http://s0:6333' }));
    expect(again.id).toBe(2);
  });

  it('a scale-out takes the first standby left and starts the cooldown', () => {
    const s = seeded();
    const pool = ['http://sb1:1', 'http://s1:6333', 'http://sb2:1'];
    expect(standbyLeft(s, pool)).toEqual(['http://sb1:1', 'http://sb2:1']);
    const { state, id } = scaleOut(s, 'http://sb1:1', 12_345);
    expect(id).toBe(2);
    expect(state.lastScaleOutMs).toBe(12_345);
    expect(state.shards[2]).toEqual({ id: 2, url: 'http://sb1:1', replicas: [], state: 'joining' });
    expect(standbyLeft(state, pool)).toEqual(['http://sb2:1']);
  });

  it('over any sequence of operations: ids are unique, below nextId, never reused; versions only grow', () => {
    const op = fc.oneof(
      fc.record({ k: fc.constant('register' as const), host: fc.integer({ min: 0, max: 6 }) }),
      fc.record({ k: fc.constant('drain' as const), id: fc.nat(8) }),
      fc.record({ k: fc.constant('remove' as const), id: fc.nat(8), points: fc.constantFrom(0, 0, 5) }),
    );
    fc.assert(fc.property(fc.array(op, { maxLength: 40 }), (ops) => {
      let s = EMPTY_STATE;
      const issued = new Set<number>();
      for (const o of ops) {
        const before = s;
        try {
          if (o.k === 'register') {
            const r = register(s, parseRegister({ url: `http://h${o.host}:1` }));
            expect(issued.has(r.id)).toBe(false);
            issued.add(r.id);
            s = r.state;
          } else if (o.k === 'drain') {
            s = drain(s, o.id);
          } else {
            s = remove(s, o.id, o.points);
          }
        } catch (e) {
          expect(['invalid_argument', 'not_found', 'already_exists', 'shard_not_drained']).toContain((e as { code: string }).code);
          expect(s).toBe(before);
        }
        expect(s.version).toBeGreaterThanOrEqual(before.version);
        expect(new Set(s.shards.map((x) => x.id)).size).toBe(s.shards.length);
        for (const x of s.shards) expect(x.id).toBeLessThan(s.nextId);
        // A map with shards always has an active one to own the points.
        if (s.shards.length > 0) expect(s.shards.some((x) => x.state === 'active')).toBe(true);
      }
    }), { numRuns: 500 });
  });
});
