import type { FastifyInstance } from 'fastify';
import { SvcError } from '../../core/base/errors.js';
import type { CallContext } from '../../core/service/api.js';
import type { PromMetrics } from '../rest/metrics.js';
import type { RestState } from '../rest/server.js';
import type { RaftView } from './member-host.js';

/**
 * `GET /cluster/raft` on a consensus member (CONTRACT.md section 11): the member's view of its group,
 * behind an admin key scoped to `*` (the service's `clusterRaft` policy; not audited, like a read).
 * 503 not_ready until the member has opened its storage and started.
 */
export function addClusterRaftRoute(app: FastifyInstance, state: RestState, view: () => RaftView | null | Promise<RaftView | null>, metrics: PromMetrics): void {
  const finished = metrics.recorder({ method: 'GET', route: '/cluster/raft' });
  app.get('/cluster/raft', {
    onResponse: (req, reply, done) => {
      if (req.method === 'GET') finished(reply.statusCode, reply.elapsedTime / 1000);
      else metrics.requestFinished({ method: req.method, route: '/cluster/raft' }, reply.statusCode, reply.elapsedTime / 1000);
      done();
    },
  }, async (req) => {
    const service = state.service;
    if (service === null) throw new SvcError('not_ready', state.notReady ?? 'storage is not open yet');
    const principal = service.authenticate(req.headers.authorization, { requestId: req.id, remote: req.ip });
    const ctx: CallContext = { principal, requestId: req.id, transport: 'rest', remote: req.ip };
    return service.guarded('clusterRaft', ctx, 'cluster/raft', async () => {
      const v = await view();
      if (v === null) throw new SvcError('not_ready', 'the consensus member is starting');
      return v;
    });
  });
}
