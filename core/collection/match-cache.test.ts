import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { isDeepStrictEqual } from 'node:util';
import fc from 'fast-check';
import { afterEach, describe, expect, it } from 'vitest';
import { compileFilter } from '../query/filter.js';
import { filterKey } from '../query/payload-index.js';
import { Database } from './database.js';
import { buildIndexInline } from './rebuild.js';

const KEY = new Uint8Array(32).fill(9);
const dirs: string[] = [];
afterEach(() => {
  for (const d of dirs.splice(0)) rmSync(d, { recursive: true, force: true });
});
async function open(): Promise<Database> {
  const d = mkdtempSync(join(tmpdir(), 'svc-match-cache-'));
  dirs.push(d);
  return Database.open({ dataDir: join(d, 'data'), masterKey: KEY, buildIndex: buildIndexInline });
}

describe('repeated filters (the match bitset is reused between writes)', () => {
  it('see every upsert, payload change and delete made between two identical filtered searches', async () => {
    const db = await open();
    await db.createCollection({ name: 'c', dim: 2, metric: 'l2', filterable: [{ path: 'n', field_type: 'numeric' }, { path: 't', field_type: 'keyword' }] });
    await db.upsert('c', { points: Array.from({ length: 40 }, (_, i) => ({ id: `p${i}`, vector: [i, 0], payload: { n: i, t: i % 2 ? 'odd' : 'even' } })) });
    const filters = [
      { lt: { field: 'n', value: 5 } },
      { not: { eq: { field: 't', value: 'odd' } } },
      { and: [{ gte: { field: 'n', value: 30 } }, { eq: { field: 't', value: 'odd' } }] },
    ];
    const ids = async (filter: object): Promise<string[]> => (await db.search('c', { vector: [0, 0], k: 100, filter })).hits.map((h) => h.id).sort();
    const model = new Map(Array.from({ length: 40 }, (_, i) => [`p${i}`, { n: i, t: i % 2 ? 'odd' : 'even' }]));
    const want = (f: number): string[] => [...model].filter(([, p]) => (f === 0 ? p.n < 5 : f === 1 ? p.t !== 'odd' : p.n >= 30 && p.t === 'odd')).map(([id]) => id).sort();
    for (let f = 0; f < filters.length; f++) expect(await ids(filters[f])).toEqual(want(f));
    // Each write changes what every filter matches; the same filters asked again must see it.
    const writes: (() => Promise<void>)[] = [
      async () => { await db.upsert('c', { points: [{ id: 'new', vector: [1, 1], payload: { n: 2, t: 'even' } }] }); model.set('new', { n: 2, t: 'even' }); },
      async () => { await db.upsert('c', { points: [{ id: 'p3', vector: [3, 0], payload: { n: 33, t: 'odd' } }] }); model.set('p3', { n: 33, t: 'odd' }); },
      async () => { await db.delete('c', 'p0'); model.delete('p0'); },
      async () => { await db.upsert('c', { points: [{ id: 'p31', vector: [31, 0], payload: { n: 1, t: 'even' } }] }); model.set('p31', { n: 1, t: 'even' }); },
    ];
    for (const w of writes) {
      await w();
      for (let f = 0; f < filters.length; f++) {
        expect(await ids(filters[f])).toEqual(want(f));
        expect(await ids(filters[f])).toEqual(want(f));
      }
    }
    await db.close();
  });

  it('filterKey is equal exactly for equal compiled filters', () => {
    const fields = [{ path: 'n', field_type: 'numeric' as const }, { path: 'a.b', field_type: 'keyword' as const }];
    const leaf = fc.oneof(
      fc.record({ op: fc.constantFrom('lt', 'lte', 'gt', 'gte', 'eq', 'ne'), v: fc.integer({ min: -3, max: 3 }) }).map(({ op, v }) => ({ [op]: { field: 'n', value: v } })),
      fc.record({ op: fc.constantFrom('eq', 'ne'), v: fc.constantFrom('x', 'true', true, false) }).map(({ op, v }) => ({ [op]: { field: 'a.b', value: v } })),
    );
    const filter = fc.letrec<{ f: object }>((tie) => ({
      f: fc.oneof({ depthSize: 'small', withCrossShrink: true }, leaf, fc.record({ not: tie('f') }), fc.record({ and: fc.array(tie('f'), { maxLength: 3 }) }), fc.record({ or: fc.array(tie('f'), { maxLength: 3 }) })),
    })).f;
    fc.assert(
      fc.property(filter, filter, (a, b) => {
        const ca = compileFilter(a, fields);
        const cb = compileFilter(b, fields);
        expect(filterKey(ca) === filterKey(cb)).toBe(isDeepStrictEqual(ca, cb));
        expect(filterKey(ca)).toBe(filterKey(compileFilter(structuredClone(a), fields)));
      }),
      { seed: 11, numRuns: 500 },
    );
    // One-sided ranges: an infinite bound is not confused with another one.
    const key = (f: object) => filterKey(compileFilter(f, fields));
    expect(key({ lt: { field: 'n', value: 1 } })).not.toBe(key({ lte: { field: 'n', value: 1 } }));
    expect(key({ gt: { field: 'n', value: 1 } })).not.toBe(key({ lt: { field: 'n', value: 1 } }));
  });
});
