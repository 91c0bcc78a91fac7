import { readFileSync } from 'node:fs';
import type { AddressInfo } from 'node:net';
import { setTimeout as delay } from 'node:timers/promises';
import { Engine } from '../../core/engine/engine.js';
import { buildProviders } from '../../core/embedded.js';
import type { AuditSink } from '../../core/service/audit.js';
import type { RateLimiter } from '../../core/service/rate-limit.js';
import { createService, type Service } from '../../core/service/service.js';
import type { SvcConfig } from '../config.js';
import { startGrpcServer } from '../grpc/server.js';
import type { Logs } from '../log.js';
import { serviceParts } from '../service-parts.js';
import { providersFromConfig } from '../providers.js';
import { createPromMetrics, type PromMetrics } from '../rest/metrics.js';
import type { ClosableTracer } from '../../core/service/tracing.js';
import { buildRestApp, type RestState } from '../rest/server.js';
import { HttpShard, shardPool } from './http-shard.js';
import { RouterMap, startMapRefresh } from './map.js';
import { routerMetrics } from './metrics.js';
import { startReplicaProbe } from './replica-set.js';
import { addClusterMapRoute } from './rest.js';
import { httpLoopCount, startLoops, type Loops } from '../loops/loops.js';

/**
 * `svc serve` with SVC_CLUSTER_SHARDS (or SVC_COORDINATOR_URL): a stateless router. No data directory:
 * REST (HTTP/1.1, and HTTP/2 with TLS) and gRPC over the one service layer (the router's own keys,
 * scopes, limits, rate limit, audit under the caller's key name, metrics, spans) over core/engine's
 * Engine, whose shards are nodes reached over HTTP with SVC_CLUSTER_SHARD_KEY (http-shard.ts). The map
 * it routes by is its own list until the coordinator answers, then the coordinator's (map.ts).
 *
 * Ready (`/readyz` 200, `/v1` served) once it has a map and every shard routed by answers `/readyz`;
 * from then on it stays ready, and a shard that stops answering fails the requests that need it with
 * `unavailable` naming it (docs/cluster.md, Router).
 */
export interface RunningRouter {
  restPort: number;
  grpcPort: number;
  /** The request loops when SVC_HTTP_LOOPS is above 1 (each routes on its own), else null. */
  loops: Loops | null;
  close(): Promise<void>;
}

/** How often each read replica's /readyz and lag are read (replica-set.ts), and the most one probe may take. */
const REPLICA_PROBE_MS = 1_000;
const REPLICA_PROBE_TIMEOUT_MS = 2_000;

/** How often a router that is not ready yet asks its shards' /readyz again, and how often it says what it waits for. */
const READY_POLL_MS = 200;
const READY_TELL_MS = 5_000;

/** What serving as a router needs, on whichever thread serves: the map, the engine over it, the service. */
export interface RouterCore {
  engine: Engine;
  service: Service;
  map: RouterMap;
  /** Resolves once the router can serve (becomeReady); rejects when `signal` aborts. */
  ready(signal: AbortSignal): Promise<void>;
  /** Stops the map refresh and replica probe, closes the engine, the shard connections and the audit file. */
  release(): Promise<void>;
  tracer: ClosableTracer;
}

/**
 * The router's parts over `metrics`: one set in a single-loop router, one per request loop in a
 * multi-loop one (roles/loops/: a router holds no state a loop must share but the rate limit and the
 * audit file, which `over` brings from the main thread). `statsSource`: whether these metrics' engine
 * gauges ask the shards (one loop does; the others' would repeat the same fan-out at every scrape).
 */
export async function routerCore(
  config: SvcConfig, logs: Logs, metrics: PromMetrics,
  over: { audit?: AuditSink; rateLimiter?: RateLimiter; statsSource?: boolean; env?: Readonly<Record<string, string | undefined>> } = {},
): Promise<RouterCore> {
  const r = config.router!;
  const log = logs.target('svc::router');
  // Text is embedded and reranked here, once, so the router holds the provider tables (api_key_env read now).
  const { embedders, rerankers } = buildProviders(providersFromConfig(config, over.env ?? process.env));
  const { fileSink, tracer, options } = await serviceParts(config, logs, metrics, over.audit !== undefined ? { audit: over.audit } : {});

  const pool = shardPool();
  let series: ReturnType<typeof routerMetrics> | null = null;
  const map = new RouterMap({
    client: (id, url, replica) => new HttpShard({
      id, url, key: r.shardKey, timeoutMs: r.timeoutMs, dispatcher: pool,
      ...(replica === null ? {
        observe: (outcome, seconds) => series?.shardCall(id, outcome, seconds),
      } : {
        // A replica's read that fails goes to the next copy at once: no retries of the same one.
        replica, readRetries: 0,
        observe: (outcome, seconds) => series?.replicaCall(id, replica, outcome, seconds),
      }),
    }),
    timeoutMs: r.timeoutMs,
    onFallback: (id, reason) => series?.fallback(id, reason),
  }, r.shards, r.replicas);
  series = routerMetrics(metrics, map);
  const probe = startReplicaProbe({
    replicas: () => map.replicas(), dispatcher: pool, timeoutMs: Math.min(r.timeoutMs, REPLICA_PROBE_TIMEOUT_MS),
    intervalMs: REPLICA_PROBE_MS, maxLagMs: r.replicaMaxLagMs, log,
  });

  let refresh: ReturnType<typeof startMapRefresh> | null = null;
  const engine = new Engine({
    shards: () => map.routed(), present: () => map.present(), moving: () => map.moving(), mapStale: async () => refresh?.now(),
    limits: config.limits, embedders, rerankers, monotonicMs: () => performance.now(),
  });
  const service = createService(engine, { ...options, ...(over.rateLimiter !== undefined ? { rateLimiter: over.rateLimiter } : {}) });
  // The engine gauges (svc_points...) are the cluster's: every shard's stats, summed, at each scrape.
  if (over.statsSource ?? true) metrics.setStatsSource(() => engine.stats());

  refresh = r.coordinatorUrl === null ? null : startMapRefresh(map, {
    coordinatorUrl: r.coordinatorUrl, key: r.shardKey, timeoutMs: r.timeoutMs, intervalMs: r.mapRefreshMs, dispatcher: pool, log,
  });
  return {
    engine, service, map, tracer,
    ready: (signal) => becomeReady(map, log, signal),
    async release() {
      await refresh?.stop();
      await probe.stop();
      await engine.close();
      await pool.close();
      fileSink?.close();
      await tracer.shutdown();
    },
  };
}

/** What /readyz and /v1 say until the router is ready. */
export const ROUTER_NOT_READY = 'the router is waiting for its shards to answer /readyz';

export async function startRouter(config: SvcConfig, logs: Logs, opts: { env?: Readonly<Record<string, string | undefined>> } = {}): Promise<RunningRouter> {
  const r = config.router!;
  const log = logs.target('svc::router');
  for (const w of config.warnings) (w.includes('SVC_INSECURE') ? log.error.bind(log) : log.warn.bind(log))({ warning: true }, w);
  const loopCount = await httpLoopCount(config, log);
  if (loopCount > 1) return startRouterLoops(config, logs, loopCount);

  const metrics = createPromMetrics();
  const core = await routerCore(config, logs, metrics, opts);
  const { service, map } = core;

  const state: RestState = { service: null, notReady: ROUTER_NOT_READY };
  const app = buildRestApp(state, { limits: config.limits, metrics, log: logs.target('svc::rest'), tls: config.tls, connections: config.connections });
  addClusterMapRoute(app, service, () => map.current(), metrics);

  let grpc: { port: number; close(): Promise<void> };
  try {
    await app.listen({ host: config.restAddr.host, port: config.restAddr.port });
    grpc = await startGrpcServer({
      service, host: config.grpcAddr.host, port: config.grpcAddr.port, limits: config.limits, log: logs.target('svc::grpc'), metrics,
      connections: config.connections,
      tls: config.tls === null ? undefined : {
        cert: readFileSync(config.tls.cert), key: readFileSync(config.tls.key),
        ...(config.tls.clientCa ? { clientCa: readFileSync(config.tls.clientCa) } : {}),
      },
    });
  } catch (e) {
    await app.close();
    await core.release();
    throw e;
  }
  const restPort = (app.server.address() as AddressInfo).port;
  log.info({
    rest_port: restPort, grpc_port: grpc.port, tls: config.tls !== null, shards: r.shards, replicas: r.replicas, coordinator: r.coordinatorUrl,
    timeout_secs: r.timeoutMs / 1000,
  }, 'svc router listening; waiting for its shards');

  const waiting = new AbortController();
  const readiness = core.ready(waiting.signal).then(() => {
    state.service = service;
    log.info({ routed: map.routed().map((s) => s.id), version: map.current().version, from: map.source() }, 'svc router ready');
  }, () => undefined);

  let closing: Promise<void> | null = null;
  return {
    restPort, grpcPort: grpc.port, loops: null,
    close() {
      closing ??= (async () => {
        waiting.abort();
        await readiness;
        await Promise.all([app.close(), grpc.close()]);
        await core.release();
      })();
      return closing;
    },
  };
}

/**
 * A router on several request loops: each loop is a whole router (routerCore) with its own map, engine
 * and shard connections, so no one thread carries every request's scatter-gather. This thread holds the
 * audit file, adds up /metrics and replaces a loop that dies (roles/loops/loops.ts).
 */
async function startRouterLoops(config: SvcConfig, logs: Logs, count: number): Promise<RunningRouter> {
  const metrics = createPromMetrics();
  const { fileSink, tracer } = await serviceParts(config, logs, metrics);
  let loops: Loops;
  try {
    loops = await startLoops({
      role: 'router', config, count, logs, metrics, engine: () => null, busy: () => null, raftView: null,
      audit: fileSink === null ? null : (r) => fileSink.append(r),
    });
  } catch (e) {
    fileSink?.close();
    await tracer.shutdown();
    throw e;
  }
  logs.target('svc::router').info({ rest_port: loops.restPort, grpc_port: loops.grpcPort, http_loops: count, shards: config.router!.shards },
    'svc router listening on its request loops; each waits for its shards');
  let closing: Promise<void> | null = null;
  return {
    restPort: loops.restPort, grpcPort: loops.grpcPort, loops,
    close() {
      closing ??= (async () => {
        await loops.close();
        fileSink?.close();
        await tracer.shutdown();
      })();
      return closing;
    },
  };
}

/** Resolves once there is a map with shards and each of them answers /readyz; rejects when `signal` aborts. */
async function becomeReady(map: RouterMap, log: ReturnType<Logs['target']>, signal: AbortSignal): Promise<void> {
  let toldAt = performance.now();
  for (;;) {
    signal.throwIfAborted();
    const shards = map.routedClients();
    const waitingFor: string[] = [];
    if (shards.length === 0) waitingFor.push(map.source() === null ? 'the coordinator\'s first map' : 'a map with an active shard');
    else {
      const answers = await Promise.allSettled(shards.map((s) => s.ready()));
      for (const a of answers) if (a.status === 'rejected') waitingFor.push((a.reason as Error).message);
    }
    if (waitingFor.length === 0) return;
    if (performance.now() - toldAt >= READY_TELL_MS) {
      toldAt = performance.now();
      log.warn({ waiting_for: waitingFor }, 'svc router not ready yet');
    }
    await delay(READY_POLL_MS, undefined, { signal });
  }
}
