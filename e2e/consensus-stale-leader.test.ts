import { rmSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { call, eventually, raftLeader, raftView, startRaftGroup } from './cluster-harness.js';
import { tempDir } from './harness.js';

/**
 * A leader cut off from its group believes it leads until its quorum check ends it (an election
 * timeout). Meanwhile the others elect a leader and take writes. A write sent to the cut-off leader
 * that it would answer from its own state, without a proposal (a DELETE of a point it does not hold),
 * must not be answered so: the group holds the point. Found by the linearizability run (docs/consensus.md,
 * Writes): it answered 200 `{deleted: false}`, and strong reads after that acknowledged delete still saw
 * the point. Now it waits for a ReadIndex round it cannot get, and answers 503.
 */
const root = tempDir('svc-stale-leader-');
afterAll(() => rmSync(root, { recursive: true, force: true }));

// A long election timeout: the cut-off leader keeps believing it leads for a while (its quorum check),
// while the others, told at once that its address refuses them, elect a leader of their own sooner.
const TIMING = { SVC_RAFT_HEARTBEAT_MS: '100', SVC_RAFT_ELECTION_MS: '4000', SVC_RAFT_WRITE_TIMEOUT_SECS: '2' };

describe('a leader cut off from its group', () => {
  it('answers no write from its stale state: a DELETE of a point the group wrote meanwhile is not "nothing deleted"', async () => {
    const { members, links } = await startRaftGroup(['s1', 's2', 's3'], (id) => join(root, id), TIMING);
    try {
      const old = await raftLeader(members);
      expect((await call(old.server)('POST', '/v1/collections', { name: 'c', dim: 2 })).status).toBe(201);
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
      const oldView = await raftView(old);
      // The window this test needs: the old leader has not stepped down yet.
      expect(oldView.role).toBe('leader');
      const d = await call(old.server)('DELETE', '/v1/collections/c/points/k');
      // Before: 200 {deleted: false} at once, from a state without k.
      expect(d.status, JSON.stringify(d.json)).toBe(503);
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
