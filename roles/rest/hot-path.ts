import { randomUUID } from 'node:crypto';
import type { IncomingMessage, ServerResponse } from 'node:http';
import type { Http2ServerRequest, Http2ServerResponse } from 'node:http2';
import { SvcError } from '../../core/base/errors.js';
import type { Limits } from '../../core/base/limits.js';
import type { CallContext } from '../../core/service/api.js';
import type { ServiceLogger } from '../../core/service/log.js';
import type { Service } from '../../core/service/service.js';
import { logInternalError, toErrorReply } from './errors.js';
import type { PromMetrics } from './metrics.js';
import type { RestRoute, RouteRequest } from './routes.js';

/**
 * The search routes (`POST /v1/collections/{name}/query[/hybrid|/text|/multi]`) answered straight from the
 * server's request event, without fastify's per-request machinery (request and reply objects, hook
 * chains, the body stream plumbing, schema validation): on a search that comes back in a tenth of a
 * millisecond that machinery was a third of the event loop's time per request.
 *
 * It does what the fastify route does, in the same order: request id, authentication before the body is
 * read, the body as JSON (fastify's own parser, so the same prototype-poisoning refusal), role and scope,
 * the service call, the reply as JSON.stringify writes it, the route's request metric. Bodies are
 * checked by the engine, as on every other transport; only the wording of a 400 can differ from the
 * schema's. A request it is not certain about (another route, a closing server, a content type other than
 * plain application/json, no content-length or one above the body limit, an escaped or overlong
 * collection name) is not taken: fastify answers it, as before.
 */
type Req = IncomingMessage | Http2ServerRequest;
type Res = ServerResponse | Http2ServerResponse;

export interface HotPathOptions {
  service(): Service | null;
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
    if (name.includes('%') || name.includes('?')) return false;
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

    let svc: Service;
    let ctx: CallContext;
    try {
      const s = opts.service();
      if (s === null) throw new SvcError('not_ready', 'storage is not open yet');
      svc = s;
      ctx = { principal: svc.authenticate(req.headers.authorization, { requestId: id, remote }), requestId: id, transport: 'rest', remote };
    } catch (e) {
      req.resume();
      fail(e);
      return;
    }

    const chunks: Buffer[] = [];
    let received = 0;
    const onData = (chunk: Buffer): void => {
      received += chunk.length;
      chunks.push(chunk);
    };
    const onEnd = (): void => {
      detach();
      if (received !== length) {
        fail(Object.assign(new Error('request body length does not match content-length'), { statusCode: 400 }));
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
        fail(bad);
        return;
      }
      const request: RouteRequest = { params: { name }, body, query: {} };
      try {
        svc.authorize(ctx, route.op, route.collection(request));
      } catch (e) {
        fail(e);
        return;
      }
      route.call(svc, ctx, request).then((result) => finish(route.status ?? 200, {}, JSON.stringify(result))).catch(fail);
    };
    const onError = (): void => {
      detach();
      fail(Object.assign(new Error('request body could not be read'), { statusCode: 400 }));
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

/** `application/json`, alone or with parameters (`; charset=utf-8`), in any case: what fastify's JSON parser takes. */
function isPlainJson(type: string): boolean {
  if (type.length < 16) return false;
  const head = type.length === 16 ? type : type.slice(0, 16);
  if (head.toLowerCase() !== 'application/json') return false;
  return type.length === 16 || type[16] === ';';
}
