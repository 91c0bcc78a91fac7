import { SvcError } from '../../base/errors.js';
import { decodeOp, encodeOp, type AnyOp, type Op } from '../../storage/codec.js';

/**
 * What a consensus group's log entries carry (issue 17): a shard's write, already checked and resolved
 * by the leader that proposed it (ids of a delete by filter, vectors of embedded text), as the storage
 * codec's operation. Every member applies the same commands in the same order to the same state, so
 * their data stays equal; the applying is in Database.applyCommand.
 *
 *   version u8 (1) | bulk u8 | uid: str16 ('' for a create or drop, whose op names its uid) | op (codec.ts)
 */

export type ShardCommand =
  | { readonly uid: string; readonly bulk: boolean; readonly op: Op }
  | { readonly uid: ''; readonly bulk: false; readonly op: Extract<AnyOp, { t: 'create_collection' | 'drop_collection' }> };

const VERSION = 1;

export function encodeCommand(c: ShardCommand): Uint8Array {
  const op = encodeOp(c.op);
  const uid = Buffer.from(c.uid, 'utf8');
  const b = Buffer.allocUnsafe(4 + uid.length + op.length);
  b[0] = VERSION;
  b[1] = c.bulk ? 1 : 0;
  b.writeUInt16LE(uid.length, 2);
  b.set(uid, 4);
  b.set(op, 4 + uid.length);
  return b;
}

/** A command of a committed entry; a malformed one is a bug or a corrupt log, never a client's input. */
export function decodeCommand(data: Uint8Array): ShardCommand {
  const b = Buffer.from(data.buffer, data.byteOffset, data.byteLength);
  if (b.length < 5 || b[0] !== VERSION) throw new SvcError('internal', `a consensus entry of unknown version ${b[0]} (${b.length} bytes)`);
  const uidBytes = b.readUInt16LE(2);
  if (4 + uidBytes >= b.length) throw new SvcError('internal', 'a consensus entry ends inside its header');
  const uid = b.toString('utf8', 4, 4 + uidBytes);
  const op = decodeOp(b.subarray(4 + uidBytes));
  if (uid === '') {
    if (op.t !== 'create_collection' && op.t !== 'drop_collection') throw new SvcError('internal', `a consensus entry's ${op.t} names no collection`);
    return { uid: '', bulk: false, op };
  }
  if (op.t !== 'upsert' && op.t !== 'delete' && op.t !== 'upsert_docs' && op.t !== 'set_payload') {
    throw new SvcError('internal', `a consensus entry carries a ${op.t} for a collection`);
  }
  return { uid, bulk: b[1] === 1, op };
}
