/**
 * gRPC over node:http2, the server half of the protocol and nothing else (PROTOCOL-HTTP2.md of
 * grpc/grpc): POST with content-type application/grpc*, length-prefixed messages, metadata as headers,
 * the status in trailers (or in the headers of a Trailers-Only reply), grpc-timeout deadlines, and
 * cancellation when the client resets the stream. Unary and server-streaming methods are all svc has.
 *
 * It replaced @grpc/grpc-js's Server on the serving path: that server spent about as much CPU per call
 * as a whole small search (bench/suites/server.ts measures both transports against pgvector). Clients,
 * grpc-js's included, see the same protocol.
 */
import {
  constants, createSecureServer, createServer,
  type Http2SecureServer, type Http2Server, type IncomingHttpHeaders, type SecureServerOptions, type ServerHttp2Session, type ServerHttp2Stream,
} from 'node:http2';
import type { Socket } from 'node:net';
import { SvcError } from '../../core/base/errors.js';
import { SERVER_CLOSING_REASON } from '../../core/service/service.js';
import { DEFAULT_CONNECTION_LIMITS, HTTP2_MAX_CONCURRENT_STREAMS, noopConnectionMetrics, type ConnectionLimits, type ConnectionMetrics } from '../connection-limits.js';
import { guardHttp2 } from '../http2-guard.js';
import { capConnections } from '../listener-cap.js';

/** gRPC status codes the transport itself sends (the service's come from status.ts). */
export const GRPC_CODE = {
  OK: 0, CANCELLED: 1, UNKNOWN: 2, INVALID_ARGUMENT: 3, DEADLINE_EXCEEDED: 4, RESOURCE_EXHAUSTED: 8,
  UNIMPLEMENTED: 12, INTERNAL: 13, UNAVAILABLE: 14,
} as const;

/** A call's final status: the code, a message, and trailing metadata (ASCII keys and values). */
export interface GrpcStatus {
  code: number;
  details: string;
  metadata: Record<string, string>;
}

/** What a handler throws to end a call with a status other than OK. */
export class GrpcStatusError extends Error {
  constructor(readonly status: GrpcStatus) {
    super(status.details);
  }
}

export interface GrpcCall {
  path: string;
  /** The request headers: custom metadata keys are lower-case header names. */
  headers: IncomingHttpHeaders;
  /** host:port of the client, as grpc-js's getPeer() gives it. */
  peer: string;
  /** Aborted when the client cancels, the deadline passes, or the server shuts a stream down. */
  signal: AbortSignal;
}

export type UnaryMethodHandler = (call: GrpcCall, message: Buffer) => Promise<{ message: Buffer; trailers?: Record<string, string> }>;
/** Writes each response message with `send` (which waits while the client is not reading). */
export type StreamMethodHandler = (call: GrpcCall, message: Buffer, send: (message: Buffer) => Promise<void>) => Promise<void>;

export type MethodHandler =
  | { kind: 'unary'; handle: UnaryMethodHandler }
  | { kind: 'serverStream'; handle: StreamMethodHandler };

export interface GrpcTransportOptions {
  /** path (/package.Service/Method) to its handler. */
  methods: ReadonlyMap<string, MethodHandler>;
  /** Larger request messages are refused as RESOURCE_EXHAUSTED while they arrive, without buffering them. */
  maxReceiveBytes: number;
  tls?: { cert: Buffer; key: Buffer; clientCa?: Buffer };
  /** A handler that throws something other than GrpcStatusError: the status to send (logged by the caller). */
  onUnexpected(e: unknown): GrpcStatus;
  /** The listening server failed to accept a connection (it keeps listening). */
  onServerError?(e: Error): void;
  /** Connection cap (grpcMaxConnections) and timeouts; the defaults when not given. */
  connections?: ConnectionLimits;
  connectionMetrics?: ConnectionMetrics;
  /** The status of a call whose request message did not arrive within the request timeout. */
  requestTimeoutStatus?(): GrpcStatus;
}

export interface GrpcTransport {
  /** `reusePort`: SO_REUSEPORT (Node 22.12+ on Linux), so that several loops' listeners share the port. */
  listen(host: string, port: number, reusePort?: boolean): Promise<number>;
  /** Stop accepting; let unary calls finish for up to graceMs and end streams at once; then cut what remains. */
  close(graceMs: number): Promise<void>;
}

const {
  HTTP2_HEADER_STATUS, HTTP2_HEADER_CONTENT_TYPE, HTTP2_HEADER_METHOD, HTTP2_HEADER_PATH, NGHTTP2_NO_ERROR,
  NGHTTP2_STREAM_STATE_HALF_CLOSED_REMOTE, NGHTTP2_STREAM_STATE_CLOSED,
} = constants;
const TIMEOUT_UNITS: Record<string, number> = { H: 3_600_000, M: 60_000, S: 1000, m: 1, u: 1e-3, n: 1e-6 };
/** A timer cannot wait longer than this (about 24.8 days); longer deadlines are as good as none. */
const MAX_TIMER_MS = 2 ** 31 - 1;

/** grpc-message is percent-encoded UTF-8: bytes outside printable ASCII, and '%', become %XX. */
export function encodeGrpcMessage(s: string): string {
  let out = '';
  for (const b of Buffer.from(s, 'utf8')) {
    out += b >= 0x20 && b <= 0x7e && b !== 0x25 ? String.fromCharCode(b) : `%${b.toString(16).toUpperCase().padStart(2, '0')}`;
  }
  return out;
}

/** grpc-timeout: up to 8 digits and a unit (PROTOCOL-HTTP2.md); undefined when absent or malformed. */
export function parseGrpcTimeout(v: unknown): number | undefined {
  if (typeof v !== 'string') return undefined;
  const m = /^(\d{1,8})([HMSmun])$/.exec(v);
  return m ? Number(m[1]) * TIMEOUT_UNITS[m[2]] : undefined;
}

/** One Length-Prefixed-Message: the uncompressed flag, the big-endian length, the bytes. */
export function frameGrpcMessage(message: Uint8Array): Buffer {
  const out = Buffer.allocUnsafe(5 + message.length);
  out[0] = 0;
  out.writeUInt32BE(message.length, 1);
  out.set(message, 5);
  return out;
}

function statusHeaders(s: GrpcStatus): Record<string, string> {
  return { ...s.metadata, 'grpc-status': String(s.code), 'grpc-message': encodeGrpcMessage(s.details) };
}

const status = (code: number, details: string, metadata: Record<string, string> = {}): GrpcStatus => ({ code, details, metadata });

export function createGrpcTransport(opts: GrpcTransportOptions): GrpcTransport {
  const sessions = new Set<ServerHttp2Session>();
  const sockets = new Set<Socket>();
  /** Aborts the server-streaming calls in flight (close() ends them at once). */
  const streams = new Set<(reason?: unknown) => void>();
  /** The status a streaming call ends with, read when its trailers are due. */
  const finalStatus = new WeakMap<ServerHttp2Stream, GrpcStatus>();
  let closing = false;
  const limits = opts.connections ?? DEFAULT_CONNECTION_LIMITS;
  const connectionMetrics = opts.connectionMetrics ?? noopConnectionMetrics;

  const h2Options = {
    // Room for requests of SVC_MAX_REQUEST_BODY_BYTES in flight: the session's memory cap is in MB.
    maxSessionMemory: Math.max(10, Math.ceil((2 * opts.maxReceiveBytes) / 2 ** 20)),
    settings: { initialWindowSize: 1 << 20, maxConcurrentStreams: HTTP2_MAX_CONCURRENT_STREAMS },
  };
  const server: Http2Server | Http2SecureServer = opts.tls
    ? createSecureServer({
      ...h2Options,
      handshakeTimeout: limits.headersTimeoutMs,
      cert: opts.tls.cert,
      key: opts.tls.key,
      ...(opts.tls.clientCa ? { ca: opts.tls.clientCa, requestCert: true, rejectUnauthorized: true } : {}),
    } satisfies SecureServerOptions)
    : createServer(h2Options);

  server.on('session', (session: ServerHttp2Session) => {
    sessions.add(session);
    if (closing) session.close(); // its TLS handshake finished after close() began: GOAWAY at once
    session.on('close', () => sessions.delete(session));
    session.on('error', () => undefined); // a broken connection fails its own calls
    // A connection-level window as large as a stream's, so one big message is not paced by updates.
    session.on('connect', () => session.setLocalWindowSize(1 << 24));
  });
  server.on('sessionError', () => undefined);
  // A reply's frames go out at once: without this, Nagle holds a small reply behind the peer's ACK.
  server.on('connection', (socket: Socket) => {
    socket.setNoDelay(true);
    // Raw sockets too: one still in its TLS handshake is no session yet, and close() must cut it.
    sockets.add(socket);
    socket.once('close', () => sockets.delete(socket));
  });
  server.on('stream', onStream);
  // At most grpcMaxConnections connections; the first stream within the headers timeout, idle ones closed,
  // every request message within the request timeout (http2-guard.ts).
  capConnections(server, limits.grpcMaxConnections, connectionMetrics, 'grpc');
  const guard = guardHttp2(server, limits, connectionMetrics, 'grpc');

  /** The client may still be sending this stream's request. */
  function bodyStillComing(stream: ServerHttp2Stream): boolean {
    if (stream.endAfterHeaders || stream.readableEnded || stream.destroyed) return false;
    const s = stream.state.state;
    return s !== NGHTTP2_STREAM_STATE_HALF_CLOSED_REMOTE && s !== NGHTTP2_STREAM_STATE_CLOSED;
  }

  /** An answer given before the request was read: RST_STREAM NO_ERROR after it, so the client stops sending. */
  function respondEarly(stream: ServerHttp2Stream, httpStatus: number): void {
    stream.respond({ [HTTP2_HEADER_STATUS]: httpStatus }, { endStream: true });
    if (bodyStillComing(stream)) {
      connectionMetrics.connectionRefused('grpc', 'unread_body');
      stream.close(NGHTTP2_NO_ERROR);
    }
  }

  function onStream(stream: ServerHttp2Stream, headers: IncomingHttpHeaders): void {
    stream.on('error', () => undefined); // a reset stream is a cancelled call, seen through 'close'
    if (headers[HTTP2_HEADER_METHOD] !== 'POST') {
      respondEarly(stream, 405);
      return;
    }
    const contentType = headers[HTTP2_HEADER_CONTENT_TYPE];
    if (typeof contentType !== 'string' || !contentType.startsWith('application/grpc')) {
      respondEarly(stream, 415);
      return;
    }
    const path = String(headers[HTTP2_HEADER_PATH] ?? '');
    const method = opts.methods.get(path);
    if (method === undefined || closing) {
      sendStatus(stream, method === undefined ? status(GRPC_CODE.UNIMPLEMENTED, `unknown method ${path}`) : status(GRPC_CODE.UNAVAILABLE, 'the server is shutting down'));
      return;
    }

    // The signal is made when a handler first asks for it (a unary search never does: an
    // AbortController a call was measurable); an abort before that is remembered and applied then.
    let controller: AbortController | undefined;
    let aborted = false;
    let abortReason: unknown;
    const signal = (): AbortSignal => {
      if (controller === undefined) {
        controller = new AbortController();
        if (aborted) controller.abort(abortReason);
      }
      return controller.signal;
    };
    // The reason tells the handler why (the server closing, or by default the client going away).
    const abort = (reason?: unknown): void => {
      aborted = true;
      abortReason = reason;
      controller?.abort(reason);
    };
    let done = false;
    let timer: NodeJS.Timeout | undefined;
    const finish = (): void => {
      done = true;
      if (timer !== undefined) clearTimeout(timer);
      if (method.kind === 'serverStream') streams.delete(abort);
    };
    stream.on('close', () => {
      if (!done) {
        finish();
        abort();
      }
    });
    const timeoutMs = parseGrpcTimeout(headers['grpc-timeout']);
    if (timeoutMs !== undefined && timeoutMs < MAX_TIMER_MS) {
      timer = setTimeout(() => {
        if (done) return;
        finish();
        abort();
        sendStatus(stream, status(GRPC_CODE.DEADLINE_EXCEEDED, 'deadline exceeded'));
      }, timeoutMs);
    }
    if (method.kind === 'serverStream') streams.add(abort);
    const socket = stream.session?.socket;
    const peer = socket?.remoteAddress?.includes(':') ? `[${socket.remoteAddress}]:${socket.remotePort}` : `${socket?.remoteAddress}:${socket?.remotePort}`;
    const call: GrpcCall = { path, headers, peer, get signal() { return signal(); } };

    const chunks: Buffer[] = [];
    let received = 0;
    // The request message must arrive within the request timeout (the handler's own time is not bounded here).
    if (!stream.endAfterHeaders) {
      guard.expectBody(stream, () => {
        if (done) return;
        finish();
        abort();
        chunks.length = 0;
        sendStatus(stream, opts.requestTimeoutStatus?.() ?? status(GRPC_CODE.DEADLINE_EXCEEDED, 'the request message did not arrive in time'), false);
      });
    }

    stream.on('data', (chunk: Buffer) => {
      if (done) return;
      received += chunk.length;
      if (received > opts.maxReceiveBytes + 5) {
        finish();
        abort();
        chunks.length = 0;
        sendStatus(stream, status(GRPC_CODE.RESOURCE_EXHAUSTED, `received message larger than max (${received - 5} vs. ${opts.maxReceiveBytes})`));
        return;
      }
      chunks.push(chunk);
    });
    stream.on('end', () => {
      if (done) return;
      const body = chunks.length === 1 ? chunks[0] : Buffer.concat(chunks);
      if (body.length < 5 || body.readUInt32BE(1) !== body.length - 5) {
        finish();
        sendStatus(stream, status(GRPC_CODE.INTERNAL, body.length < 5 ? 'a request message was expected' : 'the request must be exactly one length-prefixed message'));
        return;
      }
      if (body[0] !== 0) {
        finish();
        sendStatus(stream, status(GRPC_CODE.UNIMPLEMENTED, 'compressed messages are not accepted (grpc-encoding identity only)', { 'grpc-accept-encoding': 'identity' }));
        return;
      }
      const message = body.subarray(5);
      if (method.kind === 'unary') runUnary(stream, call, method.handle, message, () => done, finish);
      else runStream(stream, call, method.handle, message, () => done, finish);
    });
  }

  function failure(e: unknown): GrpcStatus {
    return e instanceof GrpcStatusError ? e.status : opts.onUnexpected(e);
  }

  function runUnary(stream: ServerHttp2Stream, call: GrpcCall, handle: UnaryMethodHandler, message: Buffer, isDone: () => boolean, finish: () => void): void {
    handle(call, message).then(
      (r) => {
        if (isDone()) return;
        finish();
        // Reset by the client a moment ago ('close' not emitted yet): nobody to answer.
        if (stream.destroyed || stream.closed) return;
        const trailers = { ...r.trailers, 'grpc-status': '0' };
        stream.respond({ [HTTP2_HEADER_STATUS]: 200, [HTTP2_HEADER_CONTENT_TYPE]: 'application/grpc' }, { waitForTrailers: true });
        stream.once('wantTrailers', () => stream.sendTrailers(trailers));
        stream.end(frameGrpcMessage(r.message));
      },
      (e: unknown) => {
        if (isDone()) return;
        finish();
        sendStatus(stream, failure(e));
      },
    ).catch(() => abandon(stream));
  }

  /** A reply that could not be written (the stream went away in between): the stream is dropped, never the process. */
  function abandon(stream: ServerHttp2Stream): void {
    if (!stream.destroyed) stream.destroy();
  }

  function runStream(stream: ServerHttp2Stream, call: GrpcCall, handle: StreamMethodHandler, message: Buffer, isDone: () => boolean, finish: () => void): void {
    const send = async (msg: Buffer): Promise<void> => {
      if (call.signal.aborted || stream.destroyed || stream.closed) throw new GrpcStatusError(status(GRPC_CODE.CANCELLED, 'the call ended'));
      if (!stream.headersSent) {
        stream.respond({ [HTTP2_HEADER_STATUS]: 200, [HTTP2_HEADER_CONTENT_TYPE]: 'application/grpc' }, { waitForTrailers: true });
        stream.once('wantTrailers', () => stream.sendTrailers(statusHeaders(finalStatus.get(stream) ?? status(GRPC_CODE.OK, ''))));
      }
      if (!stream.write(frameGrpcMessage(msg))) {
        await new Promise<void>((resolve) => {
          const go = (): void => {
            stream.off('drain', go);
            stream.off('close', go);
            call.signal.removeEventListener('abort', go);
            resolve();
          };
          stream.on('drain', go);
          stream.on('close', go);
          // Shutdown or cancellation does not wait for a reader that stopped reading.
          call.signal.addEventListener('abort', go, { once: true });
        });
      }
    };
    handle(call, message, send).then(
      () => (closing ? status(GRPC_CODE.UNAVAILABLE, 'the server is shutting down') : status(GRPC_CODE.OK, '')),
      (e: unknown) => (closing && call.signal.aborted ? status(GRPC_CODE.UNAVAILABLE, 'the server is shutting down') : failure(e)),
    ).then((s) => {
      // Ended already: by the client (nothing to send) or by the deadline (its status went out).
      if (isDone()) return;
      finish();
      sendStatus(stream, s);
    }).catch(() => abandon(stream));
  }

  /** The status of a call: in trailers once messages went out, else as a Trailers-Only reply. */
  function sendStatus(stream: ServerHttp2Stream, s: GrpcStatus, countUnread = true): void {
    if (stream.destroyed || stream.closed) return;
    try {
      if (stream.headersSent) {
        // 'wantTrailers' (set when the first message went out) sends it when the data ends.
        finalStatus.set(stream, s);
        stream.end();
        return;
      }
      stream.respond({ [HTTP2_HEADER_STATUS]: 200, [HTTP2_HEADER_CONTENT_TYPE]: 'application/grpc', ...statusHeaders(s) }, { endStream: true });
      // The reply is complete: a client still sending is told to stop (RST_STREAM NO_ERROR after it).
      if (!stream.readableEnded) {
        if (countUnread && bodyStillComing(stream)) connectionMetrics.connectionRefused('grpc', 'unread_body');
        stream.close(NGHTTP2_NO_ERROR);
      }
    } catch {
      abandon(stream);
    }
  }

  return {
    listen(host, port, reusePort = false) {
      return new Promise((resolve, reject) => {
        const onError = (e: Error): void => reject(e);
        server.once('error', onError);
        server.listen({ port, host, ...(reusePort ? { reusePort: true } : {}) }, () => {
          server.off('error', onError);
          // An accept failure (EMFILE, say) must not become an uncaught exception; the server keeps listening.
          server.on('error', (e: Error) => opts.onServerError?.(e));
          resolve((server.address() as { port: number }).port);
        });
      });
    },
    close(graceMs) {
      closing = true;
      guard.stop();
      // Streams (Replicate's live tail) never end on their own: they end now, with UNAVAILABLE.
      const why = new SvcError('unavailable', 'the server is shutting down', { reason: SERVER_CLOSING_REASON });
      for (const abortStream of streams) abortStream(why);
      return new Promise((resolve) => {
        const timer = setTimeout(() => {
          for (const s of sessions) s.destroy();
          for (const k of sockets) k.destroy();
        }, graceMs);
        server.close(() => {
          clearTimeout(timer);
          resolve();
        });
        for (const s of sessions) s.close();
      });
    },
  };
}
