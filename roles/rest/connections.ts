/**
 * The REST listener's connection limits (roles/connection-limits.ts), on HTTP/1.1 and on HTTP/2 alike,
 * for the fastify routes and the hot path alike (both write their answer with writeHead):
 * - an answer given before the request's body was read (a 401 before the key was known, a body over
 *   the limit, an unknown route) closes the connection: HTTP/1.1 sends `connection: close` and the
 *   socket goes once the answer is flushed; HTTP/2 resets the stream (NO_ERROR) after the answer;
 * - HTTP/1.1: node's headers, request and keep-alive timeouts; HTTP/2: the same through http2-guard.ts;
 *   a request that did not arrive in time is answered 400 limit_exceeded naming the variable;
 * - at most SVC_MAX_CONNECTIONS connections; the others are closed at accept.
 */
import { ServerResponse, type IncomingMessage, type Server as HttpServer } from 'node:http';
import { constants, Http2ServerResponse, type Http2SecureServer, type Http2ServerRequest, type ServerHttp2Stream } from 'node:http2';
import type { Socket } from 'node:net';
import {
  CLOSE_GRACE_MS, CONNECTION_LIMIT_VARIABLES, HTTP2_MAX_CONCURRENT_STREAMS, checkIntervalMs,
  type ConnectionLimits, type ConnectionMetrics,
} from '../connection-limits.js';
import { guardHttp2 } from '../http2-guard.js';
import { capConnections } from '../listener-cap.js';
import { errorReply, type ErrorReply } from './errors.js';

const { NGHTTP2_NO_ERROR, HTTP2_HEADER_STATUS } = constants;

/** The answer to a request that did not arrive within its time. */
export function requestTimeoutReply(limits: ConnectionLimits): ErrorReply {
  return errorReply('limit_exceeded', `the request did not arrive in time (headers within ${CONNECTION_LIMIT_VARIABLES.headersTimeoutMs}=${limits.headersTimeoutMs / 1000}, `
    + `all of it within ${CONNECTION_LIMIT_VARIABLES.requestTimeoutMs}=${limits.requestTimeoutMs / 1000} seconds)`);
}

/** An HTTP/1.1 request whose body has not all arrived (or not been read) yet. */
function http1BodyPending(req: IncomingMessage): boolean {
  if (req.complete) return false;
  const h = req.headers;
  return h['transfer-encoding'] !== undefined || (h['content-length'] !== undefined && h['content-length'] !== '0');
}

/** An HTTP/2 request whose body the client may still be sending. */
function http2BodyPending(req: Http2ServerRequest): boolean {
  return !req.stream.endAfterHeaders && !req.complete;
}

/** Cuts a socket that has not closed CLOSE_GRACE_MS after its last answer (a client that does not read it). */
function cutLater(socket: Socket | null): void {
  if (socket === null || socket.destroyed) return;
  const timer = setTimeout(() => socket.destroy(), CLOSE_GRACE_MS);
  timer.unref();
  socket.once('close', () => clearTimeout(timer));
}

/**
 * Response classes for the server: their writeHead sees whether the request's body is still to come and
 * closes the connection (HTTP/1.1) or the stream (HTTP/2) after the answer. One check of a flag per
 * answer; nothing more unless the body is pending.
 */
export function closingResponses(metrics: ConnectionMetrics): { Http1: typeof ServerResponse; Http2: typeof Http2ServerResponse } {
  class Http1 extends ServerResponse {}
  const writeHead1 = ServerResponse.prototype.writeHead;
  Http1.prototype.writeHead = function writeHead(this: ServerResponse, ...args: unknown[]) {
    if (this.shouldKeepAlive && !this.headersSent && http1BodyPending(this.req)) {
      this.shouldKeepAlive = false; // `connection: close`; node ends the socket once the answer is flushed
      metrics.connectionRefused('rest', 'unread_body');
      const socket = this.socket;
      this.once('finish', () => cutLater(socket));
    }
    return writeHead1.apply(this, args as Parameters<typeof writeHead1>);
  } as typeof writeHead1;

  class Http2 extends Http2ServerResponse {}
  const writeHead2 = Http2ServerResponse.prototype.writeHead;
  Http2.prototype.writeHead = function writeHead(this: Http2ServerResponse, ...args: unknown[]) {
    const stream = this.stream;
    if (!stream.headersSent && !stream.closed && http2BodyPending(this.req)) {
      metrics.connectionRefused('rest', 'unread_body');
      // After the answer, RST_STREAM NO_ERROR: the client stops sending and the stream's memory goes.
      stream.once('finish', () => {
        if (!stream.closed) stream.close(NGHTTP2_NO_ERROR);
      });
    }
    return writeHead2.apply(this, args as Parameters<typeof writeHead2>);
  } as typeof writeHead2;

  return { Http1: Http1 as typeof ServerResponse, Http2: Http2 as unknown as typeof Http2ServerResponse };
}

/** fastify's clientErrorHandler: node's request timeout, or a request it could not parse, in the contract's shape. */
export function clientErrorHandler(limits: ConnectionLimits, metrics: ConnectionMetrics): (err: NodeJS.ErrnoException, socket: Socket) => void {
  return (err, socket) => {
    if (err.code === 'ECONNRESET' || socket.destroyed) return;
    const timeout = err.code === 'ERR_HTTP_REQUEST_TIMEOUT';
    if (timeout) metrics.connectionRefused('rest', 'timeout');
    const r = timeout ? requestTimeoutReply(limits)
      : err.code === 'HPE_HEADER_OVERFLOW' ? errorReply('invalid_argument', 'request headers are too large')
        : errorReply('invalid_argument', 'malformed HTTP request');
    // An answer already on its way is not corrupted: the connection is just cut (as node does).
    const inFlight = (socket as Socket & { _httpMessage?: { headersSent?: boolean } | null })._httpMessage;
    if (socket.writable && inFlight?.headersSent !== true) {
      const body = JSON.stringify(r.body);
      const headers = Object.entries(r.headers).map(([k, v]) => `${k}: ${v}\r\n`).join('');
      socket.write(`HTTP/1.1 ${r.status} ${r.status === 400 ? 'Bad Request' : 'Error'}\r\nconnection: close\r\ncontent-type: application/json; charset=utf-8\r\n`
        + `content-length: ${Buffer.byteLength(body)}\r\n${headers}\r\n${body}`);
    }
    socket.destroy();
  };
}

/** The options given to fastify (and through it to node's server) at construction. */
export function restServerOptions(limits: ConnectionLimits, metrics: ConnectionMetrics, tls: boolean) {
  const responses = closingResponses(metrics);
  return {
    fastify: {
      keepAliveTimeout: limits.keepAliveTimeoutMs,
      requestTimeout: limits.requestTimeoutMs,
      // HTTP/2 sessions are closed by http2-guard.ts when idle, not on fastify's inactivity timer.
      http2SessionTimeout: 0,
      clientErrorHandler: clientErrorHandler(limits, metrics),
      ...(tls ? {} : { http: { ServerResponse: responses.Http1 } }),
    },
    /** Merged into fastify's `https` (node's createSecureServer options). */
    https: {
      Http1ServerResponse: responses.Http1,
      Http2ServerResponse: responses.Http2,
      handshakeTimeout: limits.headersTimeoutMs,
      settings: { maxConcurrentStreams: HTTP2_MAX_CONCURRENT_STREAMS },
    },
  } as const;
}

export interface RestConnectionGuard {
  /** For each request: an HTTP/2 request's body must arrive within the request timeout. */
  onRequest(req: IncomingMessage | Http2ServerRequest): void;
  stop(): void;
}

/** Limits set on the server fastify made, before it listens. */
export function guardRestServer(server: HttpServer | Http2SecureServer, limits: ConnectionLimits, metrics: ConnectionMetrics, tls: boolean): RestConnectionGuard {
  // HTTP/1.1 (also on the TLS server, by ALPN): node's own timeouts, checked often enough to matter.
  const h1 = server as HttpServer;
  h1.headersTimeout = limits.headersTimeoutMs;
  h1.requestTimeout = limits.requestTimeoutMs;
  h1.keepAliveTimeout = limits.keepAliveTimeoutMs;
  (h1 as HttpServer & { connectionsCheckingInterval: number }).connectionsCheckingInterval = checkIntervalMs(limits);
  capConnections(server, limits.restMaxConnections, metrics, 'rest');
  if (!tls) return { onRequest: () => undefined, stop: () => undefined };

  const guard = guardHttp2(server as Http2SecureServer, limits, metrics, 'rest');
  const timedOut = (stream: ServerHttp2Stream): void => {
    try {
      if (!stream.headersSent) {
        const r = requestTimeoutReply(limits);
        const body = JSON.stringify(r.body);
        stream.respond({ [HTTP2_HEADER_STATUS]: r.status, 'content-type': 'application/json; charset=utf-8', 'content-length': Buffer.byteLength(body), ...r.headers });
        stream.end(body);
      }
      stream.close(NGHTTP2_NO_ERROR);
    } catch {
      stream.destroy();
    }
  };
  return {
    onRequest(req) {
      if (req.httpVersionMajor !== 2) return;
      const r = req as Http2ServerRequest;
      if (http2BodyPending(r)) guard.expectBody(r.stream, timedOut);
    },
    stop: () => guard.stop(),
  };
}
