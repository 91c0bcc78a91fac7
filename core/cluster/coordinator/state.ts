import { assert } from '../../base/assert.js';
import { invalidArgument, notFound, SvcError } from '../../base/errors.js';
import { normalizeShardUrl, type ShardState } from '../routing/shard-map.js';

/**
 * The coordinator's durable state and its transitions, as pure functions: each takes a state and returns
 * the next one (never changing its argument) or throws the SvcError the API answers. The coordinator
 * (coordinator.ts) persists a new state before it acknowledges it.
 *
 * - `version` grows by one on every change of membership (register, drain, remove, scale-out); a
 *   router compares it to know when to reload. Point counts are samples, not state: they change no version.
 * - `nextId` is the id the next shard gets; it only grows, so an id is never reused, even after the
 *   shard that had it is removed (CONTRACT.md section 11).
 * - `lastScaleOutMs` (wall clock) survives a restart, so a restarted coordinator keeps the cooldown.
 */
export interface ShardRecord {
  readonly id: number;
  readonly url: string;
  readonly replicas: readonly string[];
  readonly state: ShardState;
  /** Draining only: its move has ended, it holds no point and routers no longer route to it. */
  readonly moved?: boolean;
}

/** A rebalance move (rebalance.ts): its id, fixed target set, sources, and the shards it turns active or `moved`. */
export interface MoveRecord {
  readonly id: string;
  readonly targets: readonly number[];
  readonly sources: readonly number[];
  /** Joining shards that turn active when the move ends. */
  readonly joining: readonly number[];
  /** Draining sources marked `moved` when the move ends. */
  readonly draining: readonly number[];
}

export interface CoordinatorState {
  readonly version: number;
  readonly nextId: number;
  readonly shards: readonly ShardRecord[];
  readonly lastScaleOutMs: number | null;
  /** The rebalance move running now (rebalance.ts), saved so a restarted coordinator resumes it. */
  readonly move: MoveRecord | null;
  /** The number of the next move's id (`m<n>`): a move id is never issued twice. */
  readonly nextMove: number;
}

/** Most shards in a map; every loop over shards (sampling, routing) is bounded by it. */
export const SHARDS_MAX = 1024;
/** Most read replicas of one shard. */
export const REPLICAS_MAX = 16;

export const EMPTY_STATE: CoordinatorState = Object.freeze({ version: 0, nextId: 0, shards: Object.freeze([]), lastScaleOutMs: null, move: null, nextMove: 0 });

/**
 * The state a coordinator starts from when it has none: the shards of SVC_CLUSTER_SHARDS as ids 0, 1,
 * 2, ... in list order, all active (they hold their data already), with their SVC_CLUSTER_REPLICAS.
 * URLs come normalized and distinct from the config.
 */
export function seedState(urls: readonly string[], replicas: ReadonlyMap<number, readonly string[]> = new Map()): CoordinatorState {
  if (urls.length === 0) return EMPTY_STATE;
  assert(urls.length <= SHARDS_MAX, 'the seed list is within SHARDS_MAX');
  const shards = urls.map((url, id): ShardRecord => ({ id, url, replicas: [...(replicas.get(id) ?? [])], state: 'active' }));
  return { version: 1, nextId: urls.length, shards, lastScaleOutMs: null, move: null, nextMove: 0 };
}

/** Every URL in the map (shards and replicas), for the one-place-only rule. */
function urlOwner(state: CoordinatorState, url: string): string | null {
  for (const s of state.shards) {
    if (s.url === url) return `shard ${s.id}`;
    if (s.replicas.includes(url)) return `a replica of shard ${s.id}`;
  }
  return null;
}

export interface RegisterRequest {
  url: string;
  replicas: string[];
}

/** The body of `POST /cluster/shards`: `{url, replicas?}`, nothing else. */
export function parseRegister(body: unknown): RegisterRequest {
  if (typeof body !== 'object' || body === null || Array.isArray(body)) throw invalidArgument('the body must be a JSON object {url, replicas?}');
  for (const k of Object.keys(body)) {
    if (k !== 'url' && k !== 'replicas') throw invalidArgument(`unknown field "${k.slice(0, 100)}"; a shard is registered with {url, replicas?}`);
  }
  const b = body as { url?: unknown; replicas?: unknown };
  const url = normalizeShardUrl(b.url, 'url');
  const raw = b.replicas ?? [];
  if (!Array.isArray(raw)) throw invalidArgument('replicas must be a list of URLs');
  if (raw.length > REPLICAS_MAX) throw invalidArgument(`a shard has at most ${REPLICAS_MAX} replicas (got ${raw.length})`);
  const replicas: string[] = [];
  raw.forEach((r, i) => {
    const u = normalizeShardUrl(r, `replicas[${i}]`);
    if (u === url) throw invalidArgument(`replicas[${i}] is the shard's own URL`);
    if (replicas.includes(u)) throw invalidArgument(`replicas[${i}] repeats ${u}`);
    replicas.push(u);
  });
  return { url, replicas };
}

/**
 * Adds a shard with the next id. It joins (`joining`: the rebalance brings its points) unless no shard
 * is active yet, when there is nothing to move and it is `active` at once.
 */
export function register(state: CoordinatorState, req: RegisterRequest): { state: CoordinatorState; id: number } {
  for (const url of [req.url, ...req.replicas]) {
    const owner = urlOwner(state, url);
    if (owner !== null) throw new SvcError('already_exists', `${url} is already in the shard map as ${owner}`);
  }
  if (state.shards.length >= SHARDS_MAX) throw invalidArgument(`the shard map holds at most ${SHARDS_MAX} shards`);
  const id = state.nextId;
  const joins = state.shards.some((s) => s.state === 'active');
  const shard: ShardRecord = { id, url: req.url, replicas: [...req.replicas], state: joins ? 'joining' : 'active' };
  return { state: { ...state, version: state.version + 1, nextId: id + 1, shards: [...state.shards, shard] }, id };
}

/** A shard id from a path: a decimal integer of the shard map, else invalid_argument or not_found. */
export function shardIdOf(state: CoordinatorState, text: string): ShardRecord {
  if (!/^(0|[1-9]\d{0,9})$/.test(text)) throw invalidArgument(`shard id must be a non-negative integer (got "${text.slice(0, 40)}")`);
  const id = Number(text);
  const shard = state.shards.find((s) => s.id === id);
  if (shard === undefined) throw notFound(`no shard ${id} in the shard map`);
  return shard;
}

/**
 * Starts draining a shard: its points move to their next owners. Draining one that drains already
 * changes nothing (the same answer, the same version). The last active shard cannot drain: its points
 * would have no owner. That refusal is `invalid_argument` (the contract has no "failed precondition"
 * of its own but shard_not_drained, which means something else), with a message saying what to do.
 */
export function drain(state: CoordinatorState, id: number): CoordinatorState {
  const shard = state.shards.find((s) => s.id === id);
  if (shard === undefined) throw notFound(`no shard ${id} in the shard map`);
  if (shard.state === 'draining') return state;
  const othersActive = state.shards.some((s) => s.id !== id && s.state === 'active');
  if (shard.state === 'active' && !othersActive) {
    throw invalidArgument(`shard ${id} is the last active shard: its points would have no owner. Register another shard and let it become active first`);
  }
  return { ...state, version: state.version + 1, shards: state.shards.map((s) => (s.id === id ? { ...s, state: 'draining' } : s)) };
}

/**
 * Removes a drained shard: draining, and holding no point (`pointsNow`, counted on the shard just
 * before). Anything else is `shard_not_drained`, saying what is missing.
 */
export function remove(state: CoordinatorState, id: number, pointsNow: number): CoordinatorState {
  const shard = state.shards.find((s) => s.id === id);
  if (shard === undefined) throw notFound(`no shard ${id} in the shard map`);
  if (shard.state !== 'draining') {
    throw new SvcError('shard_not_drained', `shard ${id} is ${shard.state}: drain it first (POST /cluster/shards/${id}/drain), then delete it once it holds no point`);
  }
  if (pointsNow !== 0) throw new SvcError('shard_not_drained', `shard ${id} is draining but still holds ${pointsNow} point(s)`);
  if (state.move !== null && state.move.sources.includes(id)) {
    throw new SvcError('shard_not_drained', `shard ${id} is draining and its rebalance move ${state.move.id} is still running`);
  }
  return { ...state, version: state.version + 1, shards: state.shards.filter((s) => s.id !== id) };
}

/** A scale-out: the standby joins as the next id, and the cooldown starts now. */
export function scaleOut(state: CoordinatorState, standbyUrl: string, nowMs: number): { state: CoordinatorState; id: number } {
  const { state: next, id } = register(state, { url: standbyUrl, replicas: [] });
  return { state: { ...next, lastScaleOutMs: nowMs }, id };
}

/** The standby pool: SVC_AUTOSCALE_STANDBY_URLS in order, less every URL the map holds (taken, or registered by hand). */
export function standbyLeft(state: CoordinatorState, standbyUrls: readonly string[]): string[] {
  return standbyUrls.filter((u) => urlOwner(state, u) === null);
}
