import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { InsecureSealer } from '../../core/crypto/sealer.js';
import { StorageCorruption } from '../../core/storage/errors.js';
import { NodeFileSystem } from '../../core/storage/fs.js';
import { RaftLog } from '../../core/storage/raft-log.js';
import { openMemberLog } from './member-host.js';

const root = mkdtempSync(join(tmpdir(), 'svc-member-log-'));
afterAll(() => rmSync(root, { recursive: true, force: true }));

describe('a consensus member whose log is damaged inside a complete batch', () => {
  it('refuses to start, naming the file, the offset and the remedy (an empty data directory), in the error and the log', async () => {
    const dataDir = join(root, 'n2');
    const fs = new NodeFileSystem();
    const opts = { sealer: new InsecureSealer(), log: () => undefined };
    const log = await RaftLog.open(fs, join(dataDir, 'raft'), opts);
    const e = (index: number) => ({ index, term: 1, data: new Uint8Array(64).fill(index) });
    await log.save({ entries: [e(1), e(2)], hardState: { term: 1, vote: 'n1', commit: 0 } });
    await log.save({ entries: [e(3)], hardState: { term: 1, vote: 'n1', commit: 2 } });
    await log.close();
    // A byte inside the first entry's body: the first batch is complete (a later one follows), so this
    // is no torn tail and is not cut.
    const file = join(dataDir, 'raft', '00000000000000000001.rlog');
    const bytes = readFileSync(file);
    bytes[16 + 32 + 10] ^= 0x10;
    writeFileSync(file, bytes);

    const lines: { message: string; detail: Record<string, unknown> }[] = [];
    const err = await openMemberLog(fs, dataDir, opts, (_level, message, detail) => lines.push({ message, detail })).catch((x: unknown) => x);
    expect(err).toBeInstanceOf(StorageCorruption);
    const c = err as StorageCorruption;
    expect(c.file).toBe(file);
    expect(c.offset).toBe(16);
    expect(c.message).toContain(`storage corruption in ${file} at offset 16: frame body checksum mismatch`);
    // Why it is refused, and what the operator does.
    expect(c.message).toMatch(/cut only after its last complete batch \(a torn write\), never here: this damage may be synced data.*acknowledged/);
    expect(c.message).toContain(`Fix: stop this member, move its data directory ${dataDir} aside`);
    expect(c.message).toMatch(/start the member again with the same SVC_RAFT_NODE_ID and SVC_RAFT_MEMBERS on an empty data directory at that path: it gets the group's data from the leader/);
    expect(c.message).toContain(`Never empty only ${join(dataDir, 'raft')}`);
    expect(lines).toHaveLength(1);
    expect(lines[0].message).toMatch(/log is damaged/);
    expect(lines[0].detail).toMatchObject({ file, offset: 16, damage: 'frame body checksum mismatch', dataDir });
    expect(String(lines[0].detail.fix)).toMatch(/empty data directory/);
    // The refusal changed nothing on disk: the operator keeps the evidence.
    expect(readFileSync(file).equals(bytes)).toBe(true);
  });
});
