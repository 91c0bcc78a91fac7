import { readFileSync } from 'node:fs';
import type { AddressInfo } from 'node:net';
import type { FastifyInstance } from 'fastify';
import { systemClock } from '../../core/base/clock.js';
import { Follower } from '../../core/cluster/replication/follower.js';
import { followerEngine } from '../../core/cluster/replication/follower-engine.js';
import { ReplicaStore } from '../../core/cluster/replication/replica-store.js';
import type { Database } from '../../core/collection/database.js';
import { openStorage, type ProvidersOptions } from '../../core/open-storage.js';
import { NodeEngine } from '../../core/engine/node.js';
import type { EngineApi } from '../../core/service/api.js';
import { createService, type Service } from '../../core/service/service.js';
import { ConfigError, loadConfig, type LeaderConfig, type SvcConfig } from '../config.js';
import { grpcReplicationSource } from '../grpc/replicate-client.js';
import { startGrpcServer } from '../grpc/server.js';
import { FileAuditSink } from '../log-audit.js';
import { createLogs, type Logs } from '../log.js';
import { httpLoopCount, startLoops, type Loops } from '../loops/loops.js';
import { ReadGate } from '../loops/read-gate.js';
import { serviceParts } from '../service-parts.js';
import { providersFromConfig } from '../providers.js';
import type { ClosableTracer } from '../../core/service/tracing.js';
import { createPromMetrics } from '../rest/metrics.js';
import { buildRestApp, type RestState } from '../rest/server.js';
import { variablesHelp } from '../reference/markdown.js';
import { raftNetConfig, type RaftNetConfig } from '../raft/config.js';
import type { ConsensusHost } from '../raft/member-host.js';
import { addClusterRaftRoute } from '../raft/rest.js';
import { registerCommand } from './commands.js';

export interface RunningServer {
  restPort: number;
  grpcPort: number | null;
  service: Service;
  engine: EngineApi;
  /** The request loops when SVC_HTTP_LOOPS is above 1 (roles/loops/), else null: this thread listens. */
  loops: Loops | null;
  /** Stop accepting, let requests in flight finish, close the database and the audit log. */
  close(): Promise<void>;
}

/**
 * config -> REST listening (readyz 503) -> openDatabase -> service -> ready, plus gRPC.
 * `fallbackToFreePort` (demo) binds a free port when the configured one is taken.
 */
export async function startServer(
  config: SvcConfig, logs: Logs, opts: { fallbackToFreePort?: boolean; env?: Readonly<Record<string, string | undefined>> } = {},
): Promise<RunningServer> {
  const log = logs.target('svc');
  // api_key_env is resolved here, once; the keys live only in the provider adapters' memory.
  const providers = providersFromConfig(config, opts.env ?? process.env);
  for (const w of config.warnings) (w.includes('SVC_INSECURE') ? log.error.bind(log) : log.warn.bind(log))({ warning: true }, w);

  // SVC_RAFT_MEMBERS: this node is a member of its shard's consensus group (roles/raft, docs/consensus.md).
  const raft = raftNetConfig(config);
  if (raft !== null && config.leader !== null) {
    throw new ConfigError('SVC_RAFT_MEMBERS', 'a consensus member takes writes, so it cannot also follow a leader. Fix: unset SVC_LEADER_URL, or SVC_RAFT_MEMBERS');
  }
  for (const w of raft?.warnings ?? []) log.error({ warning: true }, w);

  const metrics = createPromMetrics();
  const state: RestState = { service: null };
  let consensus: ConsensusHost | null = null;
  const loopCount = await httpLoopCount(config, log);
  // SVC_HTTP_LOOPS above 1: the loops listen (roles/loops/), this thread keeps the engine.
  const refs: { engine: EngineApi | null; audit: FileAuditSink | null } = { engine: null, audit: null };
  // The loops search the database's collections themselves, over shared memory (roles/loops/local-reads.ts),
  // while the gate is open: the engine would answer from that database with no other condition (a read
  // replica bootstrapping or swapping a re-bootstrap in, a consensus member restoring: read-gate.ts).
  const gate = loopCount > 1 ? new ReadGate() : null;
  let app: FastifyInstance | null = null;
  let loops: Loops | null = null;
  let restPort: number;
  if (loopCount === 1) {
    const rest = buildRestApp(state, { limits: config.limits, metrics, log: logs.target('svc::rest'), tls: config.tls, connections: config.connections });
    app = rest;
    if (raft !== null) addClusterRaftRoute(rest, state, () => consensus?.view() ?? null, metrics);
    const listen = async (port: number): Promise<void> => { await rest.listen({ host: config.restAddr.host, port }); };
    try {
      await listen(config.restAddr.port);
    } catch (e) {
      if (!opts.fallbackToFreePort || (e as NodeJS.ErrnoException).code !== 'EADDRINUSE') throw e;
      await listen(0);
    }
    restPort = (rest.server.address() as AddressInfo).port;
  } else {
    loops = await startLoops({
      role: 'node', config, providers, count: loopCount, logs, metrics, engine: () => refs.engine, reads: gate,
      busy: () => (state.service === null ? null : state.busy?.() ?? null) as string | null,
      raftView: raft === null ? null : () => consensus?.view() ?? null,
      audit: config.auditLog === null ? null : (r) => refs.audit?.append(r),
      fallbackToFreePort: opts.fallbackToFreePort ?? false,
    });
    restPort = loops.restPort;
  }
  const closeListeners = async (): Promise<void> => { await (app !== null ? app.close() : loops!.close()); };

  let ready: { engine: EngineApi; service: Service; fileSink: FileAuditSink | null; grpc: { port: number; close(): Promise<void> } | null; tracer: ClosableTracer };
  try {
    ready = await openAndServe(config, providers, logs, metrics, state, opts.fallbackToFreePort ?? false, raft, loops, gate, (h) => { consensus = h; }, (engine, fileSink) => {
      refs.engine = engine;
      refs.audit = fileSink;
    });
  } catch (e) {
    await closeListeners();
    throw e;
  }
  const { engine, service, fileSink, grpc, tracer } = ready;
  const grpcPort = loops?.grpcPort ?? grpc?.port ?? null;
  log.info({ rest_port: restPort, grpc_port: grpcPort, tls: config.tls !== null, data_dir: config.dataDir, http_loops: loopCount }, 'svc ready');

  let closing: Promise<void> | null = null;
  return {
    restPort, grpcPort, service, engine, loops,
    close() {
      closing ??= (async () => {
        await Promise.all([closeListeners(), grpc?.close()]);
        await engine.close();
        fileSink?.close();
        await tracer.shutdown();
      })();
      return closing;
    },
  };
}

async function openAndServe(
  config: SvcConfig, providers: ProvidersOptions, logs: Logs, metrics: ReturnType<typeof createPromMetrics>, state: RestState, fallback: boolean,
  raft: RaftNetConfig | null, loops: Loops | null, gate: ReadGate | null, onConsensus: (h: ConsensusHost) => void,
  onOpen: (engine: EngineApi, fileSink: FileAuditSink | null) => void,
) {
  // The node's engine over each database it serves (a read replica's re-bootstrap swaps in a new one):
  // text, fusion and reranking there, with the providers of the config; the rest is the database's own.
  const engines = new WeakMap<Database, NodeEngine<Database>>();
  let built: Omit<Awaited<ReturnType<typeof openStorage>>, 'storage'> | null = null;
  const engineOf = (db: Database): NodeEngine<Database> => {
    let e = engines.get(db);
    if (e === undefined) engines.set(db, e = new NodeEngine(db, built!));
    return e;
  };
  const open = async (dataDir: string, side = false): Promise<Database> => {
    const { storage, ...providers } = await openStorage(openOptions(dataDir, side));
    built ??= providers;
    return storage;
  };
  const openOptions = (dataDir: string, side: boolean): Parameters<typeof openStorage>[0] => ({
    dataDir,
    ...(config.encryptionKey !== null ? { encryptionKey: config.encryptionKey } : { insecure: true }),
    limits: config.limits,
    ...(config.snapshotDir !== null ? { snapshotDir: config.snapshotDir } : {}),
    providers,
    // A re-bootstrap's side directory is written, not searched, until it is swapped in (and reopened).
    searchWorkers: side ? 0 : config.searchWorkers,
    ...(config.buildWorkers !== null ? { buildWorkers: config.buildWorkers } : {}),
    replicationRetainBytes: config.replicationRetainBytes,
    // Server reads never wait for a rebuild unless they ask for strong (the spec's freshness states).
    waitForBulkBuild: false,
    // A read replica's graphs take new points in a build worker: its event loop applies the leader's
    // records instead of queueing them behind main-thread inserts (bench:replication's lag).
    absorbOffThread: config.leader !== null,
    // A consensus member's WAL tail is a copy of its consensus log: damage a power loss left there is
    // cut at open and replayed from the log (decided here, before the WAL's recovery runs).
    consensus: raft !== null,
    // Several loops over the database served: they read its collections from shared memory.
    sharedReads: gate !== null && !side,
    // Storage and index warnings (a torn WAL tail, a graph file not used): the operator's to see.
    log: (level, message, detail) => logs.target('svc::db')[level](detail ?? {}, message),
  });
  const store = config.leader === null ? null : await ReplicaStore.open({
    dataDir: config.dataDir, openDb: open, monotonicMs: () => performance.now(),
    log: (message, detail) => logs.target('svc::replication').info(detail ?? {}, message),
    onChange: () => gate?.update(),
  });
  const current = (): Database => store?.current ?? leaderDb!;
  const leaderDb = store === null ? await open(config.dataDir) : null;
  const follower = store === null ? null : startFollower(config, config.leader!, store, logs, metrics, () => gate?.update());
  let consensus: ConsensusHost | null = null;
  if (raft !== null) {
    const rlog = logs.target('svc::raft');
    try {
      const { startConsensusMember } = await import('../raft/member-host.js');
      consensus = await startConsensusMember(raft, leaderDb!, engineOf(leaderDb!), config.dataDir, config.encryptionKey, (level, message, detail) => rlog[level](detail ?? {}, message), { replicaHoldBytes: config.replicationRetainBytes });
    } catch (e) {
      await leaderDb!.close().catch(() => undefined);
      throw e;
    }
    onConsensus(consensus);
    const c = consensus;
    metrics.setConsensusSource(() => c.metrics());
    // Its reads answer 503 while it refills its database from a leader's snapshot: not ready meanwhile.
    state.busy = () => (c.restoring ? 'this consensus member is restoring a snapshot from its leader'
      : c.replaying ? 'this consensus member is applying its log again after a restart' : null);
    c.watchRestoring(() => gate?.update());
  }
  // A single node serves its engine; a consensus member's and a read replica's rules wrap theirs.
  const engine: EngineApi = consensus !== null ? consensus.engine : follower === null ? engineOf(leaderDb!) : followerEngine({
    current: () => engineOf(current()), read: (fn) => store!.read((db) => fn(engineOf(db))), follower, leaderUrl: config.leader!.url, close: () => store!.close(),
  });
  const { fileSink, tracer, options } = await serviceParts(config, logs, metrics);
  // With several loops this thread's service (the demo's, an embedding caller's) draws on their buckets.
  const service = createService(engine, { ...options, ...(loops !== null ? { rateLimiter: loops.rateLimiter } : {}) });
  onOpen(engine, fileSink);
  // The loops' own searches read the database exactly where this engine would, with no other condition:
  // a read replica's once it serves reads (its first bootstrap done, none running in place) and no swap
  // runs (a read waits for it, then reads the new database); a consensus member's while it restores no
  // snapshot (its non-strong reads are `unavailable` then; strong ones never reach a loop's view).
  const c = consensus;
  gate?.follow(c !== null ? () => (c.restoring || c.replaying ? null : leaderDb)
    : follower !== null ? () => (follower.serving ? store!.readable : null)
      : () => leaderDb);
  metrics.setStatsSource(() => engine.stats());
  metrics.setSearchPoolSource(() => current().searchPoolStats());
  try {
    const grpc = loops !== null ? null : await startGrpc(config, service, logs, metrics, fallback);
    // Readiness (spec): storage open and every collection's index built from it; a follower's only once
    // its first bootstrap from the leader is complete. Until then /readyz and /v1 answer 503.
    const ready = async () => {
      await follower?.whenBootstrapped();
      // A follower's stream goes on meanwhile: its indexes hold what it had when it got here.
      await current().whenIndexed({ upToNow: follower !== null });
      state.service = service; // ready: /readyz answers 200 from here on
      loops?.ready();
    };
    if (follower === null) await ready();
    else void ready().catch((e: unknown) => logs.target('svc').error({ err: (e as Error).message }, 'follower never became ready'));
    return { engine, service, fileSink, grpc, tracer };
  } catch (e) {
    await engine.close();
    fileSink?.close();
    await tracer.shutdown();
    throw e;
  }
}

/** The largest WAL record (core/storage/wal.ts) and its event's framing. */
const REPLICATION_MESSAGE_BYTES_MAX = (1 << 30) + (1 << 20);

/** The read replica's replication loop (core/cluster/replication/follower.ts) over a gRPC Replicate client. */
function startFollower(
  config: SvcConfig, leader: LeaderConfig, store: ReplicaStore, logs: Logs, metrics: ReturnType<typeof createPromMetrics>, onServing: () => void,
): Follower {
  const log = logs.target('svc::replication');
  // A replication record is a WAL record of the leader's (up to 1 GiB: a bulk load, embedded text), not a
  // request of this node's: it must never stall the stream on this node's own body limit.
  const source = grpcReplicationSource({ ...leader, maxMessageBytes: REPLICATION_MESSAGE_BYTES_MAX });
  const follower = new Follower({
    source, target: store, clock: systemClock, random: Math.random,
    sleep: (ms, signal) => new Promise<void>((resolve) => {
      const t = setTimeout(done, ms);
      function done(): void {
        clearTimeout(t);
        signal.removeEventListener('abort', done);
        resolve();
      }
      signal.addEventListener('abort', done, { once: true });
    }),
    log: (level, message, detail) => log[level]({ leader: leader.url, ...detail }, message),
    onStopped: () => source.close(),
    onServing,
  });
  metrics.setReplicationSource(() => follower.stats());
  log.info({ leader: leader.url, applied_seq: follower.stats().appliedSeq }, 'starting as a read replica');
  follower.start();
  return follower;
}

/** gRPC on SVC_GRPC_ADDR, sharing the service (auth, limits, audit, metrics) with REST. */
async function startGrpc(config: SvcConfig, service: Service, logs: Logs, metrics: ReturnType<typeof createPromMetrics>, fallback: boolean): Promise<{ port: number; close(): Promise<void> }> {
  const tls = config.tls === null ? undefined : {
    cert: readFileSync(config.tls.cert), key: readFileSync(config.tls.key),
    ...(config.tls.clientCa ? { clientCa: readFileSync(config.tls.clientCa) } : {}),
  };
  const start = (port: number) => startGrpcServer({
    service, host: config.grpcAddr.host, port,
    tls, limits: config.limits, log: logs.target('svc::grpc'), metrics, connections: config.connections,
  });
  try {
    return await start(config.grpcAddr.port);
  } catch (e) {
    if (!fallback) throw e;
    return start(0);
  }
}

/**
 * Exit 0 on SIGTERM/SIGINT after a graceful close; a second signal exits at once. Installed before the
 * server starts; a signal during startup closes it as soon as it is up.
 */
export function closeOnSignals(server: Promise<{ close(): Promise<void> }>, logs: Logs): void {
  let stopping = false;
  const onSignal = (signal: string) => {
    if (stopping) process.exit(1);
    stopping = true;
    logs.target('svc').info({ signal }, 'shutting down: finishing requests in flight');
    server.then((s) => s.close()).then(() => process.exit(0), (e: unknown) => {
      logs.target('svc').error({ err: (e as Error).message }, 'shutdown failed');
      process.exit(1);
    });
  };
  process.on('SIGTERM', () => onSignal('SIGTERM'));
  process.on('SIGINT', () => onSignal('SIGINT'));
}

/** Loads the config or prints the refusal; returns null after printing. */
export function configOrRefusal(env: NodeJS.ProcessEnv, defaultFile: string | null = 'svc.toml'): SvcConfig | null {
  try {
    return loadConfig(env, { defaultFile });
  } catch (e) {
    if (e instanceof ConfigError) {
      process.stderr.write(`svc: refusing to start: ${e.message}\n`);
      return null;
    }
    throw e;
  }
}

registerCommand('serve', {
  summary: 'run the server (REST on SVC_REST_ADDR, gRPC on SVC_GRPC_ADDR) from the environment and svc.toml',
  usage: 'svc serve [--config FILE]',
  options: { config: { type: 'string', short: 'c' } },
  epilog: () => variablesHelp(),
  async run({ values }) {
    const env = typeof values.config === 'string' ? { ...process.env, SVC_CONFIG: values.config } : process.env;
    const config = configOrRefusal(env);
    if (config === null) return 2;
    if (config.other.SVC_RAFT_MEMBERS !== undefined && (config.coordinator !== null || config.router !== null)) {
      process.stderr.write('svc: refusing to start: SVC_RAFT_MEMBERS makes this node a shard\'s consensus member, which holds data; a router or coordinator holds none. Fix: unset SVC_RAFT_MEMBERS, or SVC_CLUSTER_SHARDS, SVC_COORDINATOR_URL and SVC_COORDINATOR\n');
      return 2;
    }
    const logs = createLogs(config.logFilter);
    try {
      // SVC_COORDINATOR=true: the membership API and autoscaling, no data plane (roles/coordinator).
      // SVC_CLUSTER_SHARDS or SVC_COORDINATOR_URL: a router over those shards, no data directory (roles/router).
      // Each role's modules are imported only by the role that runs them.
      const server = config.coordinator !== null ? import('../coordinator/serve.js').then((m) => m.startCoordinator(config, logs))
        : config.router !== null ? import('../router/serve.js').then((m) => m.startRouter(config, logs, { env }))
          : startServer(config, logs, { env });
      closeOnSignals(server, logs);
      await server;
      return -1; // keep running
    } catch (e) {
      logs.target('svc').error({ err: (e as Error).message, code: (e as { code?: string }).code }, 'svc failed to start');
      return 1;
    }
  },
});
