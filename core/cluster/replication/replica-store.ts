import { SvcError } from '../../base/errors.js';
import type { ReplicaResume } from '../../base/model.js';
import type { Database } from '../../collection/database.js';
import type { Op } from '../../storage/codec.js';
import { NodeFileSystem, dirName, type FileSystem } from '../../storage/fs.js';
import type { ReplicaTarget } from './follower.js';

/**
 * A read replica's data directory across re-bootstraps. The first bootstrap fills the directory in place
 * (nothing is served before it ends). A later one (the leader no longer holds the log after this node's
 * position) goes into a side directory, `<dir>.bootstrap`, while the current one goes on serving reads;
 * at the snapshot's end the two are swapped: both closed, renamed, the new one opened again. Reads wait
 * for the swap rather than fail, and see the old state or the new, never a snapshot half applied.
 *
 * A crash at any point leaves one whole directory to open (`open` finishes or undoes a swap):
 *   side complete -> close both -> rename dir to `<dir>.old` -> rename side to dir -> fsync -> remove old.
 * Before the first rename the old directory is kept and the side one removed (the leader sends a snapshot
 * again); after it, the side one is complete (its position was durable before the swap began).
 */

export interface ReplicaStoreOptions {
  dataDir: string;
  /** Default: the real one. */
  fs?: FileSystem;
  /** Opens a database at a path; `side` for the directory a re-bootstrap fills (no search workers). */
  openDb(path: string, side: boolean): Promise<Database>;
  log(message: string, detail?: Record<string, unknown>): void;
  /** Most milliseconds a re-bootstrap's graphs are built before its swap (default SIDE_INDEX_WAIT_MS). */
  sideIndexWaitMs?: number;
  /** A monotonic clock, for the logged timings (default: none, they read 0). */
  monotonicMs?: () => number;
  /**
   * Called at once whenever `readable` or `servesDuringBootstrap()` may have changed (a swap begins or
   * ends, a re-bootstrap goes aside or not): what reads the database without `read` follows it.
   */
  onChange?: () => void;
}

/**
 * Most time a re-bootstrap builds its side directory's graphs before the swap: the stream waits
 * meanwhile, and the leader keeps its log for it only within its retention (SVC_REPLICATION_RETAIN_BYTES).
 * A 60k x 784 MNIST graph takes about 25 s on two quiet cores.
 */
export const SIDE_INDEX_WAIT_MS = 10 * 60_000;

export class ReplicaStore implements ReplicaTarget {
  private db: Database;
  private side: Database | null = null;
  private swapping: Promise<void> | null = null;
  /** From a swap's start (before its first await) to its end. */
  private swapRuns = false;
  private reading = 0;
  private readonly idle: (() => void)[] = [];
  /** Re-bootstraps go in place: a side directory could not be made or swapped here (a mount point, say). */
  private inPlace = false;
  /** The current bootstrap (if one runs) goes to a side directory. */
  private aside = false;
  private readonly sidePath: string;
  private readonly oldPath: string;

  private readonly fs: FileSystem;

  private constructor(private readonly opts: ReplicaStoreOptions, db: Database) {
    this.fs = opts.fs ?? new NodeFileSystem();
    this.db = db;
    this.sidePath = `${opts.dataDir.replace(/\/+$/, '')}.bootstrap`;
    this.oldPath = `${opts.dataDir.replace(/\/+$/, '')}.old`;
  }

  static async open(opts: ReplicaStoreOptions): Promise<ReplicaStore> {
    const fs = opts.fs ?? new NodeFileSystem();
    const { dataDir } = opts;
    const side = `${dataDir.replace(/\/+$/, '')}.bootstrap`;
    const old = `${dataDir.replace(/\/+$/, '')}.old`;
    if ((await fs.stat(dataDir)) === null) {
      // A swap stopped between its two renames: the side directory is the complete, newer one. (Nothing
      // holds either: the swap closed both before its first rename.) Only the old one left: it goes back.
      const whole = (await fs.stat(side)) !== null ? side : (await fs.stat(old)) !== null ? old : null;
      if (whole !== null) {
        opts.log('replica: finishing a swap of directories that a crash interrupted', { from: whole });
        await fs.rename(whole, dataDir);
        await fs.fsyncDir(dirName(dataDir));
      }
    }
    // Opened (and so locked) before anything beside it is removed: a second process never gets here.
    const db = await opts.openDb(dataDir, false);
    try {
      for (const leftover of [side, old]) {
        if ((await fs.stat(leftover)) !== null) {
          await fs.rmdir(leftover);
          await fs.fsyncDir(dirName(leftover));
        }
      }
    } catch (e) {
      await db.close().catch(() => undefined);
      throw e;
    }
    return new ReplicaStore(opts, db);
  }

  /** The database reads go to (the one served; a re-bootstrap's side one only after its swap). */
  get current(): Database {
    return this.db;
  }

  /**
   * The database as `read` would read it at once: null while a swap runs (a read waits for it, then
   * reads the database swapped in).
   */
  get readable(): Database | null {
    return this.swapRuns ? null : this.db;
  }

  private changed(): void {
    this.opts.onChange?.();
  }

  /**
   * A read of the served database: it waits while a swap runs, and a swap waits for the reads already
   * running on the database it closes.
   */
  async read<T>(fn: (db: Database) => Promise<T>): Promise<T> {
    while (this.swapping !== null) await this.swapping.catch(() => undefined);
    this.reading++;
    try {
      return await fn(this.db);
    } finally {
      if (--this.reading === 0) for (const w of this.idle.splice(0)) w();
    }
  }

  private readsDone(): Promise<void> {
    return this.reading === 0 ? Promise.resolve() : new Promise((resolve) => this.idle.push(resolve));
  }

  /**
   * The bootstrap running now fills a side directory, so the current state serves meanwhile: true from
   * the side directory's opening until the next bootstrap starts, so it holds through the swap and
   * until the follower has marked the bootstrap done.
   */
  servesDuringBootstrap(): boolean {
    return this.aside;
  }

  private get target(): Database {
    return this.side ?? this.db;
  }

  get replicaSeq(): ReplicaResume | null {
    return this.db.replicaSeq;
  }

  /** A new stream: a re-bootstrap the last one left unfinished is abandoned (the position is the served one's). */
  async replicaStreamOpened(): Promise<void> {
    await this.dropSide();
  }

  async replicaReset(): Promise<void> {
    this.aside = false;
    this.changed();
    await this.dropSide();
    if (this.inPlace || (this.db.replicaSeq === null && (await this.db.listCollections()).collections.length === 0)) {
      // The first bootstrap (nothing served yet), or no side directory possible: reads wait (not_ready).
      await this.db.replicaReset();
      return;
    }
    this.opts.log('replica: re-bootstrapping into a side directory; the current state serves reads meanwhile', { dir: this.sidePath });
    try {
      if ((await this.fs.stat(this.sidePath)) !== null) await this.fs.rmdir(this.sidePath);
      this.side = await this.opts.openDb(this.sidePath, true);
      this.aside = true;
      this.changed();
    } catch (e) {
      this.opts.log('replica: no side directory beside the data directory; re-bootstrapping in place (reads wait for it)', { error: String(e) });
      this.inPlace = true;
      await this.fs.rmdir(this.sidePath).catch(() => undefined);
      await this.db.replicaReset();
      return;
    }
    await this.side.replicaReset();
  }

  replicaCreate(uid: string, name: string, params: object, createdSeq: number): Promise<void> {
    return this.target.replicaCreate(uid, name, params, createdSeq);
  }

  replicaDrop(uid: string): Promise<void> {
    return this.target.replicaDrop(uid);
  }

  replicaWrite(uid: string, op: Op, bulk: boolean, encoded?: Uint8Array): Promise<void> {
    return this.target.replicaWrite(uid, op, bulk, encoded);
  }

  replicaPosition(leaderSeq: number): Promise<void> {
    return this.target.replicaPosition(leaderSeq);
  }

  async replicaSnapshotEnd(leaderSeq: number, history: string): Promise<void> {
    await this.target.replicaSnapshotEnd(leaderSeq, history);
    if (this.side === null) return;
    await this.indexSide(this.side);
    await this.swap();
  }

  /**
   * The side directory's graphs are built before the swap, while the current state goes on serving (the
   * stream waits meanwhile: the leader keeps its log for it, within its retention), and the side's close
   * writes them to their files (graph-persist.ts: graphs of GRAPH_PERSIST_NODES_MIN nodes or more), so
   * the directory swapped in opens with its graphs read back rather than built again. Past
   * SIDE_INDEX_WAIT_MS the swap goes on, and what is left builds after it, as a plain open would.
   */
  private async indexSide(side: Database): Promise<void> {
    const t0 = this.clockMs();
    let timer: ReturnType<typeof setTimeout> | undefined;
    const timedOut = new Promise<boolean>((resolve) => {
      timer = setTimeout(() => resolve(true), this.opts.sideIndexWaitMs ?? SIDE_INDEX_WAIT_MS);
      timer.unref?.();
    });
    try {
      const late = await Promise.race([side.whenIndexed({ upToNow: true }).then(() => false), timedOut]);
      const built = side.indexStates();
      this.opts.log(late
        ? 'replica: the re-bootstrapped directory\'s graphs were not built in time; swapping it in, the rest builds after'
        : 'replica: built the re-bootstrapped directory\'s graphs before swapping it in', {
        ms: Math.round(this.clockMs() - t0), collections: built.length, points: built.reduce((n, c) => n + c.count, 0),
      });
    } finally {
      clearTimeout(timer);
    }
  }

  private clockMs(): number {
    return this.opts.monotonicMs?.() ?? 0;
  }

  private swap(): Promise<void> {
    const side = this.side!;
    this.swapRuns = true;
    this.changed();
    this.swapping = (async () => {
      const { fs } = this;
      const { dataDir } = this.opts;
      await this.readsDone();
      await side.close();
      await this.db.close();
      try {
        await fs.rename(dataDir, this.oldPath);
      } catch (e) {
        // Nothing moved (a data directory that is a mount point cannot be renamed): the old state is
        // served again, and this node re-bootstraps in place from now on. The stream must start over.
        this.opts.log('replica: the data directory cannot be swapped; serving the previous state and re-bootstrapping in place', { error: String(e) });
        this.inPlace = true;
        this.side = null;
        await fs.rmdir(this.sidePath).catch(() => undefined);
        this.db = await this.opts.openDb(dataDir, false);
        throw new SvcError('unavailable', 'the re-bootstrapped directory could not be swapped in; starting over in place');
      }
      await fs.rename(this.sidePath, dataDir);
      await fs.fsyncDir(dirName(dataDir));
      this.side = null;
      await fs.rmdir(this.oldPath).catch((e: unknown) => this.opts.log('replica: could not remove the previous directory', { error: String(e) }));
      await fs.fsyncDir(dirName(dataDir));
      const db = await this.opts.openDb(dataDir, false);
      this.db = db;
      this.opts.log('replica: swapped in the re-bootstrapped directory');
      // Its graphs come from their files (written by the side's close) unless a file could not be used:
      // the operator sees which, once they are in.
      void db.whenIndexed({ upToNow: true }).then(() => {
        if (this.db !== db) return;
        const states = db.indexStates();
        this.opts.log('replica: graphs of the swapped-in directory ready', {
          loaded: states.filter((c) => c.graphLoads > 0).map((c) => c.name),
          rebuilt: states.filter((c) => c.graphLoads === 0 && c.rebuilds > 0).map((c) => c.name),
        });
      }, () => undefined);
    })().finally(() => {
      this.swapping = null;
      this.swapRuns = false;
      this.changed();
    });
    return this.swapping;
  }

  private async dropSide(): Promise<void> {
    if (this.side === null) return;
    const side = this.side;
    this.side = null;
    await side.close().catch(() => undefined);
    await this.fs.rmdir(this.sidePath);
  }

  async close(): Promise<void> {
    await this.swapping?.catch(() => undefined);
    await this.dropSide().catch(() => undefined);
    await this.db.close();
  }
}
