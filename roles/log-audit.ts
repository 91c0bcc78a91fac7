import { closeSync, fstatSync, fsyncSync, openSync, readSync, writeSync } from 'node:fs';
import { AuditChain, lastHashOf, type AuditRecord, type AuditSink } from '../core/service/audit.js';

/**
 * The SVC_AUDIT_LOG writer: append-only JSON Lines, hash-chained (core/service/audit.ts).
 *
 * Durability policy: each line is written with one write(2) as it happens, so a crash of the process loses
 * nothing; fsync runs at most once per `fsyncIntervalMs` (default 1 s) and on close, so a power loss can
 * lose at most the last interval. Restarting continues the chain from the file's last line.
 */
export class FileAuditSink implements AuditSink {
  private readonly fd: number;
  private readonly chain: AuditChain;
  private dirty = false;
  private readonly timer: NodeJS.Timeout;

  constructor(path: string, fsyncIntervalMs = 1000) {
    this.fd = openSync(path, 'a+', 0o600);
    this.chain = new AuditChain(lastHashOf(tail(this.fd)));
    this.timer = setInterval(() => this.flush(), fsyncIntervalMs);
    this.timer.unref();
  }

  append(record: AuditRecord): void {
    writeSync(this.fd, `${this.chain.line(record)}\n`);
    this.dirty = true;
  }

  flush(): void {
    if (!this.dirty) return;
    this.dirty = false;
    fsyncSync(this.fd);
  }

  close(): void {
    clearInterval(this.timer);
    this.flush();
    closeSync(this.fd);
  }
}

/** The last 64 KiB of the file: enough to hold its last line (a line is far shorter). */
function tail(fd: number): string {
  const size = fstatSync(fd).size;
  const len = Math.min(size, 65_536);
  const buf = Buffer.alloc(len);
  if (len > 0) readSync(fd, buf, 0, len, size - len);
  return buf.toString('utf8');
}

/** Fans one record out to several sinks (file, tests). */
export function teeSinks(...sinks: AuditSink[]): AuditSink {
  return { append: (r) => { for (const s of sinks) s.append(r); } };
}
