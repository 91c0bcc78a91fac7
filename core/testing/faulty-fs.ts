import * as nodePath from 'node:path';
import { Prng } from '../base/prng.js';
import { assert } from '../base/assert.js';
import type { FileHandle, FileStat, FileSystem, LockResult, OpenMode } from '../storage/fs.js';

/**
 * An in-memory FileSystem that knows what a power loss would keep. File contents become durable on
 * `sync()`; creates, renames, unlinks and mkdirs become durable on `fsyncDir()` of their directory.
 * `crash()` keeps the durable state plus a seeded choice of the unsynced rest (dropped, kept, torn to a
 * prefix), like a machine losing power. `crashAfter(n)` arms a crash at the n-th operation; from then on
 * every call fails with SimulatedCrash until `restart()`. Every choice comes from one seed: print it.
 */

export type WriteFate = 'keep' | 'drop' | 'tear' | 'random' | 'garble';
export type NamespaceFate = 'keep' | 'drop' | 'random';
export interface CrashOptions {
  /**
   * What happens to unsynced writes of each file: `tear` keeps all but the last and a prefix of the last;
   * `garble` keeps each one whole, as zeros (its pages lost, the file's length kept: a hole) or with a
   * seeded span of garbage, independently and in any order (a page cache written back out of order).
   * A function chooses by path (a file with several names, or none any more, gets the fate of '').
   */
  writes?: WriteFate | ((path: string) => WriteFate);
  /** What happens to unsynced creates/renames/unlinks: `random` keeps a random prefix of them in order. */
  namespace?: NamespaceFate;
}

export class SimulatedCrash extends Error {
  constructor() {
    super('simulated crash: the process is dead');
    this.name = 'SimulatedCrash';
  }
}

function fsError(code: string, op: string, path: string): Error {
  const e = new Error(`${code}: ${op} '${path}'`) as NodeJS.ErrnoException;
  e.code = code;
  return e;
}

type PendingWrite = { k: 'write'; pos: number; bytes: Uint8Array } | { k: 'truncate'; len: number };

class Inode {
  data: Uint8Array = new Uint8Array(0);
  len = 0;
  durable: Uint8Array = new Uint8Array(0);
  pending: PendingWrite[] = [];

  ensure(n: number): void {
    if (n <= this.data.length) return;
    const next = new Uint8Array(Math.max(n, this.data.length * 2, 64));
    next.set(this.data.subarray(0, this.len));
    this.data = next;
  }

  apply(op: PendingWrite): void {
    if (op.k === 'write') {
      this.ensure(op.pos + op.bytes.length);
      if (op.pos > this.len) this.data.fill(0, this.len, op.pos);
      this.data.set(op.bytes, op.pos);
      this.len = Math.max(this.len, op.pos + op.bytes.length);
    } else {
      if (op.len > this.len) {
        this.ensure(op.len);
        this.data.fill(0, this.len, op.len);
      }
      this.len = op.len;
    }
  }

  contents(): Uint8Array {
    return this.data.slice(0, this.len);
  }

  reset(to: Uint8Array): void {
    this.data = Uint8Array.from(to);
    this.len = to.length;
    this.durable = Uint8Array.from(to);
    this.pending = [];
  }
}

type NsOp =
  | { k: 'link'; path: string; inode: Inode }
  | { k: 'unlink'; path: string }
  | { k: 'rename'; from: string; to: string }
  | { k: 'mkdir'; path: string }
  | { k: 'rmdir'; path: string };

class Namespace {
  files = new Map<string, Inode>();
  dirs = new Set<string>(['/']);

  clone(): Namespace {
    const n = new Namespace();
    n.files = new Map(this.files);
    n.dirs = new Set(this.dirs);
    return n;
  }

  /** Applies an op if it still makes sense (an op whose premise was lost in a crash is skipped). */
  apply(op: NsOp): void {
    switch (op.k) {
      case 'link':
        if (this.dirs.has(nodePath.dirname(op.path))) this.files.set(op.path, op.inode);
        break;
      case 'unlink':
        this.files.delete(op.path);
        break;
      case 'rename': {
        const inode = this.files.get(op.from);
        if (inode && this.dirs.has(nodePath.dirname(op.to))) {
          this.files.delete(op.from);
          this.files.set(op.to, inode);
        }
        break;
      }
      case 'mkdir':
        if (this.dirs.has(nodePath.dirname(op.path))) this.dirs.add(op.path);
        break;
      case 'rmdir': {
        const prefix = op.path + '/';
        for (const p of [...this.files.keys()]) if (p.startsWith(prefix)) this.files.delete(p);
        for (const d of [...this.dirs]) if (d === op.path || d.startsWith(prefix)) this.dirs.delete(d);
        break;
      }
    }
  }
}

function opDir(op: NsOp): string {
  return nodePath.dirname(op.k === 'rename' ? op.to : op.path);
}

/** The FileSystem interface's calls: what a process makes (processView refuses them once it is dead). */
const FILE_SYSTEM_CALLS = new Set<string | symbol>(['lockExclusive', 'open', 'readFile', 'rename', 'fsyncDir', 'readdir', 'unlink', 'rmdir', 'mkdir', 'stat', 'truncate']);

export interface FaultyFsStats {
  ops: number;
  fsyncs: number;
  dirFsyncs: number;
  writes: number;
  /** Bytes returned by reads of open files (not readFile): what a reader cost. */
  readBytes: number;
}

export class FaultyFileSystem implements FileSystem {
  readonly seed: number;
  private prng: Prng;
  private current = new Namespace();
  private durable = new Namespace();
  private nsPending: NsOp[] = [];
  private generation = 0;
  private dead = false;
  private crashAt: { op: number; options: CrashOptions } | null = null;
  readonly stats: FaultyFsStats = { ops: 0, fsyncs: 0, dirFsyncs: 0, writes: 0, readBytes: 0 };
  /** Paths locked by lockExclusive; a crash releases them all, as the death of a process would. */
  private readonly locks = new Set<string>();
  /** When true every operation first yields to the event loop (lets concurrent callers interleave). */
  yieldEachOp = true;

  constructor(seed: number) {
    this.seed = seed;
    this.prng = new Prng(seed);
  }

  /** Arms a crash just before operation number `afterOps` (counting from now). */
  crashAfter(afterOps: number, options: CrashOptions = {}): void {
    this.crashAt = { op: this.stats.ops + afterOps, options };
  }

  get crashed(): boolean {
    return this.dead;
  }

  /** Power loss now: keeps the durable state and a seeded share of the rest; open handles die. */
  crash(options: CrashOptions = {}): void {
    const nsFate = options.namespace ?? 'random';
    const writesOption = options.writes ?? 'random';
    const keepNs = nsFate === 'keep' ? this.nsPending.length : nsFate === 'drop' ? 0 : this.prng.int(this.nsPending.length + 1);
    const next = this.durable.clone();
    for (const op of this.nsPending.slice(0, keepNs)) next.apply(op);
    const inodes = new Set<Inode>([...this.current.files.values(), ...next.files.values()]);
    const pathOf = new Map<Inode, string>();
    for (const [path, inode] of this.current.files) pathOf.set(inode, pathOf.has(inode) ? '' : path);
    for (const inode of inodes) {
      const survivor = new Inode();
      survivor.apply({ k: 'write', pos: 0, bytes: inode.durable });
      const writeFate = typeof writesOption === 'function' ? writesOption(pathOf.get(inode) ?? '') : writesOption;
      if (writeFate === 'garble') {
        for (const op of inode.pending) survivor.apply(this.garbled(op));
        inode.reset(survivor.contents());
        continue;
      }
      const n = inode.pending.length;
      let keep = n;
      let tearLast = false;
      if (writeFate === 'drop') keep = 0;
      else if (writeFate === 'tear') { keep = Math.max(0, n - 1); tearLast = n > 0; }
      else if (writeFate === 'random') { keep = this.prng.int(n + 1); tearLast = keep < n && this.prng.int(2) === 0; }
      for (const op of inode.pending.slice(0, keep)) survivor.apply(op);
      const torn = inode.pending[keep];
      if (tearLast && torn !== undefined && torn.k === 'write') {
        survivor.apply({ k: 'write', pos: torn.pos, bytes: torn.bytes.subarray(0, this.prng.int(torn.bytes.length)) });
      }
      inode.reset(survivor.contents());
    }
    this.durable = next;
    this.current = next.clone();
    this.nsPending = [];
    this.generation++;
    this.locks.clear();
  }

  /** An unsynced write as a `garble` crash leaves it: whole (half the time), zeros, or a span of garbage. */
  private garbled(op: PendingWrite): PendingWrite {
    if (op.k !== 'write' || op.bytes.length === 0) return op;
    const fate = this.prng.int(4);
    if (fate < 2) return op;
    if (fate === 2) return { k: 'write', pos: op.pos, bytes: new Uint8Array(op.bytes.length) };
    const bytes = Uint8Array.from(op.bytes);
    const from = this.prng.int(bytes.length);
    const to = from + 1 + this.prng.int(Math.min(512, bytes.length - from));
    for (let i = from; i < to; i++) bytes[i] = this.prng.int(256);
    return { k: 'write', pos: op.pos, bytes };
  }

  /**
   * This file system as one process sees it: once a crash ends that process, every call through the view
   * fails (SimulatedCrash), after restart() too. A killed process writes nothing more, but its promises
   * still run here: without this, work it had under way (a background checkpoint) would go on writing
   * into the next process's files. Each process (each open after a restart) takes its own view.
   */
  processView(): FileSystem {
    const generation = this.generation;
    return new Proxy(this, {
      get: (target, key, receiver) => {
        const v = Reflect.get(target, key, receiver) as unknown;
        if (typeof v !== 'function' || !FILE_SYSTEM_CALLS.has(key)) return v;
        return (...args: unknown[]) => (this.generation !== generation ? Promise.reject(new SimulatedCrash()) : (v as (...a: unknown[]) => unknown).apply(target, args));
      },
    });
  }

  /** The machine comes back: operations work again on what survived the crash. */
  restart(): void {
    this.dead = false;
    this.crashAt = null;
  }

  /** Flips one bit of a file's contents (durable and current): damage at rest. */
  flipBit(path: string, bitOffset: number): void {
    const inode = this.inodeOf(path);
    assert(bitOffset >= 0 && bitOffset < inode.len * 8, `bit ${bitOffset} is inside ${path}`);
    inode.data[bitOffset >> 3] ^= 1 << (bitOffset & 7);
    if (inode.pending.length === 0 && inode.durable.length === inode.len) inode.durable[bitOffset >> 3] ^= 1 << (bitOffset & 7);
  }

  /** Overwrites bytes (current and durable) without counting as an operation: for tamper tests. */
  poke(path: string, position: number, bytes: Uint8Array): void {
    const inode = this.inodeOf(path);
    inode.apply({ k: 'write', pos: position, bytes });
    inode.durable = inode.contents();
    inode.pending = [];
  }

  /** A file's current contents, without counting as an operation. */
  peek(path: string): Uint8Array {
    return this.inodeOf(path).contents();
  }

  /** Every file path that exists now, sorted. */
  listFiles(): string[] {
    return [...this.current.files.keys()].sort();
  }

  private inodeOf(path: string): Inode {
    const inode = this.current.files.get(nodePath.resolve('/', path));
    if (!inode) throw fsError('ENOENT', 'inode', path);
    return inode;
  }

  private async step(): Promise<void> {
    if (this.dead) throw new SimulatedCrash();
    if (this.yieldEachOp) await new Promise<void>((r) => setImmediate(r));
    if (this.dead) throw new SimulatedCrash();
    this.stats.ops++;
    if (this.crashAt !== null && this.stats.ops >= this.crashAt.op) {
      const options = this.crashAt.options;
      this.crashAt = null;
      this.crash(options);
      this.dead = true;
      throw new SimulatedCrash();
    }
  }

  /**
   * One operation: counted (step), then done in the same turn as the check that no crash came since it
   * began. A crash while it waited ends it (SimulatedCrash) instead of letting it land on the disk as
   * the crash left it, where a killed process could write nothing. (A process's calls begun after a
   * crash are refused by its processView.)
   */
  private async op<T>(fn: () => T): Promise<T> {
    const generation = this.generation;
    await this.step();
    if (this.generation !== generation) throw new SimulatedCrash();
    return fn();
  }

  private ns(op: NsOp): void {
    this.current.apply(op);
    this.nsPending.push(op);
  }

  private norm(path: string): string {
    return nodePath.resolve('/', path);
  }

  private needParent(path: string, op: string): void {
    if (!this.current.dirs.has(nodePath.dirname(path))) throw fsError('ENOENT', op, path);
  }

  /** Not counted as an operation: a lock makes nothing durable, and seeded crash points stay where they were. */
  async lockExclusive(path: string): Promise<LockResult> {
    if (this.dead) throw new SimulatedCrash();
    const key = nodePath.resolve('/', path);
    if (this.locks.has(key)) return { ok: false, holder: 'simulated' };
    this.locks.add(key);
    const generation = this.generation;
    return {
      ok: true,
      lock: {
        release: async () => {
          if (this.generation === generation) this.locks.delete(key);
        },
      },
    };
  }

  open(path: string, mode: OpenMode): Promise<FileHandle> {
    return this.op(() => {
      const p = this.norm(path);
      let inode = this.current.files.get(p);
      if (mode === 'create') {
        if (inode || this.current.dirs.has(p)) throw fsError('EEXIST', 'open', path);
        this.needParent(p, 'open');
        inode = new Inode();
        this.ns({ k: 'link', path: p, inode });
      } else if (!inode) {
        throw fsError('ENOENT', 'open', path);
      }
      return new FaultyHandle(this, inode, this.generation, mode !== 'read');
    });
  }

  /** @internal */
  async handleOp<T>(h: FaultyHandle, write: boolean, fn: () => T): Promise<T> {
    await this.step();
    if (h.generation !== this.generation) throw new SimulatedCrash();
    if (h.closed) throw fsError('EBADF', 'handle', '');
    if (write && !h.writable) throw fsError('EBADF', 'write', '');
    return fn();
  }

  /** @internal */
  countWrite(): void {
    this.stats.writes++;
  }

  /** @internal */
  countFsync(): void {
    this.stats.fsyncs++;
  }

  readFile(path: string): Promise<Uint8Array> {
    return this.op(() => {
      return this.inodeOf(path).contents();
    });
  }

  rename(from: string, to: string): Promise<void> {
    return this.op(() => {
      const f = this.norm(from);
      const t = this.norm(to);
      if (!this.current.files.has(f)) throw fsError('ENOENT', 'rename', from);
      assert(nodePath.dirname(f) === nodePath.dirname(t), 'renames stay inside one directory');
      this.ns({ k: 'rename', from: f, to: t });
    });
  }

  fsyncDir(path: string): Promise<void> {
    return this.op(() => {
      const d = this.norm(path);
      if (!this.current.dirs.has(d)) throw fsError('ENOENT', 'fsyncDir', path);
      this.stats.dirFsyncs++;
      const rest: NsOp[] = [];
      for (const op of this.nsPending) {
        if (opDir(op) === d) this.durable.apply(op);
        else rest.push(op);
      }
      this.nsPending = rest;
    });
  }

  readdir(path: string): Promise<string[]> {
    return this.op(() => {
      const d = this.norm(path);
      if (!this.current.dirs.has(d)) throw fsError('ENOENT', 'readdir', path);
      const names: string[] = [];
      for (const p of [...this.current.files.keys(), ...this.current.dirs]) {
        if (p !== d && nodePath.dirname(p) === d) names.push(nodePath.basename(p));
      }
      return names.sort();
    });
  }

  unlink(path: string): Promise<void> {
    return this.op(() => {
      const p = this.norm(path);
      if (!this.current.files.has(p)) throw fsError('ENOENT', 'unlink', path);
      this.ns({ k: 'unlink', path: p });
    });
  }

  rmdir(path: string): Promise<void> {
    return this.op(() => {
      const p = this.norm(path);
      if (this.current.dirs.has(p)) this.ns({ k: 'rmdir', path: p });
    });
  }

  mkdir(path: string, options: { exclusive?: boolean } = {}): Promise<void> {
    return this.op(() => {
      const p = this.norm(path);
      if (options.exclusive === true) {
        if (this.current.dirs.has(p) || this.current.files.has(p)) throw fsError('EEXIST', 'mkdir', path);
        if (!this.current.dirs.has(nodePath.dirname(p))) throw fsError('ENOENT', 'mkdir', path);
      }
      const missing: string[] = [];
      for (let d = p; !this.current.dirs.has(d); d = nodePath.dirname(d)) {
        if (this.current.files.has(d)) throw fsError('EEXIST', 'mkdir', path);
        missing.unshift(d);
      }
      for (const d of missing) this.ns({ k: 'mkdir', path: d });
    });
  }

  stat(path: string): Promise<FileStat | null> {
    return this.op(() => {
      const p = this.norm(path);
      if (this.current.dirs.has(p)) return { size: 0, isDirectory: true };
      const inode = this.current.files.get(p);
      return inode ? { size: inode.len, isDirectory: false } : null;
    });
  }

  truncate(path: string, length: number): Promise<void> {
    return this.op(() => {
      const inode = this.inodeOf(path);
      const op: PendingWrite = { k: 'truncate', len: length };
      inode.apply(op);
      inode.pending.push(op);
    });
  }
}

class FaultyHandle implements FileHandle {
  closed = false;

  constructor(
    private readonly fs: FaultyFileSystem,
    private readonly inode: Inode,
    readonly generation: number,
    readonly writable: boolean,
  ) {}

  read(position: number, length: number): Promise<Uint8Array> {
    return this.fs.handleOp(this, false, () => {
      const bytes = this.inode.data.slice(Math.min(position, this.inode.len), Math.min(position + length, this.inode.len));
      this.fs.stats.readBytes += bytes.length;
      return bytes;
    });
  }

  write(data: Uint8Array, position: number): Promise<void> {
    return this.fs.handleOp(this, true, () => {
      const op: PendingWrite = { k: 'write', pos: position, bytes: Uint8Array.from(data) };
      this.inode.apply(op);
      this.inode.pending.push(op);
      this.fs.countWrite();
    });
  }

  append(data: Uint8Array): Promise<void> {
    return this.fs.handleOp(this, true, () => {
      const op: PendingWrite = { k: 'write', pos: this.inode.len, bytes: Uint8Array.from(data) };
      this.inode.apply(op);
      this.inode.pending.push(op);
      this.fs.countWrite();
    });
  }

  size(): Promise<number> {
    return this.fs.handleOp(this, false, () => this.inode.len);
  }

  truncate(length: number): Promise<void> {
    return this.fs.handleOp(this, true, () => {
      const op: PendingWrite = { k: 'truncate', len: length };
      this.inode.apply(op);
      this.inode.pending.push(op);
    });
  }

  sync(): Promise<void> {
    return this.fs.handleOp(this, false, () => {
      this.inode.durable = this.inode.contents();
      this.inode.pending = [];
      this.fs.countFsync();
    });
  }

  async close(): Promise<void> {
    this.closed = true;
  }
}
