import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { Prng } from '../../core/base/prng.js';
import { InsecureSealer } from '../../core/crypto/sealer.js';
import { NodeFileSystem } from '../../core/storage/fs.js';
import { RaftLog } from '../../core/storage/raft-log.js';
import { ConsensusMember } from '../../core/cluster/consensus/member.js';
import type { Entry } from '../../core/cluster/raft/index.js';
import { freePort } from '../testing/free-port.js';
import { RaftTransport, type RaftPeer } from './transport.js';

/**
 * The pieces of issue 17 together on one machine: three members, each with its durable log in real
 * files, talking over the node:net transport with the shared secret, ticking on real timers. Writes are
 * acknowledged only once applied; the leader is stopped and later restarted from its files; every
 * acknowledged write ends up applied, in one order, on every member.
 */
const root = mkdtempSync(join(tmpdir(), 'svc-consensus-'));
afterAll(() => rmSync(root, { recursive: true, force: true }));
const SECRET = Buffer.from('x'.repeat(40));
const TICK_MS = 10;

class Running {
  applied: string[] = [];
  constructor(readonly member: ConsensusMember, readonly transport: RaftTransport, readonly log: RaftLog, readonly timer: NodeJS.Timeout) {}

  async stop(): Promise<void> {
    clearInterval(this.timer);
    await this.transport.close();
    await this.member.close();
    await this.log.close();
  }
}

async function startMember(id: string, peers: RaftPeer[], seed: number): Promise<Running> {
  const self = peers.find((p) => p.id === id)!;
  const log = await RaftLog.open(new NodeFileSystem(), join(root, id), { sealer: new InsecureSealer(), log: () => undefined });
  const applied: string[] = [];
  let member: ConsensusMember | null = null;
  const transport = new RaftTransport({
    id, listen: { host: self.host, port: self.port }, peers, secret: SECRET, tls: null, insecure: false,
    onMessage: (m) => member?.receive(m), limits: { backoffBaseMs: 10, backoffMaxMs: 200 },
  });
  member = new ConsensusMember({
    id, members: peers.map((p) => p.id), storage: log, transport, prng: new Prng(seed), electionTicks: 15, heartbeatTicks: 2,
    stateMachine: {
      apply: (e: Entry) => { if (e.data.length > 0) applied.push(Buffer.from(e.data).toString()); },
      restore: () => { throw new Error('no snapshots in this test'); },
    },
  });
  await transport.start();
  const r = new Running(member, transport, log, setInterval(() => member.tick(), TICK_MS));
  r.applied = applied;
  return r;
}

async function leaderOf(group: Running[], ms = 10_000): Promise<Running> {
  const end = Date.now() + ms;
  for (;;) {
    const l = group.find((r) => r.member.status().role === 'leader');
    if (l) return l;
    if (Date.now() > end) throw new Error('no leader elected');
    await new Promise((r) => setTimeout(r, 20));
  }
}

async function writeAll(group: Running[], keys: string[]): Promise<string[]> {
  const acked: string[] = [];
  for (const k of keys) {
    for (let attempt = 0; ; attempt++) {
      const leader = await leaderOf(group);
      try {
        await leader.member.propose(Buffer.from(k), AbortSignal.timeout(3000));
        acked.push(k);
        break;
      } catch (e) {
        if (attempt > 20) throw e;
        await new Promise((r) => setTimeout(r, 50));
      }
    }
  }
  return acked;
}

describe('a consensus group on 127.0.0.1: durable logs, the node:net transport, the Proposer seam', () => {
  it('acknowledges writes once applied, survives losing its leader, and a restarted member catches up from its files', async () => {
    const peers = await Promise.all(['n1', 'n2', 'n3'].map(async (id) => ({ id, host: '127.0.0.1', port: await freePort() })));
    const group = await Promise.all(peers.map((p, k) => startMember(p.id, peers, k + 1)));
    try {
      const first = await writeAll(group, Array.from({ length: 30 }, (_, i) => `a${i}`));
      const leader = await leaderOf(group);
      // An acknowledged write is applied on the member that acknowledged it, and on a leader elected
      // since (under load) once its term's first entry commits.
      for (let t = 0; t < 100 && !first.every((w) => leader.applied.includes(w)); t++) await new Promise((r) => setTimeout(r, 50));
      expect(leader.applied).toEqual(expect.arrayContaining(first));
      const oldId = leader.member.status().id;
      await leader.stop();
      const rest = group.filter((r) => r !== leader);
      const second = await writeAll(rest, Array.from({ length: 20 }, (_, i) => `b${i}`));
      // A follower refuses writes, naming the leader it knows.
      const follower = rest.find((r) => r.member.status().role !== 'leader')!;
      await expect(follower.member.propose(Buffer.from('nope'))).rejects.toThrow(/not the leader/);
      // The old leader comes back from its files alone and catches up.
      const back = await startMember(oldId, peers, 99);
      group.splice(group.indexOf(leader), 1, back);
      const third = await writeAll(group, ['c0', 'c1']);
      const all = [...first, ...second, ...third];
      const end = Date.now() + 10_000;
      const converged = (): boolean => group.every((r) => all.every((k) => r.applied.includes(k)) && r.applied.length === group[0].applied.length);
      while (!converged()) {
        if (Date.now() > end) throw new Error(`not converged: ${group.map((r) => r.applied.length).join(', ')} of ${all.length}`);
        await new Promise((r) => setTimeout(r, 20));
      }
      // One order everywhere (a retried write whose first try timed out may be there twice: never lost).
      for (const r of group) expect(r.applied).toEqual(group[0].applied);
      for (const r of group) expect(r.member.waiting).toBe(0);
    } finally {
      await Promise.all(group.map((r) => r.stop()));
    }
  }, 60_000);
});
