/**
 * Time limits for an HTTP/2 server (REST over TLS, gRPC), which node:http2 does not have: a connection
 * must open its first stream within the headers timeout and is closed (GOAWAY) after the idle timeout
 * with no stream open; a stream's request (its body included) must arrive within the request timeout.
 * Checked by one unref'd interval per server, not a timer per stream: per stream it costs a counter, a
 * map entry while its body is pending, and a 'close' listener.
 */
import { constants, type Http2SecureServer, type Http2Server, type ServerHttp2Session, type ServerHttp2Stream } from 'node:http2';
import { checkIntervalMs, type ConnectionLimits, type ConnectionMetrics, type ConnectionTransport } from './connection-limits.js';

const { NGHTTP2_STREAM_STATE_HALF_CLOSED_REMOTE, NGHTTP2_STREAM_STATE_CLOSED } = constants;

interface SessionState {
  open: number;
  /** When the last stream closed (or the session began). */
  idleSinceMs: number;
  opened: boolean;
}

export interface Http2Guard {
  /**
   * The stream's request has a body still to come: if it has not all arrived within the request timeout,
   * `onTimeout` answers (or resets) the stream. The guard counts the refusal.
   */
  expectBody(stream: ServerHttp2Stream, onTimeout: (stream: ServerHttp2Stream) => void): void;
  stop(): void;
}

export function guardHttp2(server: Http2Server | Http2SecureServer, limits: ConnectionLimits, metrics: ConnectionMetrics, transport: ConnectionTransport): Http2Guard {
  const sessions = new Map<ServerHttp2Session, SessionState>();
  /** Streams with a body pending, in arrival order: with one timeout, also in deadline order. */
  const pending = new Map<ServerHttp2Stream, { deadlineMs: number; onTimeout: (s: ServerHttp2Stream) => void }>();

  server.on('session', (session: ServerHttp2Session) => {
    const state: SessionState = { open: 0, idleSinceMs: performance.now(), opened: false };
    sessions.set(session, state);
    session.once('close', () => sessions.delete(session));
  });
  server.on('stream', (stream: ServerHttp2Stream) => {
    const state = sessions.get(stream.session as ServerHttp2Session);
    if (state === undefined) return;
    state.open++;
    state.opened = true;
    stream.once('close', () => {
      pending.delete(stream);
      if (--state.open === 0) state.idleSinceMs = performance.now();
    });
  });

  const sweep = (): void => {
    const now = performance.now();
    for (const [session, state] of sessions) {
      if (state.open > 0 || session.closed || session.destroyed) continue;
      if (now - state.idleSinceMs < (state.opened ? limits.idleTimeoutMs : limits.headersTimeoutMs)) continue;
      if (!state.opened) metrics.connectionRefused(transport, 'timeout');
      // No stream open, so nothing is cut: GOAWAY and the socket goes. (close() would only half-close it
      // and wait for the peer, which a client that never spoke HTTP/2 does not do.)
      sessions.delete(session);
      session.destroy();
    }
    for (const [stream, entry] of pending) {
      if (entry.deadlineMs > now) break;
      pending.delete(stream);
      if (stream.closed || stream.destroyed) continue;
      const s = stream.state.state;
      if (s === NGHTTP2_STREAM_STATE_HALF_CLOSED_REMOTE || s === NGHTTP2_STREAM_STATE_CLOSED) continue; // it all arrived
      metrics.connectionRefused(transport, 'timeout');
      entry.onTimeout(stream);
    }
  };
  const timer = setInterval(sweep, checkIntervalMs(limits));
  timer.unref();

  return {
    expectBody(stream, onTimeout) {
      if (stream.closed || stream.destroyed) return;
      pending.set(stream, { deadlineMs: performance.now() + limits.requestTimeoutMs, onTimeout });
    },
    stop() {
      clearInterval(timer);
    },
  };
}
