/**
 * Replicate end to end: an admin client reads the leader's stream over gRPC (a logical snapshot, then
 * the live commit tail) and, applying it to a model of a follower, ends with the leader's state.
 *
 * The record layout (version 2, see core/collection/replication.ts) is decoded here by hand, as a
 * follower in another language would: u8 version | u8 kind | u16 LE key-id length | key id | body, and
 * bodies in the WAL's op encoding (snapshot_begin's: the leader's history id; a heartbeat's: the leader's last seq).
 */
import { join } from 'node:path';
import { Metadata, status, type ServiceError } from '@grpc/grpc-js';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { SvcGrpc } from './grpc-client.js';
import { api, MASTER, serve, tempDir, type Server } from './harness.js';

const ADMIN = 'repl-admin-key';
const SCOPED_ADMIN = 'repl-scoped-admin';
const KINDS: Record<number, string> = { 1: 'snapshot_begin', 2: 'snapshot', 3: 'snapshot_end', 4: 'commit', 5: 'heartbeat' };

type Op =
  | { t: 'upsert'; points: { id: string; vector: number[]; payload: unknown }[] }
  | { t: 'delete'; ids: string[] }
  | { t: 'create_collection'; uid: string; name: string; params: { dim: number } }
  | { t: 'drop_collection'; uid: string };

interface Rec { seq: number; kind: string; keyId: string; op: Op | null; history?: string }

/** The WAL op encoding (tags 1 upsert, 2 delete, 64 create, 65 drop), little-endian. */
function decodeOp(b: Buffer): Op {
  let at = 0;
  const u8 = () => b[at++];
  const u16 = () => { const v = b.readUInt16LE(at); at += 2; return v; };
  const u32 = () => { const v = b.readUInt32LE(at); at += 4; return v; };
  const str16 = () => { const n = u16(); const s = b.toString('utf8', at, at + n); at += n; return s; };
  const blob32 = () => { const n = u32(); const s = b.toString('utf8', at, at + n); at += n; return s; };
  const tag = u8();
  if (tag === 1) {
    const points = [];
    for (let i = u32(); i > 0; i--) {
      const id = str16();
      const dim = u32();
      const vector = Array.from({ length: dim }, (_, j) => b.readFloatLE(at + 4 * j));
      at += 4 * dim;
      const len = b.readUInt32LE(at);
      const payload = len === 0xffffffff ? (at += 4, null) : JSON.parse(blob32());
      points.push({ id, vector, payload });
    }
    return { t: 'upsert', points };
  }
  if (tag === 2) {
    const ids = [];
    for (let i = u32(); i > 0; i--) ids.push(str16());
    return { t: 'delete', ids };
  }
  if (tag === 64) return { t: 'create_collection', uid: str16(), name: str16(), params: JSON.parse(blob32()) };
  if (tag === 65) return { t: 'drop_collection', uid: str16() };
  throw new Error(`unknown op tag ${tag}`);
}

function decodeEvent(e: { seq: number | string; record: Buffer }): Rec {
  const r = e.record;
  expect(r[0]).toBe(2);
  const keyLen = r.readUInt16LE(2);
  const body = r.subarray(4 + keyLen);
  if (KINDS[r[1]] === 'snapshot_begin') return { seq: Number(e.seq ?? 0), kind: 'snapshot_begin', keyId: 'db', op: null, history: body.toString('utf8') };
  // A heartbeat's body is the leader's last seq (u64 LE); its seq, how far the stream has read.
  if (KINDS[r[1]] === 'heartbeat') return { seq: Number(e.seq ?? 0), kind: 'heartbeat', keyId: 'db', op: null };
  return { seq: Number(e.seq ?? 0), kind: KINDS[r[1]], keyId: r.toString('utf8', 4, 4 + keyLen), op: body.length === 0 ? null : decodeOp(body) };
}

/** A follower in miniature: collections by uid, points by id; applies snapshot and tail alike. */
class Follower {
  readonly cols = new Map<string, { name: string; points: Map<string, number[]> }>();
  seq = 0;
  apply(r: Rec): void {
    if (r.kind === 'snapshot_begin') this.cols.clear();
    if (r.kind === 'snapshot_end' || r.kind === 'commit') this.seq = r.seq;
    const op = r.op;
    if (op === null) return;
    if (op.t === 'create_collection') {
      if (!this.cols.has(op.uid)) this.cols.set(op.uid, { name: op.name, points: new Map() });
    } else if (op.t === 'drop_collection') {
      this.cols.delete(op.uid);
    } else {
      const c = this.cols.get(r.keyId);
      expect(c, `records of collection ${r.keyId} come after its create`).toBeDefined();
      if (op.t === 'upsert') for (const p of op.points) c!.points.set(p.id, p.vector);
      else for (const id of op.ids) c!.points.delete(id);
    }
  }
  /** name -> sorted [id, vector] */
  state(): Record<string, [string, number[]][]> {
    const out: Record<string, [string, number[]][]> = {};
    for (const c of this.cols.values()) out[c.name] = [...c.points.entries()].sort((a, b) => (a[0] < b[0] ? -1 : 1));
    return out;
  }
}

/** An open stream: every decoded record as it arrives, and a way to wait for a condition. */
/** A Replicate stream; heartbeats (the leader's last seq, every 250 ms) are counted, not kept in `recs`. */
function openStream(g: SvcGrpc, key: string, resume?: { afterSeq: number; history: string }) {
  const md = new Metadata();
  md.set('authorization', `Bearer ${key}`);
  const stream = (g.client as any).Replicate(resume === undefined ? {} : { after_seq: resume.afterSeq, history: resume.history }, md);
  const recs: Rec[] = [];
  const beats: number[] = [];
  let error: ServiceError | undefined;
  stream.on('data', (e: { seq: number; record: Buffer }) => {
    const r = decodeEvent(e);
    if (r.kind === 'heartbeat') beats.push(r.seq);
    else recs.push(r);
  });
  stream.on('error', (e: ServiceError) => { error = e; });
  return {
    recs,
    beats,
    error: () => error,
    async until(what: string, ok: () => boolean): Promise<void> {
      for (let i = 0; i < 300 && !ok() && error === undefined; i++) await new Promise((r) => setTimeout(r, 50));
      if (error !== undefined && error.code !== status.CANCELLED) throw error;
      if (!ok()) throw new Error(`stream never showed: ${what}`);
    },
    cancel: () => stream.cancel(),
  };
}

const v = (i: number): number[] => [i, i + 0.5, -i, 1];

describe('Replicate: snapshot then live tail, over gRPC', () => {
  let server: Server;
  let g: SvcGrpc;
  let call: ReturnType<typeof api>;

  /** The leader's state, read over REST the way a user would. */
  async function leaderState(): Promise<Record<string, [string, number[]][]>> {
    const out: Record<string, [string, number[]][]> = {};
    for (const c of (await call('GET', '/v1/collections')).json.collections) {
      const pts: [string, number[]][] = [];
      let cursor: string | null = null;
      do {
        const r = await call('POST', `/v1/collections/${c.name}/points:fetch`, { limit: 100, with_vector: true, ...(cursor ? { cursor } : {}) });
        for (const p of r.json.points) pts.push([p.id, p.vector]);
        cursor = r.json.next_cursor;
      } while (cursor !== null);
      out[c.name] = pts.sort((a, b) => (a[0] < b[0] ? -1 : 1));
    }
    return out;
  }

  beforeAll(async () => {
    const dir = tempDir('svc-repl-e2e-');
    const toml = join(dir, 'svc.toml');
    (await import('node:fs')).writeFileSync(toml, `[[api_keys]]\nname = "scoped"\nrole = "admin"\ncollections = ["r_*"]\nkey = "${SCOPED_ADMIN}"\n`);
    server = await serve({ SVC_API_KEYS: ADMIN, SVC_ENCRYPTION_KEY: MASTER, SVC_DATA_DIR: join(dir, 'data'), SVC_CONFIG: toml }, { cwd: dir });
    g = new SvcGrpc(`127.0.0.1:${server.grpcPort}`);
    call = api(server.base, ADMIN);
    expect((await call('POST', '/v1/collections', { name: 'r_one', dim: 4, metric: 'l2' })).status).toBe(201);
    expect((await call('POST', '/v1/collections', { name: 'r_two', dim: 4, metric: 'l2', index: 'flat' })).status).toBe(201);
    for (let b = 0; b < 3; b++) {
      const points = Array.from({ length: 100 }, (_, i) => ({ id: `p${b * 100 + i}`, vector: v(b * 100 + i), payload: { b } }));
      expect((await call('PUT', '/v1/collections/r_one/points', { points })).status).toBe(200);
    }
    expect((await call('PUT', '/v1/collections/r_two/points', { points: [{ id: 'only', vector: v(7) }] })).status).toBe(200);
    expect((await call('DELETE', '/v1/collections/r_one/points/p5')).json).toEqual({ deleted: true });
  });

  afterAll(async () => {
    g?.close();
    expect(await server?.stop()).toBe(0);
  });

  it('a snapshot of every collection and point, then each later write as a commit, converging on the leader', async () => {
    const s = openStream(g, ADMIN);
    await s.until('the end of the snapshot', () => s.recs.some((r) => r.kind === 'snapshot_end'));
    const end = s.recs.findIndex((r) => r.kind === 'snapshot_end');
    expect(s.recs[0].kind).toBe('snapshot_begin');
    expect(s.recs.slice(1, end).every((r) => r.kind === 'snapshot')).toBe(true);
    const follower = new Follower();
    for (const r of s.recs.slice(0, end + 1)) follower.apply(r);
    expect(follower.state()).toEqual(await leaderState());
    expect(follower.state().r_one).toHaveLength(299);
    expect(follower.seq).toBeGreaterThan(0);

    // Live tail: writes of every kind arrive as commits, in seq order.
    expect((await call('PUT', '/v1/collections/r_one/points', { points: [{ id: 'late', vector: v(1000) }, { id: 'p0', vector: v(-1) }] })).status).toBe(200);
    expect((await call('DELETE', '/v1/collections/r_one/points/p1')).status).toBe(200);
    expect((await call('POST', '/v1/collections', { name: 'r_three', dim: 4, metric: 'dot' })).status).toBe(201);
    expect((await call('PUT', '/v1/collections/r_three/points', { points: [{ id: 'x', vector: v(3) }] })).status).toBe(200);
    expect((await call('DELETE', '/v1/collections/r_two')).json).toEqual({ existed: true });
    await s.until('the drop of r_two', () => s.recs.some((r) => r.op?.t === 'drop_collection'));
    const tail = s.recs.slice(end + 1);
    expect(tail.every((r) => r.kind === 'commit')).toBe(true);
    const seqs = tail.map((r) => r.seq);
    expect(seqs).toEqual([...seqs].sort((a, b) => a - b));
    expect(seqs[0]).toBeGreaterThan(follower.seq);
    expect(tail.map((r) => r.op!.t)).toEqual(['upsert', 'delete', 'create_collection', 'upsert', 'drop_collection']);
    for (const r of tail) follower.apply(r);
    expect(follower.state()).toEqual(await leaderState());
    expect(Object.keys(follower.state()).sort()).toEqual(['r_one', 'r_three']);
    s.cancel();

    // Resuming after the last seq seen: no snapshot, only what came since.
    expect(s.recs[0].history).toMatch(/^[0-9a-f]{32}$/);
    expect(s.beats.length).toBeGreaterThan(0);
    const resumed = openStream(g, ADMIN, { afterSeq: follower.seq, history: s.recs[0].history! });
    expect((await call('PUT', '/v1/collections/r_three/points', { points: [{ id: 'y', vector: v(4) }] })).status).toBe(200);
    await resumed.until('the new upsert', () => resumed.recs.length >= 2);
    // The collection is announced first (a create record, seq = its create's seq), then the commit.
    expect(resumed.recs.map((r) => [r.kind, r.op?.t])).toEqual([['snapshot', 'create_collection'], ['commit', 'upsert']]);
    for (const r of resumed.recs) follower.apply(r);
    expect(follower.state()).toEqual(await leaderState());
    resumed.cancel();
  });

  it('a snapshot taken while writers run still converges once the tail is applied', async () => {
    const writes = Array.from({ length: 40 }, (_, i) => call('PUT', '/v1/collections/r_one/points', {
      points: Array.from({ length: 10 }, (_, j) => ({ id: `w${(i * 7 + j) % 60}`, vector: v(i * 10 + j) })),
    }));
    const s = openStream(g, ADMIN);
    const statuses = (await Promise.all(writes)).map((r) => r.status);
    expect(new Set(statuses)).toEqual(new Set([200]));
    const marker = await call('PUT', '/v1/collections/r_three/points', { points: [{ id: 'marker', vector: v(9) }] });
    expect(marker.status).toBe(200);
    await s.until('the marker write', () => s.recs.some((r) => r.op?.t === 'upsert' && r.op.points.some((p) => p.id === 'marker')));
    const follower = new Follower();
    for (const r of s.recs) follower.apply(r);
    expect(follower.state()).toEqual(await leaderState());
    s.cancel();
  });

  it('needs an admin key scoped to every collection', async () => {
    for (const key of [SCOPED_ADMIN, 'not-a-key']) {
      const s = openStream(g, key);
      const err = await s.until('an error', () => false).then(() => undefined, (e: ServiceError) => e);
      expect(err?.code, key).toBe(key === SCOPED_ADMIN ? status.PERMISSION_DENIED : status.UNAUTHENTICATED);
    }
  });
});
