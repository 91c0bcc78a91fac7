import { assert } from '../../base/assert.js';
import type { Storage } from './storage.js';
import type { Entry, Snapshot } from './types.js';

/** What the host has not persisted yet: a received snapshot and/or a tail of entries. */
interface Unstable {
  snapshot: Snapshot | null;
  /** entries[k].index === offset + k. */
  entries: Entry[];
  /** The index of entries[0]; with a snapshot, snapshot.meta.index + 1. */
  offset: number;
}

/** A bound on one read of the log: at least one entry is returned whatever the byte limit. */
export interface SliceLimit {
  maxCount: number;
  maxBytes: number;
}

const NO_LIMIT: SliceLimit = { maxCount: Number.MAX_SAFE_INTEGER, maxBytes: Number.MAX_SAFE_INTEGER };

/**
 * A member's log as Raft sees it: the persisted part (Storage) overlaid by the unstable part. Entries at
 * or above `unstable.offset` come from the unstable tail and shadow any older persisted ones (a conflict
 * truncated them; the host drops them when it persists the tail).
 *
 * Invariants: applied <= committed <= lastIndex; committed never decreases; no entry at or below
 * `committed` is ever replaced (Raft's state machine safety rests on it, so it is asserted).
 */
export class RaftLog {
  private unstable: Unstable;
  committed: number;
  applied: number;

  constructor(private readonly storage: Storage, committed: number, applied: number) {
    this.unstable = { snapshot: null, entries: [], offset: storage.lastIndex() + 1 };
    // A snapshot holds only committed state, so its index is committed even if the hard state written
    // after it was lost in a crash.
    this.committed = Math.max(committed, storage.firstIndex() - 1);
    this.applied = Math.max(applied, storage.firstIndex() - 1);
    // So is what the state machine applied: a hard state written only to move the commit index is not
    // fsynced (Ready.mustSync), so a power loss may take it while the state machine kept the entries it
    // led to. The log holds them (entries are durable before they are applied).
    if (this.applied > this.committed && this.applied <= this.lastIndex()) this.committed = this.applied;
    assert(this.committed <= this.lastIndex(), `commit ${committed} beyond the last index ${this.lastIndex()}`);
    assert(this.applied <= this.committed, `applied ${applied} beyond the commit ${committed}`);
  }

  firstIndex(): number {
    const s = this.unstable.snapshot;
    return s ? s.meta.index + 1 : this.storage.firstIndex();
  }

  lastIndex(): number {
    const u = this.unstable;
    if (u.entries.length > 0) return u.offset + u.entries.length - 1;
    return u.snapshot ? u.snapshot.meta.index : this.storage.lastIndex();
  }

  /** The last index the host has persisted: what a leader counts for itself toward the commit. */
  stableLastIndex(): number {
    const u = this.unstable;
    if (u.snapshot) return this.storage.lastIndex();
    return u.entries.length > 0 ? u.offset - 1 : this.storage.lastIndex();
  }

  /** The term of entry i, or null when it is compacted or not in the log. */
  term(i: number): number | null {
    const u = this.unstable;
    if (u.snapshot && i === u.snapshot.meta.index) return u.snapshot.meta.term;
    if (i >= u.offset) return i - u.offset < u.entries.length ? u.entries[i - u.offset].term : null;
    if (u.snapshot) return null;
    return this.storage.term(i);
  }

  lastTerm(): number {
    const t = this.term(this.lastIndex());
    assert(t !== null, 'the last entry has a term');
    return t;
  }

  matchTerm(i: number, term: number): boolean {
    return this.term(i) === term;
  }

  /** Raft §5.4.1: a candidate's log is at least as up-to-date as ours by (last term, last index). */
  isUpToDate(lastIndex: number, lastTerm: number): boolean {
    const myTerm = this.lastTerm();
    return lastTerm > myTerm || (lastTerm === myTerm && lastIndex >= this.lastIndex());
  }

  /**
   * Entries [lo, hi) within `limit`, or null when lo is compacted (the caller sends a snapshot instead).
   */
  slice(lo: number, hi: number, limit: SliceLimit = NO_LIMIT): Entry[] | null {
    if (lo < this.firstIndex()) return null;
    assert(hi <= this.lastIndex() + 1, `slice to ${hi} beyond the last index ${this.lastIndex()}`);
    const u = this.unstable;
    const out: Entry[] = lo < Math.min(hi, u.offset) ? this.storage.entries(lo, Math.min(hi, u.offset), limit.maxCount) : [];
    for (let i = Math.max(lo, u.offset); i < hi && out.length < limit.maxCount; i++) out.push(u.entries[i - u.offset]);
    return limitBytes(out, limit.maxBytes);
  }

  /**
   * The largest index <= `index` whose term is <= `term` (or that is compacted, where we stop looking).
   * Both sides of a rejected append use it to skip whole terms while backing up.
   */
  findConflictByTerm(index: number, term: number): number {
    for (let i = index; i > 0; i--) {
      const t = this.term(i);
      if (t === null || t <= term) return i;
    }
    return 0;
  }

  /**
   * A follower's AppendEntries: if our log holds (prevIndex, prevTerm), keep every entry that agrees
   * (a delayed or duplicated message must not cut a longer agreeing tail), replace from the first
   * conflict on, and commit up to what this message proves we share with the leader. Returns the last
   * index the message covers, or null when prev does not match (log matching fails, reject).
   */
  maybeAppend(prevIndex: number, prevTerm: number, leaderCommit: number, entries: readonly Entry[]): number | null {
    if (!this.matchTerm(prevIndex, prevTerm)) return null;
    const lastNew = prevIndex + entries.length;
    const conflict = entries.findIndex((e) => this.term(e.index) !== e.term);
    if (conflict >= 0) this.append(entries.slice(conflict));
    this.commitTo(Math.min(leaderCommit, lastNew));
    return lastNew;
  }

  /** Appends after truncating anything at or after entries[0].index; never below the commit. */
  append(entries: readonly Entry[]): void {
    if (entries.length === 0) return;
    const after = entries[0].index;
    assert(after > this.committed, `truncating at ${after} would lose committed entries (commit ${this.committed})`);
    assert(after <= this.lastIndex() + 1, `append at ${after} leaves a gap after ${this.lastIndex()}`);
    const u = this.unstable;
    if (after <= u.offset) {
      u.entries = [];
      u.offset = after;
    } else {
      u.entries.length = after - u.offset;
    }
    for (const e of entries) u.entries.push(e);
  }

  commitTo(index: number): void {
    if (index <= this.committed) return;
    assert(index <= this.lastIndex(), `commit ${index} beyond the last index ${this.lastIndex()}`);
    this.committed = index;
  }

  appliedTo(index: number): void {
    assert(index >= this.applied && index <= this.committed, `applied ${index} outside [${this.applied}, ${this.committed}]`);
    this.applied = index;
  }

  /** A snapshot replaces the whole log: nothing we held agreed with it (see Raft.handleSnapshot). */
  restore(snapshot: Snapshot): void {
    assert(snapshot.meta.index > this.committed, 'a snapshot at or below the commit is never installed');
    this.committed = snapshot.meta.index;
    this.unstable = { snapshot, entries: [], offset: snapshot.meta.index + 1 };
  }

  hasUnstableEntries(): boolean {
    return this.unstable.entries.length > 0;
  }

  unstableEntries(): readonly Entry[] {
    return this.unstable.entries.slice();
  }

  unstableSnapshot(): Snapshot | null {
    return this.unstable.snapshot;
  }

  /**
   * The host persisted entries through (index, term). If a conflict replaced them meanwhile the term
   * differs and they stay unstable (the host will write the replacements).
   */
  stableTo(index: number, term: number): void {
    const u = this.unstable;
    if (index < u.offset || this.term(index) !== term) return;
    u.entries = u.entries.slice(index + 1 - u.offset);
    u.offset = index + 1;
  }

  stableSnapshotTo(index: number): void {
    if (this.unstable.snapshot?.meta.index === index) this.unstable.snapshot = null;
  }

  /** Committed entries not yet applied, or none while a snapshot waits to be installed. */
  nextCommitted(limit: SliceLimit): Entry[] {
    if (this.unstable.snapshot || this.applied >= this.committed) return [];
    const entries = this.slice(this.applied + 1, this.committed + 1, limit);
    assert(entries !== null, `entries after applied ${this.applied} were compacted before being applied`);
    return entries;
  }

  hasNextCommitted(): boolean {
    return !this.unstable.snapshot && this.applied < this.committed;
  }
}

function limitBytes(entries: Entry[], maxBytes: number): Entry[] {
  let bytes = 0;
  for (let k = 0; k < entries.length; k++) {
    bytes += entries[k].data.byteLength;
    if (bytes > maxBytes && k > 0) return entries.slice(0, k);
  }
  return entries;
}
