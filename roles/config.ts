import { existsSync, readFileSync, statSync } from 'node:fs';
import { isIP } from 'node:net';
import { availableParallelism } from 'node:os';
import { resolve } from 'node:path';
import { parse as parseToml } from 'smol-toml';
import { DEFAULT_LIMITS, LIMIT_VARIABLES, type Limits } from '../core/base/limits.js';
import { normalizeShardUrl, parseReplicaList, parseUrlList } from '../core/cluster/routing/shard-map.js';
import type { Role } from '../core/service/api.js';
import type { ApiKey } from '../core/service/service.js';
import { CONNECTION_LIMIT_VARIABLES, DEFAULT_CONNECTION_LIMITS, type ConnectionLimits } from './connection-limits.js';

/**
 * Configuration: built-in defaults < svc.toml (./svc.toml or SVC_CONFIG) < SVC_* environment.
 * Validated once into a frozen object; every refusal names the variable and the fix.
 *
 * In svc.toml a variable is written without its SVC_ prefix, in lower case (`rest_addr`, `max_k`,
 * `rate_limit_burst`, `tls_cert`; RUST_LOG is `log`), plus the tables `[[api_keys]]`, `[otlp]`,
 * `[embedding.<collection>]` and `[rerank.<collection>]`.
 */
export class ConfigError extends Error {
  constructor(readonly variable: string, message: string) {
    super(`${variable}: ${message}`);
    this.name = 'ConfigError';
  }
}

export interface HostPort { host: string; port: number }

export interface TlsFiles { cert: string; key: string; clientCa: string | null }

export interface ProviderTable { [key: string]: unknown }

export interface SvcConfig {
  readonly configFile: string | null;
  readonly restAddr: HostPort;
  readonly grpcAddr: HostPort;
  readonly dataDir: string;
  readonly snapshotDir: string | null;
  readonly apiKeys: readonly ApiKey[];
  /** The 64-hex master key, from SVC_ENCRYPTION_KEY or SVC_MASTER_KEY_FILE; null only when insecure. */
  readonly encryptionKey: string | null;
  /** PEM paths; null means plain HTTP (loopback or insecure only). */
  readonly tls: TlsFiles | null;
  readonly insecure: boolean;
  readonly logFilter: string;
  readonly auditLog: string | null;
  readonly otlp: { endpoint: string | null; serviceName: string; timeoutSecs: number };
  readonly limits: Limits;
  readonly rateLimit: { requestsPerSecond: number; burst: number };
  /** Connection caps and timeouts per listener (roles/connection-limits.ts); the variables' seconds in ms. */
  readonly connections: ConnectionLimits;
  /**
   * SVC_SEARCH_WORKERS: threads running dense searches over the shared vectors (core/collection/
   * search-pool.ts). `auto`, the default, is one per core but the event loop's, at most 4 (one on two
   * cores, none on one); 0 runs every search on the event loop. A search goes to a worker only when
   * something else waits on the event loop (core/collection/search-dispatch.ts), so a lone client's
   * searches stay there and skip the hand-off. bench/suites/server.ts on the 2-core box, 8 clients,
   * h2load: REST QPS +58% with one worker; a lone client's QPS unchanged.
   */
  readonly searchWorkers: number;
  /**
   * SVC_BUILD_WORKERS: threads building one large graph. `auto`, the default, is every core but the
   * search workers', at least two on two cores, within a store's scratch lanes (core/collection/
   * rebuild.ts defaultBuildWorkers); null here means auto.
   */
  readonly buildWorkers: number | null;
  /**
   * SVC_HTTP_LOOPS: event loops answering REST and gRPC (roles/loops/), each a thread listening on the
   * same ports with SO_REUSEPORT, over the one engine on the main thread. `auto` (null here), the
   * default, is decided at start (roles/loops/loops.ts httpLoopsFor): more than one only where the
   * runtime can share a port (Node 22.12+ on Linux). 1 is the single-loop server of Node 20.
   */
  readonly httpLoops: number | null;
  /**
   * SVC_REPLICATION_RETAIN_BYTES: most bytes of WAL files a leader keeps only for connected followers
   * (files every checkpoint is past that a follower has not read yet). Past it the oldest go and the
   * slowest follower's Replicate stream ends (UNAVAILABLE, reason retention_exceeded); it re-bootstraps
   * from a snapshot. Default 1 GiB; 0 keeps nothing for followers.
   */
  readonly replicationRetainBytes: number;
  readonly embedding: Readonly<Record<string, ProviderTable>>;
  readonly rerank: Readonly<Record<string, ProviderTable>>;
  /**
   * SVC_LEADER_URL (the leader's gRPC address, `http://host:port` or `https://`) and SVC_LEADER_API_KEY
   * (an admin key there): this node runs as its read replica. null: a leader.
   */
  readonly leader: LeaderConfig | null;
  /** SVC_COORDINATOR=true: this process is the cluster coordinator (no data plane). null: it is not. */
  readonly coordinator: CoordinatorConfig | null;
  /** SVC_CLUSTER_SHARDS or SVC_COORDINATOR_URL without SVC_COORDINATOR: a router (no data directory). null: it is not. */
  readonly router: RouterConfig | null;
  /** Every other variable of the spec's table, as given (cluster, replication, raft, tui, demo). */
  readonly other: Readonly<Record<string, string>>;
  /** To be logged at startup; the SVC_INSECURE warning is one of them. */
  readonly warnings: readonly string[];
}

/** SVC_REPLICATION_RETAIN_BYTES when unset: 1 GiB of WAL kept for followers beyond what checkpoints need. */
export const REPLICATION_RETAIN_BYTES_DEFAULT = 1 << 30;

/** SVC_SEARCH_WORKERS=auto: one search worker per core but the event loop's, at most this many. */
const SEARCH_WORKERS_MAX = 4;

/** SVC_SEARCH_WORKERS=auto: cores - 1 workers up to SEARCH_WORKERS_MAX (none on one core). */
export function autoSearchWorkers(cores: number): number {
  return Math.max(0, Math.min(SEARCH_WORKERS_MAX, cores - 1));
}
/** Most search workers: with the main thread and at least 7 build workers they fit a store's 16 scratch lanes. */
const SEARCH_WORKERS_LIMIT = 8;

/** Most SVC_HTTP_LOOPS: a loop per core of the largest machines we plan for. */
export const HTTP_LOOPS_MAX = 64;

/** Build and search workers together, beside the main thread, within a store's 16 scratch lanes. */
const BUILD_AND_SEARCH_WORKERS_MAX = 15;

/** Spec variables kept as strings for the roles that use them. */
const OTHER_VARS = [
  'SVC_LEADER_URL', 'SVC_LEADER_API_KEY', 'SVC_LEADER_CA', 'SVC_LEADER_CLIENT_CERT', 'SVC_LEADER_CLIENT_KEY', 'SVC_MVCC_READS', 'SVC_CLUSTER_SHARDS', 'SVC_CLUSTER_SHARD_KEY',
  'SVC_CLUSTER_REPLICAS', 'SVC_COORDINATOR', 'SVC_COORDINATOR_STATE', 'SVC_COORDINATOR_URL', 'SVC_AUTOSCALE_ENABLED',
  'SVC_AUTOSCALE_HIGH_WATER_POINTS', 'SVC_AUTOSCALE_STANDBY_URLS', 'SVC_AUTOSCALE_INTERVAL_SECS',
  'SVC_AUTOSCALE_COOLDOWN_SECS', 'SVC_AUTOSCALE_MAX_SHARDS', 'SVC_REBALANCE_BATCH_POINTS', 'SVC_RAFT_NODE_ID', 'SVC_RAFT_MEMBERS', 'SVC_RAFT_SECRET', 'SVC_RAFT_HEARTBEAT_MS', 'SVC_RAFT_ELECTION_MS',
  'SVC_RAFT_WRITE_TIMEOUT_SECS', 'SVC_RAFT_SNAPSHOT_ENTRIES', 'SVC_RAFT_TLS_CA',
  'SVC_TUI_URL', 'SVC_API_KEY', 'SVC_DEMO_DIR',
] as const;

export const SCALAR_VARS = [
  'SVC_REST_ADDR', 'SVC_GRPC_ADDR', 'SVC_DATA_DIR', 'SVC_SNAPSHOT_DIR', 'SVC_API_KEYS', 'SVC_ENCRYPTION_KEY',
  'SVC_MASTER_KEY_FILE', 'SVC_TLS_CERT', 'SVC_TLS_KEY', 'SVC_TLS_CLIENT_CA', 'SVC_INSECURE', 'RUST_LOG',
  'SVC_AUDIT_LOG', 'SVC_OTLP_ENDPOINT', 'SVC_OTLP_SERVICE_NAME', 'SVC_OTLP_TIMEOUT_SECS',
  'SVC_RATE_LIMIT_REQUESTS_PER_SECOND', 'SVC_RATE_LIMIT_BURST', 'SVC_SEARCH_WORKERS', 'SVC_BUILD_WORKERS', 'SVC_HTTP_LOOPS', 'SVC_REPLICATION_RETAIN_BYTES',
  'SVC_CLUSTER_TIMEOUT_SECS', 'SVC_CLUSTER_MAP_REFRESH_SECS', 'SVC_CLUSTER_REPLICA_MAX_LAG_SECS', ...Object.values(LIMIT_VARIABLES), ...Object.values(CONNECTION_LIMIT_VARIABLES), ...OTHER_VARS,
];

export const tomlKey = (v: string): string => (v === 'RUST_LOG' ? 'log' : v.replace(/^SVC_/, '').toLowerCase());

export interface LoadOptions {
  cwd?: string;
  /** Where the file comes from when SVC_CONFIG is unset; `null` disables the ./svc.toml lookup. */
  defaultFile?: string | null;
}

export function loadConfig(env: Readonly<Record<string, string | undefined>>, opts: LoadOptions = {}): SvcConfig {
  const cwd = opts.cwd ?? process.cwd();
  const warnings: string[] = [];
  const { file, toml } = readToml(env, cwd, opts.defaultFile === undefined ? 'svc.toml' : opts.defaultFile);
  const raw = mergedValues(env, toml);
  const get = (v: string): string | undefined => {
    const s = raw[v];
    return s === undefined || s === '' ? undefined : s;
  };

  const insecure = parseBool('SVC_INSECURE', get('SVC_INSECURE') ?? 'false');
  if (insecure) warnings.push('SVC_INSECURE=true: keys, encryption at rest and TLS checks are waived. Development only: never expose this server.');

  const restAddr = parseAddr('SVC_REST_ADDR', get('SVC_REST_ADDR') ?? '127.0.0.1:6333');
  const grpcAddr = parseAddr('SVC_GRPC_ADDR', get('SVC_GRPC_ADDR') ?? '127.0.0.1:6334');
  const apiKeys = [...envKeys(get('SVC_API_KEYS')), ...tomlKeys(toml.api_keys)];
  checkUniqueNames(apiKeys);
  if (apiKeys.length === 0 && !insecure) {
    throw new ConfigError('SVC_API_KEYS', 'no API key is configured. Fix: set SVC_API_KEYS=<secret>[,<secret>...] (for example `openssl rand -hex 24`) or add [[api_keys]] tables to svc.toml; SVC_INSECURE=true waives this for development');
  }

  const encryptionKey = masterKey(get('SVC_ENCRYPTION_KEY'), get('SVC_MASTER_KEY_FILE'), cwd, insecure, warnings);
  const tls = tlsFiles(get('SVC_TLS_CERT'), get('SVC_TLS_KEY'), get('SVC_TLS_CLIENT_CA'), cwd, insecure, warnings);
  for (const [variable, addr] of [['SVC_REST_ADDR', restAddr], ['SVC_GRPC_ADDR', grpcAddr]] as const) {
    if (!isLoopback(addr.host) && tls === null) {
      if (!insecure) {
        throw new ConfigError(variable, `binding ${addr.host} (not loopback) without TLS is refused. Fix: set SVC_TLS_CERT and SVC_TLS_KEY, or bind 127.0.0.1; SVC_INSECURE=true waives this`);
      }
      warnings.push(`${variable}=${addr.host}:${addr.port} is not loopback and serves plain text (SVC_INSECURE=true)`);
    }
  }

  const limits = { ...DEFAULT_LIMITS };
  for (const [field, variable] of Object.entries(LIMIT_VARIABLES) as [keyof Limits, string][]) {
    const s = get(variable);
    if (s !== undefined) (limits as Record<keyof Limits, number>)[field] = parseInteger(variable, s, 1);
  }
  const rps = get('SVC_RATE_LIMIT_REQUESTS_PER_SECOND');
  const rateLimit = {
    requestsPerSecond: rps === undefined ? 0 : parseNumber('SVC_RATE_LIMIT_REQUESTS_PER_SECOND', rps),
    burst: parseInteger('SVC_RATE_LIMIT_BURST', get('SVC_RATE_LIMIT_BURST') ?? '0', 0),
  };

  const connections = connectionLimits(get);

  const workersVar = get('SVC_SEARCH_WORKERS');
  const searchWorkers = workersVar === undefined || workersVar.trim() === 'auto'
    ? autoSearchWorkers(availableParallelism()) : parseInteger('SVC_SEARCH_WORKERS', workersVar, 0);
  if (searchWorkers > SEARCH_WORKERS_LIMIT) {
    throw new ConfigError('SVC_SEARCH_WORKERS', `${searchWorkers} is more than ${SEARCH_WORKERS_LIMIT}. Fix: about one per core, or auto (0: every search on the event loop)`);
  }
  const buildVar = get('SVC_BUILD_WORKERS');
  const buildWorkers = buildVar === undefined || buildVar.trim() === 'auto' ? null : parseInteger('SVC_BUILD_WORKERS', buildVar, 1);
  if (buildWorkers !== null && buildWorkers + searchWorkers > BUILD_AND_SEARCH_WORKERS_MAX) {
    throw new ConfigError('SVC_BUILD_WORKERS', `${buildWorkers} build workers beside ${searchWorkers} search workers are more than ${BUILD_AND_SEARCH_WORKERS_MAX} threads (each holds one of a store's 16 scratch lanes). Fix: fewer, or auto`);
  }

  const loopsVar = get('SVC_HTTP_LOOPS');
  const httpLoops = loopsVar === undefined || loopsVar.trim() === 'auto' ? null : parseInteger('SVC_HTTP_LOOPS', loopsVar, 1);
  if (httpLoops !== null && httpLoops > HTTP_LOOPS_MAX) {
    throw new ConfigError('SVC_HTTP_LOOPS', `${httpLoops} is more than ${HTTP_LOOPS_MAX}. Fix: about one per core, or auto`);
  }

  const retain = get('SVC_REPLICATION_RETAIN_BYTES');
  const replicationRetainBytes = retain === undefined ? REPLICATION_RETAIN_BYTES_DEFAULT : parseInteger('SVC_REPLICATION_RETAIN_BYTES', retain, 0);

  const auditLog = get('SVC_AUDIT_LOG');
  if (auditLog !== undefined && encryptionKey === null) {
    warnings.push('SVC_AUDIT_LOG without a master key: the audit chain is unkeyed, so it shows accidental damage but anyone can rewrite it (SVC_INSECURE=true); verify it with svc admin verify-audit --insecure');
  }
  const otlpEndpoint = get('SVC_OTLP_ENDPOINT');
  const other: Record<string, string> = {};
  for (const v of OTHER_VARS) {
    const s = get(v);
    if (s !== undefined) other[v] = s;
  }
  const providers = (table: string) => providerTables(table, toml[table], env);
  const snapshotDir = get('SVC_SNAPSHOT_DIR');
  const leader = leaderOf(get, insecure, cwd, warnings);
  const coordinator = coordinatorOf(get, insecure, cwd, warnings, leader !== null);
  const router = coordinator === null ? routerOf(get, insecure, warnings, leader !== null) : null;

  return deepFreeze({
    configFile: file,
    restAddr, grpcAddr,
    dataDir: resolve(cwd, get('SVC_DATA_DIR') ?? './svc-data'),
    snapshotDir: snapshotDir === undefined ? null : resolve(cwd, snapshotDir),
    apiKeys, encryptionKey, tls, insecure,
    logFilter: get('RUST_LOG') ?? 'info',
    auditLog: auditLog === undefined ? null : resolve(cwd, auditLog),
    otlp: {
      endpoint: otlpEndpoint ?? null,
      serviceName: get('SVC_OTLP_SERVICE_NAME') ?? 'svc',
      timeoutSecs: parseNumber('SVC_OTLP_TIMEOUT_SECS', get('SVC_OTLP_TIMEOUT_SECS') ?? '3'),
    },
    limits, rateLimit, connections, searchWorkers, buildWorkers, httpLoops, replicationRetainBytes,
    embedding: providers('embedding'),
    rerank: providers('rerank'),
    leader, coordinator, router, other, warnings,
  });
}

/**
 * The coordinator (spec, server configuration; CONTRACT.md section 11): its seed map, state file, the key
 * it shows shards, and autoscaling. Seconds may be fractions (tests use short ones).
 */
export interface CoordinatorConfig {
  /** SVC_COORDINATOR_STATE, resolved; null keeps the map in memory only. */
  stateFile: string | null;
  /** SVC_CLUSTER_SHARDS, normalized, in order: shard ids 0, 1, 2, ... of a coordinator with no saved state. */
  seedShards: readonly string[];
  /** SVC_CLUSTER_REPLICAS: the replicas of each seed shard, by its index (one list per seed shard). */
  seedReplicas: readonly (readonly string[])[];
  /** SVC_CLUSTER_SHARD_KEY: the bearer key shown to shards when counting their points (needs the read role, scope *). */
  shardKey: string | null;
  autoscale: {
    enabled: boolean;
    highWaterPoints: number;
    standbyUrls: readonly string[];
    intervalMs: number;
    cooldownMs: number;
    maxShards: number | null;
  };
  /** SVC_REBALANCE_BATCH_POINTS: points per rebalance batch (each holds its source's writes until its commit). */
  rebalanceBatchPoints: number;
  /**
   * SVC_CLUSTER_MAP_REFRESH_SECS in ms, the routers' interval: a move starts only twice this long after
   * the map change that asks for it, so every router reads the new shard before points reach it.
   */
  routerRefreshMs: number;
}

/** SVC_REBALANCE_BATCH_POINTS when unset, and its bounds (core/collection/move.ts takes 1 to 10,000). */
export const REBALANCE_BATCH_POINTS_DEFAULT = 1000;
const REBALANCE_BATCH_POINTS_MAX = 10_000;

/** SVC_AUTOSCALE_INTERVAL_SECS when unset (the spec gives none): a shard's point count moves slowly. */
export const AUTOSCALE_INTERVAL_SECS_DEFAULT = 30;
/** SVC_AUTOSCALE_COOLDOWN_SECS when unset (the spec gives none): time for a new shard to take its share first. */
export const AUTOSCALE_COOLDOWN_SECS_DEFAULT = 300;

function coordinatorOf(get: (v: string) => string | undefined, insecure: boolean, cwd: string, warnings: string[], follower: boolean): CoordinatorConfig | null {
  const on = parseBool('SVC_COORDINATOR', get('SVC_COORDINATOR') ?? 'false');
  const enabled = parseBool('SVC_AUTOSCALE_ENABLED', get('SVC_AUTOSCALE_ENABLED') ?? 'false');
  if (!on) {
    for (const [v, given] of [['SVC_COORDINATOR_STATE', get('SVC_COORDINATOR_STATE') !== undefined], ['SVC_AUTOSCALE_ENABLED', enabled]] as const) {
      if (given) throw new ConfigError(v, 'only a coordinator uses it. Fix: set SVC_COORDINATOR=true on the coordinator, or remove it here');
    }
    return null;
  }
  if (follower) throw new ConfigError('SVC_COORDINATOR', 'a coordinator holds no data, so it cannot follow a leader. Fix: unset SVC_LEADER_URL, or SVC_COORDINATOR');
  const urls = (v: string): string[] => {
    try {
      return parseUrlList(get(v) ?? '', v);
    } catch (e) {
      throw new ConfigError(v, `${(e as Error).message}. Fix: REST base URLs like [http://shard-0:6333,http://shard-1:6333]`);
    }
  };
  const seedShards = urls('SVC_CLUSTER_SHARDS');
  let seedReplicas: string[][];
  try {
    const byIndex = parseReplicaList(get('SVC_CLUSTER_REPLICAS') ?? '', seedShards.length, 'SVC_CLUSTER_REPLICAS');
    seedReplicas = seedShards.map((_, i) => byIndex.get(i) ?? []);
  } catch (e) {
    throw new ConfigError('SVC_CLUSTER_REPLICAS', `${(e as Error).message}. Fix: <shard_index>=<url>, comma-separated`);
  }
  const standbyUrls = urls('SVC_AUTOSCALE_STANDBY_URLS');
  const inSeed = standbyUrls.find((u) => seedShards.includes(u));
  if (inSeed !== undefined) throw new ConfigError('SVC_AUTOSCALE_STANDBY_URLS', `${inSeed} is in SVC_CLUSTER_SHARDS too. Fix: a standby is a spare node, not a shard`);
  const seconds = (v: string, fallback: number, min: number): number => {
    const s = get(v);
    if (s === undefined) return fallback * 1000;
    const n = parseNumber(v, s);
    if (n < min || n > 86_400 * 365) throw new ConfigError(v, `"${s}" is not a number of seconds between ${min} and a year`);
    return Math.round(n * 1000);
  };
  const maxShards = get('SVC_AUTOSCALE_MAX_SHARDS');
  const stateFile = get('SVC_COORDINATOR_STATE');
  const shardKey = get('SVC_CLUSTER_SHARD_KEY') ?? null;
  const autoscale = {
    enabled,
    highWaterPoints: parseInteger('SVC_AUTOSCALE_HIGH_WATER_POINTS', get('SVC_AUTOSCALE_HIGH_WATER_POINTS') ?? '0', 0),
    standbyUrls,
    intervalMs: seconds('SVC_AUTOSCALE_INTERVAL_SECS', AUTOSCALE_INTERVAL_SECS_DEFAULT, 0.01),
    cooldownMs: seconds('SVC_AUTOSCALE_COOLDOWN_SECS', AUTOSCALE_COOLDOWN_SECS_DEFAULT, 0),
    maxShards: maxShards === undefined ? null : parseInteger('SVC_AUTOSCALE_MAX_SHARDS', maxShards, 1),
  };
  if (stateFile === undefined) {
    warnings.push('SVC_COORDINATOR_STATE is unset: the shard map and its id counter live in memory only, so a restart starts again from SVC_CLUSTER_SHARDS and issues ids again');
  }
  if (shardKey === null && !insecure) {
    warnings.push('SVC_CLUSTER_SHARD_KEY is unset: the coordinator cannot count points on shards that require a key (the map shows null points and autoscaling never triggers)');
  }
  if (enabled && autoscale.highWaterPoints === 0) warnings.push('SVC_AUTOSCALE_ENABLED=true but SVC_AUTOSCALE_HIGH_WATER_POINTS=0: autoscaling never triggers');
  if (enabled && standbyUrls.length === 0) warnings.push('SVC_AUTOSCALE_ENABLED=true but SVC_AUTOSCALE_STANDBY_URLS is empty: there is nothing to scale out to');
  const batch = get('SVC_REBALANCE_BATCH_POINTS');
  const rebalanceBatchPoints = batch === undefined ? REBALANCE_BATCH_POINTS_DEFAULT : parseInteger('SVC_REBALANCE_BATCH_POINTS', batch, 1);
  if (rebalanceBatchPoints > REBALANCE_BATCH_POINTS_MAX) throw new ConfigError('SVC_REBALANCE_BATCH_POINTS', `${batch} is above ${REBALANCE_BATCH_POINTS_MAX}. Fix: 1 to ${REBALANCE_BATCH_POINTS_MAX} points`);
  const routerRefreshMs = seconds('SVC_CLUSTER_MAP_REFRESH_SECS', CLUSTER_MAP_REFRESH_SECS_DEFAULT, 0.01);
  return { stateFile: stateFile === undefined ? null : resolve(cwd, stateFile), seedShards, seedReplicas, shardKey, autoscale, rebalanceBatchPoints, routerRefreshMs };
}

/**
 * The router (spec: SVC_CLUSTER_SHARDS "makes the server a stateless router"; CONTRACT.md section 11):
 * its shards (ids 0, 1, 2, ... in list order), the key it shows them and its coordinator, the deadline of
 * one call to a shard, and how often the coordinator's map is read. docs/cluster.md, Router.
 */
export interface RouterConfig {
  /** SVC_CLUSTER_SHARDS, normalized, in order (may be empty when SVC_COORDINATOR_URL gives the map). */
  shards: readonly string[];
  /** SVC_CLUSTER_SHARD_KEY: shown to every shard, and to the coordinator (an admin key scoped to * on each). */
  shardKey: string | null;
  /** SVC_COORDINATOR_URL, normalized; null: the router routes by SVC_CLUSTER_SHARDS alone. */
  coordinatorUrl: string | null;
  /** SVC_CLUSTER_TIMEOUT_SECS in ms: the most one call to a shard may take, its retries included. */
  timeoutMs: number;
  /** SVC_CLUSTER_MAP_REFRESH_SECS in ms: between two reads of the coordinator's map. */
  mapRefreshMs: number;
  /** SVC_CLUSTER_REPLICAS: the read replicas of each shard of `shards`, by its index (one list per shard). */
  replicas: readonly (readonly string[])[];
  /** SVC_CLUSTER_REPLICA_MAX_LAG_SECS in ms: a replica further behind its leader gets no reads. */
  replicaMaxLagMs: number;
}

/** SVC_CLUSTER_TIMEOUT_SECS when unset (the spec gives none): long enough for a large batch, short enough to name a dead shard. */
export const CLUSTER_TIMEOUT_SECS_DEFAULT = 10;
/** SVC_CLUSTER_MAP_REFRESH_SECS when unset (the spec gives none). */
export const CLUSTER_MAP_REFRESH_SECS_DEFAULT = 5;
/** SVC_CLUSTER_REPLICA_MAX_LAG_SECS when unset (the spec gives none): 20 of a leader's 250 ms heartbeats. */
export const CLUSTER_REPLICA_MAX_LAG_SECS_DEFAULT = 5;

function routerOf(get: (v: string) => string | undefined, insecure: boolean, warnings: string[], follower: boolean): RouterConfig | null {
  let shards: string[];
  try {
    shards = parseUrlList(get('SVC_CLUSTER_SHARDS') ?? '', 'SVC_CLUSTER_SHARDS');
  } catch (e) {
    throw new ConfigError('SVC_CLUSTER_SHARDS', `${(e as Error).message}. Fix: REST base URLs like [http://shard-0:6333,http://shard-1:6333]`);
  }
  const coordinator = get('SVC_COORDINATOR_URL');
  if (shards.length === 0 && coordinator === undefined) return null;
  if (follower) throw new ConfigError('SVC_CLUSTER_SHARDS', 'a router holds no data, so it cannot follow a leader. Fix: unset SVC_LEADER_URL, or SVC_CLUSTER_SHARDS and SVC_COORDINATOR_URL');
  let coordinatorUrl: string | null = null;
  if (coordinator !== undefined) {
    try {
      coordinatorUrl = normalizeShardUrl(coordinator, 'SVC_COORDINATOR_URL');
    } catch (e) {
      throw new ConfigError('SVC_COORDINATOR_URL', `${(e as Error).message}. Fix: the coordinator's REST base URL, like http://coordinator:6333`);
    }
  }
  const seconds = (v: string, fallback: number, min: number, max: number): number => {
    const s = get(v);
    if (s === undefined) return fallback * 1000;
    const n = parseNumber(v, s);
    if (n < min || n > max) throw new ConfigError(v, `"${s}" is not a number of seconds between ${min} and ${max}`);
    return Math.round(n * 1000);
  };
  const shardKey = get('SVC_CLUSTER_SHARD_KEY') ?? null;
  if (shardKey === null && !insecure) {
    warnings.push('SVC_CLUSTER_SHARD_KEY is unset: the router calls its shards without a key, so shards that require one refuse every request');
  }
  let replicas: string[][];
  try {
    const byIndex = parseReplicaList(get('SVC_CLUSTER_REPLICAS') ?? '', shards.length, 'SVC_CLUSTER_REPLICAS');
    replicas = shards.map((_, i) => byIndex.get(i) ?? []);
  } catch (e) {
    throw new ConfigError('SVC_CLUSTER_REPLICAS', `${(e as Error).message}. Fix: <shard_index>=<url>, comma-separated, indexes of SVC_CLUSTER_SHARDS`);
  }
  const both = replicas.flat().find((u) => shards.includes(u));
  if (both !== undefined) throw new ConfigError('SVC_CLUSTER_REPLICAS', `${both} is in SVC_CLUSTER_SHARDS too. Fix: a replica is a follower of a shard, not a shard`);
  return {
    shards, shardKey, coordinatorUrl,
    timeoutMs: seconds('SVC_CLUSTER_TIMEOUT_SECS', CLUSTER_TIMEOUT_SECS_DEFAULT, 0.01, TIMEOUT_SECS_MAX),
    mapRefreshMs: seconds('SVC_CLUSTER_MAP_REFRESH_SECS', CLUSTER_MAP_REFRESH_SECS_DEFAULT, 0.01, 86_400),
    replicas,
    replicaMaxLagMs: seconds('SVC_CLUSTER_REPLICA_MAX_LAG_SECS', CLUSTER_REPLICA_MAX_LAG_SECS_DEFAULT, 0, 86_400),
  };
}

/**
 * A read replica's leader: its gRPC URL (CONTRACT.md section 11), the admin key presented there, and for
 * `https://` the PEM files to trust it (SVC_LEADER_CA; the system's roots when unset) and the client
 * certificate shown where it requires mutual TLS (SVC_LEADER_CLIENT_CERT and SVC_LEADER_CLIENT_KEY, set together).
 */
export interface LeaderConfig {
  url: string;
  apiKey: string;
  ca: string | null;
  clientCert: string | null;
  clientKey: string | null;
}

function leaderOf(get: (v: string) => string | undefined, insecure: boolean, cwd: string, warnings: string[]): LeaderConfig | null {
  const url = get('SVC_LEADER_URL');
  const apiKey = get('SVC_LEADER_API_KEY');
  const tls = { ca: get('SVC_LEADER_CA'), clientCert: get('SVC_LEADER_CLIENT_CERT'), clientKey: get('SVC_LEADER_CLIENT_KEY') };
  if (url === undefined) {
    for (const [v, given] of [['SVC_LEADER_API_KEY', apiKey], ['SVC_LEADER_CA', tls.ca], ['SVC_LEADER_CLIENT_CERT', tls.clientCert], ['SVC_LEADER_CLIENT_KEY', tls.clientKey]] as const) {
      if (given !== undefined) throw new ConfigError(v, 'is set without SVC_LEADER_URL. Fix: set the leader\'s gRPC URL too, or remove it');
    }
    return null;
  }
  let u: URL;
  try {
    u = new URL(url);
  } catch {
    throw new ConfigError('SVC_LEADER_URL', 'is not a URL. Fix: the leader\'s gRPC address, like http://leader:6334');
  }
  if (u.username !== '' || u.password !== '') {
    // Never echoed: it holds a credential.
    throw new ConfigError('SVC_LEADER_URL', 'carries a user name or password. Fix: give the leader\'s key in SVC_LEADER_API_KEY');
  }
  if ((u.protocol !== 'http:' && u.protocol !== 'https:') || u.hostname === '' || u.port === '' || u.pathname.length > 1 || u.search !== '' || u.hash !== '') {
    throw new ConfigError('SVC_LEADER_URL', `"${url}" is not http://host:port or https://host:port. Fix: the leader's gRPC address, like http://leader:6334`);
  }
  if (apiKey === undefined && !insecure) {
    throw new ConfigError('SVC_LEADER_API_KEY', 'is required with SVC_LEADER_URL: the Replicate stream needs an admin key on the leader');
  }
  if ((tls.clientCert === undefined) !== (tls.clientKey === undefined)) {
    throw new ConfigError(tls.clientCert === undefined ? 'SVC_LEADER_CLIENT_CERT' : 'SVC_LEADER_CLIENT_KEY', 'SVC_LEADER_CLIENT_CERT and SVC_LEADER_CLIENT_KEY go together. Fix: set both, or neither');
  }
  if (u.protocol === 'http:' && (tls.ca !== undefined || tls.clientCert !== undefined)) {
    throw new ConfigError('SVC_LEADER_URL', `is http:// but TLS files for the leader are set. Fix: use https://${u.host}`);
  }
  if (u.protocol === 'http:' && apiKey !== undefined && !isLoopback(u.hostname.replace(/^\[(.*)\]$/, '$1'))) {
    warnings.push(`SVC_LEADER_URL is http:// to ${u.hostname}: the leader's admin key and every replicated record travel unencrypted. Use https:// with SVC_LEADER_CA`);
  }
  const file = (v: string, p: string | undefined): string | null => {
    if (p === undefined) return null;
    const path = resolve(cwd, p);
    if (!existsSync(path)) throw new ConfigError(v, `${path} does not exist`);
    return path;
  };
  return {
    url: `${u.protocol}//${u.host}`, apiKey: apiKey ?? '',
    ca: file('SVC_LEADER_CA', tls.ca), clientCert: file('SVC_LEADER_CLIENT_CERT', tls.clientCert), clientKey: file('SVC_LEADER_CLIENT_KEY', tls.clientKey),
  };
}

/**
 * The master key alone, read as `svc serve` reads it (SVC_ENCRYPTION_KEY, SVC_MASTER_KEY_FILE, or their
 * svc.toml keys), for admin commands that need nothing else; null when none is configured.
 */
export function loadMasterKey(env: Readonly<Record<string, string | undefined>>, opts: LoadOptions = {}): string | null {
  const cwd = opts.cwd ?? process.cwd();
  const { toml } = readToml(env, cwd, opts.defaultFile === undefined ? 'svc.toml' : opts.defaultFile);
  const raw = mergedValues(env, toml);
  const get = (v: string): string | undefined => (raw[v] === undefined || raw[v] === '' ? undefined : raw[v]);
  return masterKey(get('SVC_ENCRYPTION_KEY'), get('SVC_MASTER_KEY_FILE'), cwd, true, []);
}

/** Most seconds a connection timeout may be: an hour (a larger one is as good as none, and a typo). */
const TIMEOUT_SECS_MAX = 3600;
/** Most connections a listener may be allowed: beyond this the process's descriptors run out first anyway. */
const MAX_CONNECTIONS_LIMIT = 1_000_000;

function connectionLimits(get: (v: string) => string | undefined): ConnectionLimits {
  const v = CONNECTION_LIMIT_VARIABLES;
  const count = (field: 'restMaxConnections' | 'grpcMaxConnections'): number => {
    const s = get(v[field]);
    const n = s === undefined ? DEFAULT_CONNECTION_LIMITS[field] : parseInteger(v[field], s, 1);
    if (n > MAX_CONNECTIONS_LIMIT) throw new ConfigError(v[field], `${n} is more than ${MAX_CONNECTIONS_LIMIT}. Fix: keep it below the process's file limit (ulimit -n)`);
    return n;
  };
  // Seconds, fractions allowed (tests use short ones); at least a millisecond, at most an hour.
  const ms = (field: 'headersTimeoutMs' | 'requestTimeoutMs' | 'keepAliveTimeoutMs' | 'idleTimeoutMs'): number => {
    const s = get(v[field]);
    if (s === undefined) return DEFAULT_CONNECTION_LIMITS[field];
    const secs = parseNumber(v[field], s);
    if (secs < 0.001 || secs > TIMEOUT_SECS_MAX) throw new ConfigError(v[field], `"${s}" is not a number of seconds between 0.001 and ${TIMEOUT_SECS_MAX}`);
    return Math.round(secs * 1000);
  };
  const limits: ConnectionLimits = {
    restMaxConnections: count('restMaxConnections'), grpcMaxConnections: count('grpcMaxConnections'),
    headersTimeoutMs: ms('headersTimeoutMs'), requestTimeoutMs: ms('requestTimeoutMs'),
    keepAliveTimeoutMs: ms('keepAliveTimeoutMs'), idleTimeoutMs: ms('idleTimeoutMs'),
  };
  // node refuses a headers timeout above the request timeout: the headers are part of the request.
  if (limits.headersTimeoutMs > limits.requestTimeoutMs) {
    throw new ConfigError(v.headersTimeoutMs, `${limits.headersTimeoutMs / 1000} is more than ${v.requestTimeoutMs}=${limits.requestTimeoutMs / 1000}. Fix: the headers are part of the request; make it at most the request timeout`);
  }
  return limits;
}

function readToml(env: Readonly<Record<string, string | undefined>>, cwd: string, defaultFile: string | null): { file: string | null; toml: Record<string, unknown> } {
  const named = env.SVC_CONFIG;
  const path = named ? resolve(cwd, named) : defaultFile === null ? null : resolve(cwd, defaultFile);
  if (path === null) return { file: null, toml: {} };
  let text: string;
  try {
    text = readFileSync(path, 'utf8');
  } catch (e) {
    if (!named && (e as NodeJS.ErrnoException).code === 'ENOENT') return { file: null, toml: {} };
    throw new ConfigError('SVC_CONFIG', `cannot read ${path}: ${(e as Error).message}. Fix: point SVC_CONFIG at a readable svc.toml`);
  }
  try {
    return { file: path, toml: parseToml(text) as Record<string, unknown> };
  } catch (e) {
    throw new ConfigError('SVC_CONFIG', `${path} is not valid TOML: ${(e as Error).message.split('\n')[0]}`);
  }
}

/** The file's scalar keys (and the [otlp] table) as variables, then the environment over them. */
function mergedValues(env: Readonly<Record<string, string | undefined>>, toml: Record<string, unknown>): Record<string, string | undefined> {
  const byKey = new Map(SCALAR_VARS.filter((v) => v !== 'SVC_API_KEYS').map((v) => [tomlKey(v), v]));
  const out: Record<string, string | undefined> = {};
  for (const [k, value] of Object.entries(toml)) {
    if (k === 'api_keys' || k === 'embedding' || k === 'rerank') continue;
    if (k === 'otlp') {
      const t = asTable('otlp', value);
      for (const [ok, ov] of Object.entries(t)) {
        if (!['endpoint', 'service_name', 'timeout_secs'].includes(ok)) throw new ConfigError(`[otlp].${ok}`, 'unknown key. Fix: use endpoint, service_name or timeout_secs');
        out[`SVC_OTLP_${ok.toUpperCase()}`] = scalarText(`[otlp].${ok}`, ov);
      }
      continue;
    }
    const variable = byKey.get(k);
    if (variable === undefined) throw new ConfigError(k, `unknown key in svc.toml. Fix: remove it or use a variable of the spec without SVC_, in lower case (for example rest_addr)`);
    out[variable] = scalarText(k, value);
  }
  for (const v of SCALAR_VARS) {
    if (env[v] !== undefined) out[v] = env[v];
  }
  return out;
}

function scalarText(where: string, v: unknown): string {
  if (typeof v === 'string' || typeof v === 'number' || typeof v === 'boolean') return String(v);
  if (Array.isArray(v) && v.every((x) => typeof x === 'string')) return v.join(',');
  throw new ConfigError(where, 'must be a string, number, boolean or list of strings');
}

function asTable(where: string, v: unknown): Record<string, unknown> {
  if (typeof v !== 'object' || v === null || Array.isArray(v) || v instanceof Date) throw new ConfigError(where, 'must be a TOML table');
  return v as Record<string, unknown>;
}

function parseBool(variable: string, s: string): boolean {
  const t = s.trim().toLowerCase();
  if (t === 'true' || t === '1' || t === 'yes') return true;
  if (t === 'false' || t === '0' || t === 'no') return false;
  throw new ConfigError(variable, `"${s}" is not a boolean. Fix: use true or false`);
}

export function parseNumber(variable: string, s: string): number {
  const n = Number(s);
  if (!Number.isFinite(n) || n < 0 || s.trim() === '') throw new ConfigError(variable, `"${s}" is not a non-negative number`);
  return n;
}

function parseInteger(variable: string, s: string, min: number): number {
  const n = Number(s);
  if (!Number.isSafeInteger(n) || n < min || s.trim() === '') throw new ConfigError(variable, `"${s}" is not an integer of at least ${min}`);
  return n;
}

export function parseAddr(variable: string, s: string): HostPort {
  const m = /^(?:\[([^\]]+)\]|([^:]+)):(\d{1,5})$/.exec(s.trim());
  const port = m ? Number(m[3]) : NaN;
  if (!m || port > 65535) throw new ConfigError(variable, `"${s}" is not host:port. Fix: for example 127.0.0.1:6333 or [::1]:6333`);
  return { host: m[1] ?? m[2], port };
}

export function isLoopback(host: string): boolean {
  if (host === 'localhost' || host === '::1') return true;
  return isIP(host) === 4 && host.startsWith('127.');
}

function envKeys(s: string | undefined): ApiKey[] {
  if (s === undefined) return [];
  const parts = s.split(',').map((p) => p.trim());
  if (parts.some((p) => p === '')) throw new ConfigError('SVC_API_KEYS', 'contains an empty key. Fix: a comma-separated list of non-empty secrets');
  return parts.map((secret, i) => ({ name: `env:${i}`, role: 'admin' as Role, collections: ['*'], secret }));
}

const HEX64 = /^[0-9a-fA-F]{64}$/;

function tomlKeys(v: unknown): ApiKey[] {
  if (v === undefined) return [];
  if (!Array.isArray(v)) throw new ConfigError('[[api_keys]]', 'must be an array of tables');
  return v.map((entry, i) => {
    const where = `[[api_keys]] #${i + 1}`;
    const t = asTable(where, entry);
    for (const k of Object.keys(t)) {
      if (!['name', 'role', 'collections', 'key', 'key_sha256'].includes(k)) throw new ConfigError(`${where}.${k}`, 'unknown key. Fix: use name, role, collections, key or key_sha256');
    }
    if (typeof t.name !== 'string' || t.name === '' || t.name.startsWith('env:')) throw new ConfigError(`${where}.name`, 'needs a non-empty name (not starting with env:)');
    if (t.role !== 'read' && t.role !== 'write' && t.role !== 'admin') throw new ConfigError(`${where}.role`, 'must be read, write or admin');
    if (!Array.isArray(t.collections) || t.collections.length === 0 || !t.collections.every((c) => typeof c === 'string' && c !== '')) {
      throw new ConfigError(`${where}.collections`, 'must be a non-empty list of names or trailing-* prefixes, for example ["team_a.*"]');
    }
    const hasKey = typeof t.key === 'string' && t.key !== '';
    const hasHash = typeof t.key_sha256 === 'string';
    if (hasKey === hasHash) throw new ConfigError(`${where}.key`, 'set exactly one of key or key_sha256');
    if (hasHash && !HEX64.test(t.key_sha256 as string)) throw new ConfigError(`${where}.key_sha256`, 'must be 64 hex characters (sha256sum of the secret)');
    const key: ApiKey = { name: t.name, role: t.role, collections: t.collections as string[] };
    if (hasKey) key.secret = t.key as string; else key.sha256 = (t.key_sha256 as string).toLowerCase();
    return key;
  });
}

function checkUniqueNames(keys: ApiKey[]): void {
  const seen = new Set<string>();
  for (const k of keys) {
    if (seen.has(k.name)) throw new ConfigError('[[api_keys]]', `the name ${k.name} is used twice. Fix: give every key its own name (audit lines use it)`);
    seen.add(k.name);
  }
}

function masterKey(direct: string | undefined, file: string | undefined, cwd: string, insecure: boolean, warnings: string[]): string | null {
  if (direct !== undefined && file !== undefined) {
    throw new ConfigError('SVC_ENCRYPTION_KEY', 'both SVC_ENCRYPTION_KEY and SVC_MASTER_KEY_FILE are set. Fix: set exactly one of them');
  }
  if (direct === undefined && file === undefined) {
    if (insecure) {
      warnings.push('no master key: data is written WITHOUT encryption at rest (SVC_INSECURE=true)');
      return null;
    }
    throw new ConfigError('SVC_ENCRYPTION_KEY', 'no master key. Fix: set SVC_ENCRYPTION_KEY to 64 hex characters (`openssl rand -hex 32`) or SVC_MASTER_KEY_FILE to a file holding them (mode 0600); SVC_INSECURE=true waives this');
  }
  let text = direct;
  const variable = direct !== undefined ? 'SVC_ENCRYPTION_KEY' : 'SVC_MASTER_KEY_FILE';
  if (file !== undefined) {
    const path = resolve(cwd, file);
    try {
      text = readFileSync(path, 'utf8');
      if ((statSync(path).mode & 0o077) !== 0) warnings.push(`SVC_MASTER_KEY_FILE ${path} is readable by group or others: chmod 600 it`);
    } catch (e) {
      throw new ConfigError('SVC_MASTER_KEY_FILE', `cannot read ${path}: ${(e as Error).message}. Fix: point it at a readable file with 64 hex characters`);
    }
  }
  const key = (text ?? '').trim();
  // A key given wrongly is refused even when insecure: silently dropping it would turn off the encryption asked for.
  if (!HEX64.test(key)) throw new ConfigError(variable, 'the master key must be exactly 64 hex characters (256 bits). Fix: `openssl rand -hex 32`');
  return key.toLowerCase();
}

function tlsFiles(cert: string | undefined, key: string | undefined, ca: string | undefined, cwd: string, insecure: boolean, warnings: string[]): TlsFiles | null {
  if ((cert === undefined) !== (key === undefined)) {
    const missing = cert === undefined ? 'SVC_TLS_CERT' : 'SVC_TLS_KEY';
    if (!insecure) throw new ConfigError(missing, 'SVC_TLS_CERT and SVC_TLS_KEY must be set together. Fix: set both (PEM chain and private key) or neither');
    warnings.push(`${missing} is missing: TLS is off (SVC_INSECURE=true)`);
    cert = key = undefined;
  }
  if (cert === undefined || key === undefined) {
    if (ca !== undefined) {
      if (!insecure) throw new ConfigError('SVC_TLS_CLIENT_CA', 'client certificates need TLS. Fix: also set SVC_TLS_CERT and SVC_TLS_KEY, or unset SVC_TLS_CLIENT_CA');
      warnings.push('SVC_TLS_CLIENT_CA is ignored without TLS (SVC_INSECURE=true)');
    }
    return null;
  }
  const files: TlsFiles = { cert: resolve(cwd, cert), key: resolve(cwd, key), clientCa: ca === undefined ? null : resolve(cwd, ca) };
  for (const [variable, path] of [['SVC_TLS_CERT', files.cert], ['SVC_TLS_KEY', files.key], ['SVC_TLS_CLIENT_CA', files.clientCa]] as const) {
    if (path === null) continue;
    try {
      readFileSync(path);
    } catch (e) {
      throw new ConfigError(variable, `cannot read ${path}: ${(e as Error).message}`);
    }
  }
  return files;
}

function providerTables(kind: string, v: unknown, env: Readonly<Record<string, string | undefined>>): Record<string, ProviderTable> {
  if (v === undefined) return {};
  const out: Record<string, ProviderTable> = {};
  for (const [collection, table] of Object.entries(asTable(`[${kind}]`, v))) {
    const t = asTable(`[${kind}.${collection}]`, table);
    if (typeof t.provider !== 'string') throw new ConfigError(`[${kind}.${collection}].provider`, 'is required');
    const envName = t.api_key_env;
    if (envName !== undefined && (typeof envName !== 'string' || !env[envName])) {
      throw new ConfigError(`[${kind}.${collection}].api_key_env`, `names ${String(envName)}, which is not set. Fix: export ${String(envName)} with the provider's key`);
    }
    out[collection] = { ...t };
  }
  return out;
}

function deepFreeze<T>(o: T): T {
  if (typeof o === 'object' && o !== null && !Object.isFrozen(o)) {
    Object.freeze(o);
    for (const v of Object.values(o)) deepFreeze(v);
  }
  return o;
}
