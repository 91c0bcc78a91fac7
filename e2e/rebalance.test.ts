/**
 * Rebalancing end to end (issue 16, docs/cluster.md "Rebalancing"): two shards, a coordinator, a router
 * and a single reference node fed the same writes. A continuous writer (upserts, overwrites, deletes)
 * and reader go through the router while a third shard registers (the router stopped meanwhile, so the
 * move waits for it to read the new map) and its points move to it, with the coordinator killed with -9
 * and restarted mid-move; then a shard drains under the same load and is
 * deleted. Zero failed requests, every acknowledged point readable with its last vector at every
 * sample, no duplicates, the new shard holds about a third, queries equal the reference's. Imports no
 * project code.
 */
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { call, eventually, KEY, startNode } from './cluster-harness.js';
import { api, MASTER, serve, tempDir, type Server } from './harness.js';
import { countOn, fetchAll, LoadModel as Model, seededRandom, startLoad } from './load-harness.js';

const ROUTER_KEY = 'rebalance-router-key';
const running = new Set<Server>();
afterAll(async () => {
  await Promise.all([...running].map((s) => s.stop('SIGKILL')));
});

async function started(p: Promise<Server>): Promise<Server> {
  const s = await p;
  running.add(s);
  return s;
}

const rand = seededRandom(1616);
const int = (n: number) => Math.floor(rand() * n);
const vec = (dim: number) => Array.from({ length: dim }, () => int(9) - 4);
const DIM = 8;
const INITIAL = 6000;





/** Everything the router answers equals the reference and the model: no point lost, none twice. */
async function checkEverything(router: ReturnType<typeof api>, reference: ReturnType<typeof api>, model: Model): Promise<void> {
  const all = await fetchAll(router, 'c');
  const ids = all.map((p) => p.id);
  expect(new Set(ids).size).toBe(ids.length);
  const live = model.live().sort();
  expect([...ids].sort()).toEqual(live);
  for (const p of all) expect(p.vector).toEqual(model.points.get(p.id));
  expect((await router('POST', '/v1/collections/c/points:count', {})).json.count).toBe(live.length);
  for (let i = 0; i < 15; i++) {
    const body = { vector: vec(DIM), k: 10, ...(i % 3 === 0 ? { filter: { eq: { field: 'g', value: 'a' } } } : {}) };
    const [a, b] = [await router('POST', '/v1/collections/c/query', body), await reference('POST', '/v1/collections/c/query', body)];
    expect(a.json).toEqual(b.json);
  }
  const multi = { vectors: [vec(4), vec(4)], k: 5 };
  expect((await router('POST', '/v1/collections/m/query/multi', multi)).json).toEqual((await reference('POST', '/v1/collections/m/query/multi', multi)).json);
  expect((await router('POST', '/v1/collections/m/points:count', {})).json).toEqual((await reference('POST', '/v1/collections/m/points:count', {})).json);
}

describe('rebalancing under load', () => {
  let shards: Server[];
  let coordinator: Server;
  let router: Server;
  let reference: Server;
  let viaRouter: ReturnType<typeof api>;
  let ref: ReturnType<typeof api>;
  let admin: ReturnType<typeof api>;
  let cwd: string;
  const model = new Model();

  beforeAll(async () => {
    cwd = tempDir();
    shards = await Promise.all([0, 1, 2].map((i) => started(startNode(join(cwd, `s${i}`)))));
    reference = await started(startNode(join(cwd, 'ref')));
    coordinator = await started(serve({
      SVC_COORDINATOR: 'true', SVC_API_KEYS: KEY, SVC_ENCRYPTION_KEY: MASTER, SVC_CLUSTER_SHARD_KEY: KEY,
      SVC_CLUSTER_SHARDS: `[${shards[0].base},${shards[1].base}]`, SVC_COORDINATOR_STATE: join(cwd, 'coordinator.json'),
      SVC_AUDIT_LOG: join(cwd, 'coordinator-audit.log'), SVC_AUTOSCALE_INTERVAL_SECS: '0.5', SVC_REBALANCE_BATCH_POINTS: '25',
      SVC_CLUSTER_MAP_REFRESH_SECS: '0.5', RUST_LOG: 'info',
    }, { cwd }));
    router = await started(serve({
      SVC_COORDINATOR_URL: coordinator.base, SVC_CLUSTER_SHARD_KEY: KEY, SVC_API_KEYS: ROUTER_KEY, SVC_ENCRYPTION_KEY: MASTER,
      SVC_CLUSTER_MAP_REFRESH_SECS: '0.5', RUST_LOG: 'info',
    }, { cwd }));
    viaRouter = api(router.base, ROUTER_KEY);
    ref = call(reference);
    admin = call(coordinator);
    for (const c of [viaRouter, ref]) {
      expect((await c('POST', '/v1/collections', { name: 'c', dim: DIM, metric: 'l2', index: 'flat', filterable: [{ path: 'g', field_type: 'keyword' }] })).status).toBe(201);
      expect((await c('POST', '/v1/collections', { name: 'm', dim: 4, metric: 'cosine', multivector: true })).status).toBe(201);
    }
    const points = Array.from({ length: INITIAL }, () => ({ id: `p${model.next++}`, vector: vec(DIM), payload: { g: int(2) === 0 ? 'a' : 'b' } }));
    for (let i = 0; i < points.length; i += 1000) {
      const part = points.slice(i, i + 1000);
      expect((await viaRouter('POST', '/v1/collections/c/points:bulk', { points: part })).status).toBe(200);
      expect((await ref('POST', '/v1/collections/c/points:bulk', { points: part })).status).toBe(200);
    }
    for (const p of points) model.points.set(p.id, p.vector);
    const documents = Array.from({ length: 300 }, (_, i) => ({ id: `d${i}`, vectors: [vec(4).map((x) => x || 1), vec(4).map((x) => x || 1)], payload: { i } }));
    expect((await viaRouter('PUT', '/v1/collections/m/documents', { documents })).status).toBe(200);
    expect((await ref('PUT', '/v1/collections/m/documents', { documents })).status).toBe(200);
  }, 120_000);

  it('scales out: a third shard takes about a third of the points, through a kill -9 of the coordinator, with no failed request', async () => {
    const load = startLoad(viaRouter, ref, model, { int, vec, dim: DIM });
    await new Promise((r) => setTimeout(r, 500));
    // The router is stopped while the shard registers (a router that reads the map late): the move waits
    // for it to route by the map with the joining shard, well past the settle time (twice 0.5 s).
    router.child.kill('SIGSTOP');
    const reg = await admin('POST', '/cluster/shards', { url: shards[2].base });
    expect(reg.status).toBe(201);
    const id = reg.json.id as number;
    await new Promise((r) => setTimeout(r, 2500));
    const movedEarly = await countOn(shards[2], 'c');
    router.child.kill('SIGCONT');
    expect(movedEarly).toBe(0);
    // Mid-move (points have reached the new shard, the move is not over): the coordinator dies.
    await eventually('points reach the new shard', async () => ((await countOn(shards[2], 'c')) > 0 ? true : 'none yet'), 30_000);
    const env = coordinator.env;
    const killed = coordinator;
    await coordinator.stop('SIGKILL');
    running.delete(coordinator);
    const mapBefore = JSON.parse(readFileSync(join(cwd, 'coordinator.json'), 'utf8'));
    expect(mapBefore.move).toBeDefined();
    await new Promise((r) => setTimeout(r, 300));
    const t0 = Date.now();
    coordinator = await started(serve(env, { cwd }));
    const restartMs = Date.now() - t0;
    admin = call(coordinator);
    await eventually('the new shard turns active', async () => {
      const map = (await admin('GET', '/cluster/map')).json;
      return map.shards.find((s: { id: number }) => s.id === id)?.state === 'active' ? true : JSON.stringify(map.shards);
    }, 60_000);
    // Routers follow the new map; the load goes on a little under it.
    await new Promise((r) => setTimeout(r, 1000));
    const { writes, reads, failures } = await load.stop();
    if (failures.length > 0) {
      console.log('restart ms', restartMs, killed.stdout().slice(-3000), killed.stderr().slice(-2000), coordinator.stdout().slice(-5000), coordinator.stderr().slice(-2000));
      for (const s of shards) console.log(s.base, s.stdout().slice(-3000), s.stderr().slice(-2000));
      console.log('router', router.stdout().slice(-5000), router.stderr().slice(-2000));
    }
    expect(failures).toEqual([]);
    expect(writes).toBeGreaterThan(20);
    expect(reads).toBeGreaterThan(20);

    await checkEverything(viaRouter, ref, model);
    const counts = await Promise.all(shards.map((s) => countOn(s, 'c')));
    expect(counts.reduce((a, b) => a + b, 0)).toBe(model.live().length);
    const share = counts[2] / model.live().length;
    expect(share).toBeGreaterThan(0.25);
    expect(share).toBeLessThan(0.42);
    expect(await countOn(shards[2], 'm')).toBeGreaterThan(50);
    const audit = readFileSync(join(cwd, 'coordinator-audit.log'), 'utf8');
    expect(audit).toContain('rebalance_start');
    expect(audit).toContain('rebalance_finish');
    const metrics = await (await fetch(`${coordinator.base}/metrics`)).text();
    expect(metrics).toMatch(/svc_rebalance_moves_in_progress 0/);
  }, 120_000);

  it('drains a shard under load, then deletes it; nothing is lost', async () => {
    const load = startLoad(viaRouter, ref, model, { int, vec, dim: DIM });
    await new Promise((r) => setTimeout(r, 300));
    expect((await admin('POST', '/cluster/shards/0/drain')).status).toBe(202);
    const early = await admin('DELETE', '/cluster/shards/0');
    expect([early.status, early.json.error?.code]).toEqual([409, 'shard_not_drained']);
    await eventually('shard 0 is drained', async () => {
      const map = (await admin('GET', '/cluster/map')).json;
      return map.shards.find((s: { id: number }) => s.id === 0)?.moved === true ? true : JSON.stringify(map.shards);
    }, 60_000);
    await new Promise((r) => setTimeout(r, 1000));
    const { failures } = await load.stop();
    if (failures.length > 0) console.log('coordinator', coordinator.stdout().slice(-5000), 'router', router.stdout().slice(-5000));
    expect(failures).toEqual([]);
    expect(await countOn(shards[0], 'c')).toBe(0);
    expect(await countOn(shards[0], 'm')).toBe(0);
    const del = await admin('DELETE', '/cluster/shards/0');
    expect(del.status, JSON.stringify(del.json)).toBe(200);
    await eventually('the router drops shard 0', async () => {
      const map = (await viaRouter('GET', '/cluster/map')).json;
      return map.shards.some((s: { id: number }) => s.id === 0) ? 'still there' : true;
    }, 10_000).catch(() => undefined);
    await checkEverything(viaRouter, ref, model);
  }, 120_000);
});
