import { rmSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { probeReusePort } from '../roles/reuse-port.js';
import { eventually, KEY, raftLeader, startRaftGroup, type RaftMember } from './cluster-harness.js';
import { tempDir } from './harness.js';

/**
 * A consensus group whose members each run two request loops (issue 20; a runtime that shares a port:
 * `npm run test:node24`). A member's loops answer plain searches themselves, over its database, as its
 * engine does (the metric says a loop answered). A member cut off from the group while the others write
 * past what their log keeps comes back by a snapshot, restored into its database in place: meanwhile its
 * engine answers reads 503 `restoring` (the state is half old, half new), and so does every loop; no
 * answer ever holds a state part restored, and none holds the old state once the restore began.
 */
const support = await probeReusePort();
const root = tempDir('svc-consensus-loops-');
afterAll(() => rmSync(root, { recursive: true, force: true }));

const TIMING = {
  SVC_RAFT_HEARTBEAT_MS: '50', SVC_RAFT_ELECTION_MS: '500', SVC_RAFT_WRITE_TIMEOUT_SECS: '3', SVC_RAFT_SNAPSHOT_ENTRIES: '40',
  SVC_HTTP_LOOPS: '2',
};
const LOOPS = 2;
const DIM = 8;
const N = 1000;
const vec = (i: number): number[] => Array.from({ length: DIM }, (_, d) => Math.sin(i * 0.37 + d));
const q = { vector: vec(3), k: 20, ef_search: 200 };

interface Answer { status: number; loop: string | null; body: any }

/** One request on a new connection (the kernel picks its loop per connection). */
async function fresh(m: RaftMember, method: string, path: string, body?: unknown): Promise<Answer> {
  const res = await fetch(`${m.server.base}${path}`, {
    method, headers: { authorization: `Bearer ${KEY}`, connection: 'close', ...(body !== undefined ? { 'content-type': 'application/json' } : {}) },
    ...(body !== undefined ? { body: JSON.stringify(body) } : {}),
  });
  const text = await res.text();
  return { status: res.status, loop: res.headers.get('x-svc-loop'), body: text === '' ? null : JSON.parse(text) as unknown };
}

async function metricValue(m: RaftMember, series: string): Promise<number> {
  const text = await (await fetch(`${m.server.base}/metrics`, { headers: { connection: 'close' } })).text();
  const line = text.split('\n').find((l) => l.startsWith(`${series} `));
  return line === undefined ? 0 : Number(line.slice(series.length + 1));
}

const LOOP_ANSWERS = 'svc_loop_searches_total{answered="loop",reason=""}';

/** Every loop of `m` answers `q` as its engine does (a strong read, which no loop answers), themselves. */
async function loopsAgree(m: RaftMember): Promise<void> {
  const before = await metricValue(m, LOOP_ANSWERS);
  await eventually(`every loop of ${m.id} answers as its engine does`, async () => {
    const reference = (await fresh(m, 'POST', '/v1/collections/c/query', { ...q, consistency: 'strong' })).body;
    const seen = new Map<string, unknown>();
    for (let i = 0; i < 50 && seen.size < LOOPS; i++) {
      const a = await fresh(m, 'POST', '/v1/collections/c/query', q);
      if (a.loop !== null) seen.set(a.loop, a.body);
    }
    if (seen.size < LOOPS) return `answered by loops ${[...seen.keys()].join(', ')} only`;
    for (const [loop, body] of seen) if (JSON.stringify(body) !== JSON.stringify(reference)) return `loop ${loop}: ${JSON.stringify(body)}`;
    return true;
  });
  // Each loop has its view now: these it answers itself.
  const reference = (await fresh(m, 'POST', '/v1/collections/c/query', { ...q, consistency: 'strong' })).body;
  for (let i = 0; i < 6; i++) expect((await fresh(m, 'POST', '/v1/collections/c/query', q)).body).toEqual(reference);
  expect(await metricValue(m, LOOP_ANSWERS)).toBeGreaterThan(before);
}

/** A write through the group (retried while it finds no leader, as a client does). */
async function write(members: RaftMember[], method: string, path: string, body: unknown): Promise<void> {
  let r: Answer | null = null;
  for (let t = 0; t < 40; t++) {
    const m = members[t % members.length];
    r = await fresh(m, method, path, body).catch(() => null);
    if (r !== null && r.status < 300) return;
    await new Promise((res) => setTimeout(res, 100));
  }
  throw new Error(`${method} ${path}: ${r?.status} ${JSON.stringify(r?.body)}`);
}

/** Which state an answer is from: every hit old, every hit new, 503 with its reason, or a part of each. */
function stateOf(a: Answer): string {
  if (a.status !== 200) return `${a.status} ${a.body?.error?.code}: ${a.body?.error?.message}`;
  const tags = new Set(a.body.hits.map((h: { payload: { tag: string } }) => h.payload.tag));
  return a.body.hits.length !== q.k ? `${a.body.hits.length} hits` : tags.size === 1 ? [...tags][0] as string : 'part';
}

describe.runIf(support.ok)(`a consensus group whose members run two request loops, on Node ${process.versions.node}`, () => {
  it('answers plain searches in every member\'s loops as its engine does, and hands them to the engine while a member restores a snapshot', async () => {
    const { members, links } = await startRaftGroup(['r1', 'r2', 'r3'], (id) => join(root, id), TIMING);
    try {
      await raftLeader(members);
      await write(members, 'POST', '/v1/collections', { name: 'c', dim: DIM, metric: 'l2' });
      await write(members, 'POST', '/v1/collections', { name: 'f', dim: DIM, metric: 'l2' });
      const points = (tag: string) => Array.from({ length: N }, (_, i) => ({ id: `p${i}`, vector: vec(i), payload: { tag } }));
      await write(members, 'PUT', '/v1/collections/c/points', { points: points('old') });
      for (const m of members) await loopsAgree(m);

      // A follower is cut off from the group; the others replace every point's payload in one write, then
      // write past SVC_RAFT_SNAPSHOT_ENTRIES, so the log the follower would need is compacted.
      const leader = await raftLeader(members);
      const away = members.find((m) => m !== leader)!;
      const rest = members.filter((m) => m !== away);
      const itsLinks = [...links].filter(([name]) => name.split('>').includes(away.id)).map(([, p]) => p);
      for (const p of itsLinks) {
        p.refuse(true);
        p.cut();
      }
      await write(rest, 'PUT', '/v1/collections/c/points', { points: points('new') });
      for (let i = 0; i < 50; i++) await write(rest, 'PUT', '/v1/collections/f/points', { points: [{ id: `f${i}`, vector: vec(i) }] });
      // Cut off, it answers its own state as it is, in its loops too (a strong read, unanswerable now, is no reference).
      for (let i = 0; i < 6; i++) expect(stateOf(await fresh(away, 'POST', '/v1/collections/c/query', q))).toBe('old');

      const seen: string[] = [];
      for (const p of itsLinks) p.refuse(false);
      for (const end = Date.now() + 60_000; ;) {
        expect(Date.now() < end, `no restore within a minute: ${seen.join(', ')}`).toBe(true);
        const s = stateOf(await fresh(away, 'POST', '/v1/collections/c/query', q));
        if (seen.at(-1) !== s) seen.push(s);
        if (s === 'new') break;
      }
      // What a one-loop member answers: the old state until the restore begins, 503 restoring while it runs,
      // then the new state; never a state part restored, never the old state again.
      expect(seen.filter((s) => !s.startsWith('503')), seen.join(', ')).toEqual(seen[0] === 'old' ? ['old', 'new'] : ['new']);
      for (const s of seen.filter((x) => x.startsWith('503'))) expect(s).toMatch(/^503 unavailable: this member is restoring a snapshot/);
      const received = await (await fetch(`${away.server.base}/metrics`)).text();
      expect(Number(/^svc_raft_snapshot_streams_total\{outcome="received"\} (\d+)/m.exec(received)?.[1])).toBeGreaterThanOrEqual(1);
      await loopsAgree(away);
      for (let i = 0; i < 5; i++) expect(stateOf(await fresh(away, 'POST', '/v1/collections/c/query', q))).toBe('new');
    } finally {
      for (const l of links.values()) await l.close();
      await Promise.all(members.map((m) => m.server.stop('SIGKILL')));
    }
  }, 180_000);
});
