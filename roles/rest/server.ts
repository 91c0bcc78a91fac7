import { randomUUID } from 'node:crypto';
import type { EventEmitter } from 'node:events';
import { readFileSync } from 'node:fs';
import Fastify, { type FastifyInstance, type FastifyReply, type FastifyRequest, type onResponseHookHandler } from 'fastify';
import type { Limits } from '../../core/base/limits.js';
import { SvcError } from '../../core/base/errors.js';
import type { CallContext } from '../../core/service/api.js';
import type { ServiceLogger } from '../../core/service/log.js';
import type { Service } from '../../core/service/service.js';
import type { TlsFiles } from '../config.js';
import { DEFAULT_CONNECTION_LIMITS, type ConnectionLimits } from '../connection-limits.js';
import { guardRestServer, restServerOptions } from './connections.js';
import { errorReply, logInternalError, toErrorReply, type ErrorReply } from './errors.js';
import { hotPath } from './hot-path.js';
import { OPENAPI_PATH, openApiDocument } from './openapi.js';
import { compileOnFirstUse } from './validate.js';
import type { PromMetrics } from './metrics.js';
import { fastifyPath, REST_ROUTES, type RestRoute, type RouteRequest } from './routes.js';

/**
 * The REST transport: a thin adapter from HTTP to core/service. Authentication runs on request (before the
 * body is read), role and scope before validation, the operation in the handler; every failure leaves
 * in the contract's error shape.
 */
export interface RestOptions {
  limits: Limits;
  metrics: PromMetrics;
  log: ServiceLogger;
  /** With TLS: HTTP/2 and HTTP/1.1 by ALPN on one port; with clientCa, a client certificate is required. */
  tls?: TlsFiles | null;
  /** Connection caps and timeouts (roles/connection-limits.ts); the defaults when not given. */
  connections?: ConnectionLimits;
  /**
   * A loop of a multi-loop server (roles/loops/): its number, sent as `x-svc-loop` on every answer, and
   * the process's one metrics text (every loop's and the engine's), which /metrics serves instead of
   * this loop's own registry.
   */
  loop?: { index: number; exposition(): Promise<string> };
}

/** The service arrives when the database is open; until then /v1 answers 503 not_ready. */
export interface RestState {
  service: Service | null;
  /** What not_ready says meanwhile; default `storage is not open yet` (a router waits for its shards). */
  notReady?: string;
  /**
   * Once serving: why /readyz says not_ready for now (a consensus member restoring a snapshot), or
   * null. Only readiness: the routes keep answering, each as its own state allows. A loop of a
   * multi-loop server asks the engine thread (a promise).
   */
  busy?: () => string | null | Promise<string | null>;
}

declare module 'fastify' {
  interface FastifyRequest { svcCtx: CallContext | null }
}

function send(reply: FastifyReply, r: ErrorReply): FastifyReply {
  return reply.code(r.status).headers(r.headers).send(r.body);
}

const MAX_PARAM_LENGTH = 4096;

/** The service, or not_ready until the database is open. */
function openService(state: RestState): Service {
  if (state.service === null) throw new SvcError('not_ready', state.notReady ?? 'storage is not open yet');
  return state.service;
}

export function buildRestApp(state: RestState, opts: RestOptions): FastifyInstance {
  const tls = opts.tls ?? null;
  const connectionLimits = opts.connections ?? DEFAULT_CONNECTION_LIMITS;
  const connections = restServerOptions(connectionLimits, opts.metrics, tls !== null);
  const common = {
    ...connections.fastify,
    bodyLimit: opts.limits.maxRequestBodyBytes,
    routerOptions: { maxParamLength: MAX_PARAM_LENGTH },
    logger: false,
    genReqId: () => randomUUID(),
    return503OnClosing: true,
  } as const;
  const app = (tls
    ? Fastify({
      ...common,
      http2: true,
      https: {
        ...connections.https,
        allowHTTP1: true,
        cert: readFileSync(tls.cert),
        key: readFileSync(tls.key),
        ...(tls.clientCa ? { ca: readFileSync(tls.clientCa), requestCert: true, rejectUnauthorized: true } : {}),
      },
    })
    : Fastify(common)) as unknown as FastifyInstance;
  // Route schemas are checked by the ajv of validate.ts (no coercion, no defaults, unknown fields
  // refused), each compiled at its route's first request rather than at start.
  app.setValidatorCompiler(({ schema }) => compileOnFirstUse(schema as Record<string, unknown>));
  const guard = guardRestServer(app.server as never, connectionLimits, opts.metrics, tls !== null);
  app.addHook('onClose', (_app, done) => {
    guard.stop();
    done();
  });

  app.decorateRequest('svcCtx', null);

  // JSON only; an empty body is an empty object (DELETE and GET from clients that always send the header).
  const json = app.getDefaultJsonParser('error', 'error');
  app.addContentTypeParser('application/json', { parseAs: 'string' }, (req, body, done) => {
    if (body === '') done(null, {});
    else json(req, body as string, done);
  });

  // Hooks in callback style: an async hook costs a promise and a microtask turn per request.
  app.addHook('onRequest', (req, reply, done) => {
    reply.header('x-request-id', req.id);
    done();
  });

  app.setErrorHandler((err, req, reply) => {
    const { reply: r, internal } = toErrorReply(err, opts.limits, req.id);
    if (internal) logInternalError(opts.log, req.id, req.routeOptions.url, err);
    return send(reply, r);
  });

  // Each route counts its own requests in an onResponse hook of its own (a global hook would look the
  // route up on every request); one that matches no route is counted here.
  app.setNotFoundHandler((req, reply) => {
    opts.metrics.requestFinished({ method: req.method, route: 'unmatched' }, 404, reply.elapsedTime / 1000);
    return send(reply, errorReply('not_found', `no route ${req.method} ${req.url.split('?')[0]}`));
  });

  app.get('/healthz', { onResponse: counted(opts.metrics, 'GET', '/healthz') }, async () => ({ status: 'ok' }));
  app.get('/readyz', { onResponse: counted(opts.metrics, 'GET', '/readyz') }, async (_req, reply) => {
    const why = state.service === null ? state.notReady ?? 'storage is not open yet' : await state.busy?.() ?? null;
    return why === null ? { status: 'ok' } : send(reply, errorReply('not_ready', why));
  });
  app.get('/metrics', { onResponse: counted(opts.metrics, 'GET', '/metrics') }, async (_req, reply) => {
    reply.header('content-type', opts.metrics.registry.contentType);
    return opts.loop !== undefined ? opts.loop.exposition() : opts.metrics.registry.metrics();
  });

  // Open, as CONTRACT.md section 1 says: generated from the route table, it holds nothing of this
  // deployment (openapi.ts), so it tells an unauthenticated caller no more than the repository does.
  const openapi = JSON.stringify(openApiDocument(REST_ROUTES));
  app.get(OPENAPI_PATH, { onResponse: counted(opts.metrics, 'GET', OPENAPI_PATH) }, async (_req, reply) => {
    reply.header('content-type', 'application/json; charset=utf-8');
    return openapi;
  });

  for (const route of REST_ROUTES) registerRoute(app, state, route, opts.metrics);

  // The search routes skip fastify on the wire (hot-path.ts); fastify keeps the server, its timeouts,
  // every other request, and inject().
  let closing = false;
  app.addHook('preClose', (done) => {
    closing = true;
    done();
  });
  const hot = hotPath(REST_ROUTES, {
    service: () => openService(state), limits: opts.limits, metrics: opts.metrics, log: opts.log,
    parseJson: (body, done) => json(undefined as never, body, done as never), closing: () => closing, maxParamLength: MAX_PARAM_LENGTH,
  });
  const server = app.server as unknown as EventEmitter;
  const listeners = server.listeners('request');
  if (listeners.length !== 1) throw new Error(`expected fastify's one request listener, found ${listeners.length}`);
  const fastifyHandler = listeners[0] as (req: unknown, res: unknown) => void;
  server.removeListener('request', fastifyHandler);
  const loop = opts.loop === undefined ? null : String(opts.loop.index);
  server.on('request', (req: Parameters<typeof hot>[0], res: Parameters<typeof hot>[1]) => {
    guard.onRequest(req);
    if (loop !== null) res.setHeader('x-svc-loop', loop);
    if (!hot(req, res)) fastifyHandler(req, res);
  });
  return app;
}

/**
 * A route's onResponse hook: its request counted under its method and template. (fastify also answers
 * HEAD on a GET route, with the GET route's hooks: that request is counted under HEAD.)
 */
function counted(metrics: PromMetrics, method: string, template: string): onResponseHookHandler {
  const finished = metrics.recorder({ method, route: template });
  return (req, reply, done) => {
    if (req.method === method) finished(reply.statusCode, reply.elapsedTime / 1000);
    else metrics.requestFinished({ method: req.method, route: template }, reply.statusCode, reply.elapsedTime / 1000);
    done();
  };
}

function registerRoute(app: FastifyInstance, state: RestState, route: RestRoute, metrics: PromMetrics): void {
  const serviceOf = (): Service => openService(state);
  const asRoute = (req: FastifyRequest): RouteRequest => req as unknown as RouteRequest;
  app.route({
    method: route.method,
    url: fastifyPath(route.template),
    onResponse: counted(metrics, route.method, route.template),
    schema: {
      ...(route.body ? { body: route.body } : {}),
      ...(route.query ? { querystring: route.query } : {}),
      // Replies with a schema are written by fast-json-stringify, compiled once per route.
      ...(route.response ? { response: { [route.status ?? 200]: route.response } } : {}),
    },
    onRequest: (req, _reply, done) => {
      try {
        const svc = serviceOf();
        const principal = svc.authenticate(req.headers.authorization, { requestId: req.id, remote: req.ip });
        req.svcCtx = { principal, requestId: req.id, transport: 'rest', remote: req.ip };
      } catch (e) {
        done(e as Error);
        return;
      }
      done();
    },
    // Authorization first, as on every transport: role and scope are checked before the body is read or
    // parsed, so a key without the right learns nothing of a body's faults. The collection comes from the
    // path; a create names it in its body, so its scope is checked again once the body is parsed.
    preParsing: (req, _reply, payload, done) => {
      try {
        serviceOf().authorize(req.svcCtx!, route.op, route.collection(asRoute(req)));
      } catch (e) {
        done(e as Error);
        return;
      }
      done(null, payload);
    },
    preValidation: (req, _reply, done) => {
      try {
        if (route.body && req.body === undefined) req.body = {};
        serviceOf().authorize(req.svcCtx!, route.op, route.collection(asRoute(req)));
      } catch (e) {
        done(e as Error);
        return;
      }
      done();
    },
    handler: async (req, reply) => {
      const result = await route.call(serviceOf(), req.svcCtx!, asRoute(req));
      reply.code(route.statusOf?.(result) ?? route.status ?? 200);
      return result;
    },
  });
}
