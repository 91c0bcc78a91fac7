/**
 * The image as the cluster's roles on a real Docker engine, driven by testcontainers (issue 18): a
 * coordinator, two shards and a router on one Docker network, each a container of the built image,
 * reaching the others by name. Writes and reads go through the router's published port; the shards'
 * own counts (asked inside their containers) show the points were split; `docker kill` of a shard makes
 * what needs it fail with 503 unavailable naming it, and the router answers again, with nothing lost,
 * once the same container is started again. The reaper cannot be pulled here
 * (TESTCONTAINERS_RYUK_DISABLED=true): everything started is removed in afterAll, volumes included, and
 * carries the label .ci/run's trap removes.
 * Consensus groups (a member killed, paused or cut off under a write load): consensus.test.ts.
 */
import { GenericContainer, Network, Wait, type StartedNetwork, type StartedTestContainer } from 'testcontainers';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { IMAGE, LABEL, PREFIX, call, checkTopK, eventually, must, points, requireEngine, secret, sh, removeAll, routerReady } from './docker-harness.js';

const CLIENT_KEY = secret();
const SHARD_KEY = secret();
const MASTER = secret(32);
const PTS = points(240);

let network: StartedNetwork | undefined;
const started: StartedTestContainer[] = [];
let router: StartedTestContainer;
let shardA: StartedTestContainer;
let shardB: StartedTestContainer;
let base = '';

/** A container of the image on the test network, named `alias` there, healthy by the image's HEALTHCHECK. */
async function role(alias: string, env: Record<string, string>, opts: { publish?: boolean } = {}): Promise<StartedTestContainer> {
  let c = new GenericContainer(IMAGE)
    .withNetwork(network!)
    .withNetworkAliases(alias)
    .withLabels({ [LABEL]: 'cluster' })
    .withEnvironment({
      // Plain text on this private network on purpose (as docker-compose.yml); keys and master key given.
      SVC_INSECURE: 'true', SVC_ENCRYPTION_KEY: MASTER, RUST_LOG: 'warn', ...env,
    })
    .withWaitStrategy(Wait.forHealthCheck())
    .withStartupTimeout(90_000);
  if (opts.publish) c = c.withExposedPorts(6333);
  const s = await c.start();
  started.push(s);
  return s;
}

/** A node's own /v1/stats, asked inside its container (shards publish no port). */
async function statsInside(c: StartedTestContainer): Promise<{ total_points: number }> {
  const r = await c.exec(['node', '-e', `fetch('http://127.0.0.1:6333/v1/stats', { headers: { authorization: 'Bearer ${SHARD_KEY}' } })
    .then((r) => r.text()).then((t) => process.stdout.write(t), (e) => { console.error(String(e)); process.exit(1); })`]);
  if (r.exitCode !== 0) throw new Error(`stats inside ${c.getName()}: ${r.output}`);
  return JSON.parse(r.stdout);
}

const via = (method: string, path: string, body?: unknown) => call(base, CLIENT_KEY, method, path, body);

beforeAll(async () => {
  requireEngine();
  network = await new Network({ nextUuid: () => `${PREFIX}-cluster-${process.pid}` }).start();
  const node = { SVC_API_KEYS: SHARD_KEY };
  const shards = '[http://shard-a:6333,http://shard-b:6333]';
  [shardA, shardB] = await Promise.all([role('shard-a', node), role('shard-b', node)]);
  await role('coordinator', {
    SVC_COORDINATOR: 'true', SVC_API_KEYS: SHARD_KEY, SVC_CLUSTER_SHARD_KEY: SHARD_KEY,
    SVC_CLUSTER_SHARDS: shards, SVC_COORDINATOR_STATE: '/var/lib/svc/coordinator-state.json',
    SVC_AUTOSCALE_INTERVAL_SECS: '1',
  });
  router = await role('router', {
    SVC_API_KEYS: CLIENT_KEY, SVC_CLUSTER_SHARD_KEY: SHARD_KEY, SVC_CLUSTER_SHARDS: shards,
    SVC_COORDINATOR_URL: 'http://coordinator:6333', SVC_CLUSTER_TIMEOUT_SECS: '5', SVC_CLUSTER_MAP_REFRESH_SECS: '1',
  }, { publish: true });
  base = `http://${router.getHost()}:${router.getMappedPort(6333)}`;
  await routerReady(base);
}, 300_000);

afterAll(async () => {
  await removeAll(started, network);
}, 120_000);

describe('the image as coordinator, router and two shards on a Docker network (testcontainers)', () => {
  it('runs as uid 10001, not root, with the data directory inside the volume', async () => {
    const r = await shardB.exec(['node', '-e', 'console.log(process.getuid(), require("fs").readdirSync("/var/lib/svc").join(","))']);
    expect(r.stdout.trim()).toBe('10001 data');
    const user = must('docker inspect', sh('docker', ['image', 'inspect', IMAGE, '--format', '{{.Config.User}} {{json .Config.Volumes}}']));
    expect(user.trim()).toBe('10001:10001 {"/var/lib/svc":{}}');
  });

  it('takes writes and answers reads through the router, the points split over both shards', async () => {
    expect((await via('POST', '/v1/collections', { name: 'docs', dim: 4, metric: 'cosine', filterable: [{ path: 'i', field_type: 'numeric' }] })).status).toBe(201);
    for (let i = 0; i < PTS.length; i += 60) {
      const r = await via('PUT', '/v1/collections/docs/points', { points: PTS.slice(i, i + 60) });
      expect([r.status, r.json]).toEqual([200, { upserted: 60 }]);
    }
    expect((await via('POST', '/v1/collections/docs/points:count', {})).json).toEqual({ count: PTS.length });
    const q = [3, 1, 2, 5];
    const hits = (await via('POST', '/v1/collections/docs/query', { vector: q, k: 10, consistency: 'strong' })).json.hits;
    expect(checkTopK(hits, PTS, q, 10)).toBe(true);
    const filtered = (await via('POST', '/v1/collections/docs/query', { vector: q, k: 5, filter: { lt: { field: 'i', value: 20 } }, consistency: 'strong' })).json.hits;
    expect(checkTopK(filtered, PTS.filter((p) => p.payload.i < 20), q, 5)).toBe(true);
    const one = await via('GET', '/v1/collections/docs/points/p123');
    expect([one.status, one.json.payload]).toEqual([200, { i: 123 }]);

    const [a, b] = await Promise.all([statsInside(shardA), statsInside(shardB)]);
    expect(a.total_points + b.total_points).toBe(PTS.length);
    expect(a.total_points).toBeGreaterThan(PTS.length / 4);
    expect(b.total_points).toBeGreaterThan(PTS.length / 4);

    const map = await via('GET', '/cluster/map');
    expect(map.json.shards.map((s: any) => [s.id, s.url, s.state])).toEqual([[0, 'http://shard-a:6333', 'active'], [1, 'http://shard-b:6333', 'active']]);
  });

  it('answers 503 unavailable naming a shard after docker kill, and again in full once it is started', async () => {
    must('docker kill', sh('docker', ['kill', shardB.getId()]));
    const named = 'shard 1 (http://shard-b:6333)';
    const search = await via('POST', '/v1/collections/docs/query', { vector: [1, 2, 3, 4], k: 5 });
    expect([search.status, search.json.error?.code]).toEqual([503, 'unavailable']);
    expect(search.json.error.message).toContain(named);
    const write = await via('PUT', '/v1/collections/docs/points', { points: points(30).map((p) => ({ ...p, id: `late-${p.id}` })) });
    expect([write.status, write.json.error?.code]).toEqual([503, 'unavailable']);
    expect(write.json.error.message).toContain(named);

    // The same container again: its volume kept every acknowledged point.
    must('docker start', sh('docker', ['start', shardB.getId()]));
    await eventually('the router answers counts again', async () => {
      const r = await via('POST', '/v1/collections/docs/points:count', {});
      return r.status === 200 && r.json.count >= PTS.length ? true : `${r.status} ${JSON.stringify(r.json)}`;
    }, 90_000);
    // The failed batch may have landed on shard 0 (docs/cluster.md: a write is never sent twice for the
    // caller); the caller sends it again, which completes it.
    const late = points(30).map((p) => ({ ...p, id: `late-${p.id}` }));
    const again = await via('PUT', '/v1/collections/docs/points', { points: late });
    expect([again.status, again.json]).toEqual([200, { upserted: 30 }]);
    expect((await via('POST', '/v1/collections/docs/points:count', {})).json).toEqual({ count: PTS.length + 30 });
    const q = [5, 4, 3, 2];
    const hits = (await via('POST', '/v1/collections/docs/query', { vector: q, k: 10, consistency: 'strong' })).json.hits;
    expect(checkTopK(hits, [...PTS, ...late], q, 10)).toBe(true);
  }, 180_000);
});
