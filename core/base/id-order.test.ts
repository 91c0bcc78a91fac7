import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { after, compareFetchIds, compareIdsUtf8, FetchOrder } from './id-order.js';

describe('compareIdsUtf8', () => {
  it('is the order of the UTF-8 bytes', () => {
    fc.assert(fc.property(fc.string({ unit: 'grapheme' }), fc.string({ unit: 'grapheme' }), (a, b) => {
      expect(Math.sign(compareIdsUtf8(a, b))).toBe(Buffer.compare(Buffer.from(a), Buffer.from(b)));
    }), { numRuns: 5000 });
    expect(compareIdsUtf8('\uffee', '😀')).toBeLessThan(0);
    expect('\uffee' < '😀').toBe(false);
  });
});

describe('FetchOrder', () => {
  it('is the live ids sorted, whatever comes and goes between two reads', () => {
    // Few distinct ids: the same id added, removed and added again between two reads comes up often.
    const id = fc.string({ unit: 'grapheme', maxLength: 3 });
    const step = fc.oneof(fc.record({ t: fc.constant('add' as const), id }), fc.record({ t: fc.constant('remove' as const), id }), fc.constant({ t: 'read' as const }));
    fc.assert(fc.property(fc.array(step, { maxLength: 200 }), (steps) => {
      const live = new Set<string>();
      const order = new FetchOrder(() => live);
      for (const s of steps) {
        if (s.t === 'read') expect(order.ids()).toEqual([...live].sort(compareFetchIds));
        // As the collection calls it: add for an id not live, remove for one that is.
        else if (s.t === 'add' && !live.has(s.id)) {
          live.add(s.id);
          order.add(s.id);
        } else if (s.t === 'remove' && live.has(s.id)) {
          live.delete(s.id);
          order.remove(s.id);
        }
      }
      const ids = order.ids();
      expect(ids).toEqual([...live].sort(compareFetchIds));
      // A cursor: the first id after it, for every id and for one between.
      for (const [i, x] of ids.entries()) {
        expect(after(ids, x)).toBe(i + 1);
        expect(after(ids, `${x}\u0000`)).toBe(i + 1);
      }
      expect(after(ids, undefined)).toBe(0);
    }), { numRuns: 500 });
  });

  it('holds no id until it is asked for, and none after more changes than half its ids', () => {
    const live = new Set<string>();
    const order = new FetchOrder(() => live);
    const held = () => {
      const o = order as unknown as { sorted: string[] | null; added: Set<string>; removed: Set<string> };
      return (o.sorted?.length ?? 0) + o.added.size + o.removed.size;
    };
    const add = (id: string) => {
      live.add(id);
      order.add(id);
    };
    for (let i = 0; i < 5000; i++) add(`p${i}`);
    expect(held()).toBe(0);
    expect(order.ids().length).toBe(5000);
    for (let i = 5000; i < 7000; i++) add(`p${i}`);
    expect(held()).toBe(7000);
    // Past half of 5,000: let go, and sorted again when asked.
    for (let i = 7000; i < 7600; i++) add(`p${i}`);
    expect(held()).toBe(0);
    expect(order.ids()).toEqual([...live].sort(compareFetchIds));
  });
});
