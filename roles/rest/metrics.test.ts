import fc from 'fast-check';
import { Counter, Histogram, Registry } from 'prom-client';
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
    // The bounded queue in front of the workers.
    Object.assign(pool, { inFlight: 7, waiting: 4, waited: 9, rejected: 2 });
    expect([await value('svc_search_worker_in_flight'), await value('svc_search_queue_waiting'), await value('svc_search_queue_waited_total'), await value('svc_search_queue_rejected_total')])
      .toEqual([7, 4, 9, 2]);
    // Workers that died, and those replaced.
    Object.assign(pool, { deaths: 5, replaced: 4 });
    expect([await value('svc_search_worker_deaths_total'), await value('svc_search_worker_replaced_total')]).toEqual([5, 4]);
    m.setSearchPoolSource(() => null); // a database opened without workers
    expect([await value('svc_search_workers'), await value('svc_search_worker_searches_total'), await value('svc_search_queue_waiting')]).toEqual([0, 12, 0]);
  });
});

describe('prom metrics: HTTP requests', () => {
  const BUCKETS = [0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 10];
  const lines = (text: string, prefix: string) => text.split('\n').filter((l) => l.startsWith(prefix)).sort();

  it('counts requests, errors and durations as prom-client\'s own counters and histogram would', async () => {
    await fc.assert(fc.asyncProperty(
      fc.array(fc.record({
        route: fc.constantFrom('/v1/collections', '/v1/collections/{name}/query', '/healthz'),
        method: fc.constantFrom('GET', 'POST'),
        status: fc.constantFrom(200, 201, 400, 404, 500),
        seconds: fc.oneof(fc.constantFrom(...BUCKETS, 0, 20), fc.double({ min: 0, max: 12, noNaN: true })),
      }), { maxLength: 60 }),
      fc.integer({ min: 0, max: 60 }),
      async (calls, scrapeAt) => {
        const m = createPromMetrics();
        const ref = new Registry();
        const labelNames = ['method', 'route'];
        const requests = new Counter({ name: 'svc_http_requests_total', help: 'x', labelNames, registers: [ref] });
        const errors = new Counter({ name: 'svc_http_request_errors_total', help: 'x', labelNames, registers: [ref] });
        const duration = new Histogram({ name: 'svc_http_request_duration_seconds', help: 'x', labelNames, buckets: BUCKETS, registers: [ref] });
        for (const [i, c] of calls.entries()) {
          if (i === scrapeAt) await m.registry.metrics(); // a scrape in between changes nothing
          const labels = { method: c.method, route: c.route };
          if (i % 2 === 0) m.requestFinished(labels, c.status, c.seconds);
          else m.recorder(labels)(c.status, c.seconds);
          requests.inc(labels);
          if (c.status >= 400) errors.inc(labels);
          duration.observe(labels, c.seconds);
        }
        const [ours, theirs] = [await m.registry.metrics(), await ref.metrics()];
        for (const family of ['svc_http_requests_total{', 'svc_http_request_errors_total{', 'svc_http_request_duration_seconds_']) {
          // Label order inside the braces may differ: compare each line's name, label set and value.
          const norm = (l: string) => {
            const mm = /^([^{]+)\{(.*)\} (.+)$/.exec(l)!;
            return `${mm[1]}{${mm[2].split(',').sort().join(',')}} ${Number(mm[3])}`;
          };
          expect(lines(ours, family).map(norm).sort()).toEqual(lines(theirs, family).map(norm).sort());
        }
      },
    ), { numRuns: 60 });
  });
});
