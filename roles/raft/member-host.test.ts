import { mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { encodeImageRef } from '../../core/cluster/consensus/snapshot-stream.js';
import { InsecureSealer, XChaChaSealer } from '../../core/crypto/sealer.js';
import { StorageCorruption } from '../../core/storage/errors.js';
import { NodeFileSystem } from '../../core/storage/fs.js';
import { RaftLog } from '../../core/storage/raft-log.js';
import { SealedChunkWriter } from '../../core/storage/sealed-chunks.js';
import { openMemberLog, snapshotImage } from './member-host.js';

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

describe('a consensus member whose streamed snapshot image is damaged on its disk', () => {
  it('fails the restore naming the file, the chunk\'s offset and the remedy, in the error and the log; a missing file alike', async () => {
    const dir = join(root, 'n3', 'raft');
    mkdirSync(dir, { recursive: true });
    const fs = new NodeFileSystem();
    const sealer = new XChaChaSealer(new Uint8Array(32).fill(3));
    const id = 'ab'.repeat(16);
    const path = (x: string) => join(dir, `image-${x}.img`);
    const w = await SealedChunkWriter.create(fs, path(id), sealer, id);
    for (const c of [Buffer.alloc(100, 1), Buffer.alloc(100, 2)]) await w.append(c);
    await w.finish();
    const snap = { meta: { index: 40, term: 2 }, data: encodeImageRef({ id, chunks: 2 }) };
    const read = async (s: typeof snap, lines: { message: string; detail: Record<string, unknown> }[]) => {
      const out: Buffer[] = [];
      for await (const c of snapshotImage(fs, path, sealer, s, join(root, 'n3'), (_l, message, detail) => lines.push({ message, detail }))) out.push(Buffer.from(c));
      return out;
    };
    expect(await read(snap, [])).toEqual([Buffer.alloc(100, 1), Buffer.alloc(100, 2)]);
    // A byte of the second chunk flipped at rest.
    const bytes = readFileSync(path(id));
    const second = 4 + bytes.readUInt32LE(0);
    bytes[second + 30] ^= 1;
    writeFileSync(path(id), bytes);
    const lines: { message: string; detail: Record<string, unknown> }[] = [];
    const err = await read(snap, lines).catch((x: unknown) => x);
    expect(err).toBeInstanceOf(StorageCorruption);
    const c = err as StorageCorruption;
    expect([c.file, c.offset]).toEqual([path(id), second]);
    expect(c.message).toContain('chunk 1 fails authentication');
    expect(c.message).toMatch(/snapshot at index 40 was authenticated chunk by chunk as it arrived, so it was damaged on this disk since: this member cannot restore it, stays restoring/);
    expect(c.message).toContain(`Fix: stop this member, move its data directory ${join(root, 'n3')} aside`);
    expect(lines).toHaveLength(1);
    expect(lines[0].message).toMatch(/snapshot image is damaged/);
    expect(lines[0].detail).toMatchObject({ file: path(id), offset: second, index: 40 });
    expect(String(lines[0].detail.fix)).toMatch(/empty data directory/);
    // The file gone: the same refusal.
    const gone = await read({ ...snap, data: encodeImageRef({ id: 'cd'.repeat(16), chunks: 2 }) }, []).catch((x: unknown) => x);
    expect(gone).toBeInstanceOf(StorageCorruption);
    expect((gone as StorageCorruption).message).toContain('the image file is missing');
  });
});
