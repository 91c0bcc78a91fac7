import { createServer } from 'node:net';
import { availableParallelism } from 'node:os';
import type { Logger } from 'pino';
import { Worker } from 'node:worker_threads';
import { AggregatorRegistry, Counter, Gauge } from 'prom-client';
import { workerEntry } from '../../core/index/worker-url.js';
import { SharedTokenBuckets, type RateLimiter } from '../../core/service/rate-limit.js';
import type { EngineApi } from '../../core/service/api.js';
import type { ProvidersOptions } from '../../core/embedded.js';
import type { AuditRecord } from '../../core/service/audit.js';
import { INSECURE_PRINCIPAL } from '../../core/service/service.js';
import { ConfigError, type SvcConfig } from '../config.js';
import { connectionCountsBuffer, releaseLoopConnections } from '../listener-cap.js';
import type { Logs } from '../log.js';
import type { RaftView } from '../raft/member-host.js';
import type { PromMetrics } from '../rest/metrics.js';
import { probeReusePort, type ReusePortSupport } from '../reuse-port.js';
import { serveEngine } from './engine-link.js';
import { otherListeners } from './port-owners.js';
import { Link, type LinkPort } from './link.js';
import type { ReadGate } from './read-gate.js';
import type { LoopData, LoopListening } from './loop-data.js';

/**
 * Several event loops answering REST and gRPC in one process (issue 20, docs/server.md "Several event
 * loops"): each loop is a worker thread (loop-worker.ts) listening on the same REST and gRPC ports with
 * SO_REUSEPORT, so the kernel hands each new connection to one of them; the engine stays on the main
 * thread, which now only runs engine calls, the search pool's hand-offs and the database's own work.
 * A loop does what a request costs on the wire (TLS, HTTP parsing, JSON, auth, validation, answer
 * writing); the main thread does what must be done once.
 *
 * A loop that dies (an uncaught error, the thread terminated) is replaced with a fresh one on the same
 * ports; its connections are lost (clients reconnect and land on a live loop), nothing stored is.
 */
export interface Loops {
  readonly count: number;
  readonly restPort: number;
  readonly grpcPort: number;
  /** Loops started to replace one that died. */
  readonly replaced: number;
  /** The loops' per-key buckets, for a service on this thread: a key's rate is the process's. */
  readonly rateLimiter: RateLimiter;
  /** The engine is open and indexed: every loop serves /v1 from now on (and every replacement). A router's loops each become ready on their own. */
  ready(): void;
  /** Stop every loop: no new connection, requests in flight finished, then the threads end. */
  close(): Promise<void>;
  /** Ends loop `index`'s thread as a crash would (tests); it is replaced. */
  terminate(index: number): Promise<void>;
}

export interface LoopsOptions {
  /** `node`: loops over this thread's engine. `router`: each loop routes on its own (loop-worker.ts). */
  role: 'node' | 'router';
  config: SvcConfig;
  /** The provider tables, keys resolved (startServer's), for the loops' own text queries. */
  providers?: ProvidersOptions | null;
  count: number;
  logs: Logs;
  /** The main thread's registry (the engine's gauges); /metrics is it plus every loop's, added up. */
  metrics: PromMetrics;
  engine: () => EngineApi | null;
  /**
   * The database whose collections the loops search themselves while the gate is open (local-reads.ts,
   * read-gate.ts); null (a router): every search comes here.
   */
  reads?: ReadGate | null;
  busy: () => string | null;
  raftView: (() => RaftView | null) | null;
  /** Into the audit file (SVC_AUDIT_LOG), which the main thread alone writes: its chain has one writer. */
  audit: ((record: AuditRecord) => void) | null;
  /** A free port when a configured one is taken (demo). */
  fallbackToFreePort?: boolean;
}

/**
 * SVC_HTTP_LOOPS=auto on this many cores, where the runtime can share a port: a quarter of them, at
 * least 2 and at most 16; one below 4 cores. On 2 cores two loops were slower than one (bench scaling:
 * 0.80x the queries/s on MNIST, more CPU per request): the loops, the engine thread, a search worker
 * and the clients already share the two.
 */
export function autoHttpLoops(cores: number): number {
  if (cores < 4) return 1;
  return Math.max(2, Math.min(16, Math.round(cores / 4)));
}

/**
 * How many loops to run: SVC_HTTP_LOOPS, or auto. Above 1 needs a runtime that shares a port
 * (`probe`); an explicit count above 1 without one is refused (never served by one loop in silence),
 * auto falls back to 1 with the probe's reason to log.
 */
export function httpLoopsFor(configured: number | null, cores: number, probe: ReusePortSupport): { count: number; why: string | null } {
  if (configured !== null) {
    if (configured > 1 && !probe.ok) {
      throw new ConfigError('SVC_HTTP_LOOPS', `${configured} loops need listeners that share a port, and this runtime cannot: ${probe.reason}. Fix: Node.js 22.12 or later on Linux, or SVC_HTTP_LOOPS=1`);
    }
    return { count: configured, why: null };
  }
  if (cores < 4) return { count: 1, why: `${cores} core${cores === 1 ? '' : 's'}: more loops than one only pay from 4 cores on` };
  if (!probe.ok) return { count: 1, why: probe.reason };
  return { count: autoHttpLoops(cores), why: null };
}

/** Binds `port` without SO_REUSEPORT and lets it go: EADDRINUSE when any listener holds it. */
async function assertPortFree(host: string, port: number): Promise<void> {
  if (port === 0) return;
  const probe = createServer();
  await new Promise<void>((resolve, reject) => {
    probe.once('error', reject);
    probe.listen({ host, port, exclusive: true }, () => resolve());
  });
  await new Promise<void>((resolve) => probe.close(() => resolve()));
}

/**
 * SVC_HTTP_LOOPS, or auto from the cores (httpLoopsFor): the runtime is asked once whether listeners
 * can share a port, unless one loop is asked for.
 */
export async function httpLoopCount(config: SvcConfig, log: Logger): Promise<number> {
  if (config.httpLoops === 1) return 1;
  const probe = await probeReusePort(config.restAddr.host);
  const { count, why } = httpLoopsFor(config.httpLoops, availableParallelism(), probe);
  if (why !== null) log.info({ http_loops: 1, why }, 'one request loop (SVC_HTTP_LOOPS=auto)');
  return count;
}

interface LoopHandle { worker: Worker; link: Link; index: number; exited: Promise<void>; ports: LoopListening | null }

export async function startLoops(o: LoopsOptions): Promise<Loops> {
  const log = o.logs.target('svc::loops');
  const keys = [...new Set([...o.config.apiKeys.map((k) => k.name), INSECURE_PRINCIPAL.keyName])];
  const buckets = SharedTokenBuckets.allocate(keys, o.config.rateLimit);
  const connections = connectionCountsBuffer(o.count);
  const loops: (LoopHandle | null)[] = new Array<LoopHandle | null>(o.count).fill(null);
  let restPort = o.config.restAddr.port;
  let grpcPort = o.config.grpcAddr.port;
  let isReady = false;
  let closing = false;
  let replaced = 0;
  new Gauge({
    name: 'svc_http_loops', help: 'Request loops (SVC_HTTP_LOOPS) listening now', registers: [o.metrics.registry],
    collect() { this.set(loops.filter((l) => l?.ports != null).length); },
  });
  new Counter({
    name: 'svc_http_loop_restarts_total', help: 'Request loops started to replace one that ended', registers: [o.metrics.registry],
    collect() { this.reset(); this.inc(replaced); },
  });

  const exposition = async (): Promise<string> => {
    const parts = await Promise.all(loops.map((l) => (l === null ? Promise.resolve([]) : l.link.call('metricsJson').catch(() => []) as Promise<object[]>)));
    const own = await o.metrics.registry.getMetricsAsJSON();
    return AggregatorRegistry.aggregate([own, ...parts]).metrics();
  };

  const spawn = async (index: number): Promise<LoopHandle> => {
    const entry = workerEntry(import.meta.url, 'loop-worker');
    const data: LoopData = {
      index, role: o.role, config: o.config, restPort, grpcPort, buckets, bucketKeys: keys, connections, auditFile: o.audit !== null, raft: o.raftView !== null, readGate: o.reads?.buffer ?? null, providers: o.providers ?? null,
    };
    const worker = new Worker(entry.filename, { eval: entry.eval, workerData: data, name: `svc-loop-${index}` });
    // Read now: a thread that has ended answers -1.
    const thread = worker.threadId;
    const link = new Link(worker as unknown as LinkPort);
    if (o.role === 'node') serveEngine(link, o.engine);
    link.handle('busy', () => o.busy());
    link.handle('readView', (name) => o.reads?.readView(String(name)) ?? null);
    link.handle('readGraph', (uid, generation) => o.reads?.readGraph(String(uid), Number(generation)) ?? null);
    link.handle('matchBits', (uid, generation, filter) => o.reads?.matchBits(String(uid), Number(generation), filter) ?? null);
    link.handle('noteRead', (uid, generation) => o.reads?.noteRead(String(uid), Number(generation)));
    link.handle('raftView', () => o.raftView?.() ?? null);
    link.handle('metrics', exposition);
    link.handle('audit', (r) => o.audit?.(r as AuditRecord));
    const handle: LoopHandle = {
      worker, link, index, ports: null,
      exited: new Promise((resolve) => worker.once('exit', (code) => {
        link.close(`request loop ${index} ended`);
        releaseLoopConnections(connections, index);
        // The scratch lanes its views held in the collections' shared memories (a loop that dies never
        // closes them), before a replacement claims its own: else each death would keep one for good.
        // Never in the way of the replacement: a failure here is logged, and the loop replaced anyway.
        try {
          const lanes = o.reads?.releaseLanesOf(thread) ?? 0;
          if (lanes > 0) log.info({ loop: index, lanes }, "a request loop's scratch lanes went back");
        } catch (e) {
          log.error({ loop: index, err: (e as Error).message }, "a request loop's scratch lanes could not be given back");
        }
        if (loops[index] === handle) loops[index] = null;
        if (!closing) {
          log.error({ loop: index, exit_code: code }, 'a request loop ended; starting another on the same ports');
          replaced++;
          void spawn(index).then((h) => { loops[index] = h; }, (e: unknown) => log.error({ loop: index, err: (e as Error).message }, 'a replacement request loop failed to start'));
        }
        resolve();
      })),
    };
    worker.on('error', (e) => log.error({ loop: index, err: e.message }, 'a request loop failed'));
    // A replacement is ready before it joins the ports: else the kernel hands it connections it would
    // answer 503 not_ready until told (a flake of the loop-death test found it). One started while the
    // engine became ready (that step skips loops not in `loops` yet) is told after it listens.
    const readyFirst = isReady && o.role === 'node';
    try {
      if (readyFirst) await link.call('ready');
      handle.ports = await link.call('listen') as LoopListening;
      if (!readyFirst && isReady && o.role === 'node') await link.call('ready');
    } catch (e) {
      // Not in `loops` yet: no close would end it, and its thread would keep the process alive.
      await worker.terminate();
      throw e;
    }
    return handle;
  };

  // SO_REUSEPORT lets any process of this user join a port whose listeners all set it: a second svc
  // started on these ports by mistake would silently take a share of the connections. A plain bind
  // first (refused while anyone holds the port) makes that an EADDRINUSE, as it is for one loop.
  try {
    // One port for both would be shared by the REST and gRPC listeners of each loop (all SO_REUSEPORT).
    if (restPort !== 0 && restPort === grpcPort) {
      throw Object.assign(new Error(`listen EADDRINUSE: REST and gRPC are both given port ${restPort}`), { code: 'EADDRINUSE' });
    }
    await assertPortFree(o.config.restAddr.host, restPort);
    await assertPortFree(o.config.grpcAddr.host, grpcPort);
  } catch (e) {
    if (!o.fallbackToFreePort || (e as NodeJS.ErrnoException).code !== 'EADDRINUSE') throw e;
    restPort = 0;
    grpcPort = 0;
  }
  try {
    // The first loop binds the ports (or free ones); the others join it on what it got.
    const first = await spawn(0);
    loops[0] = first;
    restPort = first.ports!.restPort;
    grpcPort = first.ports!.grpcPort;
    // The plain bind above is a check made before binding: another server may have passed its own and
    // joined the same port since (port-owners.ts). Whichever of two checks after binding refuses.
    for (const [what, port] of [['REST', restPort], ['gRPC', grpcPort]] as const) {
      const others = otherListeners(port);
      if (others > 0) {
        throw Object.assign(new Error(`listen EADDRINUSE: ${o.config.restAddr.host}:${port}: the ${what} port is listened on by another process too (SO_REUSEPORT would split connections with it)`), { code: 'EADDRINUSE' });
      }
    }
    for (let i = 1; i < o.count; i++) loops[i] = await spawn(i);
  } catch (e) {
    closing = true;
    await Promise.all(loops.map(async (l) => { if (l !== null) await l.worker.terminate(); }));
    throw e;
  }
  log.info({ loops: o.count, rest_port: restPort, grpc_port: grpcPort }, 'request loops listening');

  return {
    count: o.count,
    get restPort() { return restPort; },
    get grpcPort() { return grpcPort; },
    get replaced() { return replaced; },
    rateLimiter: new SharedTokenBuckets(buckets, keys, o.config.rateLimit),
    ready() {
      isReady = true;
      if (o.role === 'node') for (const l of loops) void l?.link.call('ready').catch(() => undefined);
    },
    async close() {
      closing = true;
      await Promise.all(loops.map(async (l) => {
        if (l === null) return;
        await l.link.call('close').catch(() => undefined);
        await l.worker.terminate();
        await l.exited;
      }));
    },
    async terminate(index) {
      const l = loops[index];
      if (l === null) return;
      await l.worker.terminate();
      await l.exited;
    },
  };
}
