import { SvcError } from '../../base/errors.js';
import { decodeOp, encodeOp, type AnyOp, type MoveStateRecord, type Op } from '../../storage/codec.js';

/**
 * What a consensus group's log entries carry (issue 17): a shard's write, already checked and resolved
 * by the leader that proposed it (ids of a delete by filter, vectors of embedded text), as the storage
 * codec's operation. Every member applies the same commands in the same order to the same state, so
 * their data stays equal; the applying is in Database.applyCommand.
 *
 *   version u8 | bulk u8 | uid: str16 ('' for a create, drop or move state, whose op names no collection) | op (codec.ts)
 *
 * Version 1: point writes, creates and drops. Version 2 (rebalancing moves on a group, issue 18): a
 * move's state (`move_state`, uid '') and a move batch's commit (a `delete` that carries its move mark:
 * the batch's ids leave and the collection's cursor advances, in one record). Only those two are
 * encoded as version 2, so every entry a build without moves wrote decodes as it did, and a member of
 * such a build stops at a move's entry (unknown version) instead of applying it without its meaning.
 * Version 3: a batch handed out (`move_out`, uid ''), for the same reason its own version: a member of a
 * build that knows only version 2 stops at it rather than let the group forget a batch's ids.
 */

export type MoveCommitOp = Extract<Op, { t: 'delete' }> & { readonly move: NonNullable<Extract<Op, { t: 'delete' }>['move']> };

export type ShardCommand =
  | { readonly uid: string; readonly bulk: boolean; readonly op: Op }
  | { readonly uid: ''; readonly bulk: false; readonly op: Extract<AnyOp, { t: 'create_collection' | 'drop_collection' }> }
  | { readonly uid: ''; readonly bulk: false; readonly op: { t: 'move_state' } & MoveStateRecord }
  | { readonly uid: ''; readonly bulk: false; readonly op: Extract<AnyOp, { t: 'move_out' }> };

const VERSION = 1;
/** A move's state and its batches' commits (a `delete` carrying its move mark). */
export const COMMAND_VERSION_MOVES = 2;
/** A batch handed out (`move_out`). */
export const COMMAND_VERSION_MOVE_OUT = 3;
const VERSION_MOVES = COMMAND_VERSION_MOVES;
const VERSION_MOVE_OUT = COMMAND_VERSION_MOVE_OUT;

/**
 * The highest command version this build reads and writes (it reads every one below). A member
 * advertises it to its peers (core/cluster/raft-wire/handshake.ts), and a leader proposes a command only
 * when every member reads its version (versions.ts): a member of an older build would stop at it.
 */
export const COMMAND_VERSION_MAX = VERSION_MOVE_OUT;

/** Codes a command's apply refuses with on every member alike (Database.applyCommand): the write's answer. */
const DETERMINISTIC_CODES = new Set(['already_exists', 'not_found', 'invalid_argument']);

/**
 * Whether an apply's failure is a deterministic refusal (every member refuses that entry alike: a create
 * of a name taken since it was proposed), not a failure of this member (its disk).
 */
export function isDeterministicRefusal(e: unknown): boolean {
  return e instanceof SvcError && DETERMINISTIC_CODES.has(e.code);
}

/** Whether a command is a move's (version 2 or 3). */
export function isMoveCommand(c: ShardCommand): boolean {
  return c.op.t === 'move_state' || c.op.t === 'move_out' || (c.op.t === 'delete' && c.op.move !== undefined);
}

/** The version a command is encoded under: what a member must read to apply it. */
export function commandVersion(c: ShardCommand): number {
  return c.op.t === 'move_out' ? VERSION_MOVE_OUT : isMoveCommand(c) ? VERSION_MOVES : VERSION;
}

export function encodeCommand(c: ShardCommand): Uint8Array {
  const op = encodeOp(c.op);
  const uid = Buffer.from(c.uid, 'utf8');
  const b = Buffer.allocUnsafe(4 + uid.length + op.length);
  b[0] = commandVersion(c);
  b[1] = c.bulk ? 1 : 0;
  b.writeUInt16LE(uid.length, 2);
  b.set(uid, 4);
  b.set(op, 4 + uid.length);
  return b;
}

/**
 * A command's header read, its operation left encoded (codec.ts bytes): the version, the bulk flag, the
 * collection's uid ('' for a create, drop or move state) and the operation's bytes. Throws as
 * decodeCommand does for an unknown version or a header cut short.
 */
export function commandParts(data: Uint8Array): { version: number; bulk: boolean; uid: string; op: Uint8Array } {
  const b = Buffer.from(data.buffer, data.byteOffset, data.byteLength);
  const version = b[0];
  if (b.length < 5 || (version !== VERSION && version !== VERSION_MOVES && version !== VERSION_MOVE_OUT)) throw new SvcError('internal', `a consensus entry of unknown version ${b[0]} (${b.length} bytes)`);
  const uidBytes = b.readUInt16LE(2);
  if (4 + uidBytes >= b.length) throw new SvcError('internal', 'a consensus entry ends inside its header');
  return { version, bulk: b[1] === 1, uid: b.toString('utf8', 4, 4 + uidBytes), op: data.subarray(4 + uidBytes) };
}

/** A command of a committed entry; a malformed one is a bug or a corrupt log, never a client's input. */
export function decodeCommand(data: Uint8Array): ShardCommand {
  const { version, bulk, uid, op: bytes } = commandParts(data);
  const op = decodeOp(bytes);
  let cmd: ShardCommand;
  if (uid === '') {
    if (op.t !== 'create_collection' && op.t !== 'drop_collection' && op.t !== 'move_state' && op.t !== 'move_out') throw new SvcError('internal', `a consensus entry's ${op.t} names no collection`);
    cmd = { uid: '', bulk: false, op } as ShardCommand;
  } else {
    if (op.t !== 'upsert' && op.t !== 'delete' && op.t !== 'upsert_docs' && op.t !== 'set_payload') {
      throw new SvcError('internal', `a consensus entry carries a ${op.t} for a collection`);
    }
    cmd = { uid, bulk, op };
  }
  // A move's command under version 1, or a plain write under version 2: a bug, never applied as either.
  if (commandVersion(cmd) !== version) throw new SvcError('internal', `a consensus entry of version ${version} carries a ${op.t}${isMoveCommand(cmd) ? ' of a move' : ''}`);
  return cmd;
}
