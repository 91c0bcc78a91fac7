import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { AuditChain, continueFrom, GENESIS_MAC, UNKEYED_MAC_KEY, auditMacKey, verifyAuditChain, type AuditRecord } from './audit.js';

const MASTER = new Uint8Array(32).fill(0xa1);
const KEY = auditMacKey(MASTER);
const OTHER = auditMacKey(new Uint8Array(32).fill(0xb2));

const text = (lines: readonly string[]): string => lines.map((l) => `${l}\n`).join('');

const recordArb: fc.Arbitrary<AuditRecord> = fc.record({
  ts: fc.constant('2024-01-02T03:04:05.000Z'),
  key: fc.string({ maxLength: 8 }),
  action: fc.constantFrom('upsert', 'delete', 'createCollection', 'authenticate'),
  resource: fc.string({ maxLength: 12 }),
  outcome: fc.constantFrom('ok', 'denied', 'error'),
  status: fc.constantFrom(200, 201, 401, 403, 404, 500),
  request_id: fc.uuid(),
  remote: fc.constantFrom('127.0.0.1', 'stdio', ''),
});

function chained(key: Uint8Array, records: readonly AuditRecord[]): string[] {
  const chain = new AuditChain(key);
  return records.map((r) => chain.line(r));
}

/**
 * Any change to a chain is reported at the first line where the changed file stops being a prefix of the
 * genuine one; a changed file that is a prefix (lines cut off the end) is, by design, intact.
 */
function expectedBreak(original: readonly string[], changed: readonly string[]): number | null {
  for (let i = 0; i < changed.length; i++) if (i >= original.length || changed[i] !== original[i]) return i + 1;
  return null;
}

type Change =
  | { kind: 'edit'; at: number; pos: number; ch: string }
  | { kind: 'delete'; at: number }
  | { kind: 'insert'; at: number; copyOf: number | null; forged: AuditRecord }
  | { kind: 'swap'; a: number; b: number }
  | { kind: 'rekey' };

const changeArb: fc.Arbitrary<Change> = fc.oneof(
  fc.record({ kind: fc.constant('edit' as const), at: fc.nat(), pos: fc.nat(), ch: fc.constantFrom('x', '0', 'f', ' ', '"', '}', 'é') }),
  fc.record({ kind: fc.constant('delete' as const), at: fc.nat() }),
  fc.record({ kind: fc.constant('insert' as const), at: fc.nat(), copyOf: fc.option(fc.nat()), forged: recordArb }),
  fc.record({ kind: fc.constant('swap' as const), a: fc.nat(), b: fc.nat() }),
  fc.record({ kind: fc.constant('rekey' as const) }),
);

/** Applies a change; null when it would change nothing (the property then has nothing to check). */
function apply(lines: readonly string[], records: readonly AuditRecord[], c: Change): string[] | null {
  const out = [...lines];
  const n = lines.length;
  switch (c.kind) {
    case 'edit': {
      // Any line, the last one included.
      const i = c.at % n;
      const p = c.pos % lines[i].length;
      if (lines[i][p] === c.ch) return null;
      out[i] = lines[i].slice(0, p) + c.ch + lines[i].slice(p + 1);
      return out;
    }
    case 'delete': {
      // An inner line (or the first): deleting the last one is the undetectable tail cut.
      if (n < 2) return null;
      out.splice(c.at % (n - 1), 1);
      return out;
    }
    case 'insert': {
      // A replayed genuine line, or a line sealed by someone without the key (here: with another key).
      const line = c.copyOf !== null ? lines[c.copyOf % n] : new AuditChain(OTHER).line(c.forged);
      out.splice(c.at % (n + 1), 0, line);
      return out;
    }
    case 'swap': {
      const a = c.a % n;
      const b = c.b % n;
      if (a === b) return null;
      [out[a], out[b]] = [out[b], out[a]];
      return out;
    }
    case 'rekey':
      // The whole chain recomputed, consistently, by someone with another key.
      return chained(OTHER, records);
  }
}

describe('keyed audit chain', () => {
  it('an intact chain verifies, every line counted', () => {
    fc.assert(fc.property(fc.array(recordArb, { maxLength: 12 }), (records) => {
      expect(verifyAuditChain(text(chained(KEY, records)), KEY)).toEqual({ ok: true, lines: records.length });
    }));
  });

  it('any edit (the last line too), inner deletion, insertion, reorder or re-keyed chain is reported at its line', () => {
    fc.assert(fc.property(fc.array(recordArb, { minLength: 1, maxLength: 10 }), changeArb, (records, change) => {
      const lines = chained(KEY, records);
      const changed = apply(lines, records, change);
      fc.pre(changed !== null);
      const want = expectedBreak(lines, changed!);
      // Every change generated here leaves something that is not a prefix of the genuine file.
      expect(want).not.toBeNull();
      const v = verifyAuditChain(text(changed!), KEY);
      expect(v).toMatchObject({ ok: false, line: want });
    }), { numRuns: 500 });
  });

  it('the end of a Replicate stream is a line with its reason and what it sent, sealed like any other', () => {
    const r: AuditRecord = {
      ts: '2024-01-02T03:04:05.000Z', key: 'admin', action: 'replicate_end', resource: 'database', outcome: 'error', status: 503,
      request_id: 'r1', remote: '10.0.0.2:5000', stream: { reason: 'retention_exceeded', events: 12, bytes: 3400, last_seq: 99 },
    };
    const lines = chained(KEY, [r]);
    expect(JSON.parse(lines[0])).toMatchObject({ action: 'replicate_end', reason: 'retention_exceeded', events: 12, bytes: 3400, last_seq: 99 });
    expect(verifyAuditChain(text(lines), KEY)).toEqual({ ok: true, lines: 1 });
    const edited = lines[0].replace('"events":12', '"events":13');
    expect(verifyAuditChain(text([edited]), KEY).ok).toBe(false);
  });

  it('an edit of only the last line is reported (a plain hash chain missed it)', () => {
    const records = fc.sample(recordArb, { numRuns: 3, seed: 1 });
    const lines = chained(KEY, records);
    lines[2] = lines[2].replace(/"outcome":"\w+"/, '"outcome":"ok"').replace(/"status":\d+/, '"status":200').replace(/"key":"[^"]*"/, '"key":"someone"');
    expect(verifyAuditChain(text(lines), KEY)).toMatchObject({ ok: false, line: 3 });
  });

  it('cutting lines off the end is not detectable from the file alone (documented)', () => {
    const lines = chained(KEY, fc.sample(recordArb, { numRuns: 4, seed: 2 }));
    expect(verifyAuditChain(text(lines.slice(0, 2)), KEY)).toEqual({ ok: true, lines: 2 });
  });

  it('a chain checked with another key fails at line 1; an unkeyed chain verifies only with the public key', () => {
    const records = fc.sample(recordArb, { numRuns: 3, seed: 3 });
    expect(verifyAuditChain(text(chained(KEY, records)), OTHER)).toMatchObject({ ok: false, line: 1 });
    const unkeyed = text(chained(UNKEYED_MAC_KEY, records));
    expect(verifyAuditChain(unkeyed, KEY)).toMatchObject({ ok: false, line: 1 });
    expect(verifyAuditChain(unkeyed, UNKEYED_MAC_KEY)).toEqual({ ok: true, lines: 3 });
  });

  it('lines carry the contract fields and a mac, never a key', () => {
    const [line] = chained(KEY, [{ ts: 't', key: 'k', action: 'upsert', resource: 'r', outcome: 'ok', status: 200, request_id: 'q', remote: '' }]);
    expect(Object.keys(JSON.parse(line))).toEqual(['ts', 'key', 'action', 'resource', 'outcome', 'status', 'request_id', 'remote', 'mac']);
    expect(line).not.toContain(Buffer.from(KEY).toString('hex'));
    expect(line).not.toContain(Buffer.from(MASTER).toString('hex'));
  });

  it('a writer continues from a last line that verifies, and refuses one that does not', () => {
    const records = fc.sample(recordArb, { numRuns: 4, seed: 4 });
    const lines = chained(KEY, records);
    expect(continueFrom(KEY, [])).toEqual(GENESIS_MAC);
    const prev = continueFrom(KEY, lines.slice(-2));
    expect(prev).not.toBeNull();
    const more = new AuditChain(KEY, prev!).line(records[0]);
    expect(verifyAuditChain(text([...lines, more]), KEY)).toEqual({ ok: true, lines: 5 });
    const edited = [...lines.slice(0, -1), lines[3].replace('"ts":"2', '"ts":"1')];
    expect(continueFrom(KEY, edited.slice(-2))).toBeNull();
    expect(continueFrom(OTHER, lines.slice(-2))).toBeNull();
  });

  it('a restart segment verifies on its own but the file is still reported broken, at the first bad line', () => {
    const records = fc.sample(recordArb, { numRuns: 4, seed: 5 });
    const lines = chained(KEY, records);
    lines[3] = lines[3].replace('"ts":"2', '"ts":"1'); // the tail the writer found damaged
    const chain = new AuditChain(KEY);
    const after = [chain.restart('2024-01-03T00:00:00.000Z'), chain.line(records[0])];
    const v = verifyAuditChain(text([...lines, ...after]), KEY);
    expect(v).toMatchObject({ ok: false, line: 4, restarts: [5] });
    // Deleting everything before the restart does not make the file pass: the restart itself is reported.
    expect(verifyAuditChain(text(after), KEY)).toMatchObject({ ok: false, line: 1, restarts: [1] });
    // Nobody without the key can write a restart line.
    const forged = new AuditChain(OTHER).restart('2024-01-03T00:00:00.000Z');
    expect(verifyAuditChain(text([...lines.slice(0, 3), forged]), KEY)).toMatchObject({ ok: false, line: 4, restarts: [] });
  });
});
