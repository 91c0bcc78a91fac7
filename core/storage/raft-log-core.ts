import { assert } from '../base/assert.js';
import type { Sealer } from '../crypto/sealer.js';
import { StorageCorruption } from './errors.js';
import { FILE_HEADER_BYTES } from './format.js';
import {
  decodeSnapshotFile, encodeBatch, encodeSnapshotFile, isRaftSnapshotFile, raftLogFileName, raftLogFileNo, raftLogHeader,
  openEntry, raftSnapshotFileName, scanRaftLogFile, type RaftRecord, type UnopenedEntry,
} from './raft-log-format.js';
import { RaftLogImage, type RaftLogEntry, type RaftLogHardState, type RaftLogSnapshot } from './raft-log-image.js';

/**
 * The consensus log's logic without its I/O: it turns one update into a write plan (bytes for one file,
 * a snapshot file before them, files to delete after them), takes the plan back once the host made it
 * durable, and rebuilds itself from the bytes of the files at recovery. raft-log.ts runs the plans on a
 * FileSystem; the Raft simulation runs them with synchronous real-file I/O. Both share every decision.
 */

/** A file is rolled past this; a compacted one goes once a later file restates the log, so recovery scans at most about this much below the compaction point (16 MiB: about 85,000 single-point writes of dim 16). */
export const RAFT_LOG_SEGMENT_BYTES_DEFAULT = 16 << 20;

export interface RaftLogWrite {
  /** Written whole and durable (temp, fsync, rename, fsync dir) before `bytes`: the records name it. */
  readonly snapshotFile: { readonly name: string; readonly bytes: Uint8Array } | null;
  readonly file: string;
  /** A new file: `bytes` begins with its header; fsync the directory after the file. */
  readonly create: boolean;
  readonly offset: number;
  /** One batch of frames: a single write, then fsync. */
  readonly bytes: Uint8Array;
  /** Files no longer needed once `bytes` is durable, oldest first; delete one at a time (fsync dir each). */
  readonly deleteFiles: readonly string[];
  readonly records: readonly RaftRecord[];
  readonly snapshotData: Uint8Array | null;
  /** false: write without fsync (only a commit-index change: see RaftLogUpdate.sync). */
  readonly sync: boolean;
}

export interface RaftLogUpdate {
  /** A snapshot received from the leader: replaces the whole log. */
  readonly snapshot?: RaftLogSnapshot | null;
  readonly entries?: readonly RaftLogEntry[];
  readonly hardState?: RaftLogHardState | null;
  /**
   * false (a Ready whose mustSync is false: no entries, no snapshot, the same term and vote) writes
   * without fsync, as etcd does: only the commit index moves, which Raft need not keep (a restarted
   * member learns it from its leader). A later synced write makes it durable; a crash before may lose
   * or tear it like any unsynced tail. Ignored (synced) when the update holds anything else.
   */
  readonly sync?: boolean;
}

interface LogFileInfo {
  readonly name: string;
  readonly no: number;
  bytes: number;
  /** The highest entry index in it (0 when none): it may go once the log is compacted past this. */
  maxIndex: number;
}

export interface RecoveredFiles {
  /** Log files (`*.rlog`) with their bytes, in name order. */
  readonly logs: readonly { readonly name: string; readonly bytes: Uint8Array }[];
  /** Every other name in the directory. */
  readonly others: readonly string[];
  readonly readSnapshot: (name: string) => Uint8Array | null;
}

export interface Recovery {
  readonly core: RaftLogCore;
  /** A torn last batch: cut the file to `end` bytes (0: the file never got its header; delete it). */
  readonly cut: { readonly name: string; readonly end: number; readonly reason: string } | null;
  /** Snapshot files no record names any more, and temp files of interrupted snapshot writes. */
  readonly remove: readonly string[];
}

export class RaftLogCore {
  readonly image = new RaftLogImage();
  private readonly files: LogFileInfo[] = [];
  private pending = false;

  constructor(private readonly sealer: Sealer, private readonly segmentBytesMax = RAFT_LOG_SEGMENT_BYTES_DEFAULT) {
    assert(segmentBytesMax > FILE_HEADER_BYTES, 'segmentBytesMax holds a header and more');
  }

  get fileNames(): string[] {
    return this.files.map((f) => f.name);
  }

  /** The plan for one Ready's snapshot, entries and hard state; null when there is nothing to persist. */
  prepareUpdate(u: RaftLogUpdate): RaftLogWrite | null {
    const records: RaftRecord[] = [];
    const snap = u.snapshot ?? null;
    if (snap !== null) records.push({ kind: 'install', index: snap.meta.index, term: snap.meta.term });
    for (const e of u.entries ?? []) records.push({ kind: 'entry', index: e.index, term: e.term, data: e.data });
    if (u.hardState) records.push({ kind: 'state', term: u.hardState.term, vote: u.hardState.vote, commit: u.hardState.commit });
    if (records.length === 0) return null;
    const commitOnly = snap === null && (u.entries ?? []).length === 0 && this.sameVote(u.hardState ?? null);
    return this.prepare(records, snap, !(u.sync === false && commitOnly));
  }

  private sameVote(h: RaftLogHardState | null): boolean {
    return h !== null && h.term === this.image.hard.term && h.vote === this.image.hard.vote;
  }

  /** The plan that records this member's own snapshot at `index` (at most its applied index). */
  prepareSnapshot(index: number, data: Uint8Array): RaftLogWrite {
    const term = this.image.term(index);
    assert(term !== null && index >= this.image.snap.index, `snapshot at ${index} outside the log`);
    return this.prepare([{ kind: 'snapshot', index, term }], { meta: { index, term }, data });
  }

  /** The plan that drops entries at or before `index` (covered by the snapshot); null when already so. */
  prepareCompact(index: number): RaftLogWrite | null {
    if (index <= this.image.base.index) return null;
    assert(index <= this.image.snap.index, `compaction to ${index} past the snapshot at ${this.image.snap.index}`);
    const term = this.image.term(index);
    assert(term !== null, `compaction to ${index} outside the log`);
    return this.prepare([{ kind: 'compact', index, term }], null);
  }

  private prepare(records: RaftRecord[], snap: RaftLogSnapshot | null, sync = true): RaftLogWrite {
    assert(!this.pending, 'one write plan at a time');
    const active = this.files[this.files.length - 1];
    const roll = active === undefined || (active.bytes >= this.segmentBytesMax && active.bytes > FILE_HEADER_BYTES);
    let bytes: Uint8Array;
    let file: string;
    if (roll) {
      file = raftLogFileName((active?.no ?? 0) + 1);
      // A new file restates the state first, so every file before it can be deleted once compacted.
      bytes = Buffer.concat([raftLogHeader(), encodeBatch(this.sealer, [...(active ? this.image.restate() : []), ...records])]);
    } else {
      file = active.name;
      bytes = encodeBatch(this.sealer, records);
    }
    const snapshotFile = snap === null ? null : { name: raftSnapshotFileName(snap.meta.index, snap.meta.term), bytes: encodeSnapshotFile(this.sealer, snap.meta.index, snap.meta.term, snap.data) };
    this.pending = true;
    return {
      snapshotFile, file, create: roll, offset: roll ? 0 : active.bytes, bytes, records, snapshotData: snap?.data ?? null, sync: sync || roll,
      deleteFiles: this.deletable(records, file, snapshotFile?.name ?? null),
    };
  }

  /** Files wholly below the compaction point this write leaves (a prefix: a file only goes with all before it). */
  private deletable(records: readonly RaftRecord[], writing: string, newSnapshot: string | null): string[] {
    let base = this.image.base.index;
    for (const r of records) if (r.kind === 'compact' || r.kind === 'install') base = Math.max(base, r.index);
    let installAt = -1;
    records.forEach((r, k) => { if (r.kind === 'install') installAt = k; });
    const out: string[] = [];
    for (const f of this.files) {
      if (f.name === writing) break;
      // After an install every older entry is gone, whatever its index.
      if (f.maxIndex > base && installAt < 0) break;
      out.push(f.name);
    }
    const current = raftSnapshotFileName(this.image.snap.index, this.image.snap.term);
    if (newSnapshot !== null && newSnapshot !== current && this.image.snap.index > 0) out.push(current);
    return out;
  }

  /** The host made `w` durable: the image and the file list follow. */
  commit(w: RaftLogWrite): void {
    assert(this.pending, 'commit without a plan');
    this.pending = false;
    for (const r of w.records) this.image.apply(r, true);
    if (w.snapshotData !== null) this.image.snapData = w.snapshotData;
    if (w.create) this.files.push({ name: w.file, no: raftLogFileNo(w.file)!, bytes: 0, maxIndex: 0 });
    const f = this.files[this.files.length - 1];
    assert(f.name === w.file && f.bytes === w.offset, 'a plan writes at the end of the active file');
    f.bytes += w.bytes.length;
    for (const r of w.records) if (r.kind === 'entry') f.maxIndex = Math.max(f.maxIndex, r.index);
    for (const name of w.deleteFiles) {
      const k = this.files.findIndex((x) => x.name === name);
      if (k >= 0) this.files.splice(k, 1);
    }
  }

  /** The host could not make `w` durable: the log refuses more (the disk's state is unknown until a reopen). */
  abandon(): void {
    this.pending = false;
  }

  /**
   * Rebuilds the log from its files: each file's records in order, a torn last batch dropped. Log
   * files must be numbered without gaps (deletion takes a prefix); damage anywhere else refuses.
   */
  static recover(sealer: Sealer, dir: string, found: RecoveredFiles, segmentBytesMax?: number): Recovery {
    const core = new RaftLogCore(sealer, segmentBytesMax);
    let cut: Recovery['cut'] = null;
    const logs = found.logs;
    const unopened = new Map<object, UnopenedEntry & { where: string }>();
    for (let k = 0; k < logs.length; k++) {
      const { name, bytes } = logs[k];
      const no = raftLogFileNo(name)!;
      const where = `${dir}/${name}`;
      if (k > 0 && no !== core.files[core.files.length - 1].no + 1) throw new StorageCorruption(where, 0, 'a consensus log file is missing before this one');
      const scanned = scanRaftLogFile(sealer, where, bytes, k === logs.length - 1);
      if (scanned.torn !== null) cut = { name, end: scanned.end, reason: scanned.torn };
      if (scanned.end < FILE_HEADER_BYTES) break;
      const info: LogFileInfo = { name, no, bytes: scanned.end, maxIndex: 0 };
      for (const r of scanned.records) {
        let rec = r;
        const u = scanned.unopened.get(r);
        if (u !== undefined && r.kind === 'entry') {
          // An entry that truncates held ones (a conflicting tail: rare, a new leader's overwrite) is
          // authenticated before it acts: else its header index, checked by a checksum anyone can
          // recompute, would decide which entries go, and a later compaction could drop it unopened.
          // Any other acts on nothing held, and is opened at the end if the log still holds it.
          if (r.index <= core.image.last) rec = { ...r, data: openEntry(sealer, where, r, u) };
          else unopened.set(r, { ...u, where });
        }
        core.image.apply(rec, false, where);
        if (rec.kind === 'entry') info.maxIndex = Math.max(info.maxIndex, rec.index);
      }
      core.files.push(info);
    }
    core.image.validate(dir);
    // Only the entries the log still holds are opened (and so authenticated).
    core.image.fillEntries((e) => {
      const u = unopened.get(e);
      // Opened already (above), or a record made in this process: never one with its data missing.
      return u === undefined ? null : openEntry(sealer, u.where, e, u);
    });
    const snap = core.image.snap;
    const keep = snap.index > 0 ? raftSnapshotFileName(snap.index, snap.term) : null;
    if (keep !== null) {
      const bytes = found.readSnapshot(keep);
      if (bytes === null) throw new StorageCorruption(`${dir}/${keep}`, 0, 'the snapshot the consensus log names is missing');
      core.image.snapData = decodeSnapshotFile(sealer, `${dir}/${keep}`, snap.index, snap.term, bytes);
    }
    const remove = found.others.filter((n) => (isRaftSnapshotFile(n) && n !== keep) || n.endsWith('.rsnap.tmp'));
    return { core, cut, remove };
  }

  // ---- raft's Storage, read side ----

  hardState(): RaftLogHardState {
    return this.image.hard;
  }

  firstIndex(): number {
    return this.image.base.index + 1;
  }

  lastIndex(): number {
    return this.image.last;
  }

  term(i: number): number | null {
    return this.image.term(i);
  }

  entries(lo: number, hi: number, maxCount: number): RaftLogEntry[] {
    return this.image.entries(lo, hi, maxCount);
  }

  snapshot(): RaftLogSnapshot {
    return { meta: this.image.snap, data: this.image.snapData };
  }
}

/**
 * Raft's read side of a log a RaftLogCore holds in memory (raft reads storage synchronously): shared by
 * the durable log (raft-log.ts) and the simulation's synchronous file storage.
 */
export abstract class RaftLogCoreReader {
  protected constructor(protected core: RaftLogCore) {}

  hardState(): RaftLogHardState {
    return this.core.hardState();
  }

  entries(lo: number, hi: number, maxCount: number): RaftLogEntry[] {
    return this.core.entries(lo, hi, maxCount);
  }

  term(i: number): number | null {
    return this.core.term(i);
  }

  firstIndex(): number {
    return this.core.firstIndex();
  }

  lastIndex(): number {
    return this.core.lastIndex();
  }

  snapshot(): RaftLogSnapshot {
    return this.core.snapshot();
  }
}
