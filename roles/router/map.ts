import { randomBytes } from 'node:crypto';
import type { Dispatcher } from 'undici';
import { ROUTER_ID_HEADER, ROUTER_MAP_VERSION_HEADER } from '../../core/cluster/coordinator/map-readers.js';
import { parseShardMap, presentShards, routedShards, type ShardMap } from '../../core/cluster/routing/shard-map.js';
import type { ShardRef } from '../../core/engine/shard.js';
import type { ServiceLogger } from '../../core/service/log.js';
import type { HttpShard } from './http-shard.js';
import { ReplicaSet, type FallbackReason, type Replica } from './replica-set.js';

/**
 * The map a router routes by (CONTRACT.md section 11): its own SVC_CLUSTER_SHARDS and
 * SVC_CLUSTER_REPLICAS (ids 0, 1, 2, ... in list order, all active, version 0) until the coordinator of
 * SVC_COORDINATOR_URL answers, then the coordinator's, each time its version changes. The engine reads
 * `routed()` on every request, so a new map applies at once; a shard kept across maps (same id, same
 * URL) keeps its client, and a replica kept (same shard id, same URL) keeps its client and its health.
 * A shard with replicas is a ReplicaSet (replica-set.ts) whose primary is also its ref's `primary`.
 */
export type MapSource = 'list' | 'coordinator';

export interface RouterMapOptions {
  /** A client of a shard's primary (`replica` null) or of its replica at that index. */
  client(id: number, url: string, replica: number | null): HttpShard;
  /** SVC_CLUSTER_TIMEOUT_SECS in ms: one read over a shard's copies. */
  timeoutMs: number;
  onFallback?(shard: number, reason: FallbackReason): void;
}

export class RouterMap {
  private map: ShardMap = { version: 0, shards: [], standby: [] };
  private from: MapSource | null = null;
  private refs: ShardRef[] = [];
  private presentRefs: ShardRef[] = [];
  private isMoving = false;
  private primaries: HttpShard[] = [];
  private clients = new Map<string, HttpShard>();
  private replicaStates = new Map<string, Replica>();
  private replicaList: Replica[] = [];

  constructor(private readonly opts: RouterMapOptions, seed: readonly string[], seedReplicas: readonly (readonly string[])[] = []) {
    if (seed.length > 0) {
      this.adopt({
        version: 0, shards: seed.map((url, id) => ({ id, url, replicas: [...(seedReplicas[id] ?? [])], state: 'active', points: null })), standby: [],
      }, 'list');
    }
  }

  /** The map routed by now (`GET /cluster/map` on the router answers it). */
  current(): ShardMap {
    return this.map;
  }

  /** Where the map came from; null before there is one (a router with only SVC_COORDINATOR_URL). */
  source(): MapSource | null {
    return this.from;
  }

  /** The shards requests go to, by id. */
  routed(): readonly ShardRef[] {
    return this.refs;
  }

  /** Every shard that may hold points (joining ones too): scatter reads and collection changes. */
  present(): readonly ShardRef[] {
    return this.presentRefs;
  }

  /** Whether a rebalance move runs: a joining shard, or a draining one not yet moved. */
  moving(): boolean {
    return this.isMoving;
  }

  /** The clients of the routed shards' primaries (for readiness). */
  routedClients(): HttpShard[] {
    return this.primaries;
  }

  /** The read replicas of the routed shards (probed, and shown in metrics). */
  replicas(): readonly Replica[] {
    return this.replicaList;
  }

  /** Routes by `map` from now on. */
  adopt(map: ShardMap, from: MapSource): void {
    const clients = new Map<string, HttpShard>();
    const states = new Map<string, Replica>();
    const routed = new Set(routedShards(map).map((e) => e.id));
    const primaries: HttpShard[] = [];
    this.presentRefs = presentShards(map).map((e): ShardRef => {
      const key = `${e.id} ${e.url}`;
      const primary = this.clients.get(key) ?? this.opts.client(e.id, e.url, null);
      clients.set(key, primary);
      if (routed.has(e.id)) primaries.push(primary);
      if (e.replicas.length === 0) return { id: e.id, name: primary.name, shard: primary, state: e.state };
      const replicas = e.replicas.map((url, index) => {
        const rkey = `${e.id} ${url}`;
        const had = this.replicaStates.get(rkey);
        const r: Replica = had !== undefined && had.index === index ? had : {
          shard: e.id, index, url, client: this.opts.client(e.id, url, index), outstanding: 0, usable: false, why: 'not probed yet', downUntil: 0,
        };
        states.set(rkey, r);
        return r;
      });
      const set = new ReplicaSet({ id: e.id, primary, replicas, timeoutMs: this.opts.timeoutMs, onFallback: this.opts.onFallback });
      return { id: e.id, name: primary.name, shard: set, primary, state: e.state };
    });
    this.refs = this.presentRefs.filter((r) => routed.has(r.id));
    this.isMoving = map.shards.some((s) => s.state === 'joining' || (s.state === 'draining' && s.moved !== true));
    this.clients = clients;
    this.primaries = primaries;
    this.replicaStates = states;
    this.replicaList = [...states.values()];
    this.map = map;
    this.from = from;
  }
}

export interface MapRefreshOptions {
  coordinatorUrl: string;
  key: string | null;
  timeoutMs: number;
  intervalMs: number;
  dispatcher: Dispatcher;
  log: ServiceLogger;
}

/**
 * Reads the coordinator's map now and then every interval (timed from the end of the last read), and
 * routes by it once it answers and whenever its version changes. A coordinator that cannot be read, or
 * answers something that is not a map, changes nothing: the router goes on with the map it has (told
 * once per streak of failures, not every interval).
 */
export function startMapRefresh(map: RouterMap, opts: MapRefreshOptions): { stop(): Promise<void>; now(): Promise<void> } {
  let timer: NodeJS.Timeout | null = null;
  let running: Promise<void> | null = null;
  let stopped = false;
  let failing = false;
  const readerId = randomBytes(8).toString('hex');

  const read = async (): Promise<ShardMap> => {
    // Who asks and the version it routes by: the coordinator starts a move only once its routers route
    // by the map that names the move's shards (core/cluster/coordinator/map-readers.ts).
    const held = map.source() === 'coordinator' ? { [ROUTER_MAP_VERSION_HEADER]: String(map.current().version) } : {};
    const res = await opts.dispatcher.request({
      origin: opts.coordinatorUrl, path: '/cluster/map', method: 'GET',
      headers: {
        accept: 'application/json', [ROUTER_ID_HEADER]: readerId, ...held,
        ...(opts.key === null ? {} : { authorization: `Bearer ${opts.key}` }),
      },
      signal: AbortSignal.timeout(opts.timeoutMs),
    });
    const text = await res.body.text();
    if (res.statusCode !== 200) {
      const hint = res.statusCode === 401 || res.statusCode === 403 ? ' (SVC_CLUSTER_SHARD_KEY must be an admin key scoped to * on the coordinator)' : '';
      throw new Error(`it answered ${res.statusCode}${hint}: ${text.slice(0, 200)}`);
    }
    return parseShardMap(JSON.parse(text));
  };

  const tick = async (): Promise<void> => {
    try {
      const next = await read();
      if (failing) opts.log.info({ coordinator: opts.coordinatorUrl }, 'the coordinator answers again');
      failing = false;
      const was = map.current();
      if (map.source() !== 'coordinator' || next.version !== was.version) {
        map.adopt(next, 'coordinator');
        opts.log.info({
          coordinator: opts.coordinatorUrl, version: next.version, previous_version: was.version,
          routed: map.routed().map((r) => r.id), shards: next.shards.map((s) => ({ id: s.id, state: s.state })),
        }, 'routing by the coordinator\'s shard map');
      }
    } catch (e) {
      if (!failing) {
        opts.log.warn({ coordinator: opts.coordinatorUrl, err: (e as Error).message, routing_by: map.source(), version: map.current().version },
          'could not read the shard map from the coordinator; routing by the map already held');
      }
      failing = true;
    }
  };
  // One read at a time, the scheduled ones and those `moved` answers ask for alike: two in flight
  // could be answered out of order, and the router would go back to the older map (and tell the
  // coordinator it routes by the newer one).
  let reading: Promise<void> | null = null;
  const readOnce = (): Promise<void> => (reading ??= tick().finally(() => { reading = null; }));
  const schedule = (ms: number): void => {
    if (stopped) return;
    timer = setTimeout(() => {
      running = readOnce().finally(() => {
        running = null;
        schedule(opts.intervalMs);
      });
    }, ms);
  };
  schedule(0);
  // A shard said our map is old (`moved`): read it now, after any read in flight (which may have been
  // asked before the shard's map changed), shared by every request that asks meanwhile, and at most
  // every MAP_READ_GAP_MS.
  let asked: Promise<void> | null = null;
  let lastAskedMs = 0;
  return {
    async stop() {
      stopped = true;
      if (timer !== null) clearTimeout(timer);
      await running;
      await asked;
    },
    now() {
      if (stopped) return Promise.resolve();
      if (asked === null && performance.now() - lastAskedMs >= MAP_READ_GAP_MS) {
        lastAskedMs = performance.now();
        asked = (reading ?? Promise.resolve()).then(readOnce).finally(() => { asked = null; });
      }
      return asked ?? Promise.resolve();
    },
  };
}

/** Least time between two reads of the map that shards' `moved` answers ask for. */
const MAP_READ_GAP_MS = 200;
