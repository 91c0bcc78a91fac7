import type { NodeId } from '../cluster/raft/index.js';

/** A broken Raft safety property: the message says which and where; the simulation adds the seed. */
export class InvariantViolation extends Error {
  constructor(readonly invariant: string, message: string) {
    super(`${invariant}: ${message}`);
    this.name = 'InvariantViolation';
  }
}

/** A client write the leader that accepted it saw committed: it must never be lost. */
export interface AckedWrite {
  readonly id: number;
  readonly index: number;
  readonly term: number;
  readonly member: NodeId;
}

const TERM_BITS = 2 ** 24;
const key = (index: number, term: number): number => index * TERM_BITS + term;

/**
 * The cluster-wide properties of Raft figure 3, checked from outside as the simulation runs. Entry data
 * are small integers (a write's id, which is its data; 0 for a leader's no-op), so every comparison is a
 * number.
 * - Election safety: at most one leader per term.
 * - Log matching: two logs holding an entry with the same (index, term) hold the same data there and
 *   the same term just before it, hence (by induction) the same prefix. Checked on every entry a member
 *   persists, against the first sighting of that (index, term) anywhere.
 * - Leader completeness: a leader of term T holds every entry committed by a leader of an earlier term.
 * - State machine safety: no two members apply different data at one index (snapshots included).
 * - Durability of acknowledged writes: an acknowledged write is what every member applies at its index.
 */
export class RaftChecker {
  private readonly leaderOfTerm = new Map<number, NodeId>();
  private readonly entries = new Map<number, { data: number; prevTerm: number; by: NodeId }>();
  private readonly applied: number[] = [0];
  private readonly committedTerm = new Map<number, number>();
  private readonly leaderCommit = new Map<number, number>();
  readonly acked: AckedWrite[] = [];
  maxAckedIndex = 0;

  leaders(): number {
    return this.leaderOfTerm.size;
  }

  /** Election safety. True the first time this leader of this term is seen. */
  leader(term: number, id: NodeId): boolean {
    const known = this.leaderOfTerm.get(term);
    if (known !== undefined && known !== id) throw new InvariantViolation('election safety', `${known} and ${id} both lead term ${term}`);
    if (known === undefined) this.leaderOfTerm.set(term, id);
    return known === undefined;
  }

  /** Leader completeness, checked when a member is first seen leading `term`. */
  newLeader(term: number, id: NodeId, termAt: (i: number) => number | null): void {
    let through = 0;
    for (const [t, c] of this.leaderCommit) if (t < term) through = Math.max(through, c);
    for (let i = 1; i <= through; i++) {
      const want = this.committedTerm.get(i);
      const got = termAt(i);
      if (want === undefined || got === null) continue; // compacted at the leader: its snapshot is checked on install
      if (got !== want) throw new InvariantViolation('leader completeness', `${id} leads term ${term} with ${i}/${got}, but ${i}/${want} was committed`);
    }
  }

  /** A leader's commit index: the entries through it are committed forever. */
  leaderCommitted(term: number, id: NodeId, commit: number, termAt: (i: number) => number | null): void {
    const before = this.leaderCommit.get(term) ?? 0;
    if (commit <= before) return;
    this.leaderCommit.set(term, commit);
    for (let i = before + 1; i <= commit; i++) {
      const t = termAt(i);
      if (t !== null) this.committed(i, t, id);
    }
  }

  private committed(index: number, term: number, by: NodeId): void {
    const known = this.committedTerm.get(index);
    if (known === undefined) this.committedTerm.set(index, term);
    else if (known !== term) throw new InvariantViolation('committed entries are final', `${by} commits ${index}/${term}, but ${index}/${known} was committed`);
  }

  /** Log matching, for entries a member is about to persist after an entry of term `prevTerm`. */
  persisted(id: NodeId, entries: readonly { index: number; term: number; data: number }[], prevTerm: number): void {
    let prev = prevTerm;
    for (const e of entries) {
      const k = key(e.index, e.term);
      const seen = this.entries.get(k);
      if (seen === undefined) this.entries.set(k, { data: e.data, prevTerm: prev, by: id });
      else if (seen.data !== e.data || seen.prevTerm !== prev) {
        throw new InvariantViolation('log matching', `${id} holds ${e.index}/${e.term} = ${e.data} after term ${prev}; ${seen.by} held ${seen.data} after term ${seen.prevTerm}`);
      }
      prev = e.term;
    }
  }

  /** State machine safety: `data` applied at `index` by `id`. */
  appliedEntry(id: NodeId, index: number, term: number, data: number): void {
    this.committed(index, term, id);
    if (index < this.applied.length) {
      if (this.applied[index] !== data) throw new InvariantViolation('state machine safety', `${id} applies ${data} at ${index}, another member applied ${this.applied[index]}`);
    } else if (index === this.applied.length) {
      this.applied.push(data);
    } else {
      throw new InvariantViolation('state machine safety', `${id} applies ${index} before ${this.applied.length} was applied anywhere`);
    }
  }

  /** A member installed a snapshot holding `values` (the data of entries 1..values.length). */
  snapshotInstalled(id: NodeId, values: ArrayLike<number>): void {
    for (let i = 1; i <= values.length; i++) {
      if (i < this.applied.length && this.applied[i] !== values[i - 1]) {
        throw new InvariantViolation('state machine safety', `${id} installs a snapshot with ${values[i - 1]} at ${i}, another member applied ${this.applied[i]}`);
      }
    }
  }

  /** The member that accepted `write` applied `appliedData` at its index, in its term. */
  ack(write: AckedWrite, appliedData: number): void {
    if (appliedData !== write.id) throw new InvariantViolation('acknowledged write', `${write.member} acknowledged write ${write.id} at ${write.index}/${write.term} but applied ${appliedData}`);
    this.acked.push(write);
    this.maxAckedIndex = Math.max(this.maxAckedIndex, write.index);
  }

  /** A read index must cover every write acknowledged before the read was asked (linearizability). */
  readAnswered(id: NodeId, ctx: string, index: number, ackedBefore: number): void {
    if (index < ackedBefore) throw new InvariantViolation('linearizable read', `${id} answers read ${ctx} at ${index}, but a write at ${ackedBefore} was acknowledged before it was asked`);
  }

  /** The end: every acknowledged write is applied, at its index, by every member. */
  durable(members: readonly { id: NodeId; values: ArrayLike<number> }[]): void {
    for (const w of this.acked) {
      for (const m of members) {
        const got = m.values[w.index - 1];
        if (got !== w.id) throw new InvariantViolation('acknowledged write lost', `write ${w.id} acknowledged at ${w.index}/${w.term} by ${w.member}; ${m.id} has ${got ?? 'nothing'} there`);
      }
    }
  }
}
