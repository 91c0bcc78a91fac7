import type { NodeId } from './types.js';

/** The smallest number of members that forms a majority of `size`. */
export function majority(size: number): number {
  return Math.floor(size / 2) + 1;
}

/**
 * The largest value that a majority of `members` has reached (0 when no majority has reported).
 * Used for the commit index (values: match indexes) and for confirming leadership on a read (values:
 * the read sequence numbers echoed by heartbeats). Why it is right: sorted ascending, the element at
 * `size - majority` is reached by itself and every element to its right, which is `majority` members;
 * any larger value is reached by fewer.
 */
export function quorumValue(members: readonly NodeId[], valueOf: (id: NodeId) => number | undefined): number {
  const values = members.map((id) => valueOf(id) ?? 0).sort((a, b) => a - b);
  return values[values.length - majority(values.length)] ?? 0;
}

export type VoteResult = 'won' | 'lost' | 'pending';

/** Won with a majority of grants; lost once a majority can no longer be reached. */
export function voteResult(members: readonly NodeId[], votes: ReadonlyMap<NodeId, boolean>): VoteResult {
  let granted = 0;
  let missing = 0;
  for (const id of members) {
    const v = votes.get(id);
    if (v === true) granted++;
    else if (v === undefined) missing++;
  }
  const need = majority(members.length);
  if (granted >= need) return 'won';
  if (granted + missing >= need) return 'pending';
  return 'lost';
}
