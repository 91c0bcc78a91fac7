import { describe, expect, it } from 'vitest';
import type { SearchPoolStats } from '../../core/collection/search-pool.js';
import { parsePrometheus } from '../tui/client.js';
import { createPromMetrics } from './metrics.js';

describe('prom metrics: the search pool', () => {
  it('reports the workers alive and the pool\'s own counters as they stand at each scrape', async () => {
    const m = createPromMetrics();
    const value = async (name: string): Promise<number | undefined> => parsePrometheus(await m.registry.metrics()).get(name);
    expect(await value('svc_search_workers')).toBe(0); // no source: no pool
    const pool: SearchPoolStats = { workers: 2, inFlight: 0, dispatched: 5, overflow: 1, fallbacks: 0 };
    m.setSearchPoolSource(() => pool);
    expect([await value('svc_search_workers'), await value('svc_search_worker_searches_total'), await value('svc_search_worker_overflow_total')]).toEqual([2, 5, 1]);
    pool.dispatched = 12;
    pool.workers = 1;
    pool.fallbacks = 3;
    expect([await value('svc_search_workers'), await value('svc_search_worker_searches_total'), await value('svc_search_worker_fallbacks_total')]).toEqual([1, 12, 3]);
    m.setSearchPoolSource(() => null); // a database opened without workers
    expect([await value('svc_search_workers'), await value('svc_search_worker_searches_total')]).toEqual([0, 12]);
  });
});
