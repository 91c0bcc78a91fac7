import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { SharedIds } from './shared-ids.js';

const enc = new TextEncoder();

describe('SharedIds (a collection\'s ids to slots, for request loops)', () => {
  it('finds every live id at its slot and no other, through inserts, updates, deletes and table growth; a reader over its handle agrees', () => {
    const op = fc.oneof(
      fc.record({ kind: fc.constant('put' as const), id: fc.integer({ min: 0, max: 200 }) }),
      fc.record({ kind: fc.constant('delete' as const), id: fc.integer({ min: 0, max: 200 }) }),
    );
    fc.assert(fc.property(fc.array(op, { maxLength: 400 }), (ops) => {
      // Slots are appended, as a collection's are; each slot's id record stays after the point goes.
      const records: (Uint8Array | null)[] = [];
      const ids = new SharedIds((slot) => records[slot] ?? null);
      const reader = new SharedIds((slot) => records[slot] ?? null, ids.h);
      const model = new Map<string, number>();
      for (const o of ops) {
        const id = `p${o.id}${'é'.repeat(o.id % 3)}`;
        const bytes = enc.encode(id);
        if (o.kind === 'put') {
          const slot = records.length;
          records.push(bytes);
          ids.set(bytes, slot);
          model.set(id, slot);
        } else {
          const slot = model.get(id);
          if (slot === undefined) continue;
          ids.remove(bytes, slot);
          model.delete(id);
        }
      }
      for (let i = 0; i <= 200; i++) {
        for (const id of [`p${i}${'é'.repeat(i % 3)}`, `p${i}x`]) {
          const want = model.get(id) ?? -1;
          expect(ids.find(enc.encode(id))).toBe(want);
          expect(reader.find(enc.encode(id))).toBe(want);
        }
      }
    }), { numRuns: 200 });
  });

  it('a removal naming an old slot leaves an id that moved to a new one', () => {
    const records = [enc.encode('a'), enc.encode('a')];
    const ids = new SharedIds((slot) => records[slot] ?? null);
    ids.set(records[0], 0);
    ids.set(records[1], 1);
    ids.remove(records[0], 0);
    expect(ids.find(enc.encode('a'))).toBe(1);
    ids.remove(records[1], 1);
    expect(ids.find(enc.encode('a'))).toBe(-1);
  });
});
