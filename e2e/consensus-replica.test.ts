import { rmSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { allPoints, call, caughtUp, collectionNames, eventually, KEY, raftLeader, restartMember, startNode, startRaftGroup, type RaftMember } from './cluster-harness.js';
import { tempDir, type Server } from './harness.js';

/**
 * A read replica of a consensus member (issues 7 and 17): `svc serve` with SVC_LEADER_URL naming a
 * member's gRPC address follows the group's log as that member applies it (its database's WAL holds no
 * point writes). Real processes: three members (each link through a fault proxy) and a replica, writes
 * through the leader, the member the replica follows killed and restarted while writes go on, then cut
 * off from its group (the replica's lag grows) and back. The replica ends with exactly the group's
 * collections and points.
 */
const root = tempDir('svc-consensus-replica-');
afterAll(() => rmSync(root, { recursive: true, force: true }));

// Small markers: the members compact their logs many times during the test.
const TIMING = { SVC_RAFT_HEARTBEAT_MS: '50', SVC_RAFT_ELECTION_MS: '500', SVC_RAFT_WRITE_TIMEOUT_SECS: '3', SVC_RAFT_SNAPSHOT_ENTRIES: '40' };

function vec(i: number): number[] {
  return [Math.sin(i), Math.cos(i), (i % 7) / 7, 1];
}

/** A write on the group, retried while it is 503 (an election after a kill), as a client does. */
async function write(members: RaftMember[], method: string, path: string, body: unknown): Promise<any> {
  let last = '';
  for (let t = 0; t < 40; t++) {
    const up = members.filter((m) => m.server.child.exitCode === null && m.server.child.signalCode === null);
    const m = up[t % up.length];
    const r = await call(m.server)(method, path, body).catch((e: unknown) => ({ status: 0, json: String(e) }));
    if (r.status === 200 || r.status === 201) return r.json;
    last = `${r.status} ${JSON.stringify(r.json)}`;
    if (r.status !== 503 && r.status !== 0) break;
    await new Promise((res) => setTimeout(res, 100));
  }
  throw new Error(`${method} ${path}: ${last}`);
}

/**
 * Until the replica holds exactly what `m` holds in every collection, and `m` every write the group
 * acknowledged. `m` is a follower member: it applies the leader's commits a heartbeat later, so a strong
 * read on it first (its read barrier: it applies through the leader's commit index), then the two are
 * compared until they agree (CI once read `m` after it applied a create the replica had not yet
 * fetched), then once more for the assertion's message.
 */
async function sameAs(replica: Server, m: Server): Promise<void> {
  const state = async (s: Server): Promise<string> => {
    const names = await collectionNames(s);
    return JSON.stringify([names, await Promise.all(names.map((n) => allPoints(s, n)))]);
  };
  await eventually('the member applied every acknowledged write', async () => {
    const r = await call(m)('POST', '/v1/collections/docs/points:fetch', { limit: 1, consistency: 'strong' });
    return r.status === 200 ? true : `strong read ${r.status}`;
  });
  await eventually('the replica holds what the member holds', async () => {
    await caughtUp(m, replica);
    return (await state(m)) === (await state(replica)) ? true : 'not yet';
  });
  expect(await collectionNames(replica)).toEqual(await collectionNames(m));
  for (const name of await collectionNames(m)) expect(await allPoints(replica, name), name).toEqual(await allPoints(m, name));
}

describe('a read replica of a consensus member', () => {
  it('holds the group\'s data: bootstrap, tail (payloads, deletes, a drop and a create), across the member\'s SIGKILL and restart; its lag grows while the member is cut off', async () => {
    const { members, links } = await startRaftGroup(['r1', 'r2', 'r3'], (id) => join(root, id), TIMING);
    let replica: Server | null = null;
    try {
      const leader = await raftLeader(members);
      const followed = members.find((m) => m !== leader)!;
      await write(members, 'POST', '/v1/collections', { name: 'docs', dim: 4, filterable: [{ path: 'g', field_type: 'keyword' }] });
      await write(members, 'POST', '/v1/collections', { name: 'gone', dim: 4 });
      for (let i = 0; i < 120; i += 10) {
        await write(members, 'PUT', '/v1/collections/docs/points', { points: Array.from({ length: 10 }, (_, j) => ({ id: `d${i + j}`, vector: vec(i + j), payload: { g: `g${(i + j) % 3}`, i: i + j } })) });
      }
      await write(members, 'PUT', '/v1/collections/gone/points', { points: [{ id: 'x', vector: vec(1) }] });

      // The replica bootstraps from a follower member: a snapshot of its database, then its log's tail.
      replica = await startNode(join(root, 'replica'), { SVC_LEADER_URL: `http://127.0.0.1:${followed.server.grpcPort}`, SVC_LEADER_API_KEY: KEY }, 'c3'.repeat(32));
      await sameAs(replica, followed.server);
      expect((await allPoints(replica, 'docs')).length).toBe(120);

      // The tail: upserts, a payload update, a delete by filter, a drop and a create, all through the group.
      await write(members, 'PUT', '/v1/collections/docs/points', { points: [{ id: 'd0', vector: vec(500), payload: { g: 'new' } }, { id: 'd500', vector: vec(501), payload: { g: 'g1' } }] });
      await write(members, 'POST', '/v1/collections/docs/points:payload', { points: [{ id: 'd1', payload: { extra: true } }] });
      expect((await write(members, 'POST', '/v1/collections/docs/points:delete', { filter: { eq: { field: 'g', value: 'g2' } } })).deleted).toBe(40);
      await write(members, 'DELETE', '/v1/collections/gone', undefined);
      await write(members, 'POST', '/v1/collections', { name: 'fresh', dim: 4 });
      await write(members, 'PUT', '/v1/collections/fresh/points', { points: [{ id: 'f', vector: vec(2) }] });
      await sameAs(replica, followed.server);
      const r = call(replica);
      expect((await r('GET', '/v1/collections/docs/points/d1')).json.payload).toEqual({ g: 'g1', i: 1, extra: true });
      expect(await collectionNames(replica)).toEqual(['docs', 'fresh']);
      // A replica takes no writes of its own.
      const refused = await r('PUT', '/v1/collections/docs/points', { points: [{ id: 'no', vector: vec(3) }] });
      expect([refused.status, refused.json.error?.code]).toEqual([403, 'read_only_replica']);

      // The member it follows is killed while writes go on (past several markers), and comes back.
      await followed.server.stop('SIGKILL');
      for (let i = 0; i < 60; i++) await write(members, 'PUT', '/v1/collections/docs/points', { points: [{ id: `k${i}`, vector: vec(1000 + i), payload: { g: 'k' } }] });
      await restartMember(followed);
      for (let i = 60; i < 80; i++) await write(members, 'PUT', '/v1/collections/docs/points', { points: [{ id: `k${i}`, vector: vec(1000 + i), payload: { g: 'k' } }] });
      // The restarted member catches up with the group (sameAs: a strong read on it), and the replica
      // with the member; the leader found first holds the same (it may have lost its lead meanwhile, and
      // then applies a heartbeat later).
      await sameAs(replica, followed.server);
      expect((await allPoints(replica, 'docs')).filter((p) => p.id.startsWith('k')).length).toBe(80);
      await eventually('the replica holds the first leader\'s points', async () => (
        JSON.stringify(await allPoints(replica!, 'docs')) === JSON.stringify(await allPoints(leader.server, 'docs')) ? true : 'not yet'));

      // The member it follows is cut off from its group: it soon knows no leader and stops vouching for
      // what it applied (no heartbeats), so the replica's lag grows, and a router would stop reading it.
      // Once the member is back the lag is 0 again and the group's writes of meanwhile arrive.
      const lag = async (): Promise<number> => {
        const m = await (await fetch(`${replica!.base}/metrics`)).text();
        return Number(/^svc_replication_lag_seconds (\S+)$/m.exec(m)?.[1] ?? NaN);
      };
      // 0 while it hears its member's heartbeats (within a second): read until then, as a monitor would.
      await eventually('the lag is 0', async () => {
        const s = await lag();
        return s === 0 ? true : `lag ${s} s`;
      });
      const cut = [...links].filter(([name]) => name.includes(followed.id)).map(([, l]) => l);
      for (const l of cut) {
        l.refuse(true);
        l.cut();
      }
      await eventually('the replica of a cut-off member reports a growing lag', async () => {
        const s = await lag();
        return s > 2 ? true : `lag ${s} s`;
      });
      const others = members.filter((m) => m !== followed);
      for (let i = 0; i < 5; i++) await write(others, 'PUT', '/v1/collections/docs/points', { points: [{ id: `cut${i}`, vector: vec(2000 + i) }] });
      for (const l of cut) l.refuse(false);
      await eventually('the lag is 0 again', async () => {
        const s = await lag();
        return s === 0 ? true : `lag ${s} s`;
      });
      await eventually('the writes made while it was cut off reach the replica', async () => {
        const ids = (await allPoints(replica!, 'docs')).map((p) => p.id);
        return ids.includes('cut4') ? true : 'not yet';
      });
      const now = await raftLeader(members);
      await eventually('the replica holds the group\'s points', async () => (
        JSON.stringify(await allPoints(replica!, 'docs')) === JSON.stringify(await allPoints(now.server, 'docs')) ? true : 'not yet'));
      for (const l of links.values()) await l.close();
    } finally {
      await replica?.stop('SIGKILL');
      await Promise.all(members.map((m) => m.server.stop('SIGKILL')));
    }
  }, 120_000);
});
