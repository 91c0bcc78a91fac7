import { randomUUID } from 'node:crypto';
import type { IncomingMessage, ServerResponse } from 'node:http';
import type { Http2ServerRequest, Http2ServerResponse } from 'node:http2';
import type { Limits } from '../../core/base/limits.js';
import type { CallContext } from '../../core/service/api.js';
import type { ServiceLogger } from '../../core/service/log.js';
import type { Service } from '../../core/service/service.js';
import { logInternalError, toErrorReply } from './errors.js';
import type { PromMetrics } from './metrics.js';
import type { RestRoute, RouteRequest } from './routes.js';
import { checkBody } from './validate.js';

/**
 * The search routes (`POST /v1/collections/{name}/query[/hybrid|/text|/multi]`) answered straight from the
 * server's request event, without fastify's per-request machinery (request and reply objects, hook
 * chains, routing, the body stream plumbing): on a search that comes back in a tenth of a millisecond
 * that machinery was about a sixth of the event loop's time per request (docs/server.md, REST).
 *
 * It does what the fastify route does, in the same order: request id, authentication before the body is
 * read, the body as JSON (fastify's own parser, so the same prototype-poisoning refusal), role and scope,
 * the route's JSON schema (the same options and message as fastify's), the service call, the reply as
 * JSON.stringify writes it, the route's request metric. A request it is not certain about (another
 * route, a closing server, a content type other than plain application/json, no content-length or one
 * above the body limit, a collection name with anything the router would decode or cut, or an overlong
 * one) is not taken: fastify answers it, as before.
 */
type Req = IncomingMessage | Http2ServerRequest;
type Res = ServerResponse | Http2ServerResponse;

export interface HotPathOptions {
  /** The service; throws not_ready until the database is open. */
  service(): Service;
  limits: Limits;
  metrics: PromMetrics;
  log: ServiceLogger;
  /** The JSON body parser fastify uses (secure-json-parse, refusing __proto__ and constructor keys). */
  parseJson(body: string, done: (err: Error | null, value?: unknown) => void): void;
  /** True once the server is closing: fastify then answers 503 and closes connections. */
  closing(): boolean;
  /** fastify's router's longest path parameter. */
  maxParamLength: number;
}

const PREFIX = '/v1/collections/';
const COLLECTION = '/v1/collections/{name}';
const JSON_TYPE = 'application/json; charset=utf-8';
/** A name with nothing for the router to decode or cut (`%`, `?`, `#`, `;`...); others go to fastify. */
const PLAIN_NAME = /^[A-Za-z0-9._-]+$/;

interface HotRoute {
  route: RestRoute;
  record(status: number, seconds: number): void;
}

/** Returns a request listener that answers a hot route and returns true, or returns false untouched. */
export function hotPath(routes: readonly RestRoute[], opts: HotPathOptions): (req: Req, res: Res) => boolean {
  const bySuffix = new Map<string, HotRoute>();
  for (const route of routes) {
    if (!route.hot) continue;
    if (route.method !== 'POST' || !route.template.startsWith(COLLECTION + '/')) throw new Error(`hot route ${route.template} is not a POST under ${COLLECTION}`);
    bySuffix.set(route.template.slice(COLLECTION.length), { route, record: opts.metrics.recorder({ method: route.method, route: route.template }) });
  }

  const reply = (res: Res, id: string, status: number, headers: Record<string, string>, text: string): void => {
    res.writeHead(status, { ...headers, 'content-type': JSON_TYPE, 'content-length': String(Buffer.byteLength(text)), 'x-request-id': id });
    res.end(text);
  };

  return (req, res) => {
    if (req.method !== 'POST' || opts.closing()) return false;
    const url = req.url;
    if (url === undefined || !url.startsWith(PREFIX)) return false;
    const slash = url.indexOf('/', PREFIX.length);
    if (slash <= PREFIX.length || slash - PREFIX.length > opts.maxParamLength) return false;
    const query = url.indexOf('?', slash);
    const hot = bySuffix.get(query < 0 ? url.slice(slash) : url.slice(slash, query));
    if (hot === undefined) return false;
    const name = url.slice(PREFIX.length, slash);
    if (!PLAIN_NAME.test(name)) return false;
    const type = req.headers['content-type'];
    if (type === undefined || !isPlainJson(type)) return false;
    const length = Number(req.headers['content-length']);
    if (!(length > 0) || length > opts.limits.maxRequestBodyBytes) return false;
    serve(req, res, hot, name, length);
    return true;
  };

  function serve(req: Req, res: Res, hot: HotRoute, name: string, length: number): void {
    const started = performance.now();
    const id = randomUUID();
    const remote = req.socket?.remoteAddress;
    const { route } = hot;
    const finish = (status: number, headers: Record<string, string>, text: string): void => {
      reply(res, id, status, headers, text);
      hot.record(status, (performance.now() - started) / 1000);
    };
    const fail = (err: unknown): void => {
      if (res.headersSent) return;
      const { reply: r, internal } = toErrorReply(err, opts.limits, id);
      if (internal) logInternalError(opts.log, id, route.template, err);
      finish(r.status, r.headers, JSON.stringify(r.body));
    };
    // A body that could not be read or parsed: fastify then closes an HTTP/1.1 connection.
    const failBody = (err: unknown): void => {
      if (req.httpVersionMajor === 1 && !res.headersSent) res.setHeader('connection', 'close');
      fail(err);
    };

    let svc: Service;
    let ctx: CallContext;
    try {
      svc = opts.service();
      ctx = { principal: svc.authenticate(req.headers.authorization, { requestId: id, remote }), requestId: id, transport: 'rest', remote };
      // Role and scope before the body is read, as the fastify routes' preParsing hook does.
      svc.authorize(ctx, route.op, route.collection({ params: { name }, body: undefined, query: {} }));
    } catch (e) {
      req.resume();
      fail(e);
      return;
    }

    const chunks: Buffer[] = [];
    let received = 0;
    const onData = (chunk: Buffer): void => {
      received += chunk.length;
      if (received > length) {
        detach();
        failBody(lengthMismatch());
        return;
      }
      chunks.push(chunk);
    };
    const onEnd = (): void => {
      detach();
      if (received !== length) {
        failBody(lengthMismatch());
        return;
      }
      const text = chunks.length === 1 ? chunks[0].toString('utf8') : Buffer.concat(chunks, received).toString('utf8');
      let body: unknown;
      let bad: Error | null = null;
      opts.parseJson(text, (err, value) => {
        bad = err;
        body = value;
      });
      if (bad !== null) {
        failBody(bad);
        return;
      }
      // fastify's order: role and scope (preParsing, above), the body's schema, the handler.
      const request: RouteRequest = { params: { name }, body, query: {} };
      let answer: Promise<unknown>;
      try {
        if (route.body !== undefined) checkBody(route.body, body);
        answer = route.call(svc, ctx, request);
      } catch (e) {
        fail(e);
        return;
      }
      answer.then((result) => finish(route.status ?? 200, {}, JSON.stringify(result))).catch(fail);
    };
    const onError = (): void => {
      detach();
      failBody(Object.assign(new Error('request body could not be read'), { statusCode: 400 }));
    };
    const detach = (): void => {
      req.removeListener('data', onData);
      req.removeListener('end', onEnd);
      req.removeListener('error', onError);
    };
    req.on('data', onData);
    req.on('end', onEnd);
    req.on('error', onError);
  }
}

const lengthMismatch = (): Error => Object.assign(new Error('request body length does not match content-length'), { statusCode: 400 });

/** `application/json`, alone or with parameters (`; charset=utf-8`), in any case: what fastify's JSON parser takes. */
function isPlainJson(type: string): boolean {
  if (type.slice(0, 16).toLowerCase() !== 'application/json') return false;
  return type.length === 16 || type[16] === ';';
}
