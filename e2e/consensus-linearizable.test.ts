import { rmSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { checkLinearizable, kvRegisterModel, UNKNOWN, type KvInput, type KvOutput, type Operation } from '../core/testing/linearizability.js';
import { allPoints, eventually, raftLeader, raftView, restartMember, startRaftGroup, KEY, type RaftMember } from './cluster-harness.js';
import { tempDir } from './harness.js';

/**
 * Linearizability of a consensus group of three real `svc serve` processes under faults (issue 17).
 * Clients write (upsert of a point whose payload holds a unique value; delete) and read
 * (`consistency: "strong"`) a few keys through random members, while a nemesis SIGKILLs the leader and
 * restarts it, SIGSTOPs a member, cuts a member off through the fault proxies, and freezes a member's
 * connections (neither closed nor forwarding, as a path that died silently leaves them). Every operation is
 * recorded with its call and return instants; a write whose client never learned its outcome (a 503, a
 * dropped connection, a timeout) may have happened or not. The history is checked by Wing and Gong's
 * search (core/testing/linearizability.ts): zero violations. At the end every acknowledged write's
 * effect is on every member, and the members hold the same points.
 *
 * SVC_RAFT_LIN_SECS (default 20) sets the workload's length; `npm run soak:raft` runs it long.
 */
const root = tempDir('svc-raft-lin-');
afterAll(() => rmSync(root, { recursive: true, force: true }));

const SECS = Number(process.env.SVC_RAFT_LIN_SECS ?? '20');
const CLIENTS = 6;
/** Keys grow with the run so each key's history stays small enough to check (about 250 operations each). */
const KEYS = Math.max(8, Math.ceil(SECS * 0.4));
const COLL = 'lin';
const TIMING = { SVC_RAFT_HEARTBEAT_MS: '50', SVC_RAFT_ELECTION_MS: '400', SVC_RAFT_WRITE_TIMEOUT_SECS: '2', SVC_RAFT_SNAPSHOT_ENTRIES: '200' };

type Op = Operation<KvInput, KvOutput>;

/** One HTTP call with a deadline: the JSON answer, or null when the outcome is unknown to the client. */
async function request(m: RaftMember, method: string, path: string, body?: unknown): Promise<{ status: number; json: any } | null> {
  try {
    const r = await fetch(`${m.server.base}${path}`, {
      method, signal: AbortSignal.timeout(4000),
      headers: { authorization: `Bearer ${KEY}`, ...(body === undefined ? {} : { 'content-type': 'application/json' }) },
      body: body === undefined ? undefined : JSON.stringify(body),
    });
    return { status: r.status, json: await r.json().catch(() => null) };
  } catch {
    return null;
  }
}

describe('a consensus group under kills, pauses and partitions', () => {
  it(`keeps a linearizable history of writes and strong reads (${SECS} s of load)`, async () => {
    const { members, links } = await startRaftGroup(['r1', 'r2', 'r3'], (id) => join(root, id), TIMING);
    const history: Op[] = [];
    const t0 = performance.now();
    const now = (): number => performance.now() - t0;
    const faults: string[] = [];
    let stopped = false;
    const restarting = new Set<RaftMember>();
    try {
      const leader = await raftLeader(members);
      const made = await request(leader, 'POST', '/v1/collections', { name: COLL, dim: 2, metric: 'l2' });
      expect(made?.status).toBe(201);

      let seq = 0;
      const client = async (clientId: number): Promise<void> => {
        let rnd = clientId * 7919 + 1;
        const next = (n: number): number => {
          rnd = (rnd * 1103515245 + 12345) % 2147483648;
          return rnd % n;
        };
        while (!stopped) {
          const m = members[next(members.length)];
          if (restarting.has(m)) {
            await new Promise((r) => setTimeout(r, 20));
            continue;
          }
          const key = `k${next(KEYS)}`;
          const kind = next(10);
          const call = now();
          if (kind < 4) {
            const value = `c${clientId}-${seq++}`;
            const r = await request(m, 'PUT', `/v1/collections/${COLL}/points`, { points: [{ id: key, vector: [1, 2], payload: { v: value } }] });
            const ok = r?.status === 200;
            // A refusal of the request itself (4xx) changed nothing; anything else but 200 may have.
            if (r !== null && r.status >= 400 && r.status < 500) continue;
            history.push({ clientId, input: { op: 'put', key, value }, call, output: ok ? {} : UNKNOWN, return: ok ? now() : Infinity });
          } else if (kind < 5) {
            const r = await request(m, 'DELETE', `/v1/collections/${COLL}/points/${key}`);
            const ok = r?.status === 200;
            if (r !== null && r.status >= 400 && r.status < 500) continue;
            history.push({ clientId, input: { op: 'delete', key }, call, output: ok ? {} : UNKNOWN, return: ok ? now() : Infinity });
          } else {
            const r = await request(m, 'POST', `/v1/collections/${COLL}/points:fetch`, { limit: 1000, consistency: 'strong' });
            if (r?.status !== 200) continue; // a read that failed tells nothing
            const p = (r.json.points as { id: string; payload: { v: string } }[]).find((x) => x.id === key);
            history.push({ clientId, input: { op: 'get', key }, call, output: { value: p === undefined ? null : p.payload.v }, return: now() });
          }
        }
      };

      const nemesis = async (): Promise<void> => {
        let round = 0;
        const pause = (ms: number) => new Promise((r) => setTimeout(r, ms));
        while (!stopped) {
          await pause(1500);
          if (stopped) break;
          const kind = round++ % 4;
          if (kind === 0) {
            // SIGKILL the leader, restart it a moment later on its data directory.
            const views = await Promise.all(members.map((m) => raftView(m).catch(() => null)));
            const l = members.find((_, i) => views[i]?.role === 'leader');
            if (l === undefined) continue;
            restarting.add(l);
            await l.server.stop('SIGKILL');
            faults.push(`kill ${l.id} at ${Math.round(now())} ms`);
            await pause(700);
            await restartMember(l);
            restarting.delete(l);
          } else if (kind === 1) {
            const m = members[round % members.length];
            m.server.child.kill('SIGSTOP');
            faults.push(`pause ${m.id} at ${Math.round(now())} ms`);
            await pause(1200);
            m.server.child.kill('SIGCONT');
          } else if (kind === 3) {
            // Every connection to and from a member freezes, neither closed nor forwarding (its network
            // path died silently; new connections work): found by the transport's pings, then dialled again.
            const m = members[round % members.length];
            for (const [name, l] of links) if (name.includes(m.id)) l.hang();
            faults.push(`hang ${m.id}'s connections at ${Math.round(now())} ms`);
          } else {
            const m = members[(round + 1) % members.length];
            const cut = [...links].filter(([name]) => name.includes(m.id)).map(([, l]) => l);
            for (const l of cut) {
              l.refuse(true);
              l.cut();
            }
            faults.push(`isolate ${m.id} at ${Math.round(now())} ms`);
            await pause(1500);
            for (const l of cut) l.refuse(false);
          }
        }
      };

      const running = [...Array.from({ length: CLIENTS }, (_, i) => client(i)), nemesis()];
      // At least SECS seconds and three faults (a loaded machine restarts slowly), at most four times as long.
      const until = Date.now() + SECS * 1000;
      const cap = Date.now() + SECS * 4000;
      while (Date.now() < cap && (Date.now() < until || faults.length < 3)) await new Promise((r) => setTimeout(r, 200));
      stopped = true;
      await Promise.all(running);

      const result = checkLinearizable(kvRegisterModel, history, { timeoutMs: 60_000 + SECS * 500 });
      const acked = history.filter((o) => o.output !== UNKNOWN && o.input.op !== 'get').length;
      const reads = history.filter((o) => o.input.op === 'get').length;
      console.log(`raft linearizability: ${history.length} ops (${acked} acknowledged writes, ${reads} strong reads), faults: ${faults.join('; ')}`);
      expect(faults.length).toBeGreaterThanOrEqual(3);
      expect(acked).toBeGreaterThan(10);
      expect(reads).toBeGreaterThan(10);
      expect(result.ok, result.ok ? '' : `${result.verdict}: ${result.explanation}`).toBe(true);

      // Every member ends with the same points, and every key's last acknowledged state is there
      // (the checker placed every acknowledged write; here the members agree on the outcome).
      await eventually('the members converge', async () => {
        const sets = await Promise.all(members.map((m) => allPoints(m.server, COLL)));
        return sets.every((s) => JSON.stringify(s) === JSON.stringify(sets[0])) ? true : `sizes ${sets.map((s) => s.length).join(', ')}`;
      }, 30_000);
      // A strong read right after the faults may wait for a member to find its leader: retried as a client does.
      let final = await request(members[0], 'POST', `/v1/collections/${COLL}/points:fetch`, { limit: 1000, consistency: 'strong' });
      for (let t = 0; final?.status !== 200 && t < 20; t++) {
        await new Promise((r) => setTimeout(r, 500));
        final = await request(members[0], 'POST', `/v1/collections/${COLL}/points:fetch`, { limit: 1000, consistency: 'strong' });
      }
      expect(final?.status, JSON.stringify(final?.json)).toBe(200);
      const finalHistory: Op[] = [...history];
      const end = now() + 1;
      for (let k = 0; k < KEYS; k++) {
        const p = (final!.json.points as { id: string; payload: { v: string } }[]).find((x) => x.id === `k${k}`);
        finalHistory.push({ clientId: 99, input: { op: 'get', key: `k${k}` }, call: end, output: { value: p === undefined ? null : p.payload.v }, return: end + 1 });
      }
      const withFinal = checkLinearizable(kvRegisterModel, finalHistory, { timeoutMs: 60_000 + SECS * 500 });
      expect(withFinal.ok, withFinal.ok ? '' : `${withFinal.verdict}: ${withFinal.explanation}`).toBe(true);
    } finally {
      stopped = true;
      for (const m of members) m.server.child.kill('SIGCONT');
      await Promise.all(members.map((m) => m.server.stop('SIGKILL')));
      for (const l of links.values()) await l.close();
    }
  }, (SECS * 5 + 200) * 1000);
});
