import { rmSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { call, eventually, raftLeader, raftView, startRaftGroup } from './cluster-harness.js';
import { tempDir } from './harness.js';

/**
 * A leader cut off from its group believes it leads until its quorum check ends it (an election
 * timeout). Meanwhile the others elect a leader and take writes. A write sent to the cut-off leader
 * that it would answer from its own state, without a proposal (a DELETE of a point it does not hold, a
 * vector refused for the dimension of a collection the group made anew, an empty batch for a collection
 * the group dropped), must not be answered so: the group holds the point. Found by the linearizability run (docs/consensus.md,
 * Writes): it answered 200 `{deleted: false}`, and strong reads after that acknowledged delete still saw
 * the point. Now it waits for a ReadIndex round it cannot get, and answers 503.
 */
const root = tempDir('svc-stale-leader-');
afterAll(() => rmSync(root, { recursive: true, force: true }));

// A long election timeout: the cut-off leader keeps believing it leads for a while (its quorum check),
// while the others, told at once that its address refuses them, elect a leader of their own sooner.
// 6 s: the group's writes before the old leader is asked (a point, two drops, a create) fit well inside
// (the first election takes 6 to 12 s, inside the harness's 20 s wait for a leader).
const TIMING = { SVC_RAFT_HEARTBEAT_MS: '100', SVC_RAFT_ELECTION_MS: '6000', SVC_RAFT_WRITE_TIMEOUT_SECS: '2' };

describe('a leader cut off from its group', () => {
  it('answers no write from its stale state: a DELETE of a point the group wrote meanwhile is not "nothing deleted"', async () => {
    const { members, links } = await startRaftGroup(['s1', 's2', 's3'], (id) => join(root, id), TIMING);
    try {
      const old = await raftLeader(members);
      expect((await call(old.server)('POST', '/v1/collections', { name: 'c', dim: 2 })).status).toBe(201);
      for (const name of ['e', 'g']) expect((await call(old.server)('POST', '/v1/collections', { name, dim: 2 })).status).toBe(201);
      for (const [name, l] of links) {
        if (!name.includes(old.id)) continue;
        l.refuse(true);
        l.cut();
      }
      const others = members.filter((m) => m !== old);
      // The others elect one of them; the old leader still says it leads.
      let fresh = others[0];
      await eventually('the others elect a leader', async () => {
        const views = await Promise.all(others.map((m) => raftView(m)));
        const i = views.findIndex((v) => v.role === 'leader');
        if (i < 0) return `roles ${views.map((v) => v.role).join(', ')}`;
        fresh = others[i];
        return true;
      });
      const w = await call(fresh.server)('PUT', '/v1/collections/c/points', { points: [{ id: 'k', vector: [1, 2] }] });
      expect(w.status, JSON.stringify(w.json)).toBe(200);
      // The group also drops e and g, and makes g anew with another dimension.
      for (const name of ['e', 'g']) expect((await call(fresh.server)('DELETE', `/v1/collections/${name}`)).status).toBe(200);
      expect((await call(fresh.server)('POST', '/v1/collections', { name: 'g', dim: 3 })).status).toBe(201);
      const oldView = await raftView(old);
      // The window this test needs: the old leader has not stepped down yet. Each answer below waits for a
      // confirmation it cannot get (SVC_RAFT_WRITE_TIMEOUT_SECS), so they go at once, inside the window.
      expect(oldView.role).toBe('leader');
      const [d, dims, empty] = await Promise.all([
        call(old.server)('DELETE', '/v1/collections/c/points/k'),
        call(old.server)('PUT', '/v1/collections/g/points', { points: [{ id: 'x', vector: [1, 2, 3] }] }),
        call(old.server)('PUT', '/v1/collections/e/points', { points: [] }),
      ]);
      // Before: 200 {deleted: false} at once, from a state without k.
      expect(d.status, JSON.stringify(d.json)).toBe(503);
      // Before: 400 at once (g's dimension is 2 in the old state), and 200 {upserted: 0} for the e the group dropped.
      expect(dims.status, JSON.stringify(dims.json)).toBe(503);
      expect(empty.status, JSON.stringify(empty.json)).toBe(503);
      // The point is the group's still, as a strong read on its leader says.
      const r = await call(fresh.server)('POST', '/v1/collections/c/points:fetch', { consistency: 'strong' });
      expect(r.json.points.map((p: { id: string }) => p.id)).toEqual(['k']);
      for (const l of links.values()) l.refuse(false);
      for (const l of links.values()) await l.close();
    } finally {
      await Promise.all(members.map((m) => m.server.stop('SIGKILL')));
    }
  }, 60_000);
});
