import type { FastifyInstance } from 'fastify';
import type { ShardMap } from '../../core/cluster/routing/shard-map.js';
import type { CallContext } from '../../core/service/api.js';
import type { Service } from '../../core/service/service.js';
import type { PromMetrics } from '../rest/metrics.js';

/**
 * `GET /cluster/map` on a router (CONTRACT.md section 11): the map it routes by, behind an admin key
 * scoped to `*` (the service's `clusterMap` policy, as on the coordinator; not audited, like a read).
 * Served from the start, before the router is ready, so an operator can see what it waits for.
 */
export function addClusterMapRoute(app: FastifyInstance, service: Service, map: () => ShardMap, metrics: PromMetrics): void {
  const finished = metrics.recorder({ method: 'GET', route: '/cluster/map' });
  app.get('/cluster/map', {
    onResponse: (req, reply, done) => {
      if (req.method === 'GET') finished(reply.statusCode, reply.elapsedTime / 1000);
      else metrics.requestFinished({ method: req.method, route: '/cluster/map' }, reply.statusCode, reply.elapsedTime / 1000);
      done();
    },
  }, async (req) => {
    const principal = service.authenticate(req.headers.authorization, { requestId: req.id, remote: req.ip });
    const ctx: CallContext = { principal, requestId: req.id, transport: 'rest', remote: req.ip };
    return service.guarded('clusterMap', ctx, 'cluster/map', async () => map());
  });
}
