import { SvcError } from '../../base/errors.js';
import type { DatabaseStats } from '../../base/model.js';
import type { EngineApi, OperationName } from '../../service/api.js';
import { OPERATION_KINDS, type OperationKind } from '../../service/roles.js';
import type { Follower } from './follower.js';

/**
 * A follower's engine: the engine over its current database for reads (core/engine/node.ts, so text
 * and hybrid queries are embedded and fused there as on any node), a refusal for every write. Behind the service layer, so
 * a caller is authenticated and authorized first (a key without the role still gets permission_denied),
 * and a write then gets read_only_replica without touching anything. Reads answer not_ready until the
 * first bootstrap is complete, and while a later one runs.
 */

export interface FollowerEngineOptions {
  /** Runs a read on the engine over the database served now (a re-bootstrap swaps it; a read waits for the swap). */
  read<T>(fn: (db: EngineApi) => Promise<T>): Promise<T>;
  /** The engine over the database served now, for the replication stream this node serves in turn. */
  current(): EngineApi;
  follower: Follower;
  leaderUrl: string;
  /** Stops what the follower owns (its store), after the follower itself. */
  close(): Promise<void>;
}

export function followerEngine(opts: FollowerEngineOptions): EngineApi {
  const { follower } = opts;
  const refuse = (op: string): never => {
    throw new SvcError('read_only_replica', `this node is a read replica of ${opts.leaderUrl}: send ${op} to the leader`);
  };
  const ready = (): void => {
    if (!follower.serving) throw new SvcError('not_ready', 'this read replica is bootstrapping from its leader');
  };
  const call = (db: EngineApi, op: OperationName, args: unknown[]): unknown => (db[op] as (...a: unknown[]) => unknown).apply(db, args);
  const engine: Record<string, unknown> = {};
  for (const [op, kind] of Object.entries(OPERATION_KINDS) as [OperationName, OperationKind][]) {
    // A coordinator's moves are writes here: a replica holds no points of its own to give or take.
    if (kind === 'write' || kind === 'move') engine[op] = async () => refuse(op);
    else if (kind === 'stream') engine[op] = (...args: unknown[]) => call(opts.current(), op, args);
    else engine[op] = async (...args: unknown[]) => {
      ready();
      return opts.read((db) => call(db, op, args) as Promise<unknown>);
    };
  }
  engine.stats = async (): Promise<DatabaseStats> => {
    ready();
    const s = await opts.read((db) => db.stats());
    const f = follower.stats();
    return { ...s, replication: { role: 'follower', state: f.state, applied_seq: f.appliedSeq, leader: opts.leaderUrl } };
  };
  engine.close = async () => {
    await follower.stop();
    await opts.close();
  };
  return engine as EngineApi;
}
