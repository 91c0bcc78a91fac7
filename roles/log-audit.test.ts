import { appendFileSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { parseMasterKeyHex } from '../core/crypto/keys.js';
import { auditMacKey, RESTART_ACTION, UNKEYED_MAC_KEY, verifyAuditChain, type AuditRecord } from '../core/service/audit.js';
import { FileAuditSink } from './log-audit.js';

const MASTER_HEX = 'c3'.repeat(32);
const KEY = auditMacKey(parseMasterKeyHex(MASTER_HEX));

const dirs: string[] = [];
afterEach(() => {
  for (const d of dirs.splice(0)) rmSync(d, { recursive: true, force: true });
});

function file(): string {
  const d = mkdtempSync(join(tmpdir(), 'svc-audit-'));
  dirs.push(d);
  return join(d, 'audit.jsonl');
}

const rec = (i: number): AuditRecord => ({
  ts: '2024-05-06T07:08:09.000Z', key: 'writer', action: 'upsert', resource: `collection/c${i}`, outcome: 'ok', status: 200, request_id: `r${i}`, remote: '127.0.0.1',
});

function write(path: string, from: number, n: number, masterKeyHex: string | null = MASTER_HEX): string[] {
  const warnings: string[] = [];
  const sink = new FileAuditSink(path, { masterKeyHex, onWarning: (m) => warnings.push(m) });
  for (let i = from; i < from + n; i++) sink.append(rec(i));
  sink.close();
  return warnings;
}

describe('FileAuditSink', () => {
  it('continues the chain across restarts: the whole file verifies with the master key', () => {
    const path = file();
    expect(write(path, 0, 3)).toEqual([]);
    expect(write(path, 3, 2)).toEqual([]);
    expect(write(path, 5, 1)).toEqual([]);
    expect(verifyAuditChain(readFileSync(path, 'utf8'), KEY)).toEqual({ ok: true, lines: 6 });
    const text = readFileSync(path, 'utf8');
    expect(text).not.toContain(MASTER_HEX);
    expect(text).not.toContain(Buffer.from(KEY).toString('hex'));
  });

  it('an edited last line is not continued: a warning, a restart line, and the verifier reports the edit', () => {
    const path = file();
    write(path, 0, 3);
    const lines = readFileSync(path, 'utf8').split('\n');
    lines[2] = lines[2].replace('"outcome":"ok"', '"outcome":"denied"');
    writeFileSync(path, lines.join('\n'));
    const warnings = write(path, 3, 2);
    expect(warnings).toHaveLength(1);
    expect(warnings[0]).toMatch(/new chain segment/);
    expect(warnings[0]).not.toContain(MASTER_HEX);
    const after = readFileSync(path, 'utf8').trimEnd().split('\n');
    expect(JSON.parse(after[3])).toMatchObject({ action: RESTART_ACTION, chain: 'restart' });
    expect(verifyAuditChain(after.join('\n'), KEY)).toMatchObject({ ok: false, line: 3, restarts: [4] });
  });

  it('a line torn by a crash is closed off, and a new segment starts after it', () => {
    const path = file();
    write(path, 0, 2);
    appendFileSync(path, '{"ts":"2024-05-06T07:08:09.000Z","key":"wri');
    expect(write(path, 2, 1)).toHaveLength(1);
    const v = verifyAuditChain(readFileSync(path, 'utf8'), KEY);
    expect(v).toMatchObject({ ok: false, line: 3, restarts: [4] });
    expect(readFileSync(path, 'utf8').trimEnd().split('\n')).toHaveLength(5);
  });

  it('a log of the former hash-chain format is not continued with the key', () => {
    const path = file();
    writeFileSync(path, `${JSON.stringify({ ...rec(0), prev_hash: '0'.repeat(64) })}\n`);
    expect(write(path, 1, 1)).toHaveLength(1);
    expect(verifyAuditChain(readFileSync(path, 'utf8'), KEY)).toMatchObject({ ok: false, line: 1, restarts: [2] });
  });

  it('without a master key (SVC_INSECURE) the chain is unkeyed: only the public key verifies it', () => {
    const path = file();
    write(path, 0, 2, null);
    write(path, 2, 1, null);
    expect(verifyAuditChain(readFileSync(path, 'utf8'), UNKEYED_MAC_KEY)).toEqual({ ok: true, lines: 3 });
    expect(verifyAuditChain(readFileSync(path, 'utf8'), KEY)).toMatchObject({ ok: false, line: 1 });
  });
});
