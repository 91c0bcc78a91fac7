/**
 * The connection cap of one listener (REST or gRPC) and its counters: node closes a connection at accept
 * once `maxConnections` are open ('drop'), so a flood of idle or slow sockets cannot take every file
 * descriptor of the process; each open connection is counted while it lives, and a TLS handshake that
 * did not finish within the headers timeout is counted as a timeout.
 */
import type { Server } from 'node:net';
import type { Socket } from 'node:net';
import type { ConnectionMetrics, ConnectionTransport } from './connection-limits.js';

/**
 * The open connections of the whole process, per transport, when several request loops each have a
 * listener on the same port (roles/loops/): the cap is the process's, not each loop's. Set once in a
 * loop's thread before its servers are made.
 */
let shared: { counts: Int32Array; loop: number } | null = null;
const SLOT: Readonly<Record<ConnectionTransport, number>> = { rest: 0, grpc: 1 };

/**
 * The buffer for `shareConnectionCounts`, made once and handed to every loop: the process's count per
 * transport, then each loop's own (what the process count must give back when that loop dies: a
 * terminated thread runs no socket close handler).
 */
export function connectionCountsBuffer(loops: number): SharedArrayBuffer {
  return new SharedArrayBuffer(2 * (1 + loops) * Int32Array.BYTES_PER_ELEMENT);
}

/** Counts this thread's connections (it is loop `loop`) in the shared buffer. */
export function shareConnectionCounts(buffer: SharedArrayBuffer, loop: number): void {
  shared = { counts: new Int32Array(buffer), loop };
}

/** Loop `loop` has ended: its connections no longer count (before a replacement takes its place). */
export function releaseLoopConnections(buffer: SharedArrayBuffer, loop: number): void {
  const counts = new Int32Array(buffer);
  for (const t of [SLOT.rest, SLOT.grpc]) Atomics.sub(counts, t, Atomics.exchange(counts, 2 * (1 + loop) + t, 0));
}

export function capConnections(server: Server, maxConnections: number, metrics: ConnectionMetrics, transport: ConnectionTransport): void {
  server.maxConnections = maxConnections;
  server.on('drop', () => metrics.connectionRefused(transport, 'limit'));
  const share = shared;
  server.on('connection', (socket: Socket) => {
    if (share !== null) {
      const total = SLOT[transport];
      const own = 2 * (1 + share.loop) + SLOT[transport];
      // Accepted by this loop, but over the process's cap: closed at once, as node's own drop would.
      if (Atomics.add(share.counts, total, 1) >= maxConnections) {
        Atomics.sub(share.counts, total, 1);
        socket.destroy();
        metrics.connectionRefused(transport, 'limit');
        return;
      }
      Atomics.add(share.counts, own, 1);
      socket.once('close', () => {
        Atomics.sub(share.counts, own, 1);
        Atomics.sub(share.counts, total, 1);
      });
    }
    metrics.connectionOpened(transport);
    socket.once('close', () => metrics.connectionClosed(transport));
  });
  server.on('tlsClientError', (err: NodeJS.ErrnoException) => {
    if (err.code === 'ERR_TLS_HANDSHAKE_TIMEOUT') metrics.connectionRefused(transport, 'timeout');
  });
}
