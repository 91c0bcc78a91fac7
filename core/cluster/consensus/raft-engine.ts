import { SvcError } from '../../base/errors.js';
import type { EngineApi, OperationName } from '../../service/api.js';
import { OPERATION_KINDS, type OperationKind } from '../../service/roles.js';
import { COMMAND_VERSION_MOVE_OUT, COMMAND_VERSION_MOVES } from './command.js';
import { leaderIndexOf, type ForwardedWrite } from './forward.js';
import type { ConsensusMember } from './member.js';

/**
 * A consensus member's engine (issue 17): the member's own engine (core/engine/node.ts, over its
 * database) behind the consensus group's rules, for every transport alike (behind the service layer: the
 * caller is authenticated, authorized, limited and audited once, on the member it called).
 *
 * - A write on the leader runs once the leader holds every acknowledged write (its term's first entry
 *   applied): its checks see the whole history, and the database proposes what it resolved; the answer
 *   comes once a quorum holds it and this member applied it. On a follower it is forwarded to the leader
 *   (once: a forwarded write is never forwarded again), and answered once this member has applied it
 *   too, so a read on the member a client wrote through sees the write. With no leader known it waits for one, up to
 *   the write's deadline, then answers `unavailable`, never a guess. A forward whose frame waits for this
 *   member's link to the leader (forward.ts) and is never sent because another member leads meanwhile
 *   goes to that member (or waits for a leader) within the same deadline.
 * - A read with `consistency: "strong"` waits for ReadIndex (the leader confirms its leadership and this
 *   member applies through the confirmed commit index): it sees every write acknowledged before it, on
 *   any member. Other reads answer from this member's state as it is, except while it restores a
 *   snapshot (`unavailable`, reason `restoring`: its state is not whole) or, after a start, applies
 *   again what it had committed before (reason `replaying`: its state goes through older values).
 * - A coordinator's move steps (issue 18) go as writes do: run on the ready leader, forwarded from a
 *   follower. A batch's lease ends as soon as this member stops being the ready leader. A forwarded
 *   write refused as `moved` is answered once this member applied through the leader's index.
 * - Version gates (versions.ts): a move step on this group as its source proposes commands of versions
 *   2 and 3, which a member of an older build would stop at. The leader checks that every member reads
 *   them before the step runs, and refuses it otherwise (`unavailable`, naming those members), nothing
 *   proposed; the coordinator asks again later. A step as a target proposes plain writes: never gated.
 */

/**
 * Refusals a write makes before proposing anything that may come from the leader's state (raftEngine's
 * write): a collection or point missing, a name taken, and a body checked against the collection's
 * parameters (a vector of the wrong dimension: `invalid_argument`) or its size (`limit_exceeded`), which a
 * leader behind its group may hold from a collection the group dropped and made again. A refusal of the
 * body alone (a batch over its limit, an id too long: REST refuses a malformed shape before the engine)
 * costs the same one ReadIndex round: refusals are not the path to make fast.
 */
const STATE_REFUSALS = new Set(['not_found', 'already_exists', 'invalid_argument', 'limit_exceeded']);

/** A write answered from this leader's state that it could not show current in time: not taken. */
export function notConfirmed(cause?: unknown): SvcError {
  const reason = cause instanceof SvcError && typeof cause.detail.reason === 'string' ? cause.detail.reason : 'read_timeout';
  return new SvcError('unavailable', 'this leader could not confirm with its group in time that its state is current (it may be cut off from it): the write was not taken; retry', { reason });
}

const restoringRefusal = (): SvcError =>
  new SvcError('unavailable', 'this member is restoring a snapshot from its leader; read another member or retry', { reason: 'restoring' });

/** The command version each move step may propose on the source (moveApply, the target's, only version 1). */
const MOVE_STEP_VERSION: Readonly<Record<string, number>> = { moveBatch: COMMAND_VERSION_MOVE_OUT, moveCommit: COMMAND_VERSION_MOVES };

export interface RaftEngineOptions {
  /** The member's engine over its database (core/engine/node.ts): what a write on the ready leader and a read run. */
  readonly db: EngineApi;
  /**
   * The database's rebalance lease (Database.endMoveLease, moveLeaseHeld), ended at once when this member
   * stops being the ready leader. Absent: nothing here holds one.
   */
  readonly lease?: { endMoveLease(): void; readonly moveLeaseHeld: boolean };
  readonly member: ConsensusMember;
  readonly selfId: string;
  /** A write handed to the leader; resolves with its answer and the leader's applied index after it (forward.ts). */
  forward(leaderId: string, w: ForwardedWrite, signal: AbortSignal): Promise<{ value: unknown; index: number }>;
  /** How long a write may wait for a leader and a quorum before it is `unavailable`. */
  readonly writeTimeoutMs: number;
  /** How long a strong read may wait for the leader's confirmation. */
  readonly readTimeoutMs: number;
  /**
   * Throws (`unavailable`, reason `version_skew`) when not every member of the group reads command
   * `version` (GroupVersions.requireCommand); asked on the ready leader before a move step runs.
   * Absent: nothing is gated.
   */
  requireCommandVersion?(version: number, what: string): void;
  /** While no leader is known, how often a waiting write looks again. */
  readonly leaderPollMs?: number;
  /** Stops the member, its transport and its storage, after the engine's own work. */
  close(): Promise<void>;
}

export interface RaftEngine extends EngineApi {
  /** A write a peer forwarded here: run as this member's own if it is the ready leader, never forwarded again. */
  forwarded(w: ForwardedWrite): Promise<unknown>;
}

export function raftEngine(o: RaftEngineOptions): RaftEngine {
  const { db, member } = o;
  const pollMs = o.leaderPollMs ?? 20;
  const run = (op: string, args: readonly unknown[]): Promise<unknown> => (db as unknown as Record<string, (...a: unknown[]) => Promise<unknown>>)[op](...args);

  const write = async (op: string, args: readonly unknown[], mayForward: boolean): Promise<unknown> => {
    // The write's deadline. Its signal is made only where a wait needs one (a forward, a wait to apply):
    // a leader's own write, the common case, never makes one (an AbortSignal.timeout is a timer and a
    // weak reference: about 1% of a leader's time per write).
    const deadline = performance.now() + o.writeTimeoutMs;
    const late = (): boolean => performance.now() >= deadline;
    let timeout: AbortSignal | null = null;
    const signal = (): AbortSignal => {
      const left = deadline - performance.now();
      // Past the deadline already (a poll that woke after it): aborted now, so nothing is sent.
      timeout ??= left > 0 ? AbortSignal.timeout(Math.ceil(left)) : AbortSignal.abort(new DOMException('the write\'s deadline passed', 'TimeoutError'));
      return timeout;
    };
    // A refusal made from this leader's state (STATE_REFUSALS) is a read of that state: given only once
    // a ReadIndex round shows the state current, and the write then runs again over it. A leader cut off
    // from its group (not yet stepped down) cannot confirm: the write is `unavailable`.
    let confirmed = false;
    for (;;) {
      if (member.leaderReady) {
        const version = MOVE_STEP_VERSION[op];
        if (version !== undefined) o.requireCommandVersion?.(version, `the rebalancing move step ${op} on this group`);
        try {
          return await run(op, args);
        } catch (e) {
          if (!confirmed && e instanceof SvcError && STATE_REFUSALS.has(e.code)) {
            if (late()) throw notConfirmed();
            confirmed = true;
            await member.readBarrier(signal()).catch((x: unknown) => { throw notConfirmed(x); });
            continue;
          }
          // Leadership went (or is not ready: the member host's proposer takes only a ready leader's)
          // before the write was proposed: nothing of it is in the log, so it may go again. A write of
          // several proposals (a move's nextBatch: its state, then its batch; applyBatch) may have had
          // its first ones committed: each is made so that running again over them is the same.
          if (!(e instanceof SvcError && e.detail.reason === 'not_leader') || late()) throw e;
          continue;
        }
      }
      const s = member.status();
      // A leader not ready yet (its term's first entry not applied) waits below, as a member without one does.
      if (s.leaderId !== null && s.leaderId !== o.selfId) {
        if (!mayForward) {
          throw new SvcError('unavailable', `this member is not the consensus leader (leader: ${s.leaderId}); retry`, { reason: 'not_leader', leaderId: s.leaderId });
        }
        let forwarded: { value: unknown; index: number };
        try {
          forwarded = await o.forward(s.leaderId, { op, args }, signal());
        } catch (e) {
          // Never sent (it waited for the link to a member that stopped leading meanwhile): certainly not
          // applied, so it goes to the member that leads now, or waits for one, within the same deadline.
          if (e instanceof SvcError && e.detail.reason === 'leader_unreachable' && !late() && member.status().leaderId !== s.leaderId) continue;
          // A write refused as moved follows a move batch's commit: applied here too before the answer,
          // so this member's reads agree (the router writes the ids to their new owner, then may read
          // here: without the commit this member would still show the points it gave away).
          const at = leaderIndexOf(e);
          if (e instanceof SvcError && e.code === 'moved' && at !== null) await member.whenApplied(at, signal()).catch(() => undefined);
          throw e;
        }
        const { value, index } = forwarded;
        // Applied here too before the answer: a read on this member after the write sees it (a router
        // that names this member reads where it wrote).
        await member.whenApplied(index, signal());
        return value;
      }
      if (late()) {
        throw s.role === 'leader'
          ? new SvcError('unavailable', 'this member was elected but has not yet committed its term: the write was not taken; retry', { reason: 'leader_not_ready' })
          : new SvcError('unavailable', 'no consensus leader: a quorum of this shard\'s members is not reachable; the write was not taken', { reason: 'no_leader' });
      }
      await new Promise((r) => setTimeout(r, pollMs));
    }
  };

  const read = async (op: string, args: readonly unknown[]): Promise<unknown> => {
    const body = args[1];
    if (body !== null && typeof body === 'object' && (body as { consistency?: unknown }).consistency === 'strong') {
      const signal = AbortSignal.timeout(o.readTimeoutMs);
      for (;;) {
        try {
          await member.readBarrier(signal);
          break;
        } catch (e) {
          // No leader known yet (an election, a member just started): ask again until the deadline.
          if (signal.aborted || !(e instanceof SvcError) || e.code !== 'unavailable' || e.detail.reason === 'read_timeout') throw e;
          await new Promise((r) => setTimeout(r, pollMs));
        }
      }
    } else if (member.replaying) {
      // Its state goes through older values of what it held before it stopped: no reader sees those.
      throw new SvcError('unavailable', 'this member is applying its log again after a restart; read another member or retry', { reason: 'replaying' });
    }
    // Its state half old, half the snapshot's: no reader sees that (a router reads another replica). A
    // read that waits while it runs (a search settling its graph, an embedding) looks again after: a
    // restore begun meanwhile may have replaced the collections it was reading.
    if (member.restoring) throw restoringRefusal();
    const restores = member.restoresBegun;
    const out = await run(op, args);
    if (member.restoring || member.restoresBegun !== restores) {
      // A snapshot's copy is written by then, maybe with part of the restore in it: not answered as one.
      if (op === 'snapshot') {
        const name = (args[0] as { name?: unknown } | undefined)?.name;
        throw new SvcError('unavailable', `snapshot '${String(name)}' was written while this member began restoring a snapshot from its leader, and may hold part of that restore: delete it and take it again (or take it on another member)`, { reason: 'restoring' });
      }
      throw restoringRefusal();
    }
    return out;
  };

  // A move batch's lease lives on the leader that gave it: once this member stops being the ready
  // leader its commit cannot be proposed here any more, so the lease ends at once (writes waiting at its
  // gate go on, to the new leader) instead of when it runs out. The coordinator asks the new leader.
  const lease = o.lease;
  let watching: NodeJS.Timeout | null = null;
  const watchLease = (): void => {
    if (watching !== null || lease === undefined) return;
    watching = setInterval(() => {
      if (!lease.moveLeaseHeld) {
        clearInterval(watching!);
        watching = null;
      } else if (!member.leaderReady) {
        lease.endMoveLease();
      }
    }, pollMs);
    watching.unref();
  };
  const move = async (op: string, args: readonly unknown[], mayForward: boolean): Promise<unknown> => {
    const value = await write(op, args, mayForward);
    // Also when leadership went while the batch was being made: the watch ends that lease at once.
    if (op === 'moveBatch') watchLease();
    return value;
  };

  const engine: Record<string, unknown> = {};
  for (const [op, kind] of Object.entries(OPERATION_KINDS) as [OperationName, OperationKind][]) {
    if (kind === 'write') engine[op] = (...args: unknown[]) => write(op, args, true);
    else if (kind === 'read') engine[op] = (...args: unknown[]) => read(op, args);
    // A coordinator's move steps run on the ready leader, as writes do (a follower forwards them): the
    // batch's scan and gate, its lease, and the proposals of the move's state and commits are the
    // leader's (Database.nextBatch, commitBatch; a target's applied points are proposed writes).
    else engine[op] = (...args: unknown[]) => move(op, args, true);
  }
  // The replication stream is an async iterable, not a promise. A read replica's stream begins only
  // where this member's state is that of its applied index (its snapshot would show older values, or
  // a half-restored database, to every reader of the replica); one running when a restore begins ends
  // (the member host's replication source loses its hold), and the replica asks again.
  engine.replicate = (...args: unknown[]) => {
    if (!member.healthy) throw new SvcError('unavailable', 'this consensus member has stopped (closed, or an entry failed to apply here): it serves no replication stream; follow another member', { reason: 'stopped' });
    if (member.restoring) throw new SvcError('unavailable', 'this member is restoring a snapshot from its leader: it serves no replication stream until it is done; retry', { reason: 'restoring' });
    if (member.replaying) throw new SvcError('unavailable', 'this member is applying its log again after a restart: it serves no replication stream until it is done; retry', { reason: 'replaying' });
    return (db.replicate as (...a: unknown[]) => unknown)(...args);
  };
  engine.forwarded = (w: ForwardedWrite) => {
    const kind = OPERATION_KINDS[w.op as OperationName];
    if (kind === 'move') return move(w.op, w.args, false);
    if (kind !== 'write') return Promise.reject(new SvcError('invalid_argument', `'${w.op}' is not a write a member forwards`));
    return write(w.op, w.args, false);
  };
  engine.close = () => {
    if (watching !== null) clearInterval(watching);
    return o.close();
  };
  return engine as unknown as RaftEngine;
}
