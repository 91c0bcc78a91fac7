/**
 * The limits on connections, per listener, in one place: how many may be open, how long a request may
 * take to arrive, how long an idle connection is kept. They bound what a client can hold without a key:
 * a black-box probe held about 21,000 sockets open (bodies announced and never sent) until the process
 * ran out of file descriptors and every legitimate query failed (issue 19). Units are in the names.
 */
export interface ConnectionLimits {
  /** Concurrent connections on the REST listener; more are closed at accept. */
  readonly restMaxConnections: number;
  /** Concurrent connections on the gRPC listener; more are closed at accept. */
  readonly grpcMaxConnections: number;
  /** A request's headers (HTTP/1.1), a TLS handshake, an HTTP/2 connection's first request must arrive within this. */
  readonly headersTimeoutMs: number;
  /** A whole request, its body included, must arrive within this (it does not bound the time to answer it). */
  readonly requestTimeoutMs: number;
  /** An HTTP/1.1 keep-alive connection with no request in flight is closed after this. */
  readonly keepAliveTimeoutMs: number;
  /** An HTTP/2 connection (REST over TLS, gRPC) with no stream open is closed (GOAWAY) after this. */
  readonly idleTimeoutMs: number;
}

/** Each limit's variable (svc.toml: the same without SVC_, in lower case); the timeouts are given in seconds. */
export const CONNECTION_LIMIT_VARIABLES: Readonly<Record<keyof ConnectionLimits, string>> = {
  restMaxConnections: 'SVC_MAX_CONNECTIONS',
  grpcMaxConnections: 'SVC_GRPC_MAX_CONNECTIONS',
  headersTimeoutMs: 'SVC_HEADERS_TIMEOUT_SECS',
  requestTimeoutMs: 'SVC_REQUEST_TIMEOUT_SECS',
  keepAliveTimeoutMs: 'SVC_KEEPALIVE_TIMEOUT_SECS',
  idleTimeoutMs: 'SVC_IDLE_TIMEOUT_SECS',
};

/**
 * Below the usual `ulimit -n` of 65,536 (systemd, containers) with room for the data directory's files,
 * and well below the 21,000 sockets that exhausted the probe's process; 1024 for gRPC, whose clients
 * (SDKs, replicas, routers) keep a few long-lived connections each. Timeouts: 10 s for headers, as
 * nginx's client_header_timeout (60 s) is for slower days; 30 s for a whole request, which carries a
 * 32 MiB body at about 1 MB/s; 5 s keep-alive, node's own default; 60 s HTTP/2 idle, about fastify's.
 */
export const DEFAULT_CONNECTION_LIMITS: ConnectionLimits = Object.freeze({
  restMaxConnections: 4096,
  grpcMaxConnections: 1024,
  headersTimeoutMs: 10_000,
  requestTimeoutMs: 30_000,
  keepAliveTimeoutMs: 5_000,
  idleTimeoutMs: 60_000,
});

/**
 * Streams one HTTP/2 connection may have open at once (REST over TLS and gRPC): a client opening more is
 * refused per stream (RST_STREAM REFUSED_STREAM, which clients retry), so one connection cannot hold
 * unbounded requests with pending bodies. Well above what a client multiplexes (grpc-js's default 100).
 */
export const HTTP2_MAX_CONCURRENT_STREAMS = 256;

/** After an answer that closes its connection, how long the client has to take it before the socket is cut. */
export const CLOSE_GRACE_MS = 2_000;

/** How often the timeouts are checked: a quarter of the shortest, between 50 ms and 1 s. */
export function checkIntervalMs(l: ConnectionLimits): number {
  const shortest = Math.min(l.headersTimeoutMs, l.requestTimeoutMs, l.keepAliveTimeoutMs, l.idleTimeoutMs);
  return Math.max(50, Math.min(1000, Math.floor(shortest / 4)));
}

export type ConnectionTransport = 'rest' | 'grpc';
/**
 * Why a connection (or an HTTP/2 stream) was closed by the server: `limit`, refused at accept (the
 * listener's cap); `timeout`, its headers, TLS handshake, first HTTP/2 request or body did not arrive in
 * time; `unread_body`, answered before its body was read (a 401 before the key was known, a body over
 * the limit), so the rest of the body is not waited for.
 */
export type RefusalReason = 'limit' | 'timeout' | 'unread_body';

/** What the listeners count: open connections (svc_connections_open) and refusals (svc_connections_refused_total). */
export interface ConnectionMetrics {
  connectionOpened(transport: ConnectionTransport): void;
  connectionClosed(transport: ConnectionTransport): void;
  connectionRefused(transport: ConnectionTransport, reason: RefusalReason): void;
}

export const noopConnectionMetrics: ConnectionMetrics = {
  connectionOpened: () => undefined,
  connectionClosed: () => undefined,
  connectionRefused: () => undefined,
};
