/**
 * The vocabulary of the consensus module: log entries, the hard state a member persists, snapshots and
 * the messages members exchange. All of it is plain data: the host serializes it for its transport and
 * its log; nothing here knows about sockets, files or clocks.
 */

/** A member's id in its group (the `<id>` of SVC_RAFT_MEMBERS); never empty. */
export type NodeId = string;

/** One log entry. (index, term) names it: two logs holding the same pair hold the same entry. */
export interface Entry {
  readonly term: number;
  readonly index: number;
  /** Opaque to Raft; the leader's first entry of each term is empty (a no-op that commits the term). */
  readonly data: Uint8Array;
}

/**
 * What a member must persist before sending any message produced with it (Raft figure 2's
 * "persistent state on all servers", plus the commit index so recovery need not wait for a leader).
 */
export interface HardState {
  readonly term: number;
  /** Whom this member voted for in `term`, or null. Losing it could elect two leaders in one term. */
  readonly vote: NodeId | null;
  readonly commit: number;
}

export const EMPTY_HARD_STATE: HardState = Object.freeze({ term: 0, vote: null, commit: 0 });

/** The last entry a snapshot covers. index 0 means "no snapshot". */
export interface SnapshotMeta {
  readonly index: number;
  readonly term: number;
}

/** A state machine image at `meta.index`; the bytes are the host's (the logical snapshot of replication). */
export interface Snapshot {
  readonly meta: SnapshotMeta;
  readonly data: Uint8Array;
}

export const EMPTY_SNAPSHOT: Snapshot = Object.freeze({ meta: Object.freeze({ index: 0, term: 0 }), data: new Uint8Array(0) });

/** `pre-candidate` is the PreVote phase: it has not raised its term yet. Hosts report it as `candidate`. */
export type Role = 'follower' | 'pre-candidate' | 'candidate' | 'leader';

interface MessageBase {
  readonly from: NodeId;
  readonly to: NodeId;
  /** The sender's term, except in a granted pre-vote response, which carries the term asked for. */
  readonly term: number;
}

/** AppendEntries. Empty `entries` still carries the commit index and probes the follower's log. */
export interface AppendMessage extends MessageBase {
  readonly type: 'app';
  readonly prevIndex: number;
  readonly prevTerm: number;
  readonly entries: readonly Entry[];
  readonly commit: number;
}

/**
 * Accepted: `index` is the last index the follower now holds in agreement with the leader.
 * Rejected: `index` is the rejected prevIndex; (hintIndex, hintTerm) say where the follower's log could
 * agree (its last index at or below prevIndex whose term is at most prevTerm), so the leader skips a term
 * per round trip instead of an entry.
 */
export interface AppendResponseMessage extends MessageBase {
  readonly type: 'appResp';
  readonly index: number;
  readonly reject: boolean;
  readonly hintIndex: number;
  readonly hintTerm: number;
}

export interface VoteMessage extends MessageBase {
  readonly type: 'vote' | 'preVote';
  readonly lastIndex: number;
  readonly lastTerm: number;
}

export interface VoteResponseMessage extends MessageBase {
  readonly type: 'voteResp' | 'preVoteResp';
  readonly reject: boolean;
}

/**
 * `commit` is at most what the follower is known to hold; `readSeq` is echoed to confirm leadership;
 * `sent` is the last index the leader had sent this follower, echoed with the follower's last index so
 * the leader learns at once that pipelined appends were lost (a restarted follower, a dropped link).
 */
export interface HeartbeatMessage extends MessageBase {
  readonly type: 'heartbeat';
  readonly commit: number;
  readonly readSeq: number;
  readonly sent: number;
}

export interface HeartbeatResponseMessage extends MessageBase {
  readonly type: 'heartbeatResp';
  readonly readSeq: number;
  readonly sent: number;
  readonly lastIndex: number;
}

export interface SnapshotMessage extends MessageBase {
  readonly type: 'snap';
  readonly snapshot: Snapshot;
}

/** A follower asks its leader for a read index on behalf of its host. */
export interface ReadIndexMessage extends MessageBase {
  readonly type: 'readIndex';
  readonly ctx: string;
}

export interface ReadIndexResponseMessage extends MessageBase {
  readonly type: 'readIndexResp';
  readonly ctx: string;
  readonly index: number;
}

export type Message =
  | AppendMessage
  | AppendResponseMessage
  | VoteMessage
  | VoteResponseMessage
  | HeartbeatMessage
  | HeartbeatResponseMessage
  | SnapshotMessage
  | ReadIndexMessage
  | ReadIndexResponseMessage;

export type MessageType = Message['type'];

/** Distributes over the union so each variant keeps its own fields. */
type Unsent<M> = M extends Message ? Omit<M, 'from' | 'term'> & { term?: number } : never;

/** A message as the state machine writes it: `from` is itself and `term` its term unless given. */
export type OutgoingMessage = Unsent<Message>;

/**
 * A linearizable read: once the host has applied through `index`, reading its state machine reflects
 * every write acknowledged before `readIndex(ctx)` was called.
 */
export interface ReadState {
  readonly ctx: string;
  readonly index: number;
}
