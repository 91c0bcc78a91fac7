import { describe, expect, it } from 'vitest';
import { ENGINE_LANES } from '../index/vector-store.js';
import { buildWorkersMax, defaultBuildWorkers, indexBuilderInWorkers } from './rebuild.js';

describe('build workers', () => {
  it('take every core but the search workers\', at least two on two cores, within the store\'s scratch lanes', () => {
    expect(defaultBuildWorkers(1, 0)).toBe(1);
    expect(defaultBuildWorkers(2, 0)).toBe(2);
    expect(defaultBuildWorkers(2, 1)).toBe(2);
    expect(ENGINE_LANES).toBe(16);
    expect(defaultBuildWorkers(8, 0)).toBe(8);
    expect(defaultBuildWorkers(16, 0)).toBe(15); // the main thread holds a lane too
    expect(defaultBuildWorkers(16, 4)).toBe(11);
    expect(defaultBuildWorkers(16, 8)).toBe(7);
    expect(defaultBuildWorkers(256, 0)).toBe(15);
    for (let cores = 1; cores <= 64; cores++) {
      for (let w = 0; w <= 8; w++) expect(1 + w + defaultBuildWorkers(cores, w)).toBeLessThanOrEqual(ENGINE_LANES);
    }
  });

  it('refuses a count that is not an integer from 1 to the limit', () => {
    for (const n of [0, -1, 1.5, buildWorkersMax(0) + 1]) expect(() => indexBuilderInWorkers(n)).toThrow(/build workers/);
    expect(() => indexBuilderInWorkers(8, 8)).toThrow(/beside 8 search workers/);
    expect(typeof indexBuilderInWorkers(3)).toBe('function');
  });
});
