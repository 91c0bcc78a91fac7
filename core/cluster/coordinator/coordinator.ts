import type { Clock } from '../../base/clock.js';
import { SvcError, toSvcError } from '../../base/errors.js';
import type { ShardClient } from '../routing/shard-client.js';
import type { ShardMap, ShardState } from '../routing/shard-map.js';
import { decide, type AutoscaleOptions, type Decision, type PointSample } from './autoscale.js';
import {
  drain, parseRegister, register, remove, scaleOut, seedState, shardIdOf, standbyLeft, type CoordinatorState,
} from './state.js';
import { MapReaders, type MapReader, type ReaderBehind } from './map-readers.js';
import { finishMove, startMove, type MoveRecord } from './rebalance.js';
import type { CoordinatorStore } from './store.js';

/**
 * The coordinator: the shard map's one writer. It serves the membership API of CONTRACT.md section 11
 * (core/service/cluster.ts puts auth and audit around it) and runs the autoscale step that roles/ calls
 * on an interval. Every change is computed by a pure transition (state.ts), saved, and only then made
 * visible and acknowledged; changes run one at a time, so ids are issued in order and never twice.
 */
export interface CoordinatorOptions {
  store: CoordinatorStore;
  client: ShardClient;
  clock: Clock;
  /** SVC_CLUSTER_SHARDS, normalized: the map of a coordinator that has no saved state. */
  seedUrls: readonly string[];
  /** SVC_CLUSTER_REPLICAS by shard index. */
  seedReplicas?: ReadonlyMap<number, readonly string[]>;
  autoscale: AutoscaleOptions;
  /** Most ms a shard may take to answer a count or a readiness probe. */
  probeTimeoutMs?: number;
  /** How long a router that stopped reading the map is still waited for (map-readers.ts); default 30 s. */
  readerForgetMs?: number;
}

/** The membership API, one method per route (CONTRACT.md section 11). */
export interface MembershipApi {
  /** `reader`: the router that asks, and the version it routes by (map-readers.ts). */
  map(reader?: MapReader | null): ShardMap;
  register(body: unknown): Promise<{ id: number; version: number }>;
  drain(id: string): Promise<{ id: number; state: 'draining'; version: number }>;
  remove(id: string): Promise<{ removed: true; version: number }>;
}

/** What one autoscale step saw and did. `id`: the shard a scale-out added. */
export interface AutoscaleStep {
  decision: Decision;
  samples: PointSample[];
  id?: number;
  version: number;
}

export interface CoordinatorStats {
  version: number;
  shards: Record<ShardState, number>;
  standbyLeft: number;
  lastScaleOutMs: number | null;
  scaleOuts: number;
}

/**
 * Why a move the map needs has not started (Coordinator.beginMove): its map version is newer than the
 * settle time, this process has not run long enough to have heard every live router, or routers that
 * were heard from route by another version. `forMs`: how long at most (null: until they read again).
 */
export interface MoveWait {
  why: 'settle' | 'started' | 'routers';
  forMs: number | null;
  version: number;
  routers: ReaderBehind[];
}

export const PROBE_TIMEOUT_MS_DEFAULT = 5000;
export const READER_FORGET_MS_DEFAULT = 30_000;
/** Shards counted at once in a sample: the map may hold SHARDS_MAX of them. */
const SAMPLE_CONCURRENCY = 16;

export class Coordinator implements MembershipApi {
  private state: CoordinatorState;
  /** The last sample of each shard: a count, or null when unknown. Not state: never saved. */
  private readonly points = new Map<number, number | null>();
  private queue: Promise<unknown> = Promise.resolve();
  private scaleOuts = 0;
  /** The routers that read the map lately. Not state: a restarted coordinator hears them again. */
  private readonly readers: MapReaders;
  private readonly readerForgetMs: number;
  /** When this process opened the state, and when the map's version last changed (monotonic ms). */
  private readonly openedAtMs: number;
  private versionAtMs: number;

  private constructor(private readonly opts: CoordinatorOptions, state: CoordinatorState, readonly startedFrom: 'saved' | 'seed' | 'empty') {
    this.state = state;
    this.readerForgetMs = opts.readerForgetMs ?? READER_FORGET_MS_DEFAULT;
    this.readers = new MapReaders(this.readerForgetMs);
    this.openedAtMs = opts.clock.monotonicMs();
    this.versionAtMs = this.openedAtMs;
  }

  /**
   * The saved state, or a new one seeded from SVC_CLUSTER_SHARDS (saved at once, so the ids it issued
   * hold from now on). A saved state wins over the variable: `startedFrom` says which one was used.
   */
  static async open(opts: CoordinatorOptions): Promise<Coordinator> {
    const saved = await opts.store.load();
    if (saved !== null) return new Coordinator(opts, saved, 'saved');
    const seeded = seedState(opts.seedUrls, opts.seedReplicas);
    if (seeded.version > 0) await opts.store.save(seeded);
    return new Coordinator(opts, seeded, seeded.version > 0 ? 'seed' : 'empty');
  }

  /** The current state (tests and the roles' startup log). */
  get current(): CoordinatorState {
    return this.state;
  }

  map(reader: MapReader | null = null): ShardMap {
    if (reader !== null) this.readers.heard(reader, this.opts.clock.monotonicMs());
    const s = this.state;
    return {
      version: s.version,
      shards: s.shards.map((x) => ({
        id: x.id, url: x.url, replicas: [...x.replicas], state: x.state, points: this.points.get(x.id) ?? null, ...(x.moved === true ? { moved: true } : {}),
      })),
      standby: standbyLeft(s, this.opts.autoscale.standbyUrls),
    };
  }

  stats(): CoordinatorStats {
    const shards: Record<ShardState, number> = { active: 0, joining: 0, draining: 0 };
    for (const s of this.state.shards) shards[s.state]++;
    return {
      version: this.state.version, shards, standbyLeft: standbyLeft(this.state, this.opts.autoscale.standbyUrls).length,
      lastScaleOutMs: this.state.lastScaleOutMs, scaleOuts: this.scaleOuts,
    };
  }

  async register(body: unknown): Promise<{ id: number; version: number }> {
    const req = parseRegister(body);
    return this.exclusive(async () => {
      const { state, id } = register(this.state, req);
      await this.commit(state);
      return { id, version: state.version };
    });
  }

  drain(idText: string): Promise<{ id: number; state: 'draining'; version: number }> {
    return this.exclusive(async () => {
      const { id } = shardIdOf(this.state, idText);
      const next = drain(this.state, id);
      if (next !== this.state) await this.commit(next);
      return { id, state: 'draining' as const, version: next.version };
    });
  }

  /** Counts the shard's points now (not from the last sample) before it may go. */
  remove(idText: string): Promise<{ removed: true; version: number }> {
    return this.exclusive(async () => {
      const shard = shardIdOf(this.state, idText);
      // Not draining: refused before asking the shard anything.
      const pointsNow = shard.state === 'draining' ? await this.count(shard.id, shard.url) : 0;
      const next = remove(this.state, shard.id, pointsNow);
      await this.commit(next);
      this.points.delete(shard.id);
      return { removed: true as const, version: next.version };
    });
  }

  /** Each shard's point count now; a shard that does not answer is `unknown`, and so is its map entry. */
  async sample(): Promise<PointSample[]> {
    const shards = this.state.shards;
    const out: PointSample[] = new Array(shards.length);
    let next = 0;
    const worker = async (): Promise<void> => {
      while (next < shards.length) {
        const i = next++;
        const { id, url } = shards[i];
        try {
          const points = await this.count(id, url);
          out[i] = { id, points };
          this.points.set(id, points);
        } catch (e) {
          out[i] = { id, points: 'unknown', error: toSvcError(e).message };
          this.points.set(id, null);
        }
      }
    };
    await Promise.all(Array.from({ length: Math.min(SAMPLE_CONCURRENCY, shards.length) }, worker));
    return out;
  }

  /**
   * One autoscale step: sample, decide (autoscale.ts), and on a scale-out check that the standby is
   * ready, then add it as a joining shard. Its points arrive with the rebalance (beginMove, endMove).
   */
  async autoscale(): Promise<AutoscaleStep> {
    const samples = await this.sample();
    return this.exclusive(async () => {
      const decision = decide(this.state, samples, this.opts.clock.nowMs(), this.opts.autoscale);
      if (decision.kind !== 'scale_out') return { decision, samples, version: this.state.version };
      try {
        await this.opts.client.ready(decision.standby, AbortSignal.timeout(this.probeTimeoutMs));
      } catch (e) {
        const why = toSvcError(e).message;
        return {
          decision: {
            kind: 'hold', why: 'standby_unreachable',
            reason: `shard ${decision.trigger.id} holds ${decision.trigger.points} points, above SVC_AUTOSCALE_HIGH_WATER_POINTS=${this.opts.autoscale.highWaterPoints}, `
              + `but the standby ${decision.standby} is not ready (${why}); it is tried again at the next sample`,
          },
          samples, version: this.state.version,
        } satisfies AutoscaleStep;
      }
      const { state, id } = scaleOut(this.state, decision.standby, this.opts.clock.nowMs());
      await this.commit(state);
      this.scaleOuts++;
      return { decision, samples, id, version: state.version };
    });
  }

  /**
   * The rebalance move to run: the saved one (a restarted coordinator resumes it), or a new one the map
   * needs (rebalance.ts), saved before it starts; null when there is nothing to move.
   *
   * Routers first (docs/cluster.md, Rebalancing): a new move starts only once the map's version has been
   * served `settleMs`, this process has run long enough to have heard every live router (their forget
   * time), and every router heard from lately routes by that version; else `waiting` says for what.
   * Checked in the same turn as the move is saved: no change of the map can come between.
   */
  beginMove(settleMs = 0): Promise<{ move: MoveRecord; started: boolean } | { waiting: MoveWait } | null> {
    return this.exclusive(async () => {
      if (this.state.move !== null) return { move: this.state.move, started: false };
      const r = startMove(this.state);
      if (r === null) return null;
      const now = this.opts.clock.monotonicMs();
      if (now - this.versionAtMs < settleMs) return { waiting: { why: 'settle', forMs: settleMs - (now - this.versionAtMs), version: this.state.version, routers: [] } };
      if (now - this.openedAtMs < this.readerForgetMs) {
        return { waiting: { why: 'started', forMs: this.readerForgetMs - (now - this.openedAtMs), version: this.state.version, routers: [] } };
      }
      const behind = this.routersBehind();
      if (behind.length > 0) return { waiting: { why: 'routers', forMs: null, version: this.state.version, routers: behind } };
      await this.commit(r.state);
      return { move: r.move, started: true };
    });
  }

  /** Every source of the move answered done: joining shards turn active, drained ones are `moved` (a new map version). */
  endMove(id: string): Promise<number> {
    return this.exclusive(async () => {
      const next = finishMove(this.state, id);
      if (next !== this.state) await this.commit(next);
      return next.version;
    });
  }

  /**
   * The routers heard from lately that do not route by the current map version yet: a move waits for
   * them (roles/coordinator/rebalance-loop.ts).
   */
  routersBehind(): ReaderBehind[] {
    return this.readers.behind(this.state.version, this.opts.clock.monotonicMs());
  }

  /** Routers heard from lately. */
  routers(): number {
    return this.readers.count(this.opts.clock.monotonicMs());
  }

  /** A shard's URL by id, or undefined once it left the map. */
  urlOf(id: number): string | undefined {
    return this.state.shards.find((s) => s.id === id)?.url;
  }

  close(): Promise<void> {
    return this.exclusive(() => this.opts.store.close());
  }

  private get probeTimeoutMs(): number {
    return this.opts.probeTimeoutMs ?? PROBE_TIMEOUT_MS_DEFAULT;
  }

  private async count(id: number, url: string): Promise<number> {
    try {
      return await this.opts.client.pointCount(url, AbortSignal.timeout(this.probeTimeoutMs));
    } catch (e) {
      throw new SvcError('unavailable', `shard ${id} (${url}) could not be counted: ${toSvcError(e).message}`, { shard: id });
    }
  }

  /** Saves, then shows: a change nobody could save is not made, and the API says so. */
  private async commit(next: CoordinatorState): Promise<void> {
    try {
      await this.opts.store.save(next);
    } catch (e) {
      throw new SvcError('unavailable', `the coordinator could not save its state, so nothing changed: ${e instanceof Error ? e.message : String(e)}`);
    }
    if (next.version !== this.state.version) this.versionAtMs = this.opts.clock.monotonicMs();
    this.state = next;
  }

  /** Runs changes one at a time, in call order; a failure fails only its own call. */
  private exclusive<T>(fn: () => Promise<T>): Promise<T> {
    const run = this.queue.then(fn, fn);
    this.queue = run.catch(() => undefined);
    return run;
  }
}
