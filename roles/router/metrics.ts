import { Counter, Gauge, Histogram } from 'prom-client';
import type { PromMetrics } from '../rest/metrics.js';
import type { CallOutcome } from './http-shard.js';
import type { RouterMap } from './map.js';

/**
 * A router's series, beside the HTTP ones of roles/rest/metrics.ts: the map it routes by, and each
 * shard's calls (how many, how they went, how long they took). /metrics is open, so shards appear by id
 * only, never by URL.
 */
export interface RouterMetrics {
  /** One call to shard `id` ended. */
  shardCall(id: number, outcome: CallOutcome, seconds: number): void;
}

export function routerMetrics(metrics: PromMetrics, map: RouterMap): RouterMetrics {
  const registers = [metrics.registry];
  new Gauge({
    name: 'svc_cluster_map_version', help: 'Version of the shard map routed by (0: the router\'s own SVC_CLUSTER_SHARDS)', registers,
    collect() { this.set(map.current().version); },
  });
  new Gauge({
    name: 'svc_router_shards', help: 'Shards requests are routed to', registers,
    collect() { this.set(map.routed().length); },
  });
  const calls = new Counter({
    name: 'svc_router_shard_calls_total', help: 'Calls to each shard, by outcome (ok; error: the shard refused the request; unavailable: it could not answer)',
    labelNames: ['shard', 'outcome'], registers,
  });
  const seconds = new Histogram({
    name: 'svc_router_shard_call_duration_seconds', help: 'Time of each call to a shard, retries included', labelNames: ['shard'], registers,
    buckets: [0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10],
  });
  return {
    shardCall(id, outcome, s) {
      const shard = String(id);
      calls.inc({ shard, outcome });
      seconds.observe({ shard }, s);
    },
  };
}
