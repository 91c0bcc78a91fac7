import { describe, expect, it } from 'vitest';
import { BUILD_WORKERS_LIMIT, defaultBuildWorkers, indexBuilderInWorkers } from './rebuild.js';

describe('build workers', () => {
  it('take every core but the search workers\', at least two on two cores, at most the limit', () => {
    expect(defaultBuildWorkers(1, 0)).toBe(1);
    expect(defaultBuildWorkers(2, 0)).toBe(2);
    expect(defaultBuildWorkers(2, 1)).toBe(2);
    expect(defaultBuildWorkers(16, 0)).toBe(16);
    expect(defaultBuildWorkers(16, 4)).toBe(12);
    expect(defaultBuildWorkers(16, 15)).toBe(2);
    expect(defaultBuildWorkers(256, 0)).toBe(BUILD_WORKERS_LIMIT);
  });

  it('refuses a count that is not an integer from 1 to the limit', () => {
    for (const n of [0, -1, 1.5, BUILD_WORKERS_LIMIT + 1]) expect(() => indexBuilderInWorkers(n)).toThrow(/build workers/);
    expect(typeof indexBuilderInWorkers(3)).toBe('function');
  });
});
