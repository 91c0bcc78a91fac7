import { createHash } from 'node:crypto';

/**
 * The audit trail (CONTRACT.md section 3): one JSON line per mutating or administrative operation and per
 * denial. Each line carries `prev_hash`, the SHA-256 (hex) of the previous line's exact text, so a line
 * edited or deleted in the middle breaks the chain. (Cutting the tail of the file is not detectable from
 * the file alone: keep the last hash elsewhere if that matters.)
 */
export type AuditOutcome = 'ok' | 'denied' | 'error';

export interface AuditRecord {
  ts: string;
  key: string;
  action: string;
  resource: string;
  outcome: AuditOutcome;
  status: number;
  request_id: string;
  remote: string;
}

/** Receives records in order; the file writer (roles/) and the logger are sinks. Must not throw. */
export interface AuditSink {
  append(record: AuditRecord): void;
}

export const GENESIS_HASH = '0'.repeat(64);

export function sha256Hex(text: string): string {
  return createHash('sha256').update(text, 'utf8').digest('hex');
}

/** Turns records into chained lines (without the newline). Field order is fixed so lines are stable. */
export class AuditChain {
  private prevHash: string;

  constructor(prevHash: string = GENESIS_HASH) {
    this.prevHash = prevHash;
  }

  line(r: AuditRecord): string {
    const text = JSON.stringify({
      ts: r.ts, key: r.key, action: r.action, resource: r.resource, outcome: r.outcome,
      status: r.status, request_id: r.request_id, remote: r.remote, prev_hash: this.prevHash,
    });
    this.prevHash = sha256Hex(text);
    return text;
  }
}

/** The hash a writer continues from, given the file's current text (its last non-empty line). */
export function lastHashOf(text: string): string {
  const lines = text.split('\n').filter((l) => l.length > 0);
  return lines.length === 0 ? GENESIS_HASH : sha256Hex(lines[lines.length - 1]);
}

export type AuditVerdict =
  | { ok: true; lines: number }
  | { ok: false; line: number; reason: string };

/** Checks every line's prev_hash against the line before it; reports the first broken line (1-based). */
export function verifyAuditChain(text: string): AuditVerdict {
  const lines = text.split('\n');
  if (lines.length > 0 && lines[lines.length - 1] === '') lines.pop();
  let expected = GENESIS_HASH;
  for (let i = 0; i < lines.length; i++) {
    let parsed: unknown;
    try {
      parsed = JSON.parse(lines[i]);
    } catch {
      return { ok: false, line: i + 1, reason: 'not a JSON object' };
    }
    const prev = (parsed as { prev_hash?: unknown } | null)?.prev_hash;
    if (typeof prev !== 'string') return { ok: false, line: i + 1, reason: 'no prev_hash field' };
    if (prev !== expected) {
      return { ok: false, line: i + 1, reason: 'prev_hash does not match the previous line (a line was edited, inserted or deleted)' };
    }
    expected = sha256Hex(lines[i]);
  }
  return { ok: true, lines: lines.length };
}
