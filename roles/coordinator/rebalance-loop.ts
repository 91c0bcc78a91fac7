import type { Coordinator } from '../../core/cluster/coordinator/coordinator.js';
import { moveSource, type MoveClient } from '../../core/cluster/coordinator/mover.js';
import type { ReaderBehind } from '../../core/cluster/coordinator/map-readers.js';
import type { MoveRecord } from '../../core/cluster/coordinator/rebalance.js';
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
   * (Coordinator.beginMove, core/cluster/coordinator/map-readers.ts): a router that has not read the
   * joining shard yet would not look for moved points there.
   */
  settleMs: number;
}

/** How often a move still waiting for the same routers is logged again. */
const WAIT_TELL_MS = 60_000;

export const REBALANCE_DEFAULTS: RebalanceLoopOptions = { idleMs: 1000, retryMs: 1000, batchPoints: 1000, leaseMs: 5_000, settleMs: 10_000 };

export function startRebalanceLoop(
  coordinator: Coordinator, client: MoveClient, cluster: ClusterService, series: CoordinatorMetrics, logs: Logs, o: RebalanceLoopOptions = REBALANCE_DEFAULTS,
): { stop(): Promise<void> } {
  const log = logs.target('svc::rebalance');
  const stopper = new AbortController();
  let timer: NodeJS.Timeout | null = null;
  let running: Promise<void> | null = null;
  let failing = '';
  // A move that waits for routers is told once per map version, then every WAIT_TELL_MS.
  let toldVersion = -1;
  let toldAt = 0;
  const tellWaiting = (version: number, routers: readonly ReaderBehind[]): void => {
    const now = performance.now();
    if (version === toldVersion && now - toldAt < WAIT_TELL_MS) return;
    toldVersion = version;
    toldAt = now;
    log.warn({
      version, behind: routers.length,
      routers: routers.slice(0, 10).map((r) => ({ id: r.id, version: r.version, heard_ms_ago: Math.round(r.agoMs) })),
    }, 'a rebalance move waits for routers to route by the new shard map (a router that reads it but never routes by it holds every move)');
  };

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
    const begun = await coordinator.beginMove(o.settleMs);
    series.moving(begun !== null && !('waiting' in begun));
    if (begun === null) return o.idleMs;
    if ('waiting' in begun) {
      const w = begun.waiting;
      if (w.why === 'routers') tellWaiting(w.version, w.routers);
      return Math.max(1, Math.min(w.forMs ?? o.idleMs, o.idleMs));
    }
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
