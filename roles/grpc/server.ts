/**
 * The gRPC server: proto/svc.proto's RPCs as thin adapters over the one Service (the same object the
 * REST server uses), on the lean gRPC-over-HTTP/2 transport of transport.ts. Authentication, roles,
 * scopes, limits, audit and tracing all happen in the service; this file only decodes, maps errors
 * (status.ts) and counts requests.
 */
import { randomUUID } from 'node:crypto';
import type { IncomingHttpHeaders } from 'node:http2';
import { SvcError, limitExceeded, toSvcError } from '../../core/base/errors.js';
import type { Limits } from '../../core/base/limits.js';
import type { ReplicateRequest } from '../../core/base/model.js';
import type { CallContext, Principal } from '../../core/service/api.js';
import { HTTP_STATUS } from '../../core/service/http-status.js';
import type { ServiceLogger } from '../../core/service/log.js';
import { noopMetrics, type Metrics } from '../../core/service/metrics.js';
import type { Service } from '../../core/service/service.js';
import { SvcService, type ReplicateRequest as ReplicateMessage, type ReplicationEvent } from '../../proto/gen/svc.js';
import { CONNECTION_LIMIT_VARIABLES, DEFAULT_CONNECTION_LIMITS, noopConnectionMetrics, type ConnectionLimits, type ConnectionMetrics } from '../connection-limits.js';
import { REQUEST_DECODERS, UNARY_BINDINGS, type UnaryMethod } from './rpcs.js';
import { REQUEST_ID_KEY, toServiceError } from './status.js';
import { createGrpcTransport, GrpcStatusError, type GrpcCall, type MethodHandler } from './transport.js';

export interface GrpcTls {
  /** PEM certificate chain and private key of the server (SVC_TLS_CERT, SVC_TLS_KEY). */
  cert: Buffer;
  key: Buffer;
  /** PEM CA bundle (SVC_TLS_CLIENT_CA): when set, every client must present a certificate chaining to it. */
  clientCa?: Buffer;
}

/**
 * The source of the Replicate stream: a logical snapshot, then the live commit tail. By default the
 * service's own (serviceReplication); tests may give another.
 */
export interface ReplicationSource {
  stream(ctx: CallContext, resume: ReplicateRequest, signal: AbortSignal): AsyncIterable<ReplicationEvent>;
}

/** The message's fields that are set (proto3 optionals absent when not). */
function replicateRequest(m: ReplicateMessage): ReplicateRequest {
  const r: ReplicateRequest = {};
  if (m.after_seq !== undefined) r.after_seq = Number(m.after_seq);
  if (m.history !== undefined) r.history = m.history;
  return r;
}

/** The default source: the service's `replicate` (the database's snapshot and WAL tail). */
export function serviceReplication(service: Service): ReplicationSource {
  return {
    async *stream(ctx, resume, signal) {
      for await (const e of service.replicate(ctx, resume, signal)) {
        yield { seq: e.seq, record: Buffer.from(e.record.buffer, e.record.byteOffset, e.record.byteLength) };
      }
    },
  };
}

export interface GrpcServerOptions {
  service: Service;
  /** Where to listen (an IPv6 host without brackets); port 0 picks a free one (see the returned `port`). */
  host: string;
  port: number;
  tls?: GrpcTls;
  limits: Limits;
  log: ServiceLogger;
  metrics?: Metrics & Partial<ConnectionMetrics>;
  /** Connection cap and timeouts (roles/connection-limits.ts); the defaults when not given. */
  connections?: ConnectionLimits;
  replication?: ReplicationSource;
  /** How long close() lets calls in flight finish before cutting them. Default 10 s. */
  shutdownGraceMs?: number;
  /** Share the port with the other loops of a multi-loop server (SO_REUSEPORT, roles/loops/). */
  reusePort?: boolean;
}

export interface GrpcServerHandle {
  port: number;
  close(): Promise<void>;
}

/**
 * The transport refuses (RESOURCE_EXHAUSTED, without buffering) only messages above twice the limit;
 * between the limit and that, the request is read and answered like REST: INVALID_ARGUMENT with
 * limit_exceeded naming SVC_MAX_REQUEST_BODY_BYTES.
 */
const TRANSPORT_SLACK = 2;
const MAX_GRPC_MESSAGE_BYTES = 2 ** 31 - 1;

/** A request message decoded, or the SvcError decoding it gave (answered after authentication). */
type Decoded<T> = { ok: true; value: T } | { ok: false; error: SvcError };

function decoder<T>(name: string, decode: (b: Buffer) => T, limits: Limits): (bytes: Buffer) => Decoded<T> {
  return (bytes) => {
    if (bytes.length > limits.maxRequestBodyBytes) {
      return { ok: false, error: limitExceeded('SVC_MAX_REQUEST_BODY_BYTES', limits.maxRequestBodyBytes, bytes.length, 'request message size') };
    }
    try {
      return { ok: true, value: decode(bytes) };
    } catch {
      return { ok: false, error: new SvcError('invalid_argument', `malformed ${name} request message`) };
    }
  };
}

function header(h: IncomingHttpHeaders, key: string): string | undefined {
  const v = h[key];
  return typeof v === 'string' ? v : Array.isArray(v) ? v[0] : undefined;
}

function requestIdOf(h: IncomingHttpHeaders): string {
  const v = header(h, REQUEST_ID_KEY);
  return v !== undefined && /^[\w.:-]{1,128}$/.test(v) ? v : randomUUID();
}

function hasConnectionMetrics(m: Metrics & Partial<ConnectionMetrics>): m is Metrics & ConnectionMetrics {
  return typeof m.connectionRefused === 'function' && typeof m.connectionOpened === 'function' && typeof m.connectionClosed === 'function';
}

/** A request message that did not arrive within SVC_REQUEST_TIMEOUT_SECS: limit_exceeded, as on REST. */
function limitExceededTimeout(l: ConnectionLimits): SvcError {
  return new SvcError('limit_exceeded', `the request did not arrive in time (all of it within ${CONNECTION_LIMIT_VARIABLES.requestTimeoutMs}=${l.requestTimeoutMs / 1000} seconds)`);
}

export async function startGrpcServer(opts: GrpcServerOptions): Promise<GrpcServerHandle> {
  const { service, limits, log } = opts;
  const metrics = opts.metrics ?? noopMetrics;
  const connectionLimits = opts.connections ?? DEFAULT_CONNECTION_LIMITS;

  /** Authenticate the metadata and build the call's context (the service authorizes each operation). */
  function contextOf(call: GrpcCall, requestId: string): CallContext {
    const principal: Principal = service.authenticate(header(call.headers, 'authorization'), { requestId, remote: call.peer });
    return { principal, requestId, transport: 'grpc', remote: call.peer };
  }

  function finish(path: string, startedMs: number, err: SvcError | undefined, requestId: string, op: string): void {
    if (err?.code === 'internal') log.error({ request_id: requestId, op, cause: err.detail.cause }, 'internal error in gRPC call');
    metrics.requestFinished({ method: 'GRPC', route: path }, err ? HTTP_STATUS[err.code] : 200, (performance.now() - startedMs) / 1000);
  }

  function unary<M extends UnaryMethod>(m: M): MethodHandler {
    const binding = UNARY_BINDINGS[m];
    const def = SvcService[m];
    const decode = decoder(m, (REQUEST_DECODERS[m] ?? def.requestDeserialize) as (b: Buffer) => Parameters<typeof binding.invoke>[2], limits);
    const encode = def.responseSerialize as (v: unknown) => Buffer;
    return {
      kind: 'unary',
      handle: async (call, message) => {
        const startedMs = performance.now();
        const requestId = requestIdOf(call.headers);
        try {
          const ctx = contextOf(call, requestId);
          const decoded = decode(message);
          // Role and scope first: a caller without the right learns nothing from validation errors.
          service.authorize(ctx, binding.op, decoded.ok ? binding.collection(decoded.value) : undefined);
          if (!decoded.ok) throw decoded.error;
          const bytes = encode(await binding.invoke(service, ctx, decoded.value));
          if (bytes.length > limits.maxRequestBodyBytes) {
            throw limitExceeded('SVC_MAX_REQUEST_BODY_BYTES', limits.maxRequestBodyBytes, bytes.length,
              'response message size (ask for fewer results or without vectors)');
          }
          finish(def.path, startedMs, undefined, requestId, binding.op);
          return { message: bytes, trailers: { [REQUEST_ID_KEY]: requestId } };
        } catch (e) {
          const err = toSvcError(e);
          finish(def.path, startedMs, err, requestId, binding.op);
          throw new GrpcStatusError(toServiceError(err, requestId));
        }
      },
    };
  }

  /** Replicate: admin scoped to every collection (it carries every collection's writes). */
  const replicate: MethodHandler = {
    kind: 'serverStream',
    handle: async (call, message, send) => {
      const startedMs = performance.now();
      const requestId = requestIdOf(call.headers);
      const def = SvcService.replicate;
      try {
        const ctx = contextOf(call, requestId);
        // Role (admin) and scope (*) from the service's role table, before the message is looked at.
        service.authorize(ctx, 'replicate');
        const decoded = decoder('replicate', def.requestDeserialize, limits)(message);
        if (!decoded.ok) throw decoded.error;
        const source = opts.replication ?? serviceReplication(service);
        for await (const event of source.stream(ctx, replicateRequest(decoded.value), call.signal)) {
          if (call.signal.aborted) break;
          await send(def.responseSerialize(event));
        }
        finish(def.path, startedMs, undefined, requestId, 'replicate');
      } catch (e) {
        if (e instanceof GrpcStatusError) throw e; // the transport's own (the call ended)
        const err = toSvcError(e);
        finish(def.path, startedMs, err, requestId, 'replicate');
        throw new GrpcStatusError(toServiceError(err, requestId));
      }
    },
  };

  const methods = new Map<string, MethodHandler>(Object.keys(UNARY_BINDINGS).map((m) => [SvcService[m as UnaryMethod].path, unary(m as UnaryMethod)]));
  methods.set(SvcService.replicate.path, replicate);

  const transport = createGrpcTransport({
    methods,
    maxReceiveBytes: Math.min(MAX_GRPC_MESSAGE_BYTES, limits.maxRequestBodyBytes * TRANSPORT_SLACK),
    tls: opts.tls,
    onUnexpected: (e) => {
      const requestId = randomUUID();
      log.error({ request_id: requestId, err: e instanceof Error ? e.message : String(e) }, 'internal error in gRPC transport');
      return toServiceError(new SvcError('internal', 'internal error'), requestId);
    },
    onServerError: (e) => log.error({ err: e.message }, 'gRPC server could not accept a connection'),
    connections: connectionLimits,
    connectionMetrics: hasConnectionMetrics(metrics) ? metrics : noopConnectionMetrics,
    requestTimeoutStatus: () => toServiceError(limitExceededTimeout(connectionLimits), randomUUID()),
  });
  const address = `${opts.host.includes(':') ? `[${opts.host}]` : opts.host}:${opts.port}`;
  let port: number;
  try {
    port = await transport.listen(opts.host, opts.port, opts.reusePort ?? false);
  } catch (e) {
    throw new SvcError('invalid_argument', `cannot listen for gRPC on ${address}: ${(e as Error).message}`);
  }
  log.info({ address, port, tls: opts.tls !== undefined, mtls: opts.tls?.clientCa !== undefined }, 'gRPC server listening');
  return { port, close: () => transport.close(opts.shutdownGraceMs ?? 10_000) };
}
