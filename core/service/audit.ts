import { createHash, createHmac, timingSafeEqual } from 'node:crypto';
import { deriveKey } from '../crypto/keys.js';

/**
 * The audit trail (CONTRACT.md section 3): one JSON line per mutating or administrative operation and per
 * denial, keyed and chained. Each line ends with `mac`, the HMAC-SHA256 (hex) of the previous line's MAC
 * and this line's text without the `mac` field, keyed with a key derived from the master key (HKDF, label
 * `audit`). So every line, the last one included, is checked; nobody without the master key can forge a
 * line or recompute the chain after an edit. Cutting lines off the end of the file is still not detectable
 * from the file alone: keep the last MAC elsewhere if that matters.
 *
 * A chain segment starts from GENESIS_MAC (32 zero bytes): the first line of a file, or a line the writer
 * adds with `"chain":"restart"` when it found the file's tail damaged at startup. A restart line is
 * authentic (it carries a MAC) but the verifier always reports it as a failure, because the lines before
 * it can no longer be vouched for.
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
  /** The end of a stream (action `replicate_end`): why it ended and what it sent. */
  stream?: StreamEnd;
  /** Why the server did something on its own (an autoscale decision), in a sentence. */
  reason?: string;
}

/** Why a Replicate stream ended, and how much it sent (events, record bytes, the last seq it carried). */
export interface StreamEnd {
  reason: 'client_cancel' | 'leader_closing' | 'retention_exceeded' | 'error';
  events: number;
  bytes: number;
  last_seq: number;
}

/** Receives records in order; the file writer (roles/) and the logger are sinks. Must not throw. */
export interface AuditSink {
  append(record: AuditRecord): void;
}

export const MAC_BYTES = 32;
export const GENESIS_MAC: Uint8Array = new Uint8Array(MAC_BYTES);

/** The `action` of the line a writer adds when it starts a new chain segment over a damaged tail. */
export const RESTART_ACTION = 'audit_chain_restart';

/** The audit MAC key of a master key: HKDF with its own label, so it never equals a key used for data. */
export function auditMacKey(masterKey: Uint8Array): Uint8Array {
  return deriveKey(masterKey, 'audit');
}

/**
 * The MAC key of a log written without a master key (SVC_INSECURE=true). It is public: such a chain
 * catches accidental damage, not tampering. `svc admin verify-audit --insecure` checks with it.
 */
export const UNKEYED_MAC_KEY: Uint8Array = new Uint8Array(createHash('sha256').update('svc/audit/unkeyed/v1').digest());

function mac(key: Uint8Array, prev: Uint8Array, content: string): Uint8Array {
  return new Uint8Array(createHmac('sha256', key).update(prev).update(content, 'utf8').digest());
}

/** `{...}` + the MAC -> `{...,"mac":"<hex>"}`: the MAC is always the last field. */
function seal(content: string, m: Uint8Array): string {
  return `${content.slice(0, -1)},"mac":"${Buffer.from(m).toString('hex')}"}`;
}

const MAC_SUFFIX = /,"mac":"([0-9a-f]{64})"\}$/;

/** Splits a line into the text its MAC covers and the MAC; null when it has no well-formed `mac` at the end. */
function unseal(line: string): { content: string; mac: Uint8Array } | null {
  const m = MAC_SUFFIX.exec(line);
  if (m === null) return null;
  return { content: `${line.slice(0, m.index)}}`, mac: new Uint8Array(Buffer.from(m[1], 'hex')) };
}

function recordText(r: AuditRecord, extra: Record<string, string> = {}): string {
  return JSON.stringify({
    ts: r.ts, key: r.key, action: r.action, resource: r.resource, outcome: r.outcome,
    status: r.status, request_id: r.request_id, remote: r.remote,
    ...(r.stream !== undefined ? { reason: r.stream.reason, events: r.stream.events, bytes: r.stream.bytes, last_seq: r.stream.last_seq } : {}),
    ...(r.reason !== undefined && r.stream === undefined ? { reason: r.reason } : {}),
    ...extra,
  });
}

/** Turns records into keyed, chained lines (without the newline). Field order is fixed so lines are stable. */
export class AuditChain {
  private prev: Uint8Array;

  /** `prev`: the MAC of the line this chain continues (GENESIS_MAC for a new file). */
  constructor(private readonly key: Uint8Array, prev: Uint8Array = GENESIS_MAC) {
    this.prev = prev;
  }

  line(r: AuditRecord): string {
    const content = recordText(r);
    this.prev = mac(this.key, this.prev, content);
    return seal(content, this.prev);
  }

  /** The first line of a new segment, written when the file's tail did not verify at startup. */
  restart(ts: string): string {
    const content = recordText({
      ts, key: '-', action: RESTART_ACTION, resource: 'audit', outcome: 'error', status: 0, request_id: '', remote: '',
    }, { chain: 'restart' });
    this.prev = mac(this.key, GENESIS_MAC, content);
    return seal(content, this.prev);
  }
}

function isRestart(content: string): boolean {
  try {
    return (JSON.parse(content) as { chain?: unknown }).chain === 'restart';
  } catch {
    return false;
  }
}

/**
 * Where a writer continues, given the file's complete lines (at least its last two): the last line's
 * MAC when that line verifies against the one before it (or starts a segment), else null (damaged tail).
 */
export function continueFrom(key: Uint8Array, lines: readonly string[]): Uint8Array | null {
  if (lines.length === 0) return GENESIS_MAC;
  const last = unseal(lines[lines.length - 1]);
  if (last === null) return null;
  let prev: Uint8Array | null = GENESIS_MAC;
  if (!isRestart(last.content) && lines.length > 1) prev = unseal(lines[lines.length - 2])?.mac ?? null;
  if (prev === null) return null;
  return equal(mac(key, prev, last.content), last.mac) ? last.mac : null;
}

function equal(a: Uint8Array, b: Uint8Array): boolean {
  return a.length === b.length && timingSafeEqual(a, b);
}

const FIELDS = ['ts', 'key', 'action', 'resource', 'outcome', 'status', 'request_id', 'remote'] as const;

export type AuditVerdict =
  | { ok: true; lines: number }
  | { ok: false; line: number; reason: string; restarts: number[] };

/**
 * Checks every line's MAC, the last one included, against the previous line's MAC; reports the first
 * bad line (1-based). `restarts` lists the lines where the writer started a new segment (each one is a
 * failure too: it found a damaged tail there).
 */
export function verifyAuditChain(text: string, key: Uint8Array): AuditVerdict {
  const lines = text.split('\n');
  if (lines.length > 0 && lines[lines.length - 1] === '') lines.pop();
  let prev: Uint8Array | null = GENESIS_MAC;
  let first: { line: number; reason: string } | null = null;
  const restarts: number[] = [];
  for (let i = 0; i < lines.length; i++) {
    const reason = checkLine(lines[i], key, prev);
    const sealed = unseal(lines[i]);
    if (reason === 'restart') {
      restarts.push(i + 1);
      first ??= { line: i + 1, reason: 'the server started a new chain segment here: it found the log\'s tail damaged at startup, so the lines before this one cannot be vouched for' };
      prev = sealed!.mac;
    } else if (reason !== null) {
      first ??= { line: i + 1, reason };
      // After a break, later lines are checked against their own predecessor so a later restart is found.
      prev = sealed?.mac ?? null;
    } else {
      prev = sealed!.mac;
    }
  }
  if (first === null) return { ok: true, lines: lines.length };
  return { ok: false, ...first, restarts };
}

/** null when the line verifies, 'restart' for an authentic restart line, else why it does not. */
function checkLine(line: string, key: Uint8Array, prev: Uint8Array | null): string | null {
  let parsed: unknown;
  try {
    parsed = JSON.parse(line);
  } catch {
    return 'not a JSON object (a torn or edited line)';
  }
  if (typeof parsed !== 'object' || parsed === null || Array.isArray(parsed)) return 'not a JSON object';
  const missing = FIELDS.filter((f) => !(f in parsed));
  if (missing.length > 0) return `missing the field${missing.length > 1 ? 's' : ''} ${missing.join(', ')}`;
  const sealed = unseal(line);
  if (sealed === null) return 'no mac field at the end of the line (not written by this version, or edited)';
  if (isRestart(sealed.content)) {
    return equal(mac(key, GENESIS_MAC, sealed.content), sealed.mac) ? 'restart' : 'the mac does not match: a forged restart line, or another key';
  }
  if (prev !== null && equal(mac(key, prev, sealed.content), sealed.mac)) return null;
  return 'the mac does not match: this line was edited, inserted, moved or forged, a line before it was deleted, or the log was written with another key';
}
