import { assert } from '../../base/assert.js';
import { EMPTY_HARD_STATE, EMPTY_SNAPSHOT, type Entry, type HardState, type Snapshot } from './types.js';

/**
 * What Raft reads of a member's durable state. The host writes it (from each Ready) and Raft only reads:
 * the log as [firstIndex, lastIndex], the term of the entry just before firstIndex (the snapshot's),
 * the hard state, and the latest snapshot to send to a member too far behind.
 *
 * Invariants a Storage keeps: firstIndex - 1 === snapshot().meta.index when a snapshot exists (entries
 * below it are compacted); lastIndex >= firstIndex - 1; hardState().commit <= lastIndex.
 */
export interface Storage {
  hardState(): HardState;
  /** Entries [lo, hi) with firstIndex <= lo <= hi <= lastIndex + 1, at most `maxCount` of them. */
  entries(lo: number, hi: number, maxCount: number): Entry[];
  /** The term of entry i when firstIndex - 1 <= i <= lastIndex; null outside (compacted or absent). */
  term(i: number): number | null;
  firstIndex(): number;
  lastIndex(): number;
  snapshot(): Snapshot;
}

/**
 * A Storage in memory, for tests and the simulation (the WAL implements the same interface later).
 * `entries[0]` is a sentinel standing for the snapshot's last entry (index, term), so term(firstIndex - 1)
 * needs no special case.
 */
export class MemoryStorage implements Storage {
  private hard: HardState = EMPTY_HARD_STATE;
  private snap: Snapshot = EMPTY_SNAPSHOT;
  private ents: Entry[] = [{ index: 0, term: 0, data: new Uint8Array(0) }];

  hardState(): HardState {
    return this.hard;
  }

  firstIndex(): number {
    return this.ents[0].index + 1;
  }

  lastIndex(): number {
    return this.ents[0].index + this.ents.length - 1;
  }

  term(i: number): number | null {
    const offset = this.ents[0].index;
    if (i < offset || i > this.lastIndex()) return null;
    return this.ents[i - offset].term;
  }

  entries(lo: number, hi: number, maxCount: number): Entry[] {
    assert(lo >= this.firstIndex() && hi <= this.lastIndex() + 1 && lo <= hi, `entries [${lo}, ${hi}) outside the log`);
    const offset = this.ents[0].index;
    return this.ents.slice(lo - offset, Math.min(hi, lo + maxCount) - offset);
  }

  snapshot(): Snapshot {
    return this.snap;
  }

  // ---- written by the host, from Ready ----

  setHardState(hs: HardState): void {
    this.hard = hs;
  }

  /** Appends, first dropping every entry at or after entries[0].index (a conflicting tail). */
  append(entries: readonly Entry[]): void {
    if (entries.length === 0) return;
    const first = entries[0].index;
    assert(first > this.ents[0].index, `append at ${first} below the snapshot at ${this.ents[0].index}`);
    assert(first <= this.lastIndex() + 1, `append at ${first} leaves a gap after ${this.lastIndex()}`);
    this.ents.length = first - this.ents[0].index;
    for (let k = 0; k < entries.length; k++) {
      assert(entries[k].index === first + k, 'appended entries are contiguous');
      this.ents.push(entries[k]);
    }
  }

  /** Replaces the whole log with a received snapshot (nothing before or after it survives). */
  applySnapshot(snapshot: Snapshot): void {
    assert(snapshot.meta.index >= this.snap.meta.index, 'a snapshot never goes back');
    this.snap = snapshot;
    this.ents = [{ index: snapshot.meta.index, term: snapshot.meta.term, data: new Uint8Array(0) }];
  }

  /** Records the host's own state machine image at `index` (at most the applied index). */
  createSnapshot(index: number, data: Uint8Array): Snapshot {
    const term = this.term(index);
    assert(term !== null && index >= this.snap.meta.index, `snapshot at ${index} outside the log`);
    this.snap = { meta: { index, term }, data };
    return this.snap;
  }

  /** Drops the entries before `index` (which must be covered by the snapshot); index becomes firstIndex - 1. */
  compact(index: number): void {
    const offset = this.ents[0].index;
    if (index <= offset) return;
    assert(index <= this.snap.meta.index, `compaction to ${index} past the snapshot at ${this.snap.meta.index}`);
    this.ents = this.ents.slice(index - offset);
    this.ents[0] = { index, term: this.ents[0].term, data: new Uint8Array(0) };
  }
}
