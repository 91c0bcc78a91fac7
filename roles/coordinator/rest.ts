import { randomUUID } from 'node:crypto';
import { readFileSync } from 'node:fs';
import Fastify, { type FastifyInstance, type FastifyReply, type FastifyRequest, type onResponseHookHandler } from 'fastify';
import type { Limits } from '../../core/base/limits.js';
import { ROUTER_ID_HEADER, ROUTER_MAP_VERSION_HEADER } from '../../core/cluster/coordinator/map-readers.js';
import type { CallContext } from '../../core/service/api.js';
import type { ClusterService } from '../../core/service/cluster.js';
import type { ClusterOperationName } from '../../core/service/roles.js';
import type { ServiceLogger } from '../../core/service/log.js';
import type { TlsFiles } from '../config.js';
import { DEFAULT_CONNECTION_LIMITS, type ConnectionLimits } from '../connection-limits.js';
import { guardRestServer, restServerOptions } from '../rest/connections.js';
import { errorReply, logInternalError, toErrorReply, type ErrorReply } from '../rest/errors.js';
import type { PromMetrics } from '../rest/metrics.js';

/**
 * The coordinator's REST listener: CONTRACT.md section 11's membership API (no /v1 prefix), plus
 * /healthz, /readyz and /metrics (open, as on every node). No data route: a coordinator holds no data,
 * so /v1/... answers 404 like any unknown route. The same conventions as roles/rest/server.ts: the key
 * is checked on request, role and scope before the body is read, errors in the contract's shape, every
 * request counted under its route template, the same connection limits and TLS.
 */
export interface CoordinatorRestOptions {
  limits: Limits;
  metrics: PromMetrics;
  log: ServiceLogger;
  tls?: TlsFiles | null;
  connections?: ConnectionLimits;
}

interface ClusterRoute {
  method: 'GET' | 'POST' | 'DELETE';
  template: string;
  op: ClusterOperationName;
  status: number;
  call(c: ClusterService, ctx: CallContext, req: FastifyRequest): Promise<unknown>;
}

const idOf = (req: FastifyRequest): string => (req.params as { id: string }).id;

export const CLUSTER_ROUTES: readonly ClusterRoute[] = [
  {
    method: 'GET', template: '/cluster/map', op: 'clusterMap', status: 200,
    call: (c, ctx, req) => c.map(ctx, { id: req.headers[ROUTER_ID_HEADER], version: req.headers[ROUTER_MAP_VERSION_HEADER] }),
  },
  { method: 'POST', template: '/cluster/shards', op: 'registerShard', status: 201, call: (c, ctx, req) => c.registerShard(ctx, req.body) },
  { method: 'POST', template: '/cluster/shards/{id}/drain', op: 'drainShard', status: 202, call: (c, ctx, req) => c.drainShard(ctx, idOf(req)) },
  { method: 'DELETE', template: '/cluster/shards/{id}', op: 'removeShard', status: 200, call: (c, ctx, req) => c.removeShard(ctx, idOf(req)) },
];

declare module 'fastify' {
  interface FastifyRequest { clusterCtx: CallContext | null }
}

function send(reply: FastifyReply, r: ErrorReply): FastifyReply {
  return reply.code(r.status).headers(r.headers).send(r.body);
}

function counted(metrics: PromMetrics, method: string, template: string): onResponseHookHandler {
  const finished = metrics.recorder({ method, route: template });
  return (req, reply, done) => {
    if (req.method === method) finished(reply.statusCode, reply.elapsedTime / 1000);
    else metrics.requestFinished({ method: req.method, route: template }, reply.statusCode, reply.elapsedTime / 1000);
    done();
  };
}

export function buildCoordinatorApp(cluster: ClusterService, opts: CoordinatorRestOptions): FastifyInstance {
  const tls = opts.tls ?? null;
  const limits = opts.connections ?? DEFAULT_CONNECTION_LIMITS;
  const connections = restServerOptions(limits, opts.metrics, tls !== null);
  const common = {
    ...connections.fastify,
    bodyLimit: opts.limits.maxRequestBodyBytes,
    logger: false,
    genReqId: () => randomUUID(),
    return503OnClosing: true,
  } as const;
  const app = (tls
    ? Fastify({
      ...common,
      http2: true,
      https: {
        ...connections.https, allowHTTP1: true, cert: readFileSync(tls.cert), key: readFileSync(tls.key),
        ...(tls.clientCa ? { ca: readFileSync(tls.clientCa), requestCert: true, rejectUnauthorized: true } : {}),
      },
    })
    : Fastify(common)) as unknown as FastifyInstance;
  const guard = guardRestServer(app.server as never, limits, opts.metrics, tls !== null);
  app.server.on('request', (req) => guard.onRequest(req as never));
  app.addHook('onClose', (_app, done) => {
    guard.stop();
    done();
  });
  app.decorateRequest('clusterCtx', null);

  const json = app.getDefaultJsonParser('error', 'error');
  app.addContentTypeParser('application/json', { parseAs: 'string' }, (req, body, done) => {
    if (body === '') done(null, {});
    else json(req, body as string, done);
  });
  app.addHook('onRequest', (req, reply, done) => {
    reply.header('x-request-id', req.id);
    done();
  });
  app.setErrorHandler((err, req, reply) => {
    const { reply: r, internal } = toErrorReply(err, opts.limits, req.id);
    if (internal) logInternalError(opts.log, req.id, req.routeOptions.url, err);
    return send(reply, r);
  });
  app.setNotFoundHandler((req, reply) => {
    opts.metrics.requestFinished({ method: req.method, route: 'unmatched' }, 404, reply.elapsedTime / 1000);
    return send(reply, errorReply('not_found', `no route ${req.method} ${req.url.split('?')[0]} on a cluster coordinator`));
  });

  app.get('/healthz', { onResponse: counted(opts.metrics, 'GET', '/healthz') }, async () => ({ status: 'ok' }));
  // The coordinator opens its state before it listens: once it answers at all, it is ready.
  app.get('/readyz', { onResponse: counted(opts.metrics, 'GET', '/readyz') }, async () => ({ status: 'ok' }));
  app.get('/metrics', { onResponse: counted(opts.metrics, 'GET', '/metrics') }, async (_req, reply) => {
    reply.header('content-type', opts.metrics.registry.contentType);
    return opts.metrics.registry.metrics();
  });

  for (const route of CLUSTER_ROUTES) {
    app.route({
      method: route.method,
      url: route.template.replace(/\{(\w+)\}/g, ':$1'),
      onResponse: counted(opts.metrics, route.method, route.template),
      onRequest: (req, _reply, done) => {
        try {
          const principal = cluster.service.authenticate(req.headers.authorization, { requestId: req.id, remote: req.ip });
          req.clusterCtx = { principal, requestId: req.id, transport: 'rest', remote: req.ip };
        } catch (e) {
          done(e as Error);
          return;
        }
        done();
      },
      // Role and scope before the body is read: a key without the right learns nothing of its faults.
      preParsing: (req, _reply, payload, done) => {
        try {
          cluster.service.authorize(req.clusterCtx!, route.op);
        } catch (e) {
          done(e as Error);
          return;
        }
        done(null, payload);
      },
      handler: async (req, reply) => {
        const result = await route.call(cluster, req.clusterCtx!, req);
        reply.code(route.status);
        return result;
      },
    });
  }
  return app;
}
