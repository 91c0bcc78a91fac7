import type { AddressInfo } from 'node:net';
import { systemClock } from '../../core/base/clock.js';
import type { Decision } from '../../core/cluster/coordinator/autoscale.js';
import { Coordinator, type AutoscaleStep } from '../../core/cluster/coordinator/coordinator.js';
import { FileStore, MemoryStore, type CoordinatorStore } from '../../core/cluster/coordinator/store.js';
import { createClusterService, type ClusterService } from '../../core/service/cluster.js';
import { NodeFileSystem } from '../../core/storage/fs.js';
import type { CoordinatorConfig, SvcConfig } from '../config.js';
import type { Logs } from '../log.js';
import { serviceParts } from '../service-parts.js';
import { createPromMetrics } from '../rest/metrics.js';
import { coordinatorMetrics, type CoordinatorMetrics } from './metrics.js';
import { buildCoordinatorApp } from './rest.js';
import { REBALANCE_DEFAULTS, startRebalanceLoop } from './rebalance-loop.js';
import { HttpShardClient } from './shard-client.js';

/**
 * `svc serve` with SVC_COORDINATOR=true: the cluster coordinator. It opens its state (SVC_COORDINATOR_STATE,
 * or seeds it from SVC_CLUSTER_SHARDS), serves the membership API on SVC_REST_ADDR, and every
 * SVC_AUTOSCALE_INTERVAL_SECS counts each shard's points; with autoscaling on, it decides (core/cluster/
 * coordinator/autoscale.ts) and takes a standby into the map as a `joining` shard. No database is
 * opened and no gRPC listener started: a coordinator holds no data.
 */
export interface RunningCoordinator {
  restPort: number;
  coordinator: Coordinator;
  close(): Promise<void>;
}

export async function startCoordinator(config: SvcConfig, logs: Logs): Promise<RunningCoordinator> {
  const c = config.coordinator!;
  const log = logs.target('svc::coordinator');
  for (const w of config.warnings) (w.includes('SVC_INSECURE') ? log.error.bind(log) : log.warn.bind(log))({ warning: true }, w);
  if (config.httpLoops !== null && config.httpLoops > 1) log.warn({ warning: true }, 'SVC_HTTP_LOOPS: a coordinator serves on one event loop in this build; the variable is not acted on');

  const store: CoordinatorStore = c.stateFile === null ? new MemoryStore() : await FileStore.open(new NodeFileSystem(), c.stateFile);
  let coordinator: Coordinator;
  const client = new HttpShardClient(c.shardKey);
  try {
    coordinator = await Coordinator.open({
      store, client, clock: systemClock,
      seedUrls: c.seedShards, seedReplicas: new Map(c.seedReplicas.map((r, i) => [i, r])),
      autoscale: { ...c.autoscale },
      // A router unheard of for six of its refresh intervals (5 s at least) is no longer waited for; a
      // new move waits that long after this process starts, to have heard every live router.
      readerForgetMs: Math.max(6 * c.routerRefreshMs, 5_000),
    });
  } catch (e) {
    await store.close();
    throw e;
  }
  const started = coordinator.current;
  log.info({ from: coordinator.startedFrom, version: started.version, shards: started.shards.length, next_id: started.nextId, state_file: c.stateFile }, 'coordinator state opened');
  if (coordinator.startedFrom === 'saved' && c.seedShards.length > 0) {
    log.info({}, 'SVC_CLUSTER_SHARDS is not read: the saved map is used (the variable only seeds a coordinator that has no state)');
  }

  const metrics = createPromMetrics();
  const { fileSink, tracer, options } = await serviceParts(config, logs, metrics);
  const cluster = createClusterService(coordinator, options);
  const series = coordinatorMetrics(metrics, coordinator);
  const app = buildCoordinatorApp(cluster, { limits: config.limits, metrics, log: logs.target('svc::rest'), tls: config.tls, connections: config.connections });
  const release = async (): Promise<void> => {
    await coordinator.close();
    fileSink?.close();
    await tracer.shutdown();
  };
  try {
    await app.listen({ host: config.restAddr.host, port: config.restAddr.port });
  } catch (e) {
    await app.close();
    await release();
    throw e;
  }
  const restPort = (app.server.address() as AddressInfo).port;
  const loop = startAutoscaleLoop(coordinator, c, cluster, series, logs);
  const rebalance = startRebalanceLoop(coordinator, client, cluster, series, logs, { ...REBALANCE_DEFAULTS, batchPoints: c.rebalanceBatchPoints, settleMs: 2 * c.routerRefreshMs });
  log.info({ rest_port: restPort, tls: config.tls !== null, autoscale: c.autoscale.enabled, interval_secs: c.autoscale.intervalMs / 1000 }, 'svc coordinator ready');

  let closing: Promise<void> | null = null;
  return {
    restPort, coordinator,
    close() {
      closing ??= (async () => {
        await loop.stop();
        await rebalance.stop();
        await app.close();
        await release();
      })();
      return closing;
    },
  };
}

/**
 * Every interval: count the shards' points and, with autoscaling on, decide. Steps never overlap (the
 * next is timed from the end of the last). Each decision is logged; a scale-out, and every change of
 * the reason to hold, is audited with its reason (a hold repeated each interval is logged at debug, not
 * written to the audit log again).
 */
function startAutoscaleLoop(coordinator: Coordinator, c: CoordinatorConfig, cluster: ClusterService, series: CoordinatorMetrics, logs: Logs): { stop(): Promise<void> } {
  const log = logs.target('svc::autoscale');
  let timer: NodeJS.Timeout | null = null;
  let running: Promise<void> | null = null;
  let stopped = false;
  let steps = 0;
  let lastKey = '';
  const unreachable = new Set<number>();

  const report = (step: AutoscaleStep): void => {
    for (const s of step.samples) {
      // A shard going unreachable, or coming back, is told once, not every interval.
      if (s.points === 'unknown' && !unreachable.has(s.id)) {
        unreachable.add(s.id);
        log.warn({ shard: s.id, error: s.error }, 'shard could not be counted; its points are unknown');
      } else if (s.points !== 'unknown' && unreachable.delete(s.id)) {
        log.info({ shard: s.id, points: s.points }, 'shard is counted again');
      }
    }
    const d: Decision = step.decision;
    series.step(step);
    const key = d.kind === 'scale_out' ? `scale_out ${step.id}` : `hold ${d.why}`;
    const changed = key !== lastKey;
    lastKey = key;
    const fields = { decision: d.kind, ...(d.kind === 'hold' ? { why: d.why } : { shard: step.id, standby: d.standby }), version: step.version, reason: d.reason };
    // Autoscaling turned off decides nothing: logged at debug, never audited.
    const told = d.kind === 'scale_out' || (changed && d.why !== 'disabled');
    if (told) log.info(fields, 'autoscale decision');
    else log.debug(fields, 'autoscale decision');
    if (told) {
      cluster.service.auditEvent({
        actor: 'autoscale', action: d.kind === 'scale_out' ? 'autoscale_scale_out' : 'autoscale_hold',
        resource: d.kind === 'scale_out' ? `cluster/shard/${step.id}` : 'cluster', outcome: 'ok',
        status: d.kind === 'scale_out' ? 201 : 200, requestId: `autoscale-${steps}`, reason: d.reason,
      });
    }
  };

  const tick = async (): Promise<void> => {
    steps++;
    try {
      if (c.autoscale.enabled) {
        report(await coordinator.autoscale());
      } else {
        const samples = await coordinator.sample();
        report({ decision: { kind: 'hold', why: 'disabled', reason: 'autoscaling is off' }, samples, version: coordinator.current.version });
      }
    } catch (e) {
      log.error({ err: (e as Error).message }, 'autoscale step failed; trying again at the next interval');
    }
  };
  const schedule = (ms: number): void => {
    if (stopped) return;
    timer = setTimeout(() => {
      running = tick().finally(() => {
        running = null;
        schedule(c.autoscale.intervalMs);
      });
    }, ms);
  };
  schedule(0);
  return {
    async stop() {
      stopped = true;
      if (timer !== null) clearTimeout(timer);
      await running;
    },
  };
}
