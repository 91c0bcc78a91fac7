/**
 * Read replicas end to end (issue 15): a leader and two followers as real processes, each with its own
 * data directory and master key; one follower reaches the leader through a fault proxy. Every kind of
 * write reaches both; a follower refuses writes; kill -9 of a follower mid-stream and of the leader under
 * a write load loses nothing acknowledged and duplicates nothing.
 */
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  FaultProxy, KEY, allPoints, call, caughtUp, collectionNames, eventually, replicationOf, startNode,
} from './cluster-harness.js';
import { SvcGrpc } from './grpc-client.js';
import { tempDir, type Server } from './harness.js';

const FOLLOWER_MASTER = 'b2'.repeat(32);
const nodes = new Set<Server>();
let proxy: FaultProxy | undefined;
afterAll(async () => {
  await Promise.all([...nodes].map((n) => n.stop('SIGKILL')));
  await proxy?.close();
});

async function started(p: Promise<Server>): Promise<Server> {
  const s = await p;
  nodes.add(s);
  return s;
}

async function kill(s: Server): Promise<void> {
  s.child.kill('SIGKILL');
  await s.exited;
  nodes.delete(s);
}

const vec = (i: number, j = 0) => [Math.sin(i + j), Math.cos(i * 3 + j), (i % 7) - 3, 1 + (j % 5)];

/** Same points, same search answers (dense, filtered, text, multi) on both nodes. */
async function sameAs(leader: Server, follower: Server): Promise<void> {
  expect(await collectionNames(follower)).toEqual(await collectionNames(leader));
  for (const c of ['c', 't']) expect(await allPoints(follower, c)).toEqual(await allPoints(leader, c));
  const ask = async (node: Server, path: string, body: unknown) => {
    const r = await call(node)('POST', path, body);
    expect(r.status, JSON.stringify(r.json)).toBe(200);
    return r.json.hits;
  };
  const queries: [string, unknown][] = [
    ['/v1/collections/c/query', { vector: vec(5), k: 10, consistency: 'strong' }],
    ['/v1/collections/c/query', { vector: vec(9), k: 5, filter: { eq: { field: 'tag', value: 'odd' } }, consistency: 'strong' }],
    ['/v1/collections/t/query/text', { text: 'flutter of the wing', k: 5, consistency: 'strong' }],
    ['/v1/collections/m/query/multi', { vectors: [[1, 0, 0], [0, 1, 0]], k: 5, consistency: 'strong' }],
  ];
  for (const [path, body] of queries) expect(await ask(follower, path, body), path).toEqual(await ask(leader, path, body));
}

describe('read replicas', () => {
  let dir: string;
  let leader: Server;
  let leaderEnv: Record<string, string>;
  let f1: Server;
  let f2: Server;
  const followerEnv = (name: string, grpcPort: number) => ({
    dataDir: join(dir, name),
    // The same provider tables as the leader: a text query is embedded where it is asked.
    env: { SVC_LEADER_URL: `http://127.0.0.1:${grpcPort}`, SVC_LEADER_API_KEY: KEY, SVC_CONFIG: join(dir, 'svc.toml'), RUST_LOG: 'info' },
  });

  beforeAll(async () => {
    dir = tempDir('svc-repl-e2e-');
    writeFileSync(join(dir, 'svc.toml'), ['[embedding.t]', 'provider = "fake"', 'model = "hash"', 'dim = 8', ''].join('\n'));
    leaderEnv = { SVC_CONFIG: join(dir, 'svc.toml') };
    leader = await started(startNode(join(dir, 'leader'), leaderEnv));
    const l = call(leader);
    expect((await l('POST', '/v1/collections', { name: 'c', dim: 4, metric: 'l2', filterable: [{ path: 'tag', field_type: 'keyword' }] })).status).toBe(201);
    expect((await l('POST', '/v1/collections', { name: 't', dim: 8, metric: 'cosine' })).status).toBe(201);
    expect((await l('POST', '/v1/collections', { name: 'm', dim: 3, metric: 'cosine', multivector: true })).status).toBe(201);
    const points = Array.from({ length: 300 }, (_, i) => ({ id: `p${i}`, vector: vec(i), payload: { tag: i % 2 ? 'odd' : 'even', i } }));
    expect((await l('PUT', '/v1/collections/c/points', { points: points.slice(0, 100) })).status).toBe(200);
    expect((await l('POST', '/v1/collections/c/points:bulk', { points: points.slice(100) })).status).toBe(200);
    proxy = new FaultProxy(leader.grpcPort);
    await proxy.start();
    const a = followerEnv('f1', leader.grpcPort);
    const b = followerEnv('f2', proxy.port);
    [f1, f2] = await Promise.all([started(startNode(a.dataDir, a.env, FOLLOWER_MASTER)), started(startNode(b.dataDir, b.env, FOLLOWER_MASTER))]);
  });

  it('bootstraps, then streams every kind of write; both followers end equal to the leader', async () => {
    const l = call(leader);
    // After the bootstrap: updates of existing ids, deletes, text, documents, a create and a drop.
    expect((await l('PUT', '/v1/collections/c/points', { points: [{ id: 'p1', vector: [9, 9, 9, 9], payload: { tag: 'odd', updated: true } }] })).status).toBe(200);
    expect((await l('DELETE', '/v1/collections/c/points/p2')).json).toEqual({ deleted: true });
    const txt = await l('POST', '/v1/collections/t/points:text', { points: [
      { id: 'd1', text: 'the flutter of a wing at supersonic speed' }, { id: 'd2', text: 'boundary layer on a flat plate' },
    ] });
    expect(txt.status).toBe(200);
    expect((await l('PUT', '/v1/collections/m/documents', { documents: [
      { id: 'doc1', vectors: [[1, 0, 0], [0, 1, 1]], payload: { k: 1 } }, { id: 'doc2', vectors: [[0, 0, 1]] },
    ] })).status).toBe(200);
    expect((await l('DELETE', '/v1/collections/m/documents/doc2')).json).toEqual({ deleted: true });
    expect((await l('POST', '/v1/collections', { name: 'gone', dim: 2, metric: 'dot' })).status).toBe(201);
    expect((await l('PUT', '/v1/collections/gone/points', { points: [{ id: 'x', vector: [1, 2] }] })).status).toBe(200);
    expect((await l('DELETE', '/v1/collections/gone')).json).toEqual({ existed: true });
    for (const f of [f1, f2]) {
      await caughtUp(leader, f);
      await sameAs(leader, f);
      expect(await replicationOf(f)).toMatchObject({ role: 'follower', state: 'streaming' });
    }
    const metrics = await (await fetch(`${f1.base}/metrics`)).text();
    expect(metrics).toMatch(/^svc_replication_state\{state="streaming"\} 1$/m);
    expect(metrics).toMatch(/^svc_replication_lag_records 0$/m);
  });

  it('refuses every write on REST and gRPC with read_only_replica, and changes nothing', async () => {
    const f = call(f1);
    const before = await allPoints(f1, 'c');
    const writes: [string, string, unknown][] = [
      ['PUT', '/v1/collections/c/points', { points: [{ id: 'new', vector: [1, 2, 3, 4] }] }],
      ['POST', '/v1/collections/c/points:bulk', { points: [{ id: 'new', vector: [1, 2, 3, 4] }] }],
      ['DELETE', '/v1/collections/c/points/p3', undefined],
      ['POST', '/v1/collections/t/points:text', { points: [{ id: 'x', text: 'x' }] }],
      ['PUT', '/v1/collections/m/documents', { documents: [{ id: 'x', vectors: [[1, 0, 0]] }] }],
      ['DELETE', '/v1/collections/m/documents/doc1', undefined],
      ['POST', '/v1/collections', { name: 'new', dim: 2, metric: 'l2' }],
      ['DELETE', '/v1/collections/c', undefined],
    ];
    for (const [method, path, body] of writes) {
      const r = await f(method, path, body);
      expect([r.status, r.json.error?.code], `${method} ${path}`).toEqual([403, 'read_only_replica']);
    }
    const g = new SvcGrpc(`127.0.0.1:${f1.grpcPort}`);
    const up = await g.call('Upsert', { collection: 'c', points: [{ id: 'new', vector: [1, 2, 3, 4] }] }, KEY);
    expect([up.err?.code, up.code]).toEqual([7, 'read_only_replica']);
    const drop = await g.call('DeleteCollection', { collection: 'c' }, KEY);
    expect(drop.code).toBe('read_only_replica');
    g.client.close();
    expect(await allPoints(f1, 'c')).toEqual(before);
    expect(await collectionNames(f1)).toEqual(['c', 'm', 't']);
  });

  it('refuses the Replicate stream to a read or a write key', async () => {
    writeFileSync(join(dir, 'keys.toml'), [
      '[[api_keys]]', 'name = "r"', 'role = "read"', 'collections = ["*"]', 'key = "read-key"',
      '[[api_keys]]', 'name = "w"', 'role = "write"', 'collections = ["*"]', 'key = "write-key"', '',
    ].join('\n'));
    const node = await started(startNode(join(dir, 'keys-node'), { SVC_CONFIG: join(dir, 'keys.toml') }));
    const g = new SvcGrpc(`127.0.0.1:${node.grpcPort}`);
    for (const key of ['read-key', 'write-key']) {
      const r = await g.replicate(key, { until: (events) => events.length > 0 });
      expect(r.err?.code, key).toBe(7);
      expect(r.events).toEqual([]);
    }
    g.client.close();
    await kill(node);
  });

  it('a follower killed with -9 mid-stream, again and again, resumes: nothing missing, nothing twice', async () => {
    const l = call(leader);
    let stop = false;
    let n = 0;
    const acked: string[] = [];
    const writer = (async () => {
      while (!stop) {
        const batch = Array.from({ length: 20 }, (_, j) => ({ id: `k${n}-${j}`, vector: vec(n, j), payload: { tag: 'odd', n } }));
        const r = await l('PUT', '/v1/collections/c/points', { points: batch });
        if (r.status === 200) acked.push(...batch.map((p) => p.id));
        if (n % 5 === 0) await l('DELETE', `/v1/collections/c/points/k${n}-0`);
        n++;
      }
    })();
    const a = followerEnv('f1', leader.grpcPort);
    for (let round = 0; round < 3; round++) {
      await new Promise((r) => setTimeout(r, 300));
      await kill(f1);
      f1 = await started(startNode(a.dataDir, a.env, FOLLOWER_MASTER));
      // A restart with a durable position serves at once and resumes (no second bootstrap).
      expect((await replicationOf(f1)).applied_seq).toBeGreaterThan(0);
    }
    stop = true;
    await writer;
    await caughtUp(leader, f1);
    await sameAs(leader, f1);
    const ids = (await allPoints(f1, 'c')).map((p) => p.id);
    expect(new Set(ids).size).toBe(ids.length);
    const metrics = await (await fetch(`${f1.base}/metrics`)).text();
    expect(metrics).toMatch(/^svc_replication_bootstraps_total 0$/m);
    expect(acked.length).toBeGreaterThan(0);
  }, 120_000);

  it('converges through cuts, drops and delays of its connection', async () => {
    const l = call(leader);
    for (let round = 0; round < 4; round++) {
      if (round === 0) proxy!.cut();
      if (round === 1) { proxy!.refuse(true); setTimeout(() => proxy!.refuse(false), 700); proxy!.cut(); }
      if (round === 2) { proxy!.drop(true); setTimeout(() => { proxy!.drop(false); proxy!.cut(); }, 700); }
      if (round === 3) proxy!.delayMs = 50;
      const points = Array.from({ length: 30 }, (_, j) => ({ id: `cut${round}-${j}`, vector: vec(round, j), payload: { tag: 'even' } }));
      expect((await l('PUT', '/v1/collections/c/points', { points })).status).toBe(200);
      await new Promise((r) => setTimeout(r, 300));
    }
    proxy!.delayMs = 0;
    await caughtUp(leader, f2, 60_000);
    await sameAs(leader, f2);
    const metrics = await (await fetch(`${f2.base}/metrics`)).text();
    expect(Number(/^svc_replication_reconnects_total (\d+)$/m.exec(metrics)?.[1])).toBeGreaterThanOrEqual(2);
  }, 120_000);

  it('the leader killed with -9 under a write load: every write it acknowledged reaches the followers', async () => {
    const l = call(leader);
    let stop = false;
    const acked: string[] = [];
    const writers = [0, 1].map(async (w) => {
      for (let i = 0; !stop; i++) {
        const batch = Array.from({ length: 10 }, (_, j) => ({ id: `lk${w}-${i}-${j}`, vector: vec(i, j + w), payload: { tag: 'even' } }));
        const r = await l('PUT', '/v1/collections/c/points', { points: batch }).catch(() => null);
        if (r === null) return;
        if (r.status === 200) acked.push(...batch.map((p) => p.id));
      }
    });
    await eventually('some writes acknowledged', async () => (acked.length >= 200 ? true : `${acked.length}`));
    const grpcPort = leader.grpcPort;
    await kill(leader);
    stop = true;
    await Promise.all(writers);
    const ackedAtKill = [...acked];
    // The leader comes back on the same gRPC port: the followers' SVC_LEADER_URL.
    leader = await started(startNode(join(dir, 'leader'), { ...leaderEnv, SVC_GRPC_ADDR: `127.0.0.1:${grpcPort}` }));
    for (const f of [f1, f2]) {
      await caughtUp(leader, f, 60_000);
      const ids = new Set((await allPoints(f, 'c')).map((p) => p.id));
      expect(ackedAtKill.filter((id) => !ids.has(id))).toEqual([]);
      await sameAs(leader, f);
    }
  }, 120_000);

  it('a leader replaced by its older snapshot, its log grown past the followers\' positions: they re-bootstrap to it', async () => {
    const l = call(leader);
    const snap = await l('POST', '/v1/snapshots', { name: 'before-replace' });
    expect(snap.status, JSON.stringify(snap.json)).toBe(200);
    const oldOnly = Array.from({ length: 40 }, (_, j) => ({ id: `old-only-${j}`, vector: vec(j, 3), payload: { tag: 'odd' } }));
    for (let i = 0; i < oldOnly.length; i += 4) expect((await l('PUT', '/v1/collections/c/points', { points: oldOnly.slice(i, i + 4) })).status).toBe(200);
    for (const f of [f1, f2]) await caughtUp(leader, f, 60_000);
    const positions = await Promise.all([f1, f2].map(async (f) => (await replicationOf(f)).applied_seq!));
    const bootstrapsBefore = Number(/^svc_replication_bootstraps_total (\d+)$/m.exec(await (await fetch(`${f1.base}/metrics`)).text())?.[1]);
    const grpcPort = leader.grpcPort;
    await kill(leader);
    // The snapshot, started where no follower reaches it, takes more writes than the followers have seen.
    const restoredDir = (snap.json as { path: string }).path;
    let restored = await started(startNode(restoredDir, leaderEnv));
    const r = call(restored);
    // One write is one position: 16 at a time (they share fsyncs) until past the followers'.
    for (let i = 0; (await replicationOf(restored)).commit_seq! <= Math.max(...positions) + 5; i += 16) {
      const puts = Array.from({ length: 16 }, (_, j) => r('PUT', '/v1/collections/c/points', { points: [{ id: `restored-${i + j}`, vector: vec(i + j, 4), payload: { tag: 'even' } }] }));
      for (const res of await Promise.all(puts)) expect(res.status).toBe(200);
    }
    await kill(restored);
    // Now at the followers' leader address.
    restored = await started(startNode(restoredDir, { ...leaderEnv, SVC_GRPC_ADDR: `127.0.0.1:${grpcPort}` }));
    leader = restored;
    for (const f of [f1, f2]) {
      await caughtUp(leader, f, 90_000);
      await sameAs(leader, f);
      expect((await allPoints(f, 'c')).filter((p) => p.id.startsWith('old-only-'))).toEqual([]);
    }
    const metrics = await (await fetch(`${f1.base}/metrics`)).text();
    expect(Number(/^svc_replication_bootstraps_total (\d+)$/m.exec(metrics)?.[1])).toBeGreaterThan(bootstrapsBefore);
    // Caught up and hearing the leader's heartbeats: no staleness.
    await eventually('lag 0', async () => {
      const m = await (await fetch(`${f1.base}/metrics`)).text();
      return /^svc_replication_lag_seconds 0$/m.test(m) ? true : (/^svc_replication_lag_seconds .*$/m.exec(m)?.[0] ?? 'none');
    });
  }, 180_000);
});
