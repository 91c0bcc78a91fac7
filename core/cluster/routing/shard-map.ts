import { invalidArgument } from '../../base/errors.js';

/**
 * The shard map (CONTRACT.md section 11): what a coordinator issues and a router routes by.
 * `GET /cluster/map` answers it as is.
 *
 * - `active`: owns its points by rendezvous hash (hrw.ts) among the active shards.
 * - `joining`: registered (by hand or by a scale-out) but its points are not there yet; the coordinator's
 *   rebalance move (core/cluster/coordinator/rebalance.ts) brings them and turns it active.
 * - `draining`: its points move to their next owners (hrw.ts `ranking`); `moved` once its move ended,
 *   then removable.
 *
 * `points` is the shard's total point count at the coordinator's last sample (`/v1/stats`
 * `total_points`), or null when it has not been sampled yet or its last sample failed: a shard that could
 * not be reached is unknown, never empty.
 */
export type ShardState = 'active' | 'joining' | 'draining';
export const SHARD_STATES: readonly ShardState[] = ['active', 'joining', 'draining'];

export interface ShardEntry {
  id: number;
  url: string;
  replicas: string[];
  state: ShardState;
  points: number | null;
  /** Draining only, once its rebalance move has ended: it holds no point and is not routed. */
  moved?: boolean;
}

export interface ShardMap {
  version: number;
  shards: ShardEntry[];
  standby: string[];
}

/** Longest shard URL accepted: a base URL, not a document. */
export const SHARD_URL_CHARS_MAX = 2048;

/**
 * A shard's REST base URL in its one canonical form, `http(s)://host[:port]` (host in lower case, no
 * default port, no trailing slash), so two spellings of one address are recognised as the same shard.
 * A path, query, fragment or user name is refused: the router appends `/v1/...` to the base, and a
 * credential belongs in SVC_CLUSTER_SHARD_KEY, never in a URL that the map shows to every admin.
 */
export function normalizeShardUrl(value: unknown, what = 'url'): string {
  if (typeof value !== 'string' || value.length === 0 || value.length > SHARD_URL_CHARS_MAX) {
    throw invalidArgument(`${what} must be a URL like http://host:6333 (a string of 1 to ${SHARD_URL_CHARS_MAX} characters)`);
  }
  let u: URL;
  try {
    u = new URL(value);
  } catch {
    throw invalidArgument(`${what} "${printable(value)}" is not a URL; expected http://host:port or https://host:port`);
  }
  if (u.username !== '' || u.password !== '') {
    // Never echoed: it holds a credential.
    throw invalidArgument(`${what} carries a user name or password; give shards their key in SVC_CLUSTER_SHARD_KEY instead`);
  }
  if ((u.protocol !== 'http:' && u.protocol !== 'https:') || u.hostname === '') {
    throw invalidArgument(`${what} "${printable(value)}" is not http:// or https:// with a host`);
  }
  if (u.pathname !== '/' || u.search !== '' || u.hash !== '' || /[?#]/.test(value)) {
    throw invalidArgument(`${what} "${printable(value)}" has a path, query or fragment; a shard is named by its REST base URL, like http://host:6333`);
  }
  return `${u.protocol}//${u.host}`;
}

/** At most 200 characters of a refused value, control characters escaped, for an error message. */
function printable(s: string): string {
  const cut = s.length > 200 ? `${s.slice(0, 200)}...` : s;
  return JSON.stringify(cut).slice(1, -1);
}

/**
 * A list of URLs as the variables give them (CONTRACT.md section 11): bracketed and comma-separated
 * (`[http://a:6333,http://b:6333]`), or comma-separated without brackets; blanks around items ignored.
 * Each is normalized; a repeated URL is refused (it would be one shard twice).
 */
export function parseUrlList(text: string, what: string): string[] {
  let t = text.trim();
  if (t.startsWith('[') !== t.endsWith(']')) throw invalidArgument(`${what} has an unbalanced bracket; expected [http://a:6333,http://b:6333]`);
  if (t.startsWith('[')) t = t.slice(1, -1).trim();
  if (t === '') return [];
  const out: string[] = [];
  for (const item of t.split(',')) {
    const url = normalizeShardUrl(item.trim(), `${what} item`);
    if (out.includes(url)) throw invalidArgument(`${what} names ${url} twice`);
    out.push(url);
  }
  return out;
}

/**
 * SVC_CLUSTER_REPLICAS: `<shard_index>=<url>` repeated with commas (brackets allowed around the whole);
 * the read replicas of each shard of SVC_CLUSTER_SHARDS, by its index in that list.
 */
export function parseReplicaList(text: string, shardCount: number, what: string): Map<number, string[]> {
  let t = text.trim();
  if (t.startsWith('[') && t.endsWith(']')) t = t.slice(1, -1).trim();
  const out = new Map<number, string[]>();
  if (t === '') return out;
  for (const item of t.split(',')) {
    const m = /^\s*(\d+)\s*=\s*(\S+)\s*$/.exec(item);
    if (m === null) throw invalidArgument(`${what} item "${printable(item.trim())}" is not <shard_index>=<url>`);
    const index = Number(m[1]);
    if (index >= shardCount) throw invalidArgument(`${what} names shard index ${index}, but SVC_CLUSTER_SHARDS lists ${shardCount} shard(s) (indexes from 0)`);
    const url = normalizeShardUrl(m[2], `${what} item ${index}`);
    const list = out.get(index) ?? [];
    if (list.includes(url)) throw invalidArgument(`${what} names ${url} twice for shard ${index}`);
    list.push(url);
    out.set(index, list);
  }
  return out;
}

/** Most shards a map may hold (the coordinator's own cap). */
const MAP_SHARDS_MAX = 1024;

/**
 * A map as a coordinator answered it (`GET /cluster/map`), checked before a router routes by it: a
 * version, shards with distinct small integer ids and distinct canonical URLs, known states. A map that
 * is not one is refused whole (the router keeps the map it has), never half read.
 */
export function parseShardMap(v: unknown): ShardMap {
  const o = v as { version?: unknown; shards?: unknown; standby?: unknown } | null;
  if (typeof o !== 'object' || o === null || !Number.isSafeInteger(o.version) || (o.version as number) < 0) {
    throw invalidArgument('a shard map needs a version, a non-negative integer');
  }
  if (!Array.isArray(o.shards) || o.shards.length > MAP_SHARDS_MAX) throw invalidArgument(`a shard map needs shards, a list of at most ${MAP_SHARDS_MAX}`);
  const ids = new Set<number>();
  const urls = new Set<string>();
  const shards = o.shards.map((s: unknown, i: number): ShardEntry => {
    const e = s as Partial<Record<keyof ShardEntry, unknown>> | null;
    if (typeof e !== 'object' || e === null) throw invalidArgument(`shards[${i}] is not an object`);
    if (!Number.isSafeInteger(e.id) || (e.id as number) < 0 || ids.has(e.id as number)) throw invalidArgument(`shards[${i}].id is not a new non-negative integer`);
    const url = normalizeShardUrl(e.url, `shards[${i}].url`);
    if (urls.has(url)) throw invalidArgument(`shards[${i}].url ${url} is another shard's too`);
    if (!SHARD_STATES.includes(e.state as ShardState)) throw invalidArgument(`shards[${i}].state is not one of ${SHARD_STATES.join(', ')}`);
    const replicas = Array.isArray(e.replicas) ? e.replicas.map((r, j) => normalizeShardUrl(r, `shards[${i}].replicas[${j}]`)) : [];
    const points = Number.isSafeInteger(e.points) && (e.points as number) >= 0 ? e.points as number : null;
    ids.add(e.id as number);
    urls.add(url);
    return { id: e.id as number, url, replicas, state: e.state as ShardState, points, ...(e.moved === true && e.state === 'draining' ? { moved: true } : {}) };
  });
  const standby = Array.isArray(o.standby) ? o.standby.map((u, i) => normalizeShardUrl(u, `standby[${i}]`)) : [];
  return { version: o.version as number, shards, standby };
}

/**
 * The shards a router routes point writes, `get` and single deletes by (rendezvous hash over them): the
 * active ones, and the draining ones until their move has ended (`moved`). During a move this is the
 * set from before it, so a write reaches the point's source, which holds it or answers `moved`
 * (docs/cluster.md, Rebalancing). A joining shard is left out until its move ends and it turns active.
 */
export function routedShards(map: ShardMap): ShardEntry[] {
  return map.shards.filter((s) => s.state === 'active' || (s.state === 'draining' && s.moved !== true)).sort((a, b) => a.id - b.id);
}

/**
 * The shards that may hold points: every one but the drained (`moved`). Scatter reads, deletes by
 * filter, and collection creates, drops and snapshots go to all of them, joining ones included.
 */
export function presentShards(map: ShardMap): ShardEntry[] {
  return map.shards.filter((s) => !(s.state === 'draining' && s.moved === true)).sort((a, b) => a.id - b.id);
}
