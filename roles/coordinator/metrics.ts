import { Counter, Gauge } from 'prom-client';
import type { HoldWhy } from '../../core/cluster/coordinator/autoscale.js';
import type { AutoscaleStep, Coordinator } from '../../core/cluster/coordinator/coordinator.js';
import { SHARD_STATES } from '../../core/cluster/routing/shard-map.js';
import type { PromMetrics } from '../rest/metrics.js';

/**
 * The coordinator's series, beside the HTTP ones of roles/rest/metrics.ts. Gauges are read from the
 * coordinator at scrape time; the decision counters are counted per autoscale step. /metrics is open, so
 * shards appear by id only, never by URL.
 */
export interface CoordinatorMetrics {
  step(step: AutoscaleStep): void;
  /** A rebalance batch committed. */
  moved(points: number, bytes: number): void;
  /** Whether a rebalance move runs now. */
  moving(now: boolean): void;
  moveFinished(): void;
}

export function coordinatorMetrics(metrics: PromMetrics, coordinator: Coordinator): CoordinatorMetrics {
  const registers = [metrics.registry];
  new Gauge({
    name: 'svc_cluster_map_version', help: 'Version of the shard map (grows on every membership change)', registers,
    collect() { this.set(coordinator.stats().version); },
  });
  new Gauge({
    name: 'svc_cluster_shards', help: 'Shards in the map, by state', labelNames: ['state'], registers,
    collect() {
      const s = coordinator.stats().shards;
      for (const state of SHARD_STATES) this.set({ state }, s[state]);
    },
  });
  new Gauge({
    name: 'svc_cluster_shard_points', help: 'Points on each shard at the last sample (absent while unknown)', labelNames: ['shard'], registers,
    collect() {
      this.reset();
      for (const s of coordinator.map().shards) if (s.points !== null) this.set({ shard: String(s.id) }, s.points);
    },
  });
  new Gauge({
    name: 'svc_cluster_shards_unknown', help: 'Shards whose point count could not be read at the last sample (or not sampled yet)', registers,
    collect() { this.set(coordinator.map().shards.filter((s) => s.points === null).length); },
  });
  new Gauge({
    name: 'svc_autoscale_standby_left', help: 'Standby URLs not yet taken into the map (SVC_AUTOSCALE_STANDBY_URLS)', registers,
    collect() { this.set(coordinator.stats().standbyLeft); },
  });
  new Gauge({
    name: 'svc_autoscale_last_scale_out_timestamp_seconds', help: 'Unix time of the last scale-out (0: never), kept across restarts', registers,
    collect() { this.set((coordinator.stats().lastScaleOutMs ?? 0) / 1000); },
  });
  new Gauge({
    name: 'svc_cluster_routers', help: 'Routers that read the shard map lately, by whether they route by its current version', labelNames: ['map'], registers,
    collect() {
      const behind = coordinator.routersBehind().length;
      this.set({ map: 'current' }, coordinator.routers() - behind);
      this.set({ map: 'behind' }, behind);
    },
  });
  const scaleOuts = new Counter({ name: 'svc_autoscale_scale_outs_total', help: 'Scale-outs this coordinator made since it started', registers });
  const decisions = new Counter({
    name: 'svc_autoscale_decisions_total', help: 'Autoscale decisions by outcome: scale_out, or the reason to hold', labelNames: ['decision'], registers,
  });
  const holds: HoldWhy[] = ['below_high_water', 'no_samples', 'max_shards', 'cooldown', 'no_standby', 'standby_unreachable'];
  for (const d of ['scale_out', ...holds]) decisions.inc({ decision: d }, 0);
  const movedPoints = new Counter({ name: 'svc_rebalance_moved_points_total', help: 'Points moved between shards by rebalance moves (committed batches)', registers });
  const movedBytes = new Counter({ name: 'svc_rebalance_moved_bytes_total', help: 'Bytes of vectors and payloads moved by rebalance moves (the sources\' estimate)', registers });
  const inProgress = new Gauge({ name: 'svc_rebalance_moves_in_progress', help: 'Rebalance moves running now (0 or 1)', registers });
  const finished = new Counter({ name: 'svc_rebalance_moves_total', help: 'Rebalance moves this coordinator finished since it started', registers });
  return {
    moved(points, bytes) {
      movedPoints.inc(points);
      movedBytes.inc(bytes);
    },
    moving(now) {
      inProgress.set(now ? 1 : 0);
    },
    moveFinished() {
      finished.inc();
    },
    step({ decision }) {
      if (decision.kind === 'scale_out') {
        scaleOuts.inc();
        decisions.inc({ decision: 'scale_out' });
      } else if (decision.why !== 'disabled') {
        decisions.inc({ decision: decision.why });
      }
    },
  };
}
