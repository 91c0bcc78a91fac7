import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { Database } from '../../core/collection/database.js';
import { buildIndexInline } from '../../core/collection/rebuild.js';
import { NodeEngine } from '../../core/engine/node.js';
import type { Advertised } from '../../core/cluster/consensus/versions.js';
import { freePort } from '../testing/free-port.js';
import type { RaftNetConfig } from './config.js';
import { startConsensusMember, type ConsensusHost } from './member-host.js';
import type { RaftPeer } from './transport.js';

/**
 * Version skew in a group of real members (member-host.ts over databases on files and the node:net
 * transport): a leader proposes a rebalancing move's commands only once every member advertised a build
 * that reads them. With one member on an older build the move's step is refused (`unavailable`, naming
 * it) and nothing is proposed; once that member is back on this build, the same step runs.
 */
const root = mkdtempSync(join(tmpdir(), 'svc-versions-'));
afterAll(() => rmSync(root, { recursive: true, force: true }));
const SECRET = Buffer.from('y'.repeat(40));

interface Running { host: ConsensusHost; db: Database }

async function start(id: string, peers: RaftPeer[], versions?: Advertised | null): Promise<Running> {
  const self = peers.find((p) => p.id === id)!;
  const dataDir = join(root, id);
  const db = await Database.open({ dataDir, masterKey: null, buildIndex: buildIndexInline, consensus: true });
  const rc: RaftNetConfig = {
    id, listen: { host: self.host, port: self.port }, members: peers, secret: SECRET, tls: null, insecure: false, warnings: [],
    timing: { heartbeatMs: 20, electionMs: 200, writeTimeoutMs: 5000, snapshotEntries: 10_000 },
  };
  const host = await startConsensusMember(rc, db, new NodeEngine(db), dataDir, null, () => undefined, versions === undefined ? {} : { versions });
  return { host, db };
}

async function until<T>(what: string, f: () => T | null | undefined, ms = 15_000): Promise<T> {
  const end = Date.now() + ms;
  for (;;) {
    const v = f();
    if (v !== null && v !== undefined && v !== false) return v;
    if (Date.now() > end) throw new Error(`timed out waiting: ${what}`);
    await new Promise((r) => setTimeout(r, 20));
  }
}

const batch = (r: Running) => (r.host.engine as unknown as { moveBatch(b: unknown): Promise<{ done: boolean; count?: number }> })
  .moveBatch({ move: 'm1', self: 0, targets: [0, 1], limit: 100 });

describe('a consensus group with a member on an older build', () => {
  it('refuses a move step naming that member, proposes nothing, and runs it once the member is upgraded', async () => {
    const peers = await Promise.all(['n1', 'n2', 'n3'].map(async (id) => ({ id, host: '127.0.0.1', port: await freePort() })));
    // n3 stands in for the build before move batches were commands of their own: it reads up to version 2.
    const group = [await start('n1', peers), await start('n2', peers), await start('n3', peers, { command: 2, stream: 1 })];
    try {
      await until('a leader', () => group.some((r) => r.host.view().role === 'leader'));
      const e1 = group[0].host.engine;
      await e1.createCollection({ name: 'c', dim: 2, metric: 'l2', index: 'flat' });
      await e1.upsert('c', { points: Array.from({ length: 20 }, (_, i) => ({ id: `p${i}`, vector: [i, 1] })) });
      const leader = await until('every member heard by the leader', () => group.find((r) => {
        const v = r.host.view();
        return v.role === 'leader' && v.versions.not_heard_from.length === 0 && v.applied_index === v.commit_index;
      }));
      const v = leader.host.view();
      expect(v.members.find((m) => m.id === 'n3')).toMatchObject({ command_version: 2, snapshot_stream_version: 1, advertised: true });
      expect(v.versions).toEqual({ command_version: 2, snapshot_stream_version: 1, not_heard_from: [] });
      const before = v.commit_index;

      // Through a follower (forwarded) and on the leader alike.
      for (const r of group) {
        const e = await batch(r).then(() => null, (x: unknown) => x);
        expect(e).toMatchObject({ code: 'unavailable', detail: { reason: 'version_skew', required_command_version: 3 } });
        expect((e as Error).message).toMatch(/on an older build: n3 \(reads up to version 2\)/);
      }
      // Nothing proposed: the log did not grow, and no member holds a move.
      await new Promise((r) => setTimeout(r, 100));
      expect(leader.host.view().commit_index).toBe(before);
      for (const r of group) expect(r.db.consensusImageVersion()).toBe(1);
      // Plain writes are never gated.
      await e1.upsert('c', { points: [{ id: 'q', vector: [0, 0] }] });

      // n3 comes back on this build: its new handshake replaces what it advertised, and the step runs.
      await group[2].host.engine.close();
      group[2] = await start('n3', peers);
      await until('the leader hears n3 on this build', () => group.some((r) => r.host.view().role === 'leader' && r.host.view().versions.command_version === 3));
      const answer = await batch(group[0]);
      expect(answer).toMatchObject({ done: false });
      expect(answer.count).toBeGreaterThan(0);
      for (const r of group) await until('the move on every member', () => r.db.consensusImageVersion() === 3);
    } finally {
      for (const r of group) await r.host.engine.close().catch(() => undefined);
    }
  }, 60_000);
});
