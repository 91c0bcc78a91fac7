import type { ProvidersOptions } from '../../core/embedded.js';
import type { SvcConfig } from '../config.js';

/** What a request loop (loop-worker.ts) is started with, and what it answers once listening. */
export interface LoopData {
  index: number;
  /**
   * `node`: the engine is the main thread's (a database, a follower, a consensus member), reached over
   * the link. `router`: each loop routes on its own (a router holds no state the loops must share but
   * the rate limit and the audit file): its own map, engine and shard connections.
   */
  role: 'node' | 'router';
  config: SvcConfig;
  restPort: number;
  grpcPort: number;
  /** The per-key token buckets (core/service/rate-limit.ts SharedTokenBuckets) and their key order. */
  buckets: SharedArrayBuffer;
  bucketKeys: string[];
  /** The process's open connections per transport (roles/listener-cap.ts shareConnectionCounts). */
  connections: SharedArrayBuffer;
  /** SVC_AUDIT_LOG is set: records go to the main thread's file sink. */
  auditFile: boolean;
  /** This node is a consensus member: GET /cluster/raft is served. */
  raft: boolean;
  /**
   * Plain dense searches are answered in the loop, over the database's shared memory (local-reads.ts),
   * while this gate is open (read-gate.ts); null: none is.
   */
  readGate: SharedArrayBuffer | null;
  /**
   * The config's provider tables with their API keys resolved (the main thread's, resolved once at
   * startup), for a loop's own text queries: in this thread's memory only, never logged.
   */
  providers: ProvidersOptions | null;
}

export interface LoopListening { restPort: number; grpcPort: number }
