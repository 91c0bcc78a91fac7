import { closeSync, mkdirSync, openSync, readFileSync, readdirSync, renameSync, truncateSync, unlinkSync, writeSync } from 'node:fs';
import { join } from 'node:path';
import type { Prng } from '../base/prng.js';
import type { Sealer } from '../crypto/sealer.js';
import { raftLogFileNo } from '../storage/raft-log-format.js';
import { RaftLogCore, RaftLogCoreReader, type RaftLogUpdate, type RaftLogWrite } from '../storage/raft-log-core.js';
import type { RaftLogSnapshot } from '../storage/raft-log-image.js';

/**
 * The consensus log (core/storage/raft-log-core.ts) on real files with synchronous I/O, for the Raft
 * simulation, which is synchronous: every decision is the production log's, only the executor differs.
 * A simulated crash is a process crash (written bytes survive, so no fsync is needed); `saveTorn` is a
 * crash in the middle of one write: a seeded byte prefix of the batch reaches the file. Power loss is
 * the faulty file system's job (core/storage/raft-log.test.ts).
 */
export class SyncFileRaftStorage extends RaftLogCoreReader {
  private fd: number | null = null;

  private constructor(private readonly dir: string, core: RaftLogCore) {
    super(core);
  }

  /** Recovers what `dir` holds (a torn last batch is cut off), as RaftLog.open does. */
  static open(dir: string, sealer: Sealer, segmentBytesMax?: number): SyncFileRaftStorage {
    mkdirSync(dir, { recursive: true });
    const names = readdirSync(dir).sort();
    const logs = names.filter((n) => raftLogFileNo(n) !== null).map((name) => ({ name, bytes: readFileSync(join(dir, name)) }));
    const others = names.filter((n) => raftLogFileNo(n) === null);
    const readSnapshot = (n: string): Uint8Array | null => (others.includes(n) ? readFileSync(join(dir, n)) : null);
    const { core, cut, remove } = RaftLogCore.recover(sealer, dir, { logs, others, readSnapshot }, segmentBytesMax);
    if (cut !== null) {
      if (cut.end === 0) unlinkSync(join(dir, cut.name));
      else truncateSync(join(dir, cut.name), cut.end);
    }
    for (const n of remove) unlinkSync(join(dir, n));
    const s = new SyncFileRaftStorage(dir, core);
    const last = core.fileNames.at(-1);
    if (last !== undefined) s.fd = openSync(join(dir, last), 'r+');
    return s;
  }


  save(u: RaftLogUpdate): void {
    const w = this.core.prepareUpdate(u);
    if (w !== null) this.run(w);
  }

  createSnapshot(index: number, data: Uint8Array): RaftLogSnapshot {
    this.run(this.core.prepareSnapshot(index, data));
    return this.core.snapshot();
  }

  compact(index: number): void {
    const w = this.core.prepareCompact(index);
    if (w !== null) this.run(w);
  }

  /**
   * The process dies while writing `u`: the snapshot file lands or not, then a prefix of the batch cut
   * at a seeded byte offset. This object is dead afterwards (reopen the directory). Says what was kept.
   */
  saveTorn(u: RaftLogUpdate, prng: Prng): string {
    const w = this.core.prepareUpdate(u);
    this.close();
    if (w === null) return 'nothing to write';
    if (w.snapshotFile !== null && prng.int(2) === 0) return 'died before the snapshot file';
    if (w.snapshotFile !== null) this.writeSnapshotFile(w);
    const keep = prng.int(w.bytes.length);
    const fd = openSync(join(this.dir, w.file), w.create ? 'w' : 'r+');
    writeSync(fd, w.bytes, 0, keep, w.offset);
    closeSync(fd);
    return `torn at byte ${keep} of ${w.bytes.length}`;
  }

  close(): void {
    if (this.fd !== null) closeSync(this.fd);
    this.fd = null;
  }

  private run(w: RaftLogWrite): void {
    if (w.snapshotFile !== null) this.writeSnapshotFile(w);
    if (w.create) {
      this.close();
      this.fd = openSync(join(this.dir, w.file), 'w+');
    }
    writeSync(this.fd!, w.bytes, 0, w.bytes.length, w.offset);
    for (const n of w.deleteFiles) unlinkSync(join(this.dir, n));
    this.core.commit(w);
  }

  private writeSnapshotFile(w: RaftLogWrite): void {
    const f = w.snapshotFile!;
    const tmp = join(this.dir, `${f.name}.tmp`);
    const fd = openSync(tmp, 'w');
    writeSync(fd, f.bytes);
    closeSync(fd);
    renameSync(tmp, join(this.dir, f.name));
  }
}
