import { SvcError } from '../base/errors.js';
import type { Sealer } from '../crypto/sealer.js';
import { joinPath, mkdirDurable, type FileHandle, type FileSystem } from './fs.js';
import { raftLogFileNo } from './raft-log-format.js';
import { RaftLogCore, RaftLogCoreReader, type RaftLogUpdate, type RaftLogWrite } from './raft-log-core.js';
import type { RaftLogSnapshot } from './raft-log-image.js';
import type { StorageLog } from './wal.js';

export type { RaftLogEntry, RaftLogHardState, RaftLogSnapshot } from './raft-log-image.js';
export type { RaftLogUpdate } from './raft-log-core.js';

export interface RaftLogOptions {
  /** Seals every record and snapshot (the member's consensus key; InsecureSealer in insecure mode). */
  sealer: Sealer;
  log: StorageLog;
  /** A file is rolled once it reaches this size; whole files are the unit of deletion after compaction. */
  segmentBytesMax?: number;
}

/**
 * A consensus member's durable log: raft's Storage (core/cluster/raft/storage.ts, read side, served
 * from memory) over files in one directory, in the WAL's sealed frame format with term and index
 * (README.md, "The consensus log"). The host persists each Ready with one `save` (one write + fsync)
 * before it sends what that Ready promises (the member's loop: core/cluster/consensus/member.ts);
 * saves land in the order they are called, awaited or not. `createSnapshot` and `compact` bound the log. After a crash
 * `open` rebuilds exactly the batches that were durable: a torn last batch is cut off and logged.
 *
 * Memory: the entries after the compaction point are held in memory (raft reads them synchronously),
 * so the host snapshots and compacts to bound them, as etcd's hosts do.
 */
export class RaftLog extends RaftLogCoreReader {
  private active: FileHandle | null = null;
  /**
   * The active file may hold bytes not fsynced (a commit-only batch written unsynced, or whatever a
   * process killed before this open left in the page cache): it is fsynced before the next file begins,
   * so that every file but the last is whole after a power loss (recovery refuses a finished file that
   * does not end on a batch end).
   */
  private activeUnsynced = false;
  private failed: unknown = null;
  private closed = false;
  private chain: Promise<unknown> = Promise.resolve();

  private constructor(private readonly fs: FileSystem, private readonly dir: string, core: RaftLogCore) {
    super(core);
  }

  static async open(fs: FileSystem, dir: string, opts: RaftLogOptions): Promise<RaftLog> {
    await mkdirDurable(fs, dir);
    const names = await fs.readdir(dir);
    const logs: { name: string; bytes: Uint8Array }[] = [];
    for (const name of names) if (raftLogFileNo(name) !== null) logs.push({ name, bytes: await fs.readFile(joinPath(dir, name)) });
    const others = names.filter((n) => raftLogFileNo(n) === null);
    const snapshots = new Map<string, Uint8Array>();
    for (const name of others) if (name.endsWith('.rsnap')) snapshots.set(name, await fs.readFile(joinPath(dir, name)));
    const { core, cut, remove } = RaftLogCore.recover(opts.sealer, dir, { logs, others, readSnapshot: (n) => snapshots.get(n) ?? null }, opts.segmentBytesMax);
    if (cut !== null) {
      opts.log('raft log: cutting a torn final batch', { file: joinPath(dir, cut.name), offset: cut.end, reason: cut.reason });
      if (cut.end === 0) {
        await fs.unlink(joinPath(dir, cut.name));
        await fs.fsyncDir(dir);
      } else {
        await fs.truncate(joinPath(dir, cut.name), cut.end);
        const h = await fs.open(joinPath(dir, cut.name), 'readwrite');
        await h.sync();
        await h.close();
      }
    }
    for (const name of remove) await fs.unlink(joinPath(dir, name));
    if (remove.length > 0) await fs.fsyncDir(dir);
    const log = new RaftLog(fs, dir, core);
    const last = core.fileNames.at(-1);
    if (last !== undefined) {
      log.active = await fs.open(joinPath(dir, last), 'readwrite');
      log.activeUnsynced = true;
    }
    return log;
  }

  // ---- raft's Storage ----


  // ---- written by the host ----

  /**
   * Persists one Ready: its snapshot (replacing the log), entries (dropping a conflicting tail) and hard
   * state, durable when this resolves (unless `sync` is false for a commit index alone); only then may
   * the messages that promise it go out. Queued behind every earlier save, so saves land in call order.
   * After a failed write the log refuses more: what is on disk is unknown until a reopen recovers it.
   */
  save(update: RaftLogUpdate): Promise<void> {
    return this.serial(() => this.core.prepareUpdate(update));
  }

  /** Records this member's own state machine image at `index` (at most its applied index). */
  async createSnapshot(index: number, data: Uint8Array): Promise<RaftLogSnapshot> {
    await this.serial(() => this.core.prepareSnapshot(index, data));
    return this.core.snapshot();
  }

  /** Drops entries at or before `index` (covered by the snapshot); files wholly below it are deleted. */
  compact(index: number): Promise<void> {
    return this.serial(() => this.core.prepareCompact(index));
  }

  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    await this.chain.catch(() => undefined);
    await this.active?.close();
    this.active = null;
  }

  private serial(plan: () => RaftLogWrite | null): Promise<void> {
    const run = this.chain.then(async () => {
      if (this.closed) throw new SvcError('not_ready', 'the consensus log is closed');
      if (this.failed !== null) throw this.failed;
      const w = plan();
      if (w === null) return;
      try {
        await this.execute(w);
      } catch (e) {
        this.failed = e;
        this.core.abandon();
        throw e;
      }
      this.core.commit(w);
    });
    this.chain = run.catch(() => undefined);
    return run;
  }

  private async execute(w: RaftLogWrite): Promise<void> {
    const fs = this.fs;
    if (w.snapshotFile !== null) {
      const path = joinPath(this.dir, w.snapshotFile.name);
      const tmp = `${path}.tmp`;
      if (await fs.stat(tmp)) await fs.unlink(tmp);
      const h = await fs.open(tmp, 'create');
      try {
        await h.write(w.snapshotFile.bytes, 0);
        await h.sync();
      } finally {
        await h.close();
      }
      await fs.rename(tmp, path);
      await fs.fsyncDir(this.dir);
    }
    if (w.create) {
      if (this.activeUnsynced) await this.active?.sync();
      this.activeUnsynced = false;
      const path = joinPath(this.dir, w.file);
      if (await fs.stat(path)) await fs.unlink(path);
      const h = await fs.open(path, 'create');
      await h.write(w.bytes, 0);
      await h.sync();
      await fs.fsyncDir(this.dir);
      await this.active?.close();
      this.active = h;
    } else {
      await this.active!.write(w.bytes, w.offset);
      if (w.sync) await this.active!.sync();
      // An fsync makes every earlier write of the file durable too.
      this.activeUnsynced = !w.sync;
    }
    // One at a time, oldest first: a crash must leave a prefix deleted, never a hole.
    for (const name of w.deleteFiles) {
      await fs.unlink(joinPath(this.dir, name));
      await fs.fsyncDir(this.dir);
    }
  }
}
