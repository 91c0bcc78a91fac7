import * as fsp from 'node:fs/promises';
import { constants as FS } from 'node:fs';
import * as nodePath from 'node:path';
import { createRequire } from 'node:module';

/**
 * The subset of a file system that storage needs. Everything durable goes through `sync()` on a file and
 * `fsyncDir()` on its directory after a create, rename or unlink: until then a crash may lose it.
 * A real implementation (NodeFileSystem) and a fault-injecting one (core/testing/faulty-fs.ts) exist.
 */
export interface FileHandle {
  /** Reads up to `length` bytes at `position`; returns the bytes actually read (shorter at EOF). */
  read(position: number, length: number): Promise<Uint8Array>;
  /** Writes all of `data` at `position` (pwrite). */
  write(data: Uint8Array, position: number): Promise<void>;
  /** Writes all of `data` at the current end of the file. */
  append(data: Uint8Array): Promise<void>;
  size(): Promise<number>;
  truncate(length: number): Promise<void>;
  /** fsync: the file's contents (not its directory entry) are durable when this resolves. */
  sync(): Promise<void>;
  close(): Promise<void>;
}

export type OpenMode =
  | 'read'      // existing file, read only
  | 'readwrite' // existing file
  | 'create';   // a new file; fails if it exists

export interface FileStat {
  size: number;
  isDirectory: boolean;
}

/** An exclusive lock on a path, held until `release()` or until the holding process dies. */
export interface PathLock {
  release(): Promise<void>;
}

/** A lock taken, or the word of who holds it (a pid, as its lock file says; '' when it says nothing). */
export type LockResult = { ok: true; lock: PathLock } | { ok: false; holder: string };

export interface FileSystem {
  /**
   * Takes an exclusive, non-blocking lock on `path` (created if missing) and writes this process's id
   * into it. Another open of the same path, in this process or another, fails until release; a holder
   * that dies releases it with no clean-up (the lock belongs to the open file, not to the file's content).
   */
  lockExclusive(path: string): Promise<LockResult>;
  open(path: string, mode: OpenMode): Promise<FileHandle>;
  readFile(path: string): Promise<Uint8Array>;
  rename(from: string, to: string): Promise<void>;
  /** fsync of a directory: creates, renames and unlinks inside it are durable when this resolves. */
  fsyncDir(path: string): Promise<void>;
  /** Names (not paths) in a directory, sorted. */
  readdir(path: string): Promise<string[]>;
  unlink(path: string): Promise<void>;
  /** Removes a directory and everything below it; no error when it does not exist. */
  rmdir(path: string): Promise<void>;
  /**
   * Creates a directory and missing parents; no error when it exists. With `exclusive`, creates exactly
   * this one new directory: its parent must exist, and any entry already there (a file, a directory, a
   * symbolic link, a dangling one included) fails with EEXIST rather than being followed or reused.
   */
  mkdir(path: string, options?: { exclusive?: boolean }): Promise<void>;
  /** null when nothing is there. */
  stat(path: string): Promise<FileStat | null>;
  truncate(path: string, length: number): Promise<void>;
}

export const joinPath = (...parts: string[]): string => nodePath.join(...parts);
export const dirName = (p: string): string => nodePath.dirname(p);
export const baseName = (p: string): string => nodePath.basename(p);

/** Creates a directory (and missing parents) durably: each new entry's parent directory is fsynced. */
export async function mkdirDurable(fs: FileSystem, path: string): Promise<void> {
  const missing: string[] = [];
  for (let d = path; (await fs.stat(d)) === null; d = dirName(d)) {
    missing.unshift(d);
    if (dirName(d) === d) break;
  }
  if (missing.length === 0) return;
  await fs.mkdir(path);
  for (const d of missing) await fs.fsyncDir(dirName(d));
}

/** Writes a whole file durably and atomically: temp file, fsync, rename, fsync of the directory. */
export async function writeFileAtomic(fs: FileSystem, path: string, data: Uint8Array): Promise<void> {
  const tmp = `${path}.tmp`;
  if (await fs.stat(tmp)) await fs.unlink(tmp);
  const h = await fs.open(tmp, 'create');
  try {
    await h.write(data, 0);
    await h.sync();
  } finally {
    await h.close();
  }
  await fs.rename(tmp, path);
  await fs.fsyncDir(dirName(path));
}

class NodeFileHandle implements FileHandle {
  constructor(private readonly h: fsp.FileHandle, private end: number) {}

  async read(position: number, length: number): Promise<Uint8Array> {
    const buf = Buffer.allocUnsafe(length);
    let got = 0;
    while (got < length) {
      const { bytesRead } = await this.h.read(buf, got, length - got, position + got);
      if (bytesRead === 0) break;
      got += bytesRead;
    }
    return buf.subarray(0, got);
  }

  async write(data: Uint8Array, position: number): Promise<void> {
    let done = 0;
    while (done < data.length) {
      const { bytesWritten } = await this.h.write(data, done, data.length - done, position + done);
      done += bytesWritten;
    }
    this.end = Math.max(this.end, position + data.length);
  }

  append(data: Uint8Array): Promise<void> {
    return this.write(data, this.end);
  }

  async size(): Promise<number> {
    return (await this.h.stat()).size;
  }

  async truncate(length: number): Promise<void> {
    await this.h.truncate(length);
    this.end = length;
  }

  sync(): Promise<void> {
    return this.h.sync();
  }

  close(): Promise<void> {
    return this.h.close();
  }
}

/**
 * A whole-file lock through fs-native-extensions (Node has no file lock of its own): an open file
 * description lock on Linux (fcntl F_OFD_SETLK), flock(2) on macOS. A Node-API addon shipped prebuilt
 * in the package, so the same install loads on every Node.js version (20, 22, 24) with no compiler and
 * no headers. Loaded once, on the first lock.
 */
interface FileLocks {
  /** True when taken; false when another open file description holds it (EAGAIN). */
  tryLock(fd: number, opts?: { shared?: boolean }): boolean;
}
let fileLocks: FileLocks | null = null;
function locks(): FileLocks {
  fileLocks ??= createRequire(import.meta.url)('fs-native-extensions') as FileLocks;
  return fileLocks;
}

/** The real thing: node:fs/promises with real fsync of files and directories. */
export class NodeFileSystem implements FileSystem {
  /**
   * The lock belongs to the open file description: a second open of the same file, even in this
   * process, is refused, and the kernel releases it when the holder exits or is killed. The pid in the
   * file is only the message for whoever is refused; a stale pid left by a dead holder means nothing.
   */
  async lockExclusive(path: string): Promise<LockResult> {
    const h = await fsp.open(path, FS.O_RDWR | FS.O_CREAT, 0o600);
    let taken: boolean;
    try {
      taken = locks().tryLock(h.fd);
    } catch (e) {
      await h.close();
      throw e;
    }
    if (!taken) {
      const holder = (await h.readFile('utf8').catch(() => '')).trim().slice(0, 32);
      await h.close();
      return { ok: false, holder };
    }
    try {
      await h.truncate(0);
      await h.write(`${process.pid}\n`, 0);
    } catch (e) {
      await h.close();
      throw e;
    }
    let released = false;
    return {
      ok: true,
      lock: {
        release: async () => {
          if (released) return;
          released = true;
          await h.close();
        },
      },
    };
  }

  async open(path: string, mode: OpenMode): Promise<FileHandle> {
    const flags = mode === 'read' ? FS.O_RDONLY : mode === 'readwrite' ? FS.O_RDWR : FS.O_RDWR | FS.O_CREAT | FS.O_EXCL;
    const h = await fsp.open(path, flags, 0o600);
    const size = (await h.stat()).size;
    return new NodeFileHandle(h, size);
  }

  async readFile(path: string): Promise<Uint8Array> {
    return new Uint8Array(await fsp.readFile(path));
  }

  rename(from: string, to: string): Promise<void> {
    return fsp.rename(from, to);
  }

  async fsyncDir(path: string): Promise<void> {
    const h = await fsp.open(path, FS.O_RDONLY | FS.O_DIRECTORY);
    try {
      await h.sync();
    } finally {
      await h.close();
    }
  }

  async readdir(path: string): Promise<string[]> {
    return (await fsp.readdir(path)).sort();
  }

  unlink(path: string): Promise<void> {
    return fsp.unlink(path);
  }

  rmdir(path: string): Promise<void> {
    return fsp.rm(path, { recursive: true, force: true });
  }

  async mkdir(path: string, options: { exclusive?: boolean } = {}): Promise<void> {
    await fsp.mkdir(path, { recursive: options.exclusive !== true, mode: 0o700 });
  }

  async stat(path: string): Promise<FileStat | null> {
    try {
      const s = await fsp.stat(path);
      return { size: s.size, isDirectory: s.isDirectory() };
    } catch (e) {
      if ((e as NodeJS.ErrnoException).code === 'ENOENT') return null;
      throw e;
    }
  }

  truncate(path: string, length: number): Promise<void> {
    return fsp.truncate(path, length);
  }
}
