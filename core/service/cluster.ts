import { SvcError } from '../base/errors.js';
import type { MembershipApi } from '../cluster/coordinator/coordinator.js';
import { parseMapReader } from '../cluster/coordinator/map-readers.js';
import type { ShardMap } from '../cluster/routing/shard-map.js';
import type { CallContext, EngineApi } from './api.js';
import { createService, type Service, type ServiceOptions } from './service.js';

/**
 * The coordinator's membership API (CONTRACT.md section 11) behind the one service layer: the same
 * keys, role and scope checks (admin, scoped to `*`), rate limit, spans and audit lines as every other
 * operation. REST (roles/coordinator) is a thin adapter over this.
 */
export interface ClusterService {
  /** Authentication for the transport (the service's own). */
  readonly service: Service;
  /** `router`: the two headers a router names itself by (map-readers.ts), as the transport got them. */
  map(ctx: CallContext, router?: { id: unknown; version: unknown }): Promise<ShardMap>;
  registerShard(ctx: CallContext, body: unknown): Promise<{ id: number; version: number }>;
  drainShard(ctx: CallContext, id: string): Promise<{ id: number; state: 'draining'; version: number }>;
  removeShard(ctx: CallContext, id: string): Promise<{ removed: true; version: number }>;
}

/**
 * A coordinator has no data plane (spec: "membership API, no data plane"): its service has no engine,
 * and no transport of the coordinator routes a data operation to it. Should one arrive anyway, it is
 * refused, never answered empty.
 */
export const NO_DATA_PLANE: EngineApi = new Proxy({} as EngineApi, {
  get(_target, op) {
    if (op === 'close') return async () => undefined;
    if (op === 'then') return undefined; // not a thenable
    return () => {
      throw new SvcError('not_found', `${String(op)} is a data operation; this process is a cluster coordinator and holds no data`);
    };
  },
});

export function createClusterService(membership: MembershipApi, opts: ServiceOptions): ClusterService {
  const service = createService(NO_DATA_PLANE, opts);
  const shard = (id: unknown): string => `cluster/shard/${typeof id === 'string' ? id.slice(0, 40) : '?'}`;
  return {
    service,
    map: (ctx, router) => service.guarded('clusterMap', ctx, 'cluster/map', async () => membership.map(router === undefined ? null : parseMapReader(router.id, router.version))),
    registerShard: (ctx, body) => service.guarded('registerShard', ctx, 'cluster/shards', () => membership.register(body)),
    drainShard: (ctx, id) => service.guarded('drainShard', ctx, shard(id), () => membership.drain(id)),
    removeShard: (ctx, id) => service.guarded('removeShard', ctx, shard(id), () => membership.remove(id)),
  };
}
