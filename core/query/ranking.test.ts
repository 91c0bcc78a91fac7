import { describe, expect, it } from 'vitest';
import { checkTextStats, sumTextStats } from './ranking.js';

describe('text statistics from a caller', () => {
  it('takes well-formed statistics as they are', () => {
    const s = { docs: 10, total_length: 57, df: { 0: 3, 4294967295: 10 } };
    expect(checkTextStats(s, 64)).toEqual({ docs: 10, total_length: 57, df: { 0: 3, 4294967295: 10 } });
    expect(sumTextStats([s, { docs: 2, total_length: 3, df: { 0: 1 } }])).toEqual({ docs: 12, total_length: 60, df: { 0: 4, 4294967295: 10 } });
    // Documents from __svc_sparse__ are as long as their weights add up to: a fractional total.
    expect(checkTextStats({ docs: 2, total_length: 3.75, df: {} }, 2).total_length).toBe(3.75);
  });

  it('refuses anything else with invalid_argument', () => {
    const bad: unknown[] = [
      null, [], 'x', { docs: 1, total_length: 1 }, { docs: -1, total_length: 0, df: {} }, { docs: 1.5, total_length: 0, df: {} },
      { docs: 1, total_length: 0, df: [] }, { docs: 1, total_length: 0, df: { x: 1 } }, { docs: 1, total_length: 0, df: { '01': 1 } },
      { docs: 1, total_length: 0, df: { 4294967296: 1 } }, { docs: 1, total_length: 0, df: { 3: 2 } }, { docs: 1, total_length: 0, df: {}, extra: 1 },
      { docs: 5, total_length: 0, df: { 1: 1, 2: 1, 3: 1 } }, { docs: 1, total_length: -0.5, df: {} }, { docs: 1, total_length: '3', df: {} },
      { docs: 1, total_length: Infinity, df: {} }, { docs: 1, total_length: NaN, df: {} },
    ];
    for (const v of bad) expect(() => checkTextStats(v, 2), JSON.stringify(v)).toThrow(expect.objectContaining({ code: 'invalid_argument' }));
  });
});
