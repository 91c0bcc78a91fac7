import { Counter, Gauge, Histogram } from 'prom-client';
import type { PromMetrics } from '../rest/metrics.js';
import type { CallOutcome } from './http-shard.js';
import type { RouterMap } from './map.js';
import type { FallbackReason } from './replica-set.js';

/**
 * A router's series, beside the HTTP ones of roles/rest/metrics.ts: the map it routes by, each shard's
 * calls (how many, how they went, how long they took) and each read replica's. /metrics is open, so
 * shards appear by id and replicas by their index in the shard's list, never by URL.
 */
export interface RouterMetrics {
  /** One call to shard `id`'s primary ended. */
  shardCall(id: number, outcome: CallOutcome, seconds: number): void;
  /** One call to replica `replica` (its index) of shard `id` ended. */
  replicaCall(id: number, replica: number, outcome: CallOutcome, seconds: number): void;
  /** A read its replicas could not answer went to shard `id`'s primary. */
  fallback(id: number, reason: FallbackReason): void;
}

const BUCKETS = [0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10];

export function routerMetrics(metrics: PromMetrics, map: RouterMap): RouterMetrics {
  const registers = [metrics.registry];
  // A router on several request loops has these per loop; /metrics adds the loops up (roles/loops/),
  // so each gauge says how: the newest map and the most shards any loop routes by, and a replica
  // usable only where every loop uses it. Counters and histograms are summed.
  new Gauge({
    name: 'svc_cluster_map_version', help: 'Version of the shard map routed by (0: the router\'s own SVC_CLUSTER_SHARDS)', registers, aggregator: 'max',
    collect() { this.set(map.current().version); },
  });
  new Gauge({
    name: 'svc_router_shards', help: 'Shards requests are routed to', registers, aggregator: 'max',
    collect() { this.set(map.routed().length); },
  });
  const calls = new Counter({
    name: 'svc_router_shard_calls_total', help: 'Calls to each shard\'s primary, by outcome (ok; error: the shard refused the request; unavailable: it could not answer)',
    labelNames: ['shard', 'outcome'], registers,
  });
  const seconds = new Histogram({
    name: 'svc_router_shard_call_duration_seconds', help: 'Time of each call to a shard\'s primary, retries included', labelNames: ['shard'], registers,
    buckets: BUCKETS,
  });
  const replicaCalls = new Counter({
    name: 'svc_router_replica_calls_total', help: 'Reads sent to each read replica (by shard id and its index in the shard\'s replicas), by outcome',
    labelNames: ['shard', 'replica', 'outcome'], registers,
  });
  const replicaSeconds = new Histogram({
    name: 'svc_router_replica_call_duration_seconds', help: 'Time of each read sent to a read replica', labelNames: ['shard', 'replica'], registers,
    buckets: BUCKETS,
  });
  const fallbacks = new Counter({
    name: 'svc_router_replica_fallbacks_total',
    help: 'Reads that a shard\'s replicas could not answer (unavailable) or did not know of (not_found), answered by its primary',
    labelNames: ['shard', 'reason'], registers,
  });
  new Gauge({
    name: 'svc_router_replica_usable', help: 'Each read replica: 1 when reads go to it (ready, a follower, within SVC_CLUSTER_REPLICA_MAX_LAG_SECS)',
    labelNames: ['shard', 'replica'], registers, aggregator: 'min',
    collect() {
      this.reset();
      for (const r of map.replicas()) this.set({ shard: String(r.shard), replica: String(r.index) }, r.usable ? 1 : 0);
    },
  });
  return {
    shardCall(id, outcome, s) {
      const shard = String(id);
      calls.inc({ shard, outcome });
      seconds.observe({ shard }, s);
    },
    replicaCall(id, index, outcome, s) {
      const shard = String(id);
      const replica = String(index);
      replicaCalls.inc({ shard, replica, outcome });
      replicaSeconds.observe({ shard, replica }, s);
    },
    fallback(id, reason) {
      fallbacks.inc({ shard: String(id), reason });
    },
  };
}
