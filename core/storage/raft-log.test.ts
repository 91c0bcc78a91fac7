import { describe, expect, it } from 'vitest';
import { mkdtemp, readdir, readFile, rm, stat, truncate, writeFile, cp } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Prng } from '../base/prng.js';
import { InsecureSealer, XChaChaSealer } from '../crypto/sealer.js';
import { randomDataKey } from '../crypto/keys.js';
import { MemoryStorage, type Storage } from '../cluster/raft/index.js';
import { FaultyFileSystem, SimulatedCrash } from '../testing/faulty-fs.js';
import { StorageCorruption } from './errors.js';
import { NodeFileSystem } from './fs.js';
import { RaftLog, type RaftLogUpdate } from './raft-log.js';
import { RaftLogCore } from './raft-log-core.js';
import { encodeBatch, encodeSnapshotFile, raftLogFileName, raftLogHeader, raftSnapshotFileName, type RaftRecord } from './raft-log-format.js';
import type { Sealer } from '../crypto/sealer.js';
import { crc } from './format.js';

const quiet = (): void => {};
const sealer = new XChaChaSealer(randomDataKey());

/** Everything raft can read of a Storage, as comparable data. */
function dump(s: Storage): unknown {
  const first = s.firstIndex();
  const last = s.lastIndex();
  const hex = (b: Uint8Array): string => Buffer.from(b).toString('hex');
  const snap = s.snapshot();
  return {
    hard: s.hardState(), first, last, baseTerm: s.term(first - 1),
    snap: { meta: snap.meta, data: hex(snap.data) },
    entries: s.entries(first, last + 1, Number.MAX_SAFE_INTEGER).map((e) => `${e.index}/${e.term}/${hex(e.data)}`),
  };
}

type Op =
  | { k: 'save'; u: RaftLogUpdate }
  | { k: 'snapshot'; index: number; data: Uint8Array }
  | { k: 'compact'; index: number };

const bytes = (prng: Prng, max: number): Uint8Array => Uint8Array.from({ length: prng.int(max + 1) }, () => prng.int(256));
const vote = (prng: Prng): string | null => [null, 'n1', 'n2', 'n3'][prng.int(4)];

/** A random operation a host could legally ask of its storage, given the state so far (the model's). */
function nextOp(prng: Prng, m: MemoryStorage): Op {
  const hard = m.hardState();
  const last = m.lastIndex();
  const snapIndex = m.snapshot().meta.index;
  const r = prng.int(20);
  if (r < 11) {
    // Appends start anywhere after the commit index: at the end, or over a conflicting tail.
    const start = hard.commit + 1 + prng.int(last - hard.commit + 1);
    const term = Math.max(hard.term, m.term(start - 1) ?? 0) + prng.int(2);
    const entries = Array.from({ length: 1 + prng.int(5) }, (_, k) => ({ index: start + k, term, data: bytes(prng, 60) }));
    const end = start + entries.length - 1;
    const hardState = prng.int(3) === 0 ? null : { term, vote: vote(prng), commit: hard.commit + prng.int(end - hard.commit + 1) };
    return { k: 'save', u: { entries, hardState } };
  }
  if (r < 14) return { k: 'save', u: { hardState: { term: hard.term + prng.int(2), vote: vote(prng), commit: hard.commit + prng.int(last - hard.commit + 1) } } };
  if (r < 15) {
    const index = Math.max(last, hard.commit) + prng.int(6);
    const term = Math.max(hard.term, m.term(last) ?? 0) + prng.int(2);
    return { k: 'save', u: { snapshot: { meta: { index, term }, data: bytes(prng, 200) }, hardState: { term, vote: vote(prng), commit: index } } };
  }
  if (r < 18 && hard.commit > snapIndex) return { k: 'snapshot', index: snapIndex + 1 + prng.int(hard.commit - snapIndex), data: bytes(prng, 200) };
  if (snapIndex > m.firstIndex() - 1) return { k: 'compact', index: m.firstIndex() + prng.int(snapIndex - m.firstIndex() + 1) };
  return { k: 'save', u: { hardState: { ...hard, commit: hard.commit } } };
}

function applyModel(m: MemoryStorage, op: Op): void {
  if (op.k === 'snapshot') m.createSnapshot(op.index, op.data);
  else if (op.k === 'compact') m.compact(op.index);
  else {
    if (op.u.snapshot) m.applySnapshot(op.u.snapshot);
    m.append(op.u.entries ?? []);
    if (op.u.hardState) m.setHardState(op.u.hardState);
  }
}

async function applyLog(log: RaftLog, op: Op): Promise<void> {
  if (op.k === 'snapshot') await log.createSnapshot(op.index, op.data);
  else if (op.k === 'compact') await log.compact(op.index);
  else await log.save(op.u);
}

describe('RaftLog', () => {
  it('is a raft Storage, and reads back after a reopen what it was given', async () => {
    const fs = new FaultyFileSystem(1);
    fs.yieldEachOp = false;
    const opts = { sealer, log: quiet, segmentBytesMax: 500 };
    const log = await RaftLog.open(fs, '/d/raft', opts);
    const storage: Storage = log;
    const model = new MemoryStorage();
    const prng = new Prng(1);
    for (let k = 0; k < 400; k++) {
      const op = nextOp(prng, model);
      applyModel(model, op);
      await applyLog(log, op);
      expect(dump(storage), `op ${k}`).toEqual(dump(model));
    }
    await log.close();
    const again = await RaftLog.open(fs, '/d/raft', opts);
    expect(dump(again)).toEqual(dump(model));
    // Compaction deleted whole files: the directory holds a bounded number of them.
    expect((await fs.readdir('/d/raft')).length).toBeLessThan(40);
    await again.close();
  });

  it('drops a conflicting tail durably: a reopen does not resurrect it', async () => {
    const fs = new FaultyFileSystem(2);
    const opts = { sealer: new InsecureSealer(), log: quiet };
    const log = await RaftLog.open(fs, '/r', opts);
    const e = (index: number, term: number, s: string) => ({ index, term, data: new Uint8Array(Buffer.from(s)) });
    await log.save({ entries: [e(1, 1, 'a'), e(2, 1, 'b'), e(3, 1, 'c')], hardState: { term: 1, vote: 'n1', commit: 1 } });
    await log.save({ entries: [e(2, 2, 'B')], hardState: { term: 2, vote: null, commit: 1 } });
    await log.close();
    const again = await RaftLog.open(fs, '/r', opts);
    expect(again.lastIndex()).toBe(2);
    expect(again.term(2)).toBe(2);
    expect(Buffer.from(again.entries(2, 3, 10)[0].data).toString()).toBe('B');
    expect(again.hardState()).toEqual({ term: 2, vote: null, commit: 1 });
    await again.close();
  });

  it('recovers exactly an acknowledged state at 300 random crash points (power loss: unsynced writes dropped, kept or torn)', async () => {
    let afterAcks = 0;
    for (let point = 0; point < 300; point++) {
      const seed = 5000 + point;
      const fs = new FaultyFileSystem(seed);
      fs.yieldEachOp = false;
      const prng = new Prng(seed);
      const model = new MemoryStorage();
      const opts = { sealer, log: quiet, segmentBytesMax: 300 + prng.int(2000) };
      let acked = dump(model);
      let inFlight = acked;
      fs.crashAfter(1 + prng.int(400), {});
      let ops = 0;
      try {
        const log = await RaftLog.open(fs, '/d/raft', opts);
        for (; ops < 200; ops++) {
          const op = nextOp(prng, model);
          applyModel(model, op);
          inFlight = dump(model);
          await applyLog(log, op);
          acked = inFlight;
        }
        await log.close();
      } catch (e) {
        if (!(e instanceof SimulatedCrash)) throw new Error(`seed ${seed}: ${String(e)}`, { cause: e });
      }
      if (ops > 0) afterAcks++;
      if (!fs.crashed) fs.crash();
      fs.restart();
      const log = await RaftLog.open(fs, '/d/raft', opts).catch((e: unknown) => {
        throw new Error(`seed ${seed}: reopen failed: ${String(e)}`, { cause: e });
      });
      const got = dump(log);
      // The crash may have come after the in-flight write was durable, never in between.
      if (JSON.stringify(got) !== JSON.stringify(inFlight)) expect(got, `seed ${seed}`).toEqual(acked);
      // And the recovered log takes writes again, which a further reopen keeps.
      const next = { index: log.lastIndex() + 1, term: log.hardState().term + 1, data: new Uint8Array([1, 2, 3]) };
      await log.save({ entries: [next], hardState: { term: next.term, vote: null, commit: log.hardState().commit } });
      const before = dump(log);
      await log.close();
      const again = await RaftLog.open(fs, '/d/raft', opts);
      expect(dump(again), `seed ${seed} after recovery`).toEqual(before);
      await again.close();
    }
    expect(afterAcks).toBeGreaterThan(250);
  });

  it('cuts a batch torn at any byte offset back to the batch before it (real files)', async () => {
    const dir = await mkdtemp(join(tmpdir(), 'svc-rlog-'));
    try {
      const fs = new NodeFileSystem();
      const opts = { sealer, log: quiet, segmentBytesMax: 1 << 20 };
      const model = new MemoryStorage();
      const prng = new Prng(42);
      const log = await RaftLog.open(fs, join(dir, 'raft'), opts);
      for (let k = 0; k < 30; k++) {
        const op = nextOp(prng, model);
        if (op.k !== 'save' || op.u.snapshot) continue;
        applyModel(model, op);
        await applyLog(log, op);
      }
      const durable = dump(model);
      const file = join(dir, 'raft', (await readdir(join(dir, 'raft'))).find((n) => n.endsWith('.rlog'))!);
      const sizeBefore = (await stat(file)).size;
      const last = { entries: [1, 2, 3].map((k) => ({ index: model.lastIndex() + k, term: model.hardState().term + 1, data: bytes(prng, 80) })), hardState: { term: model.hardState().term + 1, vote: 'n2', commit: model.hardState().commit } };
      await log.save(last);
      await log.close();
      const sizeAfter = (await stat(file)).size;
      const full = await readFile(file);
      for (let trial = 0; trial < 40; trial++) {
        const cutAt = sizeBefore + prng.int(sizeAfter - sizeBefore);
        const copy = await mkdtemp(join(tmpdir(), 'svc-rlog-torn-'));
        try {
          await cp(join(dir, 'raft'), copy, { recursive: true });
          const torn = join(copy, file.slice(file.lastIndexOf('/') + 1));
          if (trial % 2 === 0) await truncate(torn, cutAt);
          else await writeFile(torn, Buffer.concat([full.subarray(0, cutAt), Buffer.alloc(sizeAfter - cutAt)])); // zero-filled tail
          const reopened = await RaftLog.open(fs, copy, opts);
          expect(dump(reopened), `cut at ${cutAt}`).toEqual(durable);
          await reopened.close();
          expect((await stat(torn)).size).toBe(sizeBefore);
        } finally {
          await rm(copy, { recursive: true, force: true });
        }
      }
    } finally {
      await rm(dir, { recursive: true, force: true });
    }
  });

  it('writes a commit-only update without fsync when asked: lost at power loss, durable after the next synced write', async () => {
    for (const fate of ['drop', 'tear', 'keep'] as const) {
      const fs = new FaultyFileSystem(9);
      const opts = { sealer, log: quiet };
      const log = await RaftLog.open(fs, '/r', opts);
      const e = (index: number) => ({ index, term: 2, data: new Uint8Array(30).fill(index) });
      await log.save({ entries: [e(1), e(2), e(3)], hardState: { term: 2, vote: 'n1', commit: 1 } });
      const fsyncs = fs.stats.fsyncs;
      await log.save({ hardState: { term: 2, vote: 'n1', commit: 3 }, sync: false });
      expect(fs.stats.fsyncs).toBe(fsyncs);
      fs.crash({ writes: fate });
      fs.restart();
      const again = await RaftLog.open(fs, '/r', opts);
      expect(again.lastIndex()).toBe(3);
      expect([1, 3]).toContain(again.hardState().commit);
      if (fate === 'drop') expect(again.hardState().commit).toBe(1);
      // A change of vote or term is never left unsynced, whatever the caller says.
      const before = fs.stats.fsyncs;
      await again.save({ hardState: { term: 3, vote: null, commit: 2 }, sync: false });
      expect(fs.stats.fsyncs).toBe(before + 1);
      await again.save({ hardState: { term: 3, vote: null, commit: 3 }, sync: false });
      await again.save({ entries: [e(4)] });
      fs.crash({ writes: 'drop' });
      fs.restart();
      const third = await RaftLog.open(fs, '/r', opts);
      expect(third.hardState()).toEqual({ term: 3, vote: null, commit: 3 });
      expect(third.lastIndex()).toBe(4);
      await third.close();
    }
  });

  it('fsyncs a file that ends with an unsynced batch before the next file begins: a power loss then leaves every finished file whole', async () => {
    const e = (index: number) => ({ index, term: 2, data: new Uint8Array(30).fill(index) });
    // The first file's size after the first save: the commit-only batch then takes it past the bound.
    const probe = new FaultyFileSystem(1);
    const p = await RaftLog.open(probe, '/r', { sealer, log: quiet });
    await p.save({ entries: [e(1), e(2), e(3)], hardState: { term: 2, vote: 'n1', commit: 1 } });
    const first = (await probe.readFile('/r/00000000000000000001.rlog')).length;
    await p.close();
    for (const fate of ['garble', 'tear', 'drop', 'keep'] as const) {
      for (const reopened of [false, true]) {
        const fs = new FaultyFileSystem(7);
        const opts = { sealer, log: quiet, segmentBytesMax: first + 1 };
        let log = await RaftLog.open(fs, '/r', opts);
        await log.save({ entries: [e(1), e(2), e(3)], hardState: { term: 2, vote: 'n1', commit: 1 } });
        await log.save({ hardState: { term: 2, vote: 'n1', commit: 3 }, sync: false });
        if (reopened) {
          // A process killed here (not a power loss): its unsynced bytes are in the page cache, unsynced.
          await log.close();
          log = await RaftLog.open(fs, '/r', opts);
        }
        // Past the bound: the next batch begins the second file.
        await log.save({ entries: [e(4)] });
        expect(await fs.readdir('/r')).toContain('00000000000000000002.rlog');
        fs.crash({ writes: fate });
        fs.restart();
        const again = await RaftLog.open(fs, '/r', opts);
        expect(again.lastIndex(), `${fate}${reopened ? ', reopened' : ''}`).toBe(4);
        expect(again.hardState().commit).toBe(3);
        await again.close();
      }
    }
  });

  it('refuses to open on damage inside a complete batch (a flipped bit), naming the file', async () => {
    const fs = new FaultyFileSystem(3);
    const opts = { sealer, log: quiet };
    const log = await RaftLog.open(fs, '/r', opts);
    const e = (index: number) => ({ index, term: 1, data: new Uint8Array(20) });
    await log.save({ entries: [e(1), e(2)], hardState: { term: 1, vote: null, commit: 0 } });
    await log.save({ entries: [e(3)], hardState: { term: 1, vote: null, commit: 2 } });
    await log.close();
    fs.flipBit('/r/00000000000000000001.rlog', (16 + 40) * 8 + 3);
    await expect(RaftLog.open(fs, '/r', opts)).rejects.toThrow(StorageCorruption);
  });

  describe('opens at recovery only the entries it still holds', () => {
    /** A log file of these batches, each sealed by its own sealer, recovered with `sealer`. */
    const recover = (batches: [Sealer, RaftRecord[]][], opener: Sealer = sealer): RaftLogCore => {
      const bytes = Buffer.concat([raftLogHeader(), ...batches.map(([s, rs]) => encodeBatch(s, rs))]);
      const snap = encodeSnapshotFile(sealer, 2, 1, new Uint8Array([7]));
      return RaftLogCore.recover(opener, '/r', {
        logs: [{ name: raftLogFileName(1), bytes }], others: [],
        readSnapshot: (n) => (n === raftSnapshotFileName(2, 1) ? snap : null),
      }).core;
    };
    const entry = (index: number, fill: number): RaftRecord => ({ kind: 'entry', index, term: 1, data: new Uint8Array(8).fill(fill) });
    const state = (commit: number): RaftRecord => ({ kind: 'state', term: 1, vote: 'n1', commit });
    // An entry sealed under another key: its checksums hold, only its seal tells (a file from elsewhere).
    const other = new XChaChaSealer(randomDataKey());

    it('an entry the log holds is authenticated: one sealed under another key refuses the open', () => {
      expect(() => recover([[sealer, [entry(1, 1), state(0)]], [other, [entry(2, 2)]], [sealer, [entry(3, 3), state(3)]]]))
        .toThrow(/entry record 2\/1 failed authentication/);
    });

    it('an entry below a later compaction is dropped unopened; the entries held after it read back', () => {
      let opened = 0;
      const counting: Sealer = { encrypted: true, seal: (p, a) => sealer.seal(p, a), open: (x, a) => { opened++; return sealer.open(x, a); } };
      const core = recover([
        [sealer, [entry(1, 1), state(0)]], [other, [entry(2, 2)]], [sealer, [entry(3, 3), entry(4, 4), state(3)]],
        [sealer, [{ kind: 'snapshot', index: 2, term: 1 }, { kind: 'compact', index: 2, term: 1 }]],
      ], counting);
      expect([core.firstIndex(), core.lastIndex()]).toEqual([3, 4]);
      expect(core.entries(3, 5, 10).map((e) => [e.index, [...e.data]])).toEqual([[3, new Array(8).fill(3)], [4, new Array(8).fill(4)]]);
      // Entries 3 and 4, the two states, the snapshot and compaction records, the snapshot file: not entries 1 and 2.
      expect(opened).toBe(2 + 2 + 2 + 1);
    });

    const held = (core: RaftLogCore) => core.entries(core.firstIndex(), core.lastIndex() + 1, 100).map((e) => [e.index, e.term, e.data[0]]);
    const entryOf = (index: number, term: number, fill: number): RaftRecord => ({ kind: 'entry', index, term, data: new Uint8Array(8).fill(fill) });

    it('a torn last batch is dropped with its unopened entries; the whole batches before it read back', () => {
      const bytes = Buffer.concat([raftLogHeader(), encodeBatch(sealer, [entry(1, 1), state(1)]), encodeBatch(other, [entry(2, 2), entry(3, 3)])]);
      const r = RaftLogCore.recover(sealer, '/r', { logs: [{ name: raftLogFileName(1), bytes: bytes.subarray(0, bytes.length - 3) }], others: [], readSnapshot: () => null });
      expect(r.cut).not.toBeNull();
      expect(held(r.core)).toEqual([[1, 1, 1]]);
    });

    it('a conflicting tail\'s entry is authenticated before it truncates: a forged one (checksums recomputed) refuses the open', () => {
      // The overwritten entry is never opened; its replacement is.
      const ok = recover([[sealer, [entry(1, 1), state(0)]], [other, [entry(2, 2)]], [sealer, [entryOf(2, 2, 9), { kind: 'state', term: 2, vote: 'n1', commit: 2 }]]]);
      expect(held(ok)).toEqual([[1, 1, 1], [2, 2, 9]]);
      // Entries 1..6 held, compacted through 3. A frame whose header says index 2 (any key: its body is
      // never opened unless it is held) would drop 4..6 and then be compacted away itself.
      const recs: RaftRecord[][] = [[1, 2, 3, 4, 5, 6].map((i) => entry(i, i)).concat(state(3)), [{ kind: 'snapshot', index: 3, term: 1 }], [{ kind: 'compact', index: 3, term: 1 }]];
      const snapshots = { [raftSnapshotFileName(3, 1)]: encodeSnapshotFile(sealer, 3, 1, new Uint8Array([1])) };
      const open = (forged: Buffer[]) => RaftLogCore.recover(sealer, '/r', {
        logs: [{ name: raftLogFileName(1), bytes: Buffer.concat([raftLogHeader(), encodeBatch(sealer, recs[0]), ...forged, encodeBatch(sealer, recs[1]), encodeBatch(sealer, recs[2])]) }],
        others: [], readSnapshot: (n) => snapshots[n] ?? null,
      }).core;
      expect(held(open([])).map((e) => e[0])).toEqual([4, 5, 6]);
      const forged = encodeBatch(other, [entry(1, 1)]);
      forged.writeBigUInt64LE(2n, 12);
      forged.writeUInt32LE(crc(forged.subarray(4, 32)), 0);
      expect(() => open([forged])).toThrow(/entry record 2\/1 failed authentication/);
    });

    it('the same index in two files: the later file\'s entry is the one held', () => {
      const file1 = Buffer.concat([raftLogHeader(), encodeBatch(sealer, [entry(1, 1), entry(2, 2), state(0)])]);
      const file2 = Buffer.concat([raftLogHeader(), encodeBatch(sealer, [state(0), entryOf(2, 2, 7), { kind: 'state', term: 2, vote: 'n1', commit: 2 }])]);
      const core = RaftLogCore.recover(sealer, '/r', { logs: [{ name: raftLogFileName(1), bytes: file1 }, { name: raftLogFileName(2), bytes: file2 }], others: [], readSnapshot: () => null }).core;
      expect(held(core)).toEqual([[1, 1, 1], [2, 2, 7]]);
    });

    it('an installed snapshot drops the entries before it unopened', () => {
      const snap = encodeSnapshotFile(sealer, 5, 1, new Uint8Array([1]));
      const bytes = Buffer.concat([raftLogHeader(), encodeBatch(other, [entry(1, 1)]), encodeBatch(sealer, [state(1)]), encodeBatch(sealer, [{ kind: 'install', index: 5, term: 1 }, entry(6, 6), state(6)])]);
      const core = RaftLogCore.recover(sealer, '/r', { logs: [{ name: raftLogFileName(1), bytes }], others: [], readSnapshot: (n) => (n === raftSnapshotFileName(5, 1) ? snap : null) }).core;
      expect(held(core)).toEqual([[6, 1, 6]]);
    });
  });
});
