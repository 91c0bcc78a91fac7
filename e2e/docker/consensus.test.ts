/**
 * A consensus group of three containers of the image under a router, on a Docker network (issue 18,
 * docs/consensus.md): the members g1-1, g1-2 and g1-3 run Raft on port 6340 of their own names and all
 * answer to the alias g1, the URL the router names the shard by (as docker-compose.yml's shard-1 does).
 * Under a write load through the router: `docker kill` of the leader, `docker pause` of a member, and a
 * member cut off by `docker network disconnect`; writes go on with a quorum each time; afterwards every
 * acknowledged id is there, through the router and on every member, and the members are equal.
 *
 * The router keeps its connections to the member Docker's DNS gave it; a paused member still resolves and
 * calls that reach it wait out SVC_CLUSTER_TIMEOUT_SECS, so the pause and the cut take a member the
 * router is not writing through (found from the members' request counters): the point is the quorum.
 * The leader is killed wherever the router writes. The reaper cannot be pulled here: afterAll removes
 * everything, and every container carries the label .ci/run's trap removes.
 */
import { GenericContainer, Network, Wait, type StartedNetwork, type StartedTestContainer } from 'testcontainers';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { IMAGE, LABEL, PREFIX, call, checkTopK, eventually, must, points, requireEngine, secret, sh, removeAll, routerReady } from './docker-harness.js';

const CLIENT_KEY = secret();
const SHARD_KEY = secret();
const MASTER = secret(32);
const RAFT_SECRET = secret(32);
const IDS = ['g1-1', 'g1-2', 'g1-3'];
const TIMING = { SVC_RAFT_HEARTBEAT_MS: '50', SVC_RAFT_ELECTION_MS: '500', SVC_RAFT_WRITE_TIMEOUT_SECS: '3', SVC_RAFT_SNAPSHOT_ENTRIES: '300' };

let network: StartedNetwork | undefined;
const started: StartedTestContainer[] = [];
const members = new Map<string, StartedTestContainer>();
let base = '';

const via = (method: string, path: string, body?: unknown) => call(base, CLIENT_KEY, method, path, body);

/** A member's REST port on this host, asked each time: `docker start` gives a killed member a new one. */
function memberBase(id: string): string {
  const out = must(`docker port ${id}`, sh('docker', ['port', members.get(id)!.getId(), '6333/tcp']));
  const port = /:(\d+)\s*$/m.exec(out.split('\n')[0])?.[1];
  if (port === undefined) throw new Error(`docker port of ${id}: ${out}`);
  return `http://127.0.0.1:${port}`;
}

const onMember = (id: string, method: string, path: string, body?: unknown) => call(memberBase(id), SHARD_KEY, method, path, body);

interface RaftView { id: string; role: string; term: number; leader_id: string | null; commit_index: number; applied_index: number }

async function view(id: string): Promise<RaftView> {
  const r = await onMember(id, 'GET', '/cluster/raft');
  if (r.status !== 200) throw new Error(`/cluster/raft on ${id}: ${r.status} ${JSON.stringify(r.json)}`);
  return r.json;
}

/** The leader every one of `ids` names, once they agree and it calls itself leader. */
async function agreedLeader(ids: string[]): Promise<string> {
  let leader = '';
  await eventually(`${ids.join(', ')} agree on a leader`, async () => {
    const views = await Promise.all(ids.map(view));
    const named = new Set(views.map((v) => v.leader_id));
    const l = views[0].leader_id;
    if (named.size !== 1 || l === null || (ids.includes(l) && views.find((v) => v.id === l)?.role !== 'leader')) {
      return JSON.stringify(views.map((v) => [v.id, v.role, v.term, v.leader_id]));
    }
    leader = l;
    return true;
  }, 30_000);
  return leader;
}

/** The point ids `base` holds, read page by page with `consistency: "strong"`. */
async function strongIds(baseUrl: string, key: string): Promise<string[]> {
  const ids: string[] = [];
  let cursor: string | null = null;
  do {
    const r: { status: number; json: any } = await call(baseUrl, key, 'POST', '/v1/collections/docs/points:fetch', { limit: 1000, cursor, consistency: 'strong' });
    if (r.status !== 200) throw new Error(`strong fetch on ${baseUrl}: ${r.status} ${JSON.stringify(r.json)}`);
    ids.push(...r.json.points.map((p: { id: string }) => p.id));
    cursor = r.json.next_cursor;
  } while (cursor !== null);
  return ids.sort();
}

/** PUT requests a member has served (its /metrics), to tell which member the router writes through. */
async function putsServed(id: string): Promise<number> {
  const r = await fetch(`${memberBase(id)}/metrics`, { signal: AbortSignal.timeout(5_000) });
  let n = 0;
  for (const line of (await r.text()).split('\n')) {
    if (line.startsWith('svc_http_requests_total{') && line.includes('method="PUT"')) n += Number(line.slice(line.lastIndexOf(' ') + 1));
  }
  return n;
}

/** Two clients writing batches of 10 new ids through the router until stopped; what was acknowledged, and when. */
function writeLoad() {
  const acked: { at: number; ids: string[] }[] = [];
  let failed = 0;
  let running = true;
  let n = 0;
  const worker = async (w: number) => {
    while (running) {
      const batch = n++;
      const pts = points(10).map((p, k) => ({ ...p, id: `w${w}-${batch}-${k}` }));
      const r = await via('PUT', '/v1/collections/docs/points', { points: pts }).catch(() => null);
      if (r?.status === 200) acked.push({ at: Date.now(), ids: pts.map((p) => p.id) });
      else {
        failed++;
        await new Promise((res) => setTimeout(res, 100));
      }
    }
  };
  const done = Promise.all([worker(0), worker(1)]);
  return {
    acked, failed: () => failed,
    ackedSince: (t: number) => acked.filter((a) => a.at >= t).length,
    async stop() {
      running = false;
      await done;
    },
  };
}

/** Waits until at least `batches` more batches are acknowledged after `t`, or fails saying how many were. */
async function writesGoOn(load: ReturnType<typeof writeLoad>, t: number, batches: number, what: string): Promise<void> {
  await eventually(`writes acknowledged ${what}`, async () => {
    const k = load.ackedSince(t);
    return k >= batches ? true : `${k} batches acknowledged, ${load.failed()} failed`;
  }, 30_000);
}

beforeAll(async () => {
  requireEngine();
  network = await new Network({ nextUuid: () => `${PREFIX}-consensus-${process.pid}` }).start();
  const list = IDS.map((id) => `${id}=${id}:6340`).join(',');
  const member = (id: string) => new GenericContainer(IMAGE)
    .withNetwork(network!)
    .withNetworkAliases(id, 'g1')
    .withLabels({ [LABEL]: 'consensus' })
    .withEnvironment({
      // Plain text on this private network, as docker-compose.yml; keys, master key and the group's secret given.
      SVC_INSECURE: 'true', SVC_ENCRYPTION_KEY: MASTER, SVC_API_KEYS: SHARD_KEY, RUST_LOG: 'warn',
      SVC_RAFT_MEMBERS: list, SVC_RAFT_NODE_ID: id, SVC_RAFT_SECRET: RAFT_SECRET, ...TIMING,
    })
    .withExposedPorts(6333)
    .withWaitStrategy(Wait.forHealthCheck())
    .withStartupTimeout(90_000)
    .start()
    .then((c) => {
      started.push(c);
      members.set(id, c);
    });
  await Promise.all(IDS.map(member));
  const router = await new GenericContainer(IMAGE)
    .withNetwork(network)
    .withNetworkAliases('router')
    .withLabels({ [LABEL]: 'consensus' })
    .withEnvironment({
      SVC_INSECURE: 'true', SVC_ENCRYPTION_KEY: MASTER, RUST_LOG: 'warn',
      SVC_API_KEYS: CLIENT_KEY, SVC_CLUSTER_SHARD_KEY: SHARD_KEY, SVC_CLUSTER_SHARDS: '[http://g1:6333]', SVC_CLUSTER_TIMEOUT_SECS: '4',
    })
    .withExposedPorts(6333)
    .withWaitStrategy(Wait.forHealthCheck())
    .withStartupTimeout(90_000)
    .start();
  started.push(router);
  base = `http://${router.getHost()}:${router.getMappedPort(6333)}`;
  await routerReady(base);
}, 300_000);

afterAll(async () => {
  await removeAll(started, network);
}, 120_000);

describe('a consensus group of three containers under a router (testcontainers)', () => {
  it('takes writes and answers reads through the router, every member holding them', async () => {
    expect((await via('POST', '/v1/collections', { name: 'docs', dim: 4, metric: 'cosine' })).status).toBe(201);
    const pts = points(100);
    expect((await via('PUT', '/v1/collections/docs/points', { points: pts })).json).toEqual({ upserted: 100 });
    const q = [3, 1, 2, 5];
    const hits = (await via('POST', '/v1/collections/docs/query', { vector: q, k: 10, consistency: 'strong' })).json.hits;
    expect(checkTopK(hits, pts, q, 10)).toBe(true);
    await agreedLeader(IDS);
    for (const id of IDS) expect((await strongIds(memberBase(id), SHARD_KEY)).length).toBe(100);
  });

  it('loses no acknowledged write to a killed leader, a paused member or one cut off, and the members end equal', async () => {
    const load = writeLoad();
    const phases: string[] = [];
    try {
      await writesGoOn(load, 0, 5, 'before any fault');

      // docker kill of the leader: the two others elect one; the killed one comes back and catches up.
      const leader = await agreedLeader(IDS);
      let t = Date.now();
      must('docker kill', sh('docker', ['kill', members.get(leader)!.getId()]));
      await writesGoOn(load, t, 5, `after ${leader}, the leader, was killed`);
      const newLeader = await agreedLeader(IDS.filter((id) => id !== leader));
      expect(newLeader).not.toBe(leader);
      phases.push(`kill ${leader}: 5 batches in ${Date.now() - t} ms`);
      must('docker start', sh('docker', ['start', members.get(leader)!.getId()]));
      await agreedLeader(IDS);

      // The members the router writes through: those whose PUT count grows over a few batches. Two
      // clients keep at most two connections busy, but one may be replaced meanwhile: look again then.
      let spare: string[] = [];
      let routed: string[] = [];
      for (let look = 0; look < 3 && spare.length === 0; look++) {
        const before = await Promise.all(IDS.map(putsServed));
        await writesGoOn(load, Date.now(), 5, 'to find the router\'s members');
        const after = await Promise.all(IDS.map(putsServed));
        routed = IDS.filter((_, i) => after[i] > before[i]);
        spare = IDS.filter((id) => !routed.includes(id));
      }
      expect(spare.length, `the router wrote through ${routed.join(', ')} each time`).toBeGreaterThan(0);

      // docker pause of a member the router does not use: the other two are a quorum.
      const paused = spare[0];
      t = Date.now();
      must('docker pause', sh('docker', ['pause', members.get(paused)!.getId()]));
      try {
        await writesGoOn(load, t, 10, `while ${paused} is paused`);
        phases.push(`pause ${paused}: 10 batches in ${Date.now() - t} ms`);
      } finally {
        must('docker unpause', sh('docker', ['unpause', members.get(paused)!.getId()]));
      }
      await agreedLeader(IDS);

      // docker network disconnect: the member is cut off from the others and the router, then returns.
      const cut = spare[spare.length - 1];
      const c = members.get(cut)!;
      t = Date.now();
      must('docker network disconnect', sh('docker', ['network', 'disconnect', network!.getName(), c.getId()]));
      try {
        await writesGoOn(load, t, 10, `while ${cut} is cut off`);
        phases.push(`disconnect ${cut}: 10 batches in ${Date.now() - t} ms`);
      } finally {
        must('docker network connect', sh('docker', ['network', 'connect', '--alias', cut, '--alias', 'g1', network!.getName(), c.getId()]));
      }
    } finally {
      await load.stop();
    }
    console.log(`consensus: ${load.acked.length} batches acknowledged, ${load.failed()} failed; ${phases.join('; ')}`);

    // Every acknowledged id is there through the router, and every member holds exactly the same points.
    const acked = new Set(load.acked.flatMap((a) => a.ids));
    const all = await strongIds(base, CLIENT_KEY);
    const missing = [...acked].filter((id) => !all.includes(id));
    expect(missing, `${missing.length} acknowledged ids missing`).toEqual([]);
    await eventually('every member has applied the same index', async () => {
      const views = await Promise.all(IDS.map(view));
      const applied = new Set(views.map((v) => v.applied_index));
      return applied.size === 1 && new Set(views.map((v) => v.leader_id)).size === 1 ? true : JSON.stringify(views.map((v) => [v.id, v.role, v.applied_index]));
    }, 60_000);
    for (const id of IDS) expect(await strongIds(memberBase(id), SHARD_KEY), id).toEqual(all);
  }, 240_000);
});
