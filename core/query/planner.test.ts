import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { DEFAULT_PLANNER_OPTIONS, planFilteredSearch, widenedEf } from './planner.js';

const sizes = fc.record({
  live: fc.integer({ min: 1, max: 50_000_000 }),
  k: fc.integer({ min: 1, max: 10_000 }),
  ef: fc.integer({ min: 1, max: 4096 }),
});

describe('planFilteredSearch', () => {
  it('never picks HNSW for a more selective filter where a less selective one got the exact scan', () => {
    fc.assert(
      fc.property(sizes, fc.double({ min: 0, max: 1, noNaN: true }), fc.double({ min: 0, max: 1, noNaN: true }), fc.constantFrom(0, 0.25, 0.5, 1), ({ live, k, ef }, a, b, efWidenExponent) => {
        const fewer = Math.floor(Math.min(a, b) * live);
        const more = Math.floor(Math.max(a, b) * live);
        const selective = planFilteredSearch({ matches: fewer, live, k, ef }, { efWidenExponent });
        const broad = planFilteredSearch({ matches: more, live, k, ef }, { efWidenExponent });
        if (broad.kind === 'exact') expect(selective.kind).toBe('exact');
      }),
      { numRuns: 2000 },
    );
  });

  it('scans exactly when at most k points match, or fewer than the selectivity floor', () => {
    fc.assert(
      fc.property(sizes, fc.double({ min: 0, max: 1, noNaN: true }), ({ live, k, ef }, frac) => {
        const matches = Math.floor(frac * live);
        const plan = planFilteredSearch({ matches, live, k, ef });
        if (matches <= k || matches / live < DEFAULT_PLANNER_OPTIONS.hnswSelectivityMin) expect(plan.kind).toBe('exact');
        if (plan.kind === 'hnsw') expect(plan.hnswCost).toBeLessThan(plan.exactCost);
      }),
      { numRuns: 1000 },
    );
  });

  it('returns a widened ef of at least k on the HNSW path, growing as selectivity falls', () => {
    fc.assert(
      fc.property(sizes, fc.double({ min: 0.0001, max: 1, noNaN: true }), ({ live, k, ef }, frac) => {
        const plan = planFilteredSearch({ matches: Math.floor(frac * live), live, k, ef });
        if (plan.kind === 'hnsw') {
          expect(plan.ef).toBeGreaterThanOrEqual(k);
          expect(plan.ef).toBeGreaterThanOrEqual(Math.min(ef, DEFAULT_PLANNER_OPTIONS.efMax));
          expect(plan.ef).toBeLessThanOrEqual(Math.max(k, DEFAULT_PLANNER_OPTIONS.efMax));
        }
      }),
      { numRuns: 1000 },
    );
    expect(widenedEf(1, 10, 64, 4096)).toBe(64);
    expect(widenedEf(0.25, 10, 64, 4096)).toBe(128);
    expect(widenedEf(0.01, 10, 64, 4096)).toBe(640);
    expect(widenedEf(0.0001, 10, 64, 4096)).toBe(4096);
    expect(widenedEf(0.5, 5000, 64, 4096)).toBe(5000);
    fc.assert(
      fc.property(fc.double({ min: 0, max: 1, noNaN: true }), fc.double({ min: 0, max: 1, noNaN: true }), sizes, (a, b, { k, ef }) => {
        expect(widenedEf(Math.min(a, b), k, ef, 4096)).toBeGreaterThanOrEqual(widenedEf(Math.max(a, b), k, ef, 4096));
      }),
    );
  });

  it('picks HNSW for broad filters on large collections and the scan for selective ones', () => {
    const live = 1_000_000;
    const at = (sel: number) => planFilteredSearch({ matches: sel * live, live, k: 10, ef: 64 }).kind;
    expect(at(1)).toBe('hnsw');
    expect(at(0.5)).toBe('hnsw');
    expect(at(0.1)).toBe('hnsw');
    expect(at(0.01)).toBe('exact');
    expect(at(0.001)).toBe('exact');
    // A small collection is cheaper to scan even with a broad filter.
    expect(planFilteredSearch({ matches: 300, live: 1000, k: 10, ef: 64 }).kind).toBe('exact');
  });

  it('handles empty collections and filters that match nothing', () => {
    expect(planFilteredSearch({ matches: 0, live: 0, k: 10, ef: 64 }).kind).toBe('exact');
    expect(planFilteredSearch({ matches: 0, live: 1000, k: 10, ef: 64 }).kind).toBe('exact');
    // An estimate above the live count is clipped to it.
    expect(planFilteredSearch({ matches: 5e6, live: 1e6, k: 10, ef: 64 }).selectivity).toBe(1);
  });
});
