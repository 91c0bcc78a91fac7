import { assert } from '../base/assert.js';
import { StorageCorruption } from './errors.js';
import type { RaftRecord } from './raft-log-format.js';

/**
 * What a consensus member's log holds, in memory: the hard state, the snapshot's (index, term), the
 * entries after the compaction point. Records change it the same way whether they were just made
 * durable or are being read back at recovery, so what recovery rebuilds is what was acknowledged.
 *
 * The types mirror core/cluster/raft's (storage sits below cluster and cannot import them; they are
 * structurally the same, and raft-log.test.ts assigns a RaftLog to raft's Storage to keep it so).
 */

export interface RaftLogEntry {
  readonly index: number;
  readonly term: number;
  readonly data: Uint8Array;
}

export interface RaftLogHardState {
  readonly term: number;
  readonly vote: string | null;
  readonly commit: number;
}

export interface RaftLogSnapshotMeta {
  readonly index: number;
  readonly term: number;
}

export interface RaftLogSnapshot {
  readonly meta: RaftLogSnapshotMeta;
  readonly data: Uint8Array;
}

export class RaftLogImage {
  hard: RaftLogHardState = { term: 0, vote: null, commit: 0 };
  snap: RaftLogSnapshotMeta = { index: 0, term: 0 };
  snapData: Uint8Array = new Uint8Array(0);
  /** The entry just before the first one held: the compaction point (index 0: nothing compacted). */
  base: RaftLogSnapshotMeta = { index: 0, term: 0 };
  last = 0;
  /**
   * Entries (base.index, last], by index. A map rather than an array because recovery may meet a gap:
   * entries whose older neighbours were in a deleted file, which a later compaction record covers.
   */
  private readonly ents = new Map<number, RaftLogEntry>();

  /**
   * Applies one record. `strict` (live writes) asserts what the host must never ask; recovery instead
   * tolerates a gap below a later compaction and validates the result once at the end (`validate`).
   */
  apply(r: RaftRecord, strict: boolean, where = ''): void {
    switch (r.kind) {
      case 'entry': {
        if (r.index <= this.base.index) {
          assert(!strict, `append at ${r.index} at or below the compaction point ${this.base.index}`);
          throw new StorageCorruption(where, 0, `entry ${r.index} at or below the compaction point ${this.base.index}`);
        }
        assert(!strict || r.index <= this.last + 1, `append at ${r.index} leaves a gap after ${this.last}`);
        for (let k = this.last; k >= r.index; k--) this.ents.delete(k);
        this.ents.set(r.index, r);
        this.last = r.index;
        return;
      }
      case 'state':
        this.hard = { term: r.term, vote: r.vote, commit: r.commit };
        return;
      case 'install':
        assert(!strict || r.index >= this.snap.index, 'a snapshot never goes back');
        this.ents.clear();
        this.snap = { index: r.index, term: r.term };
        this.base = this.snap;
        this.last = r.index;
        return;
      case 'snapshot':
        assert(!strict || (r.index >= this.snap.index && this.term(r.index) === r.term), `snapshot at ${r.index}/${r.term} outside the log`);
        this.snap = { index: r.index, term: r.term };
        return;
      case 'compact':
        if (r.index <= this.base.index) return;
        assert(!strict || (r.index <= this.snap.index && this.term(r.index) === r.term), `compaction to ${r.index} past the snapshot at ${this.snap.index}`);
        this.dropThrough(r.index);
        this.base = { index: r.index, term: r.term };
        if (this.last < r.index) this.last = r.index;
        return;
    }
  }

  private dropThrough(index: number): void {
    if (index - this.base.index > this.ents.size) {
      for (const k of this.ents.keys()) if (k <= index) this.ents.delete(k);
    } else {
      for (let k = this.base.index + 1; k <= index; k++) this.ents.delete(k);
    }
  }

  /** After recovery: the log is whole from base to last, and the hard state's commit lies in it. */
  validate(where: string): void {
    for (let i = this.base.index + 1; i <= this.last; i++) {
      if (!this.ents.has(i)) throw new StorageCorruption(where, 0, `the consensus log misses entry ${i} of ${this.base.index + 1}..${this.last}`);
    }
    if (this.ents.size !== this.last - this.base.index) throw new StorageCorruption(where, 0, 'the consensus log holds entries outside its range');
    if (this.hard.commit > this.last) throw new StorageCorruption(where, 0, `commit ${this.hard.commit} past the last entry ${this.last}`);
    if (this.snap.index < this.base.index) throw new StorageCorruption(where, 0, `compacted to ${this.base.index} past the snapshot at ${this.snap.index}`);
  }

  /** Recovery: each entry held gets the data `open` returns for it (null: it has its data). */
  fillEntries(open: (e: RaftLogEntry) => Uint8Array | null): void {
    for (const [i, e] of this.ents) {
      const data = open(e);
      if (data !== null) this.ents.set(i, { index: e.index, term: e.term, data });
    }
  }

  term(i: number): number | null {
    if (i === this.base.index) return this.base.term;
    if (i < this.base.index || i > this.last) return null;
    return this.ents.get(i)!.term;
  }

  entries(lo: number, hi: number, maxCount: number): RaftLogEntry[] {
    assert(lo > this.base.index && hi <= this.last + 1 && lo <= hi, `entries [${lo}, ${hi}) outside the log`);
    const out: RaftLogEntry[] = [];
    for (let i = lo; i < hi && out.length < maxCount; i++) out.push(this.ents.get(i)!);
    return out;
  }

  /** The records that restate this image at the start of a new file, so older files can be deleted. */
  restate(): RaftRecord[] {
    const out: RaftRecord[] = [];
    if (this.snap.index > 0) out.push({ kind: 'snapshot', ...this.snap });
    if (this.base.index > 0) out.push({ kind: 'compact', ...this.base });
    out.push({ kind: 'state', ...this.hard });
    return out;
  }
}
