import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import type { ReplicationEvent } from '../base/model.js';
import { Database } from './database.js';
import { buildIndexInline } from './rebuild.js';
import { decodeRecord, encodeRecord, ReplicationKind, SNAPSHOT_CHUNK_BYTES_MAX } from './replication.js';

const dirs: string[] = [];
afterEach(() => { for (const d of dirs.splice(0)) rmSync(d, { recursive: true, force: true }); });

async function open(): Promise<Database> {
  const d = mkdtempSync(join(tmpdir(), 'svc-repl-'));
  dirs.push(d);
  return Database.open({ dataDir: d, masterKey: new Uint8Array(32).fill(7), buildIndex: buildIndexInline });
}

/** Reads events until `stop` says so, then aborts the stream. */
async function take(db: Database, body: object | undefined, stop: (e: ReplicationEvent[]) => boolean): Promise<ReplicationEvent[]> {
  const ac = new AbortController();
  const got: ReplicationEvent[] = [];
  for await (const e of db.replicate(body, ac.signal)) {
    got.push(e);
    if (stop(got)) ac.abort();
  }
  return got;
}

const kinds = (es: ReplicationEvent[]) => es.map((e) => decodeRecord(e.record).kind);

describe('replication records', () => {
  it('round-trip, and unknown versions or kinds are refused', () => {
    const r = encodeRecord(ReplicationKind.commit, 'abc', new Uint8Array([2, 0, 0, 0, 0]));
    expect(decodeRecord(r)).toEqual({ kind: 'commit', keyId: 'abc', op: { t: 'delete', ids: [] } });
    expect(() => decodeRecord(Uint8Array.from([2, 4, 0, 0]))).toThrow(/version/);
    expect(() => decodeRecord(Uint8Array.from([1, 9, 0, 0]))).toThrow(/kind/);
  });
});

describe('Database.replicate', () => {
  it('snapshot (collections, then points in bounded chunks), then commits; aborting ends the stream', async () => {
    const db = await open();
    await db.createCollection({ name: 'c', dim: 256, metric: 'l2', index: 'flat' });
    const points = Array.from({ length: 2500 }, (_, i) => ({ id: `p${i}`, vector: Array.from({ length: 256 }, () => i) }));
    for (let i = 0; i < points.length; i += 1000) await db.upsert('c', { points: points.slice(i, i + 1000) });
    const snap = await take(db, undefined, (es) => kinds(es).includes('snapshotEnd'));
    expect(kinds(snap)[0]).toBe('snapshotBegin');
    expect(kinds(snap).at(-1)).toBe('snapshotEnd');
    const chunks = snap.filter((e) => decodeRecord(e.record).op?.t === 'upsert');
    expect(chunks.length).toBeGreaterThan(2);
    expect(Math.max(...chunks.map((e) => e.record.length))).toBeLessThanOrEqual(SNAPSHOT_CHUNK_BYTES_MAX + 64);
    const ids = new Set(chunks.flatMap((e) => (decodeRecord(e.record).op as { points: { id: string }[] }).points.map((p) => p.id)));
    expect(ids.size).toBe(2500);
    const base = snap.at(-1)!.seq;

    // Resume after the snapshot: only later commits, in order.
    const live = take(db, { after_seq: base }, (es) => es.length === 2);
    await db.delete('c', 'p1');
    await db.upsert('c', { points: [{ id: 'n', vector: Array.from({ length: 256 }, () => 1) }] });
    const tail = await live;
    expect(tail.map((e) => e.seq)).toEqual([base + 1, base + 2]);
    expect(tail.map((e) => decodeRecord(e.record).op?.t)).toEqual(['delete', 'upsert']);
    await db.close();
  });

  it('refuses a malformed after_seq; one it no longer has (or never had) gets a full snapshot', async () => {
    const db = await open();
    for (const bad of [{ after_seq: -1 }, { after_seq: 1.5 }, { after_seq: '3' }, { other: 1 }]) {
      await expect(take(db, bad, () => true)).rejects.toMatchObject({ code: 'invalid_argument' });
    }
    expect(kinds(await take(db, { after_seq: 1_000_000 }, () => true))).toEqual(['snapshotBegin']);
    await db.close();
  });
});
