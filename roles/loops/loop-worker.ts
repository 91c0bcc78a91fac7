/**
 * One request loop of a multi-loop server (loops.ts): a worker thread with the REST app (HTTP/1.1,
 * HTTP/2, the search hot path) and the gRPC server, both listening with SO_REUSEPORT on the ports every
 * loop shares, and its own service layer over the engine on the main thread (engine-link.ts). What must
 * be one per process is: the rate-limit buckets (a SharedArrayBuffer), the audit file (records go to the
 * main thread's sink), /metrics (the main thread adds up every loop's registry) and readiness (asked of
 * the main thread).
 */
import { parentPort, workerData } from 'node:worker_threads';
import { Counter } from 'prom-client';
import type { AddressInfo } from 'node:net';
import { readFileSync } from 'node:fs';
import type { Embedder, Reranker } from '../../core/base/model.js';
import type { AuditRecord } from '../../core/service/audit.js';
import { createService, type Service } from '../../core/service/service.js';
import { SharedTokenBuckets } from '../../core/service/rate-limit.js';
import { startGrpcServer } from '../grpc/server.js';
import { shareConnectionCounts } from '../listener-cap.js';
import { createLogs } from '../log.js';
import { addClusterRaftRoute } from '../raft/rest.js';
import type { RaftView } from '../raft/member-host.js';
import { createPromMetrics } from '../rest/metrics.js';
import { buildRestApp, type RestState } from '../rest/server.js';
import { serviceParts } from '../service-parts.js';
import type { ClosableTracer } from '../../core/service/tracing.js';
import { engineOverLink } from './engine-link.js';
import { LocalReads } from './local-reads.js';
import { ReadGateView } from './read-gate.js';
import { Link, type LinkPort } from './link.js';
import type { LoopData, LoopListening } from './loop-data.js';


const data = workerData as LoopData;

/** The providers the main thread resolved, built as it builds them (core/open-storage.ts), for this loop. */
async function loopProviders(): Promise<{ embedders: Map<string, Embedder>; rerankers: Map<string, Reranker> }> {
  const { buildProviders } = await import('../../core/open-storage.js');
  return buildProviders(data.providers ?? undefined);
}
// Before any server is made: SVC_MAX_CONNECTIONS and SVC_GRPC_MAX_CONNECTIONS are the process's.
shareConnectionCounts(data.connections, data.index);
const link = new Link(parentPort as unknown as LinkPort);
const config = data.config;
const logs = createLogs(config.logFilter);
const metrics = createPromMetrics();
const state: RestState = { service: null, ...(data.role === 'node' ? { busy: () => link.call('busy') as Promise<string | null> } : {}) };
const app = buildRestApp(state, {
  limits: config.limits, metrics, log: logs.target('svc::rest'), tls: config.tls, connections: config.connections,
  loop: { index: data.index, exposition: () => link.call('metrics') as Promise<string> },
});
const audit = data.auditFile ? { append: (r: AuditRecord) => link.notify('audit', r) } : { append: () => undefined };
const rateLimiter = new SharedTokenBuckets(data.buckets, data.bucketKeys, config.rateLimit);
const waiting = new AbortController();
let service: Service;
/** A node's loop: its own searches over the engine's shared memory (local-reads.ts), while the gate lets it. */
let reads: LocalReads | null = null;
let tracer: ClosableTracer | null = null;
let release = async (): Promise<void> => { await tracer?.shutdown(); };
/**
 * The role's setup. Its awaits (a router's modules, the OpenTelemetry SDK) let the main thread's first
 * calls in: every handler below is registered before it and waits for it, so a call never finds no
 * handler, and a setup that fails fails the call (the loop's start) with its error.
 */
const setup = (async (): Promise<void> => {
  if (data.role === 'router') {
    // The first loop's metrics ask the shards for the cluster's gauges; the others' would repeat it.
    // A router's modules load only in a router's loops.
    const [{ ROUTER_NOT_READY, routerCore }, { addClusterMapRoute }] = await Promise.all([import('../router/serve.js'), import('../router/rest.js')]);
    const core = await routerCore(config, logs, metrics, { audit, rateLimiter, statsSource: data.index === 0 });
    ({ service, tracer } = core);
    state.notReady = ROUTER_NOT_READY;
    addClusterMapRoute(app, service, () => core.map.current(), metrics);
    void core.ready(waiting.signal).then(() => { state.service = service; }, () => undefined);
    release = () => core.release();
    return;
  }
  const parts = await serviceParts(config, logs, metrics, { audit });
  tracer = parts.tracer;
  const own = data.readGate !== null ? new LocalReads(link, new ReadGateView(data.readGate)) : null;
  reads = own;
  // The config's providers, for this loop's own text queries (engine-link.ts): adapters of its own.
  const text = own !== null && Object.keys(data.providers?.embedding ?? {}).length > 0
    ? { limits: config.limits, ...await loopProviders() }
    : null;
  service = createService(engineOverLink(link, own, text), { ...parts.options, rateLimiter });
  if (own !== null) {
    new Counter({
      name: 'svc_loop_searches_total',
      help: 'Dense searches a request loop answered itself over shared memory (answered="loop"), or handed to the engine thread (answered="engine", with the reason)',
      labelNames: ['answered', 'reason'], registers: [metrics.registry],
      collect() {
        this.reset();
        this.inc({ answered: 'loop', reason: '' }, own.counts.local);
        for (const [reason, n] of own.counts.declined) this.inc({ answered: 'engine', reason }, n);
      },
    });
    new Counter({
      name: 'svc_loop_queries_total',
      help: 'Hybrid searches (op="hybrid"), shard rankings (op="rankings"), multi-vector searches (op="multi_vector"), counts (op="count"), point reads (op="get") and pages of points (op="fetch") a request loop answered itself (answered="loop"), or handed to the engine thread (answered="engine", with the reason)',
      labelNames: ['op', 'answered', 'reason'], registers: [metrics.registry],
      collect() {
        this.reset();
        for (const [op, c] of Object.entries(own.queryCounts)) {
          this.inc({ op, answered: 'loop', reason: '' }, c.local);
          for (const [reason, n] of c.declined) this.inc({ op, answered: 'engine', reason }, n);
        }
      },
    });
  }
  if (data.raft) addClusterRaftRoute(app, state, () => link.call('raftView') as Promise<RaftView | null>, metrics);
})();
// Failing calls hand the main thread an internal error: the reason is logged here, for the operator.
setup.catch((e: unknown) => logs.target('svc').error({ loop: data.index, err: e instanceof Error ? e.message : String(e) }, 'a request loop could not set up'));

if (data.role === 'node') {
  // The engine is open and indexed: /v1 answers from here on (readyz too, unless the engine is busy).
  link.handle('ready', async () => {
    await setup;
    state.service = service;
  });
}

let grpc: { port: number; close(): Promise<void> } | null = null;

link.handle('listen', async (): Promise<LoopListening> => {
  await setup;
  // Typed in @types/node from 22.12 on; fastify hands the options to node's listen as they are.
  const options: { host: string; port: number; reusePort: boolean } = { host: config.restAddr.host, port: data.restPort, reusePort: true };
  await app.listen(options);
  const tls = config.tls === null ? undefined : {
    cert: readFileSync(config.tls.cert), key: readFileSync(config.tls.key),
    ...(config.tls.clientCa ? { clientCa: readFileSync(config.tls.clientCa) } : {}),
  };
  grpc = await startGrpcServer({
    service, host: config.grpcAddr.host, port: data.grpcPort, reusePort: true,
    tls, limits: config.limits, log: logs.target('svc::grpc'), metrics, connections: config.connections,
  });
  return { restPort: (app.server.address() as AddressInfo).port, grpcPort: grpc.port };
});

link.handle('metricsJson', () => metrics.registry.getMetricsAsJSON());

// Stop accepting, finish what is in flight (fastify's close, the gRPC grace), flush spans.
link.handle('close', async () => {
  await setup.catch(() => undefined);
  waiting.abort();
  await Promise.all([app.close(), grpc?.close()]);
  // The stores' scratch lanes this loop's views hold go back (a loop that dies does not close them: the
  // engine thread gives them back when it sees the thread end, loops.ts).
  reads?.close();
  await release();
});
