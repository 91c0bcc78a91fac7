import { DEFAULT_LIMITS, LIMIT_VARIABLES, type Limits } from '../../core/base/limits.js';
import { CLUSTER_MAP_REFRESH_SECS_DEFAULT, CLUSTER_REPLICA_MAX_LAG_SECS_DEFAULT, CLUSTER_TIMEOUT_SECS_DEFAULT, REPLICATION_RETAIN_BYTES_DEFAULT } from '../config.js';
import { CONNECTION_LIMIT_VARIABLES, DEFAULT_CONNECTION_LIMITS, type ConnectionLimits } from '../connection-limits.js';
import { DEFAULT_TUI_URL } from '../tui/defaults.js';

/**
 * Every environment variable svc reads, with its default and meaning: the one source of
 * docs/reference/config.md and of `svc serve --help`. The limits' and connection limits' defaults come
 * from their tables in code; the others are the literals of roles/config.ts, held equal to what
 * loadConfig does by roles/reference/reference.test.ts, which also fails when config.ts reads a
 * variable that is not listed here.
 */
export type VariableGroup = 'server' | 'keys' | 'tls' | 'limits' | 'connections' | 'observability' | 'engine' | 'replica' | 'cluster' | 'commands' | 'tests';

export interface ConfigVariable {
  name: string;
  default: string;
  meaning: string;
  group: VariableGroup;
  /** false: read from the environment only, never from svc.toml (commands that do not load it). */
  file?: false;
}

export const GROUP_TITLES: Readonly<Record<VariableGroup, string>> = {
  server: 'Addresses, data, configuration file',
  keys: 'Keys and encryption at rest',
  tls: 'TLS',
  limits: 'Per-request limits (a request over one is refused with `limit_exceeded` naming the variable)',
  connections: 'Connections, per listener (timeouts in seconds, fractions allowed)',
  observability: 'Logs, audit, traces, rate limiting',
  engine: 'Search and storage',
  replica: 'Read replicas (docs/server.md, Read replicas)',
  cluster: 'Cluster (docs/cluster.md): the router, the coordinator and autoscaling act on these; read replicas of shards and the consensus ones are accepted and kept for the roles still to come',
  commands: 'Other commands (`svc mcp`, `svc tui`, `svc demo`)',
  tests: 'Tests and soaks (read by the test suites, not by svc)',
};

const none = 'none';

const LIMIT_MEANINGS: Readonly<Record<keyof Limits, string>> = {
  maxK: 'most hits a query may ask for (`k`, and the rerank pool)',
  maxEfSearch: 'largest `ef_search` a query may set',
  maxFetchLimit: 'largest `limit` of a `points:fetch` page',
  maxVectorDim: 'largest collection dimension',
  maxPayloadBytes: 'largest payload of one point, as serialized JSON',
  maxBatchSize: 'most points (texts, documents) in one upsert',
  maxRequestBodyBytes: 'largest request body (REST) or message (gRPC, either way; MCP line)',
  maxSparseTerms: 'most terms of a sparse vector or of an analysed text query',
  maxBulkBatchSize: 'most points in one `points:bulk`',
};

const CONNECTION_MEANINGS: Readonly<Record<keyof ConnectionLimits, string>> = {
  restMaxConnections: 'connections open at once on the REST listener; more are closed at accept',
  grpcMaxConnections: 'the same for the gRPC listener',
  headersTimeoutMs: 'a request\'s headers, a TLS handshake, an HTTP/2 connection\'s first stream must arrive within it',
  requestTimeoutMs: 'a whole request, body included, must arrive within it (it does not bound the answer)',
  keepAliveTimeoutMs: 'an idle HTTP/1.1 keep-alive connection is closed after it',
  idleTimeoutMs: 'an HTTP/2 connection (REST over TLS, gRPC) with no stream open is closed (GOAWAY) after it',
};

const limits: ConfigVariable[] = (Object.keys(LIMIT_VARIABLES) as (keyof Limits)[]).map((field) => ({
  name: LIMIT_VARIABLES[field], default: String(DEFAULT_LIMITS[field]), meaning: LIMIT_MEANINGS[field], group: 'limits',
}));

const connections: ConfigVariable[] = (Object.keys(CONNECTION_LIMIT_VARIABLES) as (keyof ConnectionLimits)[]).map((field) => ({
  name: CONNECTION_LIMIT_VARIABLES[field],
  default: String(field.endsWith('Ms') ? DEFAULT_CONNECTION_LIMITS[field] / 1000 : DEFAULT_CONNECTION_LIMITS[field]),
  meaning: CONNECTION_MEANINGS[field],
  group: 'connections',
}));

const cluster = (name: string, meaning: string): ConfigVariable => ({ name, default: none, meaning, group: 'cluster' });

export const CONFIG_VARIABLES: readonly ConfigVariable[] = [
  { name: 'SVC_REST_ADDR', default: '127.0.0.1:6333', meaning: 'REST bind address (host:port); a non-loopback host needs TLS (or SVC_INSECURE)', group: 'server' },
  { name: 'SVC_GRPC_ADDR', default: '127.0.0.1:6334', meaning: 'gRPC bind address; the same rule', group: 'server' },
  { name: 'SVC_DATA_DIR', default: './svc-data', meaning: 'the data directory: segments, write-ahead log, manifest (held by one process at a time)', group: 'server' },
  { name: 'SVC_SNAPSHOT_DIR', default: '<data dir>-snapshots', meaning: 'where `POST /v1/snapshots` writes; a snapshot is itself a data directory', group: 'server' },
  { name: 'SVC_CONFIG', default: './svc.toml, if present', meaning: 'the configuration file; in it a variable is written without SVC_, in lower case (`rest_addr`), plus `[[api_keys]]`, `[otlp]`, `[embedding.<collection>]`, `[rerank.<collection>]`', group: 'server', file: false },
  { name: 'SVC_API_KEYS', default: none, meaning: 'comma-separated admin keys for every collection (scoped keys: `[[api_keys]]` in svc.toml); required unless SVC_INSECURE', group: 'keys' },
  { name: 'SVC_ENCRYPTION_KEY', default: none, meaning: 'the master key, 64 hex characters (`openssl rand -hex 32`); keep it: the data cannot be read without it. Required unless SVC_INSECURE', group: 'keys' },
  { name: 'SVC_MASTER_KEY_FILE', default: none, meaning: 'a file holding the master key (mode 0600), instead of SVC_ENCRYPTION_KEY (set one of the two)', group: 'keys' },
  { name: 'SVC_INSECURE', default: 'false', meaning: 'development only: allows no API keys, no encryption at rest, a non-loopback bind without TLS (each with a warning)', group: 'keys' },
  { name: 'SVC_TLS_CERT', default: none, meaning: 'PEM certificate chain; with SVC_TLS_KEY, REST serves HTTPS (HTTP/2 and HTTP/1.1) and gRPC TLS', group: 'tls' },
  { name: 'SVC_TLS_KEY', default: none, meaning: 'PEM private key of SVC_TLS_CERT (set the two together)', group: 'tls' },
  { name: 'SVC_TLS_CLIENT_CA', default: none, meaning: 'PEM CA: both transports then require a client certificate chaining to it, besides the API key', group: 'tls' },
  ...limits,
  ...connections,
  { name: 'RUST_LOG', default: 'info', meaning: 'log filter (a level, or `target=level` pairs such as `svc::audit=info`); logs are JSON on stderr', group: 'observability' },
  { name: 'SVC_AUDIT_LOG', default: none, meaning: 'path of the append-only, hash-chained JSON Lines audit log (`svc admin verify-audit` checks it)', group: 'observability' },
  { name: 'SVC_OTLP_ENDPOINT', default: none, meaning: 'OTLP/gRPC trace export target (`http://host:port`); unset: spans go to the log only', group: 'observability' },
  { name: 'SVC_OTLP_SERVICE_NAME', default: 'svc', meaning: '`service.name` of exported traces', group: 'observability' },
  { name: 'SVC_OTLP_TIMEOUT_SECS', default: '3', meaning: 'trace export timeout', group: 'observability' },
  { name: 'SVC_RATE_LIMIT_REQUESTS_PER_SECOND', default: '0', meaning: 'per-key token bucket refill; 0 turns rate limiting off', group: 'observability' },
  { name: 'SVC_RATE_LIMIT_BURST', default: '0', meaning: 'per-key bucket capacity; 0 means one second\'s worth of requests', group: 'observability' },
  { name: 'SVC_SEARCH_WORKERS', default: 'auto', meaning: 'threads running dense searches: auto is one per core but the event loop\'s, at most 4; 0 runs every search on the event loop', group: 'engine' },
  { name: 'SVC_BUILD_WORKERS', default: 'auto', meaning: 'threads building one large graph: auto is every core but the search workers\', at least two on two cores, at most 15 less the search workers', group: 'engine' },
  { name: 'SVC_HTTP_LOOPS', default: 'auto', meaning: 'event loops (threads) answering REST and gRPC on the same ports over one engine: auto is a quarter of the cores (at least 2, at most 16) from 4 cores on where the runtime can share a port, else 1 (Node 20, fewer than 4 cores); above 1 needs Node 22.12+ on Linux', group: 'engine' },
  { name: 'SVC_REPLICATION_RETAIN_BYTES', default: String(REPLICATION_RETAIN_BYTES_DEFAULT), meaning: 'most bytes of WAL a leader keeps only for connected replicas; past it the slowest re-bootstraps (on a consensus member: bytes of its in-memory consensus log kept past its compaction for replicas, at most 256 MiB)', group: 'engine' },
  { name: 'SVC_LEADER_URL', default: none, meaning: 'run as a read replica of this leader\'s gRPC address (`http://host:port` or `https://`); unset: a read-write leader', group: 'replica' },
  { name: 'SVC_LEADER_API_KEY', default: none, meaning: 'an admin key scoped to `*` on the leader; required with SVC_LEADER_URL unless SVC_INSECURE', group: 'replica' },
  { name: 'SVC_LEADER_CA', default: 'the system\'s roots', meaning: '`https://` leader only: PEM CA to trust its certificate', group: 'replica' },
  { name: 'SVC_LEADER_CLIENT_CERT', default: none, meaning: '`https://` leader only: client certificate for a leader that requires one (with SVC_LEADER_CLIENT_KEY)', group: 'replica' },
  { name: 'SVC_LEADER_CLIENT_KEY', default: none, meaning: 'its private key', group: 'replica' },
  { name: 'SVC_MVCC_READS', default: 'false', meaning: 'experimental lock-free reads (the spec\'s); accepted, not acted on by this build', group: 'cluster' },
  cluster('SVC_CLUSTER_SHARDS', 'bracketed list of shard REST base URLs (ids 0, 1, 2, ... in this order): the server becomes a router, with no data directory'),
  cluster('SVC_CLUSTER_SHARD_KEY', 'key a router or coordinator presents to shards, and a router to its coordinator: an admin key scoped to `*` there'),
  cluster('SVC_CLUSTER_REPLICAS', 'per-shard read replicas (followers of that shard), `<shard_index>=<url>`, comma-separated, the index of SVC_CLUSTER_SHARDS: a router spreads reads over them (fewest in flight first), falling back to the primary; writes and `consistency: "strong"` reads go to the primary; a coordinator keeps them in its map'),
  { name: 'SVC_CLUSTER_TIMEOUT_SECS', default: String(CLUSTER_TIMEOUT_SECS_DEFAULT), meaning: 'router: the most one call to a shard may take, retries of a read included; past it the request fails with `unavailable` naming the shard', group: 'cluster' },
  { name: 'SVC_CLUSTER_REPLICA_MAX_LAG_SECS', default: String(CLUSTER_REPLICA_MAX_LAG_SECS_DEFAULT), meaning: 'router: a read replica further behind its leader than this (its svc_replication_lag_seconds) gets no reads until it catches up', group: 'cluster' },
  { name: 'SVC_CLUSTER_MAP_REFRESH_SECS', default: String(CLUSTER_MAP_REFRESH_SECS_DEFAULT), meaning: 'router: how often it reads the shard map from SVC_COORDINATOR_URL', group: 'cluster' },
  { name: 'SVC_COORDINATOR', default: 'false', meaning: 'run as the cluster coordinator (membership API, no data plane)', group: 'cluster' },
  cluster('SVC_COORDINATOR_STATE', 'file where the coordinator keeps its shard map and id counter, written atomically (unset: in memory only, with a warning)'),
  cluster('SVC_COORDINATOR_URL', 'the coordinator a router reads its shard map from (it routes by SVC_CLUSTER_SHARDS until the coordinator answers); alone, it makes the server a router too'),
  { name: 'SVC_AUTOSCALE_ENABLED', default: 'false', meaning: 'automatic scale-out on the coordinator', group: 'cluster' },
  { name: 'SVC_AUTOSCALE_HIGH_WATER_POINTS', default: '0', meaning: 'per-shard point count above which to scale out; 0 disables', group: 'cluster' },
  cluster('SVC_AUTOSCALE_STANDBY_URLS', 'standby shard URLs, one consumed per scale-out'),
  { name: 'SVC_AUTOSCALE_INTERVAL_SECS', default: '30', meaning: 'how often the coordinator samples each shard\'s point count', group: 'cluster' },
  { name: 'SVC_REBALANCE_BATCH_POINTS', default: '1000', meaning: 'points per rebalance batch on a coordinator (1 to 10000); a batch holds its source\'s writes until its commit', group: 'cluster' },
  { name: 'SVC_AUTOSCALE_COOLDOWN_SECS', default: '300', meaning: 'least time between scale-outs (kept across coordinator restarts)', group: 'cluster' },
  cluster('SVC_AUTOSCALE_MAX_SHARDS', 'most shards'),
  cluster('SVC_RAFT_NODE_ID', 'this node\'s id in its shard\'s consensus group'),
  cluster('SVC_RAFT_MEMBERS', 'the group\'s members, `<id>=<url>,...`'),
  cluster('SVC_RAFT_SECRET', 'the consensus group\'s shared secret, the same on every member, at least 32 characters (`openssl rand -hex 32`): members prove it to each other both ways by HMAC challenge-response with fresh nonces; it is never sent or logged. Needed unless mutual TLS (SVC_TLS_CERT, SVC_TLS_KEY, SVC_TLS_CLIENT_CA) authenticates them, or SVC_INSECURE; a non-loopback consensus address also needs TLS'),
  cluster('SVC_RAFT_TLS_CA', 'the CA consensus members\' certificates chain to: with TLS, members verify each other both ways on the consensus port only (REST and gRPC need no client certificate); default SVC_TLS_CLIENT_CA'),
  { name: 'SVC_RAFT_HEARTBEAT_MS', default: '100', meaning: 'a consensus leader\'s heartbeat interval; the same on every member', group: 'cluster' },
  { name: 'SVC_RAFT_ELECTION_MS', default: '1000', meaning: 'a member that hears no leader for a random 1 to 2 times this starts an election (at least three heartbeats; about ten is usual)', group: 'cluster' },
  { name: 'SVC_RAFT_WRITE_TIMEOUT_SECS', default: '10', meaning: 'how long a write on a consensus member may wait for a leader and a quorum; past it the write is `unavailable` and not acknowledged (it may still be applied)', group: 'cluster' },
  { name: 'SVC_RAFT_SNAPSHOT_ENTRIES', default: '10000', meaning: 'applied writes between two snapshots of a consensus member; each snapshot bounds the log, which keeps a quarter of this many entries before it for followers a little behind', group: 'cluster' },
  { name: 'SVC_API_KEY', default: none, meaning: 'the key `svc mcp` acts as (one of SVC_API_KEYS or `[[api_keys]]`), and `svc tui`\'s bearer', group: 'commands' },
  { name: 'SVC_TUI_URL', default: DEFAULT_TUI_URL, meaning: 'the server `svc tui` watches', group: 'commands', file: false },
  { name: 'SVC_DEMO_DIR', default: 'the platform data directory (`~/.local/share/svc/demo` on Linux)', meaning: '`svc demo`\'s data directory, master key file and API key file', group: 'commands', file: false },
  { name: 'SVC_CRASH_TRIALS', default: '20', meaning: 'SIGKILLs of a writer in core/collection/crash.test.ts (`npm run soak:crash` runs 200)', group: 'tests' },
  { name: 'SVC_CRASH_SEED', default: '1234', meaning: 'its seed', group: 'tests' },
  { name: 'SVC_FOLLOWER_SIM_SEEDS', default: '6', meaning: 'seeds of the read-replica simulation (`npm run sim:follower` runs 200)', group: 'tests' },
  { name: 'SVC_FOLLOWER_SIM_SEED', default: '1', meaning: 'its first seed (to replay one)', group: 'tests' },
  { name: 'SVC_RAFT_SIM_SEEDS', default: '300', meaning: 'seeds of the Raft simulation in core/testing/raft-sim.test.ts (`npm run sim:raft -- --seeds N` runs any number)', group: 'tests' },
  { name: 'SVC_RAFT_SIM_SEED', default: '1', meaning: 'its first seed (`npm run sim:raft -- --seed N --trace` replays one)', group: 'tests' },
  { name: 'SVC_RAFT_SIM_FILE_SEEDS', default: '30', meaning: 'seeds of that simulation run again with every member\'s log in real files (`npm run sim:raft -- --seeds N --files` runs any number)', group: 'tests' },
  { name: 'SVC_RAFT_KILL_TRIALS', default: '8', meaning: 'SIGKILLs of a consensus-log writer in core/storage/raft-log-kill.test.ts', group: 'tests' },
  { name: 'SVC_RAFT_KILL_SEED', default: '77', meaning: 'its seed', group: 'tests' },
  { name: 'SVC_RAFT_REWRITE', default: 'unset', meaning: '`1` writes the actual outputs into the Raft transcripts (core/cluster/raft/testdata/*.txt) instead of comparing, for review in the diff', group: 'tests' },
  { name: 'SVC_OPS_SEEDS', default: '8', meaning: 'seeds of the randomized count / payload / delete-by-filter check (core/collection/point-ops.test.ts)', group: 'tests' },
  { name: 'SVC_OPS_SEED', default: '1', meaning: 'its first seed (to replay one)', group: 'tests' },
  { name: 'SVC_ENGINE_SEEDS', default: '3', meaning: 'seeds of the engine-over-three-shards check against one node (core/engine/engine.test.ts)', group: 'tests' },
  { name: 'SVC_MODEL_RUNS', default: '40', meaning: 'runs of the collection model test (core/collection/model.test.ts)', group: 'tests' },
  { name: 'SVC_MODEL_SEED', default: '20240611', meaning: 'its seed', group: 'tests' },
];

/** The variables of `svc serve` (and `svc mcp`): every group but the test suites'. */
export const SERVE_VARIABLES: readonly ConfigVariable[] = CONFIG_VARIABLES.filter((v) => v.group !== 'tests');
