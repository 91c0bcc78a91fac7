/**
 * The connection cap of one listener (REST or gRPC) and its counters: node closes a connection at accept
 * once `maxConnections` are open ('drop'), so a flood of idle or slow sockets cannot take every file
 * descriptor of the process; each open connection is counted while it lives, and a TLS handshake that
 * did not finish within the headers timeout is counted as a timeout.
 */
import type { Server } from 'node:net';
import type { Socket } from 'node:net';
import type { ConnectionMetrics, ConnectionTransport } from './connection-limits.js';

export function capConnections(server: Server, maxConnections: number, metrics: ConnectionMetrics, transport: ConnectionTransport): void {
  server.maxConnections = maxConnections;
  server.on('drop', () => metrics.connectionRefused(transport, 'limit'));
  server.on('connection', (socket: Socket) => {
    metrics.connectionOpened(transport);
    socket.once('close', () => metrics.connectionClosed(transport));
  });
  server.on('tlsClientError', (err: NodeJS.ErrnoException) => {
    if (err.code === 'ERR_TLS_HANDSHAKE_TIMEOUT') metrics.connectionRefused(transport, 'timeout');
  });
}
