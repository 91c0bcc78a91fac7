import type { Coordinator } from '../../core/cluster/coordinator/coordinator.js';
import { moveSource, type MoveClient } from '../../core/cluster/coordinator/mover.js';
import { moveNeeded, type MoveRecord } from '../../core/cluster/coordinator/rebalance.js';
import type { ClusterService } from '../../core/service/cluster.js';
import type { Logs } from '../log.js';
import type { CoordinatorMetrics } from './metrics.js';

/**
 * The rebalancer (docs/cluster.md, Rebalancing): every `idleMs` it asks the coordinator for the move the
 * map needs (or the saved one, after a restart) and runs it: every source at once, batch after batch
 * (core/cluster/coordinator/mover.ts), then ends it (joining shards turn active, drained ones `moved`).
 * A failure (a shard down, a lease lost) is logged and the move goes on after `retryMs` from the sources'
 * cursors, which are the truth. Each move's start and end is logged and audited.
 */
export interface RebalanceLoopOptions {
  idleMs: number;
  retryMs: number;
  batchPoints: number;
  leaseMs: number;
  /**
   * How long a map version must have been served before a move starts (twice the routers' refresh
   * interval); then it waits until every router heard from lately says it routes by that version
   * (core/cluster/coordinator/map-readers.ts): a router that has not read the joining shard yet would
   * not look for moved points there.
   */
  settleMs: number;
}

export const REBALANCE_DEFAULTS: RebalanceLoopOptions = { idleMs: 1000, retryMs: 1000, batchPoints: 1000, leaseMs: 5_000, settleMs: 10_000 };

export function startRebalanceLoop(
  coordinator: Coordinator, client: MoveClient, cluster: ClusterService, series: CoordinatorMetrics, logs: Logs, o: RebalanceLoopOptions = REBALANCE_DEFAULTS,
): { stop(): Promise<void> } {
  const log = logs.target('svc::rebalance');
  const stopper = new AbortController();
  let timer: NodeJS.Timeout | null = null;
  let running: Promise<void> | null = null;
  let failing = '';
  // The map version seen and since when (monotonic): a move waits until it has been served settleMs.
  let seenVersion = -1;
  let seenAt = 0;
  let toldBehind = -1;

  const audit = (action: string, move: MoveRecord, reason: string): void => {
    cluster.service.auditEvent({ actor: 'rebalance', action, resource: `cluster/move/${move.id}`, outcome: 'ok', status: 200, requestId: `rebalance-${move.id}`, reason });
  };

  const run = async (move: MoveRecord): Promise<void> => {
    const sources = move.sources.map((id) => ({ id, url: coordinator.urlOf(id) })).filter((s): s is { id: number; url: string } => s.url !== undefined);
    await Promise.all(sources.map((source) => moveSource({
      client, move, source, limit: o.batchPoints, leaseMs: o.leaseMs, signal: stopper.signal,
      urlOf: (id) => {
        const url = coordinator.urlOf(id);
        if (url === undefined) throw new Error(`target shard ${id} of move ${move.id} left the map`);
        return url;
      },
      onBatch: (points, bytes) => series.moved(points, bytes),
    })));
  };

  const tick = async (): Promise<number> => {
    const version = coordinator.current.version;
    if (version !== seenVersion) {
      seenVersion = version;
      seenAt = performance.now();
    }
    if (coordinator.current.move === null && moveNeeded(coordinator.current)) {
      // Routers first: the map has been served settleMs (a restarted coordinator has heard its routers
      // again by then), and every router heard from lately routes by it.
      const wait = o.settleMs - (performance.now() - seenAt);
      if (wait > 0) return Math.min(wait, o.idleMs);
      const behind = coordinator.routersBehind();
      if (behind.length > 0) {
        if (toldBehind !== version) {
          toldBehind = version;
          log.info({ version, routers: behind.slice(0, 10).map((r) => ({ id: r.id, version: r.version, heard_ms_ago: Math.round(r.agoMs) })), behind: behind.length },
            'a rebalance move waits for routers to read the new shard map');
        }
        return Math.min(o.settleMs / 2, o.idleMs);
      }
    }
    const begun = await coordinator.beginMove();
    series.moving(begun !== null);
    if (begun === null) return o.idleMs;
    const { move, started } = begun;
    const what = `sources ${move.sources.join(', ')} to targets ${move.targets.join(', ')}`
      + `${move.joining.length > 0 ? `; joining ${move.joining.join(', ')}` : ''}${move.draining.length > 0 ? `; draining ${move.draining.join(', ')}` : ''}`;
    if (started) {
      log.info({ move: move.id, sources: move.sources, targets: move.targets, joining: move.joining, draining: move.draining }, 'rebalance move started');
      audit('rebalance_start', move, `move ${move.id}: ${what}`);
    } else if (failing === '') {
      log.info({ move: move.id }, 'rebalance move resumed');
    }
    try {
      await run(move);
    } catch (e) {
      const why = (e as Error).message;
      if (why !== failing) log.warn({ move: move.id, err: why }, 'rebalance move interrupted; it goes on from the sources\' cursors');
      failing = why;
      return o.retryMs;
    }
    failing = '';
    const after = await coordinator.endMove(move.id);
    series.moving(false);
    series.moveFinished();
    log.info({ move: move.id, version: after }, 'rebalance move finished');
    audit('rebalance_finish', move, `move ${move.id} finished (${what}); map version ${after}`);
    return 0;
  };

  const schedule = (ms: number): void => {
    if (stopper.signal.aborted) return;
    timer = setTimeout(() => {
      running = tick().then(schedule, (e: unknown) => {
        log.error({ err: (e as Error).message }, 'rebalance step failed; trying again');
        schedule(o.retryMs);
      }).finally(() => { running = null; });
    }, ms);
  };
  schedule(0);
  return {
    async stop() {
      stopper.abort();
      if (timer !== null) clearTimeout(timer);
      await running;
    },
  };
}
