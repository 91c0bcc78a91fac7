import { closeSync, fstatSync, fsyncSync, openSync, readSync, writeSync } from 'node:fs';
import { parseMasterKeyHex } from '../core/crypto/keys.js';
import { AuditChain, auditMacKey, continueFrom, UNKEYED_MAC_KEY, type AuditRecord, type AuditSink } from '../core/service/audit.js';

/**
 * The SVC_AUDIT_LOG writer: append-only JSON Lines, keyed and chained (core/service/audit.ts).
 *
 * Durability policy: each line is written with one write(2) as it happens, so a crash of the process loses
 * nothing; fsync runs at most once per `fsyncIntervalMs` (default 1 s) and on close, so a power loss can
 * lose at most the last interval.
 *
 * Restarting continues the chain from the file's last line once that line's MAC verifies. When it does
 * not (a torn last line after a power loss, an edit, a log of an older version or of another key), the
 * writer warns and starts a new segment with a `"chain":"restart"` line; `svc admin verify-audit`
 * reports that line as a failure from then on, so the damage is never silently absorbed.
 */
export interface AuditFileOptions {
  /** The 64-hex master key; null writes an unkeyed chain (SVC_INSECURE only). */
  masterKeyHex: string | null;
  fsyncIntervalMs?: number;
  /** Told when the file's tail did not verify and a new segment was started. Never given a key. */
  onWarning?: (message: string) => void;
  /** The restart line's timestamp. */
  now?: () => Date;
}

export class FileAuditSink implements AuditSink {
  private readonly fd: number;
  private readonly chain: AuditChain;
  private dirty = false;
  private readonly timer: NodeJS.Timeout;

  constructor(path: string, opts: AuditFileOptions) {
    const key = opts.masterKeyHex === null ? UNKEYED_MAC_KEY : auditMacKey(parseMasterKeyHex(opts.masterKeyHex));
    this.fd = openSync(path, 'a+', 0o600);
    const text = tail(this.fd);
    const torn = text.length > 0 && !text.endsWith('\n');
    const lines = text.split('\n').filter((l) => l.length > 0);
    // The tail's first line may be cut by the 64 KiB window: only its last two lines are looked at.
    const prev = torn ? null : continueFrom(key, lines.slice(-2));
    if (prev !== null) {
      this.chain = new AuditChain(key, prev);
    } else {
      this.chain = new AuditChain(key);
      opts.onWarning?.(`audit log ${path}: its last line does not verify (${torn ? 'torn by a crash' : 'edited, damaged, or written by another version or key'}); `
        + 'starting a new chain segment. svc admin verify-audit will report the break: check the file and rotate it.');
      writeSync(this.fd, `${torn ? '\n' : ''}${this.chain.restart((opts.now?.() ?? new Date()).toISOString())}\n`);
      this.dirty = true;
    }
    this.timer = setInterval(() => this.flush(), opts.fsyncIntervalMs ?? 1000);
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

/** The last 64 KiB of the file: enough to hold its last two lines (a line is far shorter). */
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
