import { Counter, Gauge, Histogram, Registry } from 'prom-client';
import type { SearchPoolStats } from '../../core/collection/search-pool.js';
import type { DatabaseStats } from '../../core/service/api.js';
import type { Metrics } from '../../core/service/metrics.js';

/**
 * prom-client implementation of core/service/metrics.ts, plus engine gauges read at scrape time.
 * The engine gauges are totals without collection labels: /metrics is open, so it names no collection.
 */
export interface PromMetrics extends Metrics {
  readonly registry: Registry;
  /** Where the engine gauges come from; null until the database is open. */
  setStatsSource(source: (() => Promise<DatabaseStats>) | null): void;
  /** The search pool's counters (Database.searchPoolStats); null, or a source answering null, without a pool. */
  setSearchPoolSource(source: (() => SearchPoolStats | null) | null): void;
}

export function createPromMetrics(): PromMetrics {
  const registry = new Registry();
  const labelNames = ['method', 'route'] as const;
  const requests = new Counter({ name: 'svc_http_requests_total', help: 'HTTP requests by method and route template', labelNames, registers: [registry] });
  const errors = new Counter({ name: 'svc_http_request_errors_total', help: 'HTTP responses with status >= 400', labelNames, registers: [registry] });
  const duration = new Histogram({
    name: 'svc_http_request_duration_seconds', help: 'HTTP request duration', labelNames, registers: [registry],
    buckets: [0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 10],
  });
  // The labelled series of each method and route template, looked up once (routes are a fixed set:
  // templates, never concrete paths).
  const children = new Map<string, { requests: { inc(): void }; errors: { inc(): void }; duration: { observe(v: number): void } }>();
  const authFailures = new Counter({ name: 'svc_auth_failures_total', help: 'Rejected authentications', registers: [registry] });
  const rateLimited = new Counter({ name: 'svc_rate_limited_total', help: 'Requests refused by the per-key rate limit', registers: [registry] });

  let source: (() => Promise<DatabaseStats>) | null = null;
  let last: DatabaseStats | null = null;
  let pending: Promise<DatabaseStats | null> | null = null;
  // One engine read serves every gauge of a scrape.
  const refresh = (): Promise<DatabaseStats | null> => {
    if (source === null) return Promise.resolve(null);
    pending ??= source().then((s) => (last = s), () => last).finally(() => { setTimeout(() => { pending = null; }, 100).unref(); });
    return pending;
  };
  const gauge = (name: string, help: string, read: (s: DatabaseStats) => number): void => {
    new Gauge({
      name, help, registers: [registry],
      async collect() { const s = await refresh(); this.set(s === null ? 0 : read(s)); },
    });
  };
  gauge('svc_collections', 'Collections in the database', (s) => s.collections);
  gauge('svc_points', 'Points in all collections', (s) => s.total_points);
  gauge('svc_collections_stale', 'Collections whose index is stale (a rebuild pending or running)', (s) => s.per_collection.filter((c) => c.index_state === 'stale').length);
  gauge('svc_vector_bytes', 'Bytes of vectors in memory, all collections', (s) => s.per_collection.reduce((n, c) => n + c.vector_bytes, 0));
  gauge('svc_graph_bytes', 'Bytes of search graphs in memory, all collections', (s) => s.per_collection.reduce((n, c) => n + c.graph_bytes, 0));
  gauge('svc_disk_bytes', 'Bytes of the data directory at the last manifest', (s) => s.snapshot_status.disk_bytes);
  gauge('svc_manifest_version', 'Manifest version', (s) => s.snapshot_status.manifest_version);

  let poolSource: (() => SearchPoolStats | null) | null = null;
  new Gauge({
    name: 'svc_search_workers', help: 'Search worker threads alive (SVC_SEARCH_WORKERS)', registers: [registry],
    collect() { this.set(poolSource?.()?.workers ?? 0); },
  });
  // Counters the pool keeps itself, brought up to its figures at each scrape.
  const poolCounter = (name: string, help: string, read: (s: SearchPoolStats) => number): void => {
    let seen = 0;
    new Counter({
      name, help, registers: [registry],
      collect() {
        const s = poolSource?.();
        const now = s ? read(s) : seen;
        if (now > seen) this.inc(now - seen);
        seen = now;
      },
    });
  };
  poolCounter('svc_search_worker_searches_total', 'Dense searches a search worker answered', (s) => s.dispatched);
  poolCounter('svc_search_worker_overflow_total', 'Dense searches run on the event loop because every worker was full', (s) => s.overflow);
  poolCounter('svc_search_worker_fallbacks_total', 'Dense searches answered on the event loop because their worker died', (s) => s.fallbacks);

  return {
    registry,
    setStatsSource(s) { source = s; },
    setSearchPoolSource(s) { poolSource = s; },
    requestFinished(l, status, seconds) {
      const key = `${l.method} ${l.route}`;
      let c = children.get(key);
      if (c === undefined) {
        const labels = { method: l.method, route: l.route };
        c = { requests: requests.labels(labels), errors: errors.labels(labels), duration: duration.labels(labels) };
        children.set(key, c);
      }
      c.requests.inc();
      if (status >= 400) c.errors.inc();
      c.duration.observe(seconds);
    },
    authFailure() { authFailures.inc(); },
    rateLimited() { rateLimited.inc(); },
  };
}
