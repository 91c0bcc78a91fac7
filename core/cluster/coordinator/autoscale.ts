import { standbyLeft, type CoordinatorState } from './state.js';

/**
 * The autoscale decision (spec, "Cluster membership"): on each sample, scale out by one shard when
 * autoscaling is enabled, some shard's point count is above the high-water mark (0 turns it off), the
 * cooldown since the last scale-out has passed, the map is below the shard cap, and a standby URL is
 * left. Scale-in never happens on its own: removing a shard is an operator's drain and delete.
 *
 * Pure: the samples, the time and the state come in, a decision with its reason goes out. The caller
 * (coordinator.ts) probes the standby and applies a scale-out.
 *
 * - A shard whose count could not be read is `unknown`: it never triggers a scale-out and is never
 *   taken for an empty one.
 * - Draining shards do not trigger: their points are leaving.
 * - The cap (SVC_AUTOSCALE_MAX_SHARDS) counts every shard in the map, draining ones included: they are
 *   machines still running.
 * - The cooldown runs from the last scale-out's wall-clock time, kept across restarts. A clock that went
 *   back before it keeps the cooldown running (it never shortens it).
 */
export interface AutoscaleOptions {
  enabled: boolean;
  /** SVC_AUTOSCALE_HIGH_WATER_POINTS; 0 disables. */
  highWaterPoints: number;
  /** SVC_AUTOSCALE_MAX_SHARDS; null: no cap but the standby pool. */
  maxShards: number | null;
  /** SVC_AUTOSCALE_COOLDOWN_SECS in ms. */
  cooldownMs: number;
  /** SVC_AUTOSCALE_STANDBY_URLS, normalized, in order. */
  standbyUrls: readonly string[];
}

/** One shard's point count at a sample, or why it is unknown. */
export type PointSample = { id: number; points: number } | { id: number; points: 'unknown'; error: string };

/** Why no scale-out happened. `standby_unreachable` is the coordinator's: the standby it would take did not answer. */
export type HoldWhy = 'disabled' | 'below_high_water' | 'no_samples' | 'max_shards' | 'cooldown' | 'no_standby' | 'standby_unreachable';

export type Decision =
  | { kind: 'scale_out'; standby: string; trigger: { id: number; points: number }; reason: string }
  | { kind: 'hold'; why: HoldWhy; reason: string };

export function decide(state: CoordinatorState, samples: readonly PointSample[], nowMs: number, opts: AutoscaleOptions): Decision {
  const hold = (why: HoldWhy, reason: string): Decision => ({ kind: 'hold', why, reason });
  if (!opts.enabled) return hold('disabled', 'autoscaling is off (SVC_AUTOSCALE_ENABLED=false)');
  if (opts.highWaterPoints === 0) return hold('disabled', 'autoscaling is off (SVC_AUTOSCALE_HIGH_WATER_POINTS=0)');

  const counted = new Set(state.shards.filter((s) => s.state !== 'draining').map((s) => s.id));
  let top: { id: number; points: number } | null = null;
  let unknown = 0;
  for (const s of samples) {
    if (!counted.has(s.id)) continue;
    if (s.points === 'unknown') {
      unknown++;
      continue;
    }
    if (top === null || s.points > top.points) top = { id: s.id, points: s.points };
  }
  const unknownNote = unknown > 0 ? `; ${unknown} shard(s) could not be counted` : '';
  if (top === null) {
    return hold('no_samples', unknown === 0 ? 'no shard to sample' : `none of the ${unknown} shard(s) could be counted: their points are unknown`);
  }
  const hw = opts.highWaterPoints;
  if (top.points <= hw) {
    return hold('below_high_water', `the fullest shard, ${top.id}, holds ${top.points} points, not above SVC_AUTOSCALE_HIGH_WATER_POINTS=${hw}${unknownNote}`);
  }
  const above = `shard ${top.id} holds ${top.points} points, above SVC_AUTOSCALE_HIGH_WATER_POINTS=${hw}`;
  if (opts.maxShards !== null && state.shards.length >= opts.maxShards) {
    return hold('max_shards', `${above}, but the map has ${state.shards.length} shards, SVC_AUTOSCALE_MAX_SHARDS=${opts.maxShards}`);
  }
  if (state.lastScaleOutMs !== null) {
    const since = nowMs - state.lastScaleOutMs;
    if (since < opts.cooldownMs) {
      const leftS = Math.ceil((state.lastScaleOutMs + opts.cooldownMs - nowMs) / 1000);
      return hold('cooldown', `${above}, but the last scale-out was ${Math.max(0, Math.floor(since / 1000))} s ago, within SVC_AUTOSCALE_COOLDOWN_SECS=${opts.cooldownMs / 1000} (${leftS} s left)`);
    }
  }
  const pool = standbyLeft(state, opts.standbyUrls);
  if (pool.length === 0) return hold('no_standby', `${above}, but no standby URL is left (SVC_AUTOSCALE_STANDBY_URLS)`);
  return { kind: 'scale_out', standby: pool[0], trigger: top, reason: `${above}: ${pool[0]} joins as shard ${state.nextId}` };
}
