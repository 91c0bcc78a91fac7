/**
 * The cluster coordinator as a real process (`svc serve` with SVC_COORDINATOR=true): the membership API
 * of CONTRACT.md section 11, its persistence across restarts, its keys, and autoscaling against real
 * shard nodes. Imports no project code.
 */
import { existsSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { call, eventually, KEY, startNode } from './cluster-harness.js';
import { api, cleanEnv, freePort, MASTER, run, serve, tempDir, type Server } from './harness.js';

const ADMIN = 'coord-admin';
const running: Server[] = [];
afterAll(async () => {
  await Promise.all(running.map((s) => s.stop()));
});

/** Read, write and an admin scoped to some collections: none may touch the coordinator. */
const TOML = ['read', 'write'].map((role) => `[[api_keys]]\nname = "${role}"\nrole = "${role}"\ncollections = ["*"]\nkey = "${role}-key"\n`).join('')
  + '[[api_keys]]\nname = "team-admin"\nrole = "admin"\ncollections = ["team.*"]\nkey = "team-admin-key"\n';

async function startCoordinator(cwd: string, extra: Record<string, string>): Promise<Server> {
  const s = await serve({
    SVC_COORDINATOR: 'true', SVC_API_KEYS: ADMIN, SVC_ENCRYPTION_KEY: MASTER,
    SVC_COORDINATOR_STATE: join(cwd, 'state', 'coordinator.json'), SVC_AUDIT_LOG: join(cwd, 'audit.log'), ...extra,
  }, { cwd });
  running.push(s);
  return s;
}

async function stop(s: Server): Promise<void> {
  expect(await s.stop()).toBe(0);
  running.splice(running.indexOf(s), 1);
}

const auditLines = (cwd: string): any[] => (existsSync(join(cwd, 'audit.log'))
  ? readFileSync(join(cwd, 'audit.log'), 'utf8').split('\n').filter((l) => l !== '').map((l) => JSON.parse(l)) : []);

/** Ports nothing listens on: shards that cannot be reached. */
async function deadUrl(): Promise<string> {
  return `http://127.0.0.1:${await freePort()}`;
}

describe('coordinator membership API', () => {
  it('registers, refuses bad input without a change, keeps map and id counter across a restart, and wants an admin key', async () => {
    const cwd = tempDir();
    writeFileSync(join(cwd, 'svc.toml'), TOML);
    const [s0, s1] = [await deadUrl(), await deadUrl()];
    let coord = await startCoordinator(cwd, { SVC_CLUSTER_SHARDS: `[${s0},${s1}]`, SVC_AUTOSCALE_INTERVAL_SECS: '0.2' });
    const admin = api(coord.base, ADMIN);

    const seeded = await admin('GET', '/cluster/map');
    expect([seeded.status, seeded.json]).toEqual([200, {
      version: 1, standby: [],
      shards: [
        { id: 0, url: s0, replicas: [], state: 'active', points: null },
        { id: 1, url: s1, replicas: [], state: 'active', points: null },
      ],
    }]);
    const s2 = await deadUrl();
    const reg = await admin('POST', '/cluster/shards', { url: `${s2}/`, replicas: [await deadUrl()] });
    expect([reg.status, reg.json]).toEqual([201, { id: 2, version: 2 }]);
    const map = (await admin('GET', '/cluster/map')).json;
    expect(map.shards[2]).toMatchObject({ id: 2, url: s2, state: 'joining', points: null });

    // Bad input: each refused in the contract's shape, the map untouched.
    const refused: [string, string, unknown, number, string][] = [
      ['POST', '/cluster/shards', '{"url": ', 400, 'invalid_argument'],
      ['POST', '/cluster/shards', { url: 'not a url' }, 400, 'invalid_argument'],
      ['POST', '/cluster/shards', { url: 'http://h:1/v1' }, 400, 'invalid_argument'],
      ['POST', '/cluster/shards', { url: 'http://h:1', weight: 2 }, 400, 'invalid_argument'],
      ['POST', '/cluster/shards', { url: s0.toUpperCase() }, 409, 'already_exists'],
      ['POST', '/cluster/shards/7/drain', undefined, 404, 'not_found'],
      ['POST', '/cluster/shards/x/drain', undefined, 400, 'invalid_argument'],
      ['DELETE', '/cluster/shards/0', undefined, 409, 'shard_not_drained'],
      ['DELETE', '/cluster/shards/7', undefined, 404, 'not_found'],
    ];
    for (const [method, path, body, status, code] of refused) {
      const r = await admin(method, path, body);
      expect([r.status, r.json?.error?.code], `${method} ${path} ${JSON.stringify(body)}`).toEqual([status, code]);
      expect(typeof r.json.error.message).toBe('string');
    }
    expect((await admin('GET', '/cluster/map')).json).toEqual(map);

    // Drain: 202, again the same; the last active shard cannot drain.
    expect((await admin('POST', '/cluster/shards/1/drain')).json).toEqual({ id: 1, state: 'draining', version: 3 });
    expect((await admin('POST', '/cluster/shards/1/drain')).status).toBe(202);
    const last = await admin('POST', '/cluster/shards/0/drain');
    expect([last.status, last.json.error.code]).toEqual([400, 'invalid_argument']);
    expect(last.json.error.message).toContain('last active shard');
    // Shard 1 cannot be reached: its points are unknown, never taken for none, so it is not removed.
    const unknown = await admin('DELETE', '/cluster/shards/1');
    expect([unknown.status, unknown.json.error.code]).toEqual([503, 'unavailable']);
    expect(unknown.json.error.message).toContain('shard 1');

    // Only an admin key scoped to everything: 401 without a key, 403 for read, write and a scoped admin.
    for (const [key, status] of [[undefined, 401], ['wrong', 401], ['read-key', 403], ['write-key', 403], ['team-admin-key', 403]] as const) {
      for (const [method, path, body] of [['GET', '/cluster/map'], ['POST', '/cluster/shards', { url: 'http://other:1' }], ['POST', '/cluster/shards/2/drain'], ['DELETE', '/cluster/shards/2']] as const) {
        const r = await api(coord.base, key)(method, path, body);
        expect([r.status, r.json?.error?.code], `${key} ${method} ${path}`).toEqual([status, status === 401 ? 'unauthenticated' : 'permission_denied']);
      }
    }
    expect((await admin('GET', '/cluster/map')).json.version).toBe(3);
    // Health, readiness and metrics are open; no data route exists.
    expect((await api(coord.base)('GET', '/readyz')).status).toBe(200);
    expect((await api(coord.base)('GET', '/metrics')).json).toContain('svc_cluster_shards{state="draining"} 1');
    expect((await admin('GET', '/v1/collections')).status).toBe(404);

    // A second coordinator on the same state file is refused while the first runs.
    const second = run(['serve'], cleanEnv({
      SVC_COORDINATOR: 'true', SVC_API_KEYS: ADMIN, SVC_ENCRYPTION_KEY: MASTER, SVC_REST_ADDR: `127.0.0.1:${await freePort()}`,
      SVC_COORDINATOR_STATE: join(cwd, 'state', 'coordinator.json'),
    }), cwd);
    expect(await second.exited).toBe(1);
    expect(second.stderr()).toContain('is in use by process');

    // Restart, with another SVC_CLUSTER_SHARDS: the saved map wins, and ids go on from 3.
    const before = (await admin('GET', '/cluster/map')).json;
    await stop(coord);
    coord = await startCoordinator(cwd, { SVC_CLUSTER_SHARDS: `[${await deadUrl()}]` });
    const after = api(coord.base, ADMIN);
    expect((await after('GET', '/cluster/map')).json).toEqual(before);
    const again = await after('POST', '/cluster/shards', { url: await deadUrl() });
    expect([again.status, again.json]).toEqual([201, { id: 3, version: 4 }]);

    // Every change and every denial is in the audit log, named by key, never by secret.
    const lines = auditLines(cwd);
    expect(lines.filter((l) => l.action === 'registerShard' && l.outcome === 'ok').map((l) => [l.key, l.status])).toEqual([['env:0', 201], ['env:0', 201]]);
    expect(lines.filter((l) => l.outcome === 'denied').map((l) => l.key)).toEqual(expect.arrayContaining(['read', 'write', 'team-admin']));
    expect(readFileSync(join(cwd, 'audit.log'), 'utf8')).not.toContain(ADMIN);
    await stop(coord);

    // A damaged state file stops the start with the file and the fault named; it is not reset.
    const file = join(cwd, 'state', 'coordinator.json');
    writeFileSync(file, readFileSync(file, 'utf8').replace('"next_id": 4', '"next_id": 1'));
    const damaged = run(['serve'], cleanEnv({
      SVC_COORDINATOR: 'true', SVC_API_KEYS: ADMIN, SVC_ENCRYPTION_KEY: MASTER, SVC_REST_ADDR: `127.0.0.1:${await freePort()}`, SVC_COORDINATOR_STATE: file,
    }), cwd);
    expect(await damaged.exited).toBe(1);
    expect(damaged.stderr()).toContain(`coordinator state file ${file} is not valid`);
    expect(readFileSync(file, 'utf8')).toContain('"next_id": 1');
  }, 120_000);
});

describe('coordinator autoscaling', () => {
  it('takes a standby exactly once when a shard passes the high-water mark, keeps the cooldown, and audits why', async () => {
    const shardA = await startNode(tempDir());
    running.push(shardA);
    const shardB = await startNode(tempDir());
    running.push(shardB);
    const standby = await startNode(tempDir());
    running.push(standby);
    const spare = await deadUrl();
    const cwd = tempDir();
    const env = {
      SVC_CLUSTER_SHARDS: `[${shardA.base},${shardB.base}]`, SVC_CLUSTER_SHARD_KEY: KEY,
      SVC_AUTOSCALE_ENABLED: 'true', SVC_AUTOSCALE_HIGH_WATER_POINTS: '20', SVC_AUTOSCALE_INTERVAL_SECS: '0.2',
      SVC_AUTOSCALE_COOLDOWN_SECS: '3600', SVC_AUTOSCALE_STANDBY_URLS: `${standby.base},${spare}`, SVC_AUTOSCALE_MAX_SHARDS: '8',
    };
    let coord = await startCoordinator(cwd, env);
    const admin = api(coord.base, ADMIN);
    const mapNow = async () => (await admin('GET', '/cluster/map')).json;

    // Both shards counted (0 points): below the mark, nothing taken.
    await eventually('both shards counted', async () => {
      const m = await mapNow();
      return m.shards.every((s: any) => s.points === 0) ? true : JSON.stringify(m);
    });
    expect((await mapNow()).standby).toEqual([standby.base, spare]);

    // Fill shard 0 past the mark (30 points), shard 1 below it.
    for (const [node, n] of [[shardA, 30], [shardB, 5]] as const) {
      const c = call(node);
      expect((await c('POST', '/v1/collections', { name: 'docs', dim: 2, metric: 'l2' })).status).toBe(201);
      const points = Array.from({ length: n }, (_, i) => ({ id: `p${i}`, vector: [i, 1] }));
      expect((await c('PUT', '/v1/collections/docs/points', { points })).status).toBe(200);
    }
    await eventually('the standby joins', async () => {
      const m = await mapNow();
      return m.shards.length === 3 ? true : JSON.stringify(m);
    });
    const joined = await mapNow();
    expect(joined.shards.map((s: any) => [s.id, s.url, s.state])).toEqual([[0, shardA.base, 'active'], [1, shardB.base, 'active'], [2, standby.base, 'joining']]);
    expect(joined.standby).toEqual([spare]);
    expect(joined.version).toBe(2);

    // Many intervals later: still one scale-out, the cooldown holding it (shard 0 is still above the mark).
    await new Promise((r) => setTimeout(r, 2000));
    const later = await mapNow();
    expect(later.shards).toHaveLength(3);
    expect(later.shards[0].points).toBe(30);
    const metrics = (await api(coord.base)('GET', '/metrics')).json as string;
    expect(metrics).toContain('svc_autoscale_scale_outs_total 1');
    expect(metrics).toMatch(/svc_autoscale_decisions_total\{decision="cooldown"\} [1-9]/);
    expect(metrics).toMatch(/svc_autoscale_last_scale_out_timestamp_seconds 1\d{9}/);
    expect(metrics).toContain('svc_autoscale_standby_left 1');

    const decisions = () => auditLines(cwd).filter((l) => l.action.startsWith('autoscale_'));
    const outs = decisions().filter((l) => l.action === 'autoscale_scale_out');
    expect(outs).toHaveLength(1);
    expect(outs[0]).toMatchObject({ key: 'autoscale', resource: 'cluster/shard/2', outcome: 'ok', status: 201 });
    expect(outs[0].reason).toContain('shard 0 holds 30 points, above SVC_AUTOSCALE_HIGH_WATER_POINTS=20');
    expect(outs[0].reason).toContain(`${standby.base} joins as shard 2`);
    const holds = decisions().filter((l) => l.action === 'autoscale_hold').map((l) => l.reason as string);
    expect(holds[0]).toContain('not above SVC_AUTOSCALE_HIGH_WATER_POINTS=20');
    expect(holds.filter((r) => r.includes('SVC_AUTOSCALE_COOLDOWN_SECS=3600'))).toHaveLength(1); // a repeated hold is audited once

    // A restart keeps the cooldown: the spare is still not taken.
    await stop(coord);
    coord = await startCoordinator(cwd, env);
    const admin2 = api(coord.base, ADMIN);
    await eventually('the restarted coordinator counts shard 0 again', async () => {
      const m = (await admin2('GET', '/cluster/map')).json;
      return m.shards[0]?.points === 30 ? true : JSON.stringify(m);
    });
    await new Promise((r) => setTimeout(r, 1000));
    const afterRestart = (await admin2('GET', '/cluster/map')).json;
    expect(afterRestart.shards).toHaveLength(3);
    expect(afterRestart.standby).toEqual([spare]);
    expect(auditLines(cwd).filter((l) => l.action === 'autoscale_scale_out')).toHaveLength(1);

    // A shard that stops answering is unknown (null), never counted as empty.
    await shardB.stop();
    await eventually('shard 1 is unknown', async () => {
      const m = (await admin2('GET', '/cluster/map')).json;
      return m.shards[1].points === null ? true : JSON.stringify(m.shards[1]);
    });
  }, 180_000);
});
