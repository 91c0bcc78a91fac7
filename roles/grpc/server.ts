/**
 * The gRPC transport: @grpc/grpc-js serving proto/svc.proto as thin adapters over the one Service
 * (the same object the REST server uses). Authentication, roles, scopes, limits, audit and tracing all
 * happen in the service; this file only decodes, maps errors (status.ts) and counts requests.
 */
import { randomUUID } from 'node:crypto';
import {
  Metadata, Server, ServerCredentials,
  type sendUnaryData, type ServerUnaryCall, type ServerWritableStream, type ServiceDefinition, type UntypedHandleCall,
} from '@grpc/grpc-js';
import { SvcError, limitExceeded, toSvcError } from '../../core/base/errors.js';
import type { Limits } from '../../core/base/limits.js';
import type { CallContext, Principal } from '../../core/service/api.js';
import { HTTP_STATUS } from '../../core/service/http-status.js';
import type { ServiceLogger } from '../../core/service/log.js';
import { noopMetrics, type Metrics } from '../../core/service/metrics.js';
import type { Service } from '../../core/service/service.js';
import { SvcService, type ReplicateRequest, type ReplicationEvent } from '../../proto/gen/svc.js';
import { UNARY_BINDINGS, type Method, type RequestOf, type UnaryMethod } from './rpcs.js';
import { REQUEST_ID_KEY, toServiceError } from './status.js';

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
  stream(ctx: CallContext, afterSeq: number | undefined, signal: AbortSignal): AsyncIterable<ReplicationEvent>;
}

/** The default source: the service's `replicate` (the database's snapshot and WAL tail). */
export function serviceReplication(service: Service): ReplicationSource {
  return {
    async *stream(ctx, afterSeq, signal) {
      for await (const e of service.replicate(ctx, afterSeq === undefined ? {} : { after_seq: afterSeq }, signal)) {
        yield { seq: e.seq, record: Buffer.from(e.record.buffer, e.record.byteOffset, e.record.byteLength) };
      }
    },
  };
}

export interface GrpcServerOptions {
  service: Service;
  /** host:port; port 0 picks a free one (see the returned `port`). */
  address: string;
  tls?: GrpcTls;
  limits: Limits;
  log: ServiceLogger;
  metrics?: Metrics;
  replication?: ReplicationSource;
  /** How long close() lets calls in flight finish before cutting them. Default 10 s. */
  shutdownGraceMs?: number;
}

export interface GrpcServerHandle {
  port: number;
  close(): Promise<void>;
}

/** The request of a call: decoded, or the SvcError that decoding it gave (answered after authentication). */
type Decoded<T> = { ok: true; value: T } | { ok: false; error: SvcError };

/**
 * The transport refuses (RESOURCE_EXHAUSTED, without buffering) only messages above twice the limit;
 * between the limit and that, the request is read and answered like REST: INVALID_ARGUMENT with
 * limit_exceeded naming SVC_MAX_REQUEST_BODY_BYTES.
 */
const TRANSPORT_SLACK = 2;
const MAX_GRPC_MESSAGE_BYTES = 2 ** 31 - 1;

/**
 * The generated definition, with deserialization that never throws (a malformed or oversized message
 * becomes a Decoded error, so the client gets the contract's status rather than grpc-js's INTERNAL) and
 * serialization done by the handlers (so they can check the response size before sending).
 */
function serviceDefinition(limits: Limits): ServiceDefinition {
  const def: Record<string, unknown> = {};
  for (const [name, m] of Object.entries(SvcService)) {
    def[name] = {
      ...m,
      requestDeserialize: (bytes: Buffer): Decoded<unknown> => {
        if (bytes.length > limits.maxRequestBodyBytes) {
          return { ok: false, error: limitExceeded('SVC_MAX_REQUEST_BODY_BYTES', limits.maxRequestBodyBytes, bytes.length, 'request message size') };
        }
        try {
          return { ok: true, value: (m.requestDeserialize as (b: Buffer) => unknown)(bytes) };
        } catch {
          return { ok: false, error: new SvcError('invalid_argument', `malformed ${name} request message`) };
        }
      },
      responseSerialize: (bytes: Buffer): Buffer => bytes,
    };
  }
  return def as ServiceDefinition;
}

function authorizationOf(md: Metadata): string | undefined {
  const v = md.get('authorization')[0];
  return typeof v === 'string' ? v : undefined;
}

function requestIdOf(md: Metadata): string {
  const v = md.get(REQUEST_ID_KEY)[0];
  return typeof v === 'string' && /^[\w.:-]{1,128}$/.test(v) ? v : randomUUID();
}

export function startGrpcServer(opts: GrpcServerOptions): Promise<GrpcServerHandle> {
  const { service, limits, log } = opts;
  const metrics = opts.metrics ?? noopMetrics;

  /** Authenticate the metadata and build the call's context (the service authorizes each operation). */
  function contextOf(md: Metadata, requestId: string, remote: string): CallContext {
    const principal: Principal = service.authenticate(authorizationOf(md), { requestId, remote });
    return { principal, requestId, transport: 'grpc', remote };
  }

  function finish(path: string, startedMs: number, err: SvcError | undefined, requestId: string, op: string): void {
    if (err?.code === 'internal') log.error({ request_id: requestId, op, cause: err.detail.cause }, 'internal error in gRPC call');
    metrics.requestFinished({ method: 'GRPC', route: path }, err ? HTTP_STATUS[err.code] : 200, (performance.now() - startedMs) / 1000);
  }

  function unary<M extends UnaryMethod>(m: M): UntypedHandleCall {
    const binding = UNARY_BINDINGS[m];
    const { path, responseSerialize } = SvcService[m];
    const encode = responseSerialize as (v: unknown) => Buffer;
    return (call: ServerUnaryCall<Decoded<RequestOf<M>>, Buffer>, callback: sendUnaryData<Buffer>) => {
      const startedMs = performance.now();
      const requestId = requestIdOf(call.metadata);
      const trailer = new Metadata();
      trailer.set(REQUEST_ID_KEY, requestId);
      const run = async (): Promise<Buffer> => {
        const ctx = contextOf(call.metadata, requestId, call.getPeer());
        const decoded = call.request;
        // Role and scope first: a caller without the right learns nothing from validation errors.
        service.authorize(ctx, binding.op, decoded.ok ? binding.collection(decoded.value) : undefined);
        if (!decoded.ok) throw decoded.error;
        const bytes = encode(await binding.invoke(service, ctx, decoded.value));
        if (bytes.length > limits.maxRequestBodyBytes) {
          throw limitExceeded('SVC_MAX_REQUEST_BODY_BYTES', limits.maxRequestBodyBytes, bytes.length,
            'response message size (ask for fewer results or without vectors)');
        }
        return bytes;
      };
      run().then(
        (bytes) => {
          finish(path, startedMs, undefined, requestId, binding.op);
          callback(null, bytes, trailer);
        },
        (e: unknown) => {
          const err = toSvcError(e);
          finish(path, startedMs, err, requestId, binding.op);
          callback(toServiceError(err, requestId));
        },
      );
    };
  }

  /** Replicate: admin scoped to every collection (it carries every collection's writes). */
  function replicate(call: ServerWritableStream<Decoded<ReplicateRequest>, Buffer>): void {
    const startedMs = performance.now();
    const requestId = requestIdOf(call.metadata);
    const path = SvcService.replicate.path;
    const abort = new AbortController();
    call.on('cancelled', () => abort.abort());
    const run = async (): Promise<void> => {
      const ctx = contextOf(call.metadata, requestId, call.getPeer());
      // Role (admin) and scope (*) from the service's role table, before the message is looked at.
      service.authorize(ctx, 'replicate');
      const decoded = call.request;
      if (!decoded.ok) throw decoded.error;
      const source = opts.replication ?? serviceReplication(service);
      for await (const event of source.stream(ctx, decoded.value.after_seq, abort.signal)) {
        if (abort.signal.aborted) return;
        const bytes = (SvcService.replicate.responseSerialize as (v: ReplicationEvent) => Buffer)(event);
        if (!call.write(bytes)) await new Promise((resolve) => call.once('drain', resolve));
      }
    };
    run().then(
      () => {
        finish(path, startedMs, undefined, requestId, 'replicate');
        call.end();
      },
      (e: unknown) => {
        const err = toSvcError(e);
        finish(path, startedMs, err, requestId, 'replicate');
        // grpc-js turns an 'error' event on a server stream into the call's final status.
        call.emit('error', toServiceError(err, requestId));
      },
    );
  }

  const handlers: Record<Method, UntypedHandleCall> = {
    ...(Object.fromEntries(Object.keys(UNARY_BINDINGS).map((m) => [m, unary(m as UnaryMethod)])) as Record<UnaryMethod, UntypedHandleCall>),
    replicate: replicate as UntypedHandleCall,
  };

  const transportMax = Math.min(MAX_GRPC_MESSAGE_BYTES, limits.maxRequestBodyBytes * TRANSPORT_SLACK);
  const server = new Server({
    'grpc.max_receive_message_length': transportMax,
    'grpc.max_send_message_length': transportMax,
    // channelz (grpc-js's introspection service, not served here) would count every call.
    'grpc.enable_channelz': 0,
  });
  server.addService(serviceDefinition(limits), handlers);

  const credentials = opts.tls
    ? ServerCredentials.createSsl(opts.tls.clientCa ?? null, [{ private_key: opts.tls.key, cert_chain: opts.tls.cert }], opts.tls.clientCa !== undefined)
    : ServerCredentials.createInsecure();

  return new Promise((resolve, reject) => {
    server.bindAsync(opts.address, credentials, (err, port) => {
      if (err) {
        reject(new SvcError('invalid_argument', `cannot listen for gRPC on ${opts.address}: ${err.message}`));
        return;
      }
      log.info({ address: opts.address, port, tls: opts.tls !== undefined, mtls: opts.tls?.clientCa !== undefined }, 'gRPC server listening');
      resolve({ port, close: () => shutdown(server, opts.shutdownGraceMs ?? 10_000) });
    });
  });
}

/** Stop accepting, let calls in flight finish for up to graceMs, then cut what remains. */
function shutdown(server: Server, graceMs: number): Promise<void> {
  return new Promise((resolve) => {
    const timer = setTimeout(() => server.forceShutdown(), graceMs);
    server.tryShutdown(() => {
      clearTimeout(timer);
      resolve();
    });
  });
}
