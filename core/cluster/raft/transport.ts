import type { Message, NodeId } from './types.js';

/**
 * How a host's Ready messages leave and arrive: roles/raft/transport.ts on node:net, the simulation's
 * network in tests. Raft tolerates loss, so a transport never blocks the host: what cannot go now is
 * dropped and counted, and Raft's heartbeats and probes send it again.
 */
export interface Transport {
  /** Hands messages over for sending, in order per recipient; returns at once. */
  send(messages: readonly Message[]): void;
}

/** Where a transport delivers what it received from an authenticated peer (the host then calls step()). */
export type MessageHandler = (message: Message, from: NodeId) => void;
