/**
 * The top-level docker-compose.yml itself, brought up with the Compose this machine has (Debian's
 * docker-compose v1; `docker compose` v2 where that is what is installed, SVC_COMPOSE to choose) and used
 * through its router (issue 18): it refuses to start without its keys, comes up healthy, takes a
 * collection, writes and searches on 127.0.0.1, shard-1's three consensus members hold the same points
 * under one leader, shard-2's replica follows it, its coordinator lists the standby; the leader of
 * shard-1 killed, writes are still acknowledged through the router and the member catches up once
 * started again; then `down -v` leaves no container, network or volume. The TLS variant
 * (docker-compose.tls.yml, certificates from scripts/compose-certs.sh) the same way over https, the
 * members speaking TLS to each other. Ports are free ones, not 6333/6334, so a developer's own server is
 * left alone.
 */
import { chmodSync, mkdtempSync, readFileSync, readdirSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { freePort } from '../harness.js';
import { IMAGE, PREFIX, call, checkTopK, eventually, must, points, requireEngine, secret, sh, type Cmd } from './docker-harness.js';

const ROOT = resolve(import.meta.dirname, '..', '..');
const MEMBERS = ['shard-1-1', 'shard-1-2', 'shard-1-3'];
const SERVICES = ['coordinator', 'router', ...MEMBERS, 'shard-2', 'shard-2-replica', 'standby-1'];

/** Compose v1 when installed (what Debian gives), else the v2 plugin. */
function composeCommand(): string[] {
  if (process.env.SVC_COMPOSE) return process.env.SVC_COMPOSE.split(' ');
  if (sh('docker-compose', ['version']).status === 0) return ['docker-compose'];
  if (sh('docker', ['compose', 'version']).status === 0) return ['docker', 'compose'];
  throw new Error('neither docker-compose (v1) nor docker compose (v2) runs: apt-get install docker-compose');
}

interface Project {
  name: string;
  files: string[];
  env: Record<string, string>;
  rest: number;
  coordinator: number;
  compose(args: string[], timeoutMs?: number): Cmd;
  down(): void;
}

async function project(name: string, files: string[], extra: Record<string, string> = {}): Promise<Project> {
  const cmd = composeCommand();
  const [rest, grpc, coordinator] = [await freePort(), await freePort(), await freePort()];
  const env = {
    SVC_IMAGE: IMAGE, SVC_API_KEYS: secret(), SVC_CLUSTER_SHARD_KEY: secret(), SVC_ENCRYPTION_KEY: secret(32), SVC_RAFT_SECRET: secret(32),
    SVC_REST_PORT: String(rest), SVC_GRPC_PORT: String(grpc), SVC_COORDINATOR_PORT: String(coordinator), RUST_LOG: 'warn', ...extra,
  };
  const compose = (args: string[], timeoutMs = 180_000) => sh(cmd[0], [...cmd.slice(1), '-p', name, ...files.flatMap((f) => ['-f', f]), ...args], { cwd: ROOT, env, timeoutMs });
  return {
    name, files, env, rest, coordinator, compose,
    down() {
      const r = compose(['down', '-v', '--remove-orphans', '--timeout', '10'], 120_000);
      // Whatever down missed (it failed, or was cut short) goes by the project's label.
      const left = (kind: string) => sh('docker', [kind, 'ls', '-q', '--filter', `label=com.docker.compose.project=${name}`, ...(kind === 'container' ? ['-a'] : [])]).stdout.split('\n').filter(Boolean);
      const containers = left('container');
      if (containers.length > 0) sh('docker', ['rm', '-f', '-v', ...containers]);
      for (const kind of ['network', 'volume']) {
        const ids = left(kind);
        if (ids.length > 0) sh('docker', [kind, 'rm', ...ids]);
      }
      if (r.status !== 0) throw new Error(`compose down failed: ${r.stderr}`);
    },
  };
}

function leftovers(p: Project): string[] {
  return ['container', 'network', 'volume'].flatMap((kind) => sh('docker', [kind, 'ls', '-q', '--filter', `label=com.docker.compose.project=${p.name}`, ...(kind === 'container' ? ['-a'] : [])])
    .stdout.split('\n').filter(Boolean).map((id) => `${kind} ${id}`));
}

/** `docker inspect`'s health of every service's container: one compose and one docker call (compose v1 starts slowly). */
function health(p: Project): Record<string, string> {
  const out: Record<string, string> = Object.fromEntries(SERVICES.map((s) => [s, 'absent']));
  const ids = p.compose(['ps', '-q']).stdout.split('\n').filter(Boolean);
  if (ids.length === 0) return out;
  const lines = sh('docker', ['inspect', '--format', '{{index .Config.Labels "com.docker.compose.service"}} {{.State.Health.Status}}', ...ids]).stdout;
  for (const line of lines.split('\n').filter(Boolean)) {
    const [service, status] = line.split(' ');
    out[service] = status;
  }
  return out;
}

/**
 * GETs of nodes by their service names with `key`, all made in one `exec` inside the router's container
 * (only the router and the coordinator are published; compose v1 takes a second or two per exec). With
 * TLS the router's trust (NODE_EXTRA_CA_CERTS, the compose CA) verifies each node's certificate for its
 * name. A node that does not answer gives `{error}`.
 */
function inside(p: Project, tls: boolean, gets: [service: string, path: string][], key = p.env.SVC_CLUSTER_SHARD_KEY): any[] {
  if (!/^[0-9a-f]+$/.test(key)) throw new Error('a test key is hex');
  const code = `const lib = require('${tls ? 'https' : 'http'}');
    const get = (u) => new Promise((res) => lib.get(u, { headers: { authorization: 'Bearer ${key}' }, timeout: 10000 }, (r) => {
      let b = ''; r.setEncoding('utf8'); r.on('data', (d) => b += d); r.on('end', () => { try { res(JSON.parse(b)); } catch { res({ error: b }); } });
    }).on('error', (e) => res({ error: String(e) })).on('timeout', function () { this.destroy(new Error('timeout')); }));
    Promise.all(JSON.parse(process.argv[1]).map(([s, path]) => get('${tls ? 'https' : 'http'}://' + s + ':6333' + path))).then((out) => process.stdout.write(JSON.stringify(out)));`;
  return JSON.parse(must('GETs inside the router', p.compose(['exec', '-T', 'router', 'node', '-e', code, JSON.stringify(gets)], 60_000)));
}

const statsInside = (p: Project, service: string, tls: boolean, key?: string): any => inside(p, tls, [[service, '/v1/stats']], key)[0];

/** Every member's /cluster/raft agrees on one leader and has applied the same index; its points then. */
async function membersAgree(p: Project, tls: boolean, members = MEMBERS): Promise<{ leader: string; points: number }> {
  let out = { leader: '', points: -1 };
  await eventually('shard-1\'s members agree', async () => {
    const got = inside(p, tls, members.flatMap((m): [string, string][] => [[m, '/cluster/raft'], [m, '/v1/stats']]));
    const views = members.map((_, i) => got[2 * i]);
    const counts = members.map((_, i) => got[2 * i + 1].total_points);
    const leaders = new Set(views.map((v) => v.leader_id));
    const applied = new Set(views.map((v) => v.applied_index));
    const said = JSON.stringify(views.map((v) => [v.id, v.role, v.leader_id, v.applied_index])) + ` points ${counts}`;
    if (leaders.size !== 1 || views[0].leader_id === null || applied.size !== 1 || new Set(counts).size !== 1) return said;
    if (views.filter((v) => v.role === 'leader').length !== 1) return said;
    out = { leader: views[0].leader_id, points: counts[0] };
    return true;
  }, 60_000);
  return out;
}

/** The whole walk through one brought-up project: what both variants must do. */
async function exercise(p: Project, scheme: 'http' | 'https', ca?: string): Promise<void> {
  const base = `${scheme}://${scheme === 'https' ? 'localhost' : '127.0.0.1'}:${p.rest}`;
  const via = (method: string, path: string, body?: unknown) => call(base, p.env.SVC_API_KEYS, method, path, body, ca);
  await eventually('every service healthy', async () => {
    const h = health(p);
    return Object.values(h).every((s) => s === 'healthy') ? true : JSON.stringify(h);
  }, 120_000);
  await eventually('the router is ready', async () => {
    const r = await via('GET', '/readyz');
    return r.status === 200 ? true : `${r.status} ${JSON.stringify(r.json)}`;
  });

  const pts = points(200);
  expect((await via('POST', '/v1/collections', { name: 'docs', dim: 4 })).status).toBe(201);
  expect((await via('PUT', '/v1/collections/docs/points', { points: pts.slice(0, 100) })).json).toEqual({ upserted: 100 });
  expect((await via('POST', '/v1/collections/docs/points:bulk', { points: pts.slice(100) })).json).toEqual({ upserted: 100 });
  expect((await via('POST', '/v1/collections/docs/points:count', {})).json).toEqual({ count: 200 });
  const q = [2, 3, 1, 4];
  const hits = (await via('POST', '/v1/collections/docs/query', { vector: q, k: 10, consistency: 'strong' })).json.hits;
  expect(checkTopK(hits, pts, q, 10)).toBe(true);

  // shard-1's members hold the same points under one leader; shard-2's read replica follows it.
  const group = await membersAgree(p, scheme === 'https');
  const leader = statsInside(p, 'shard-2', scheme === 'https');
  expect(group.points + leader.total_points).toBe(200);
  expect(group.points).toBeGreaterThan(40);
  await eventually('shard-2-replica holds what shard-2 holds', async () => {
    const r = statsInside(p, 'shard-2-replica', scheme === 'https');
    return r.replication?.role === 'follower' && r.total_points === leader.total_points ? true : JSON.stringify(r.replication) + ` ${r.total_points}/${leader.total_points}`;
  });
  // A node takes the shard key only, never the clients': they go through the router.
  expect(statsInside(p, 'shard-2', scheme === 'https', p.env.SVC_API_KEYS).error?.code).toBe('unauthenticated');

  const map = await call(`${scheme}://${scheme === 'https' ? 'localhost' : '127.0.0.1'}:${p.coordinator}`, p.env.SVC_API_KEYS, 'GET', '/cluster/map', undefined, ca);
  expect(map.json.shards.map((s: any) => [s.url, s.replicas, s.state])).toEqual([
    [`${scheme}://shard-1:6333`, [], 'active'],
    [`${scheme}://shard-2:6333`, [`${scheme}://shard-2-replica:6333`], 'active'],
  ]);
  expect(map.json.standby).toEqual([`${scheme}://standby-1:6333`]);
}

/**
 * shard-1's leader killed: the other two elect one, and writes through the router (which names the
 * group by the alias all members answer to) are acknowledged again within an election or two; started
 * again, the member catches up. Nothing acknowledged is lost.
 */
async function killLeader(p: Project): Promise<void> {
  const via = (method: string, path: string, body?: unknown) => call(`http://127.0.0.1:${p.rest}`, p.env.SVC_API_KEYS, method, path, body);
  const { leader } = await membersAgree(p, false);
  const id = p.compose(['ps', '-q', leader]).stdout.trim();
  must('docker kill', sh('docker', ['kill', id]));
  const start = Date.now();
  const late = points(260).slice(200);
  for (let i = 0; i < late.length; i += 20) {
    await eventually('a write is acknowledged without the killed leader', async () => {
      const r = await via('PUT', '/v1/collections/docs/points', { points: late.slice(i, i + 20) });
      return r.status === 200 ? true : `${r.status} ${JSON.stringify(r.json)}`;
    }, 30_000);
  }
  console.log(`compose: ${late.length} points acknowledged ${Date.now() - start} ms after shard-1's leader (${leader}) was killed`);
  await eventually('the router counts every acknowledged point', async () => {
    const r = await via('POST', '/v1/collections/docs/points:count', {});
    return r.json?.count === 260 ? true : JSON.stringify(r.json);
  });
  const rest = MEMBERS.filter((m) => m !== leader);
  const after = await membersAgree(p, false, rest);
  expect(after.leader).not.toBe(leader);
  must('compose start', p.compose(['start', leader]));
  const healed = await membersAgree(p, false);
  expect(healed.points).toBe(after.points);
}

beforeAll(() => {
  requireEngine();
  composeCommand();
});

describe('docker-compose.yml', () => {
  let p: Project;
  beforeAll(async () => {
    p = await project(`${PREFIX}compose${process.pid}`, ['docker-compose.yml']);
  });
  afterAll(() => p?.down(), 180_000);

  it('refuses to start while a key is unset, naming it', () => {
    for (const v of ['SVC_API_KEYS', 'SVC_CLUSTER_SHARD_KEY', 'SVC_ENCRYPTION_KEY', 'SVC_RAFT_SECRET']) {
      const r = sh(composeCommand()[0], [...composeCommand().slice(1), '-p', p.name, 'config', '-q'], { cwd: ROOT, env: { ...p.env, [v]: '' } });
      expect(r.status).not.toBe(0);
      expect(r.stderr).toContain(`set ${v}`);
    }
    // And nothing of it reaches the file: the keys are in no line of it.
    expect(readFileSync(join(ROOT, 'docker-compose.yml'), 'utf8')).not.toMatch(/[0-9a-f]{32}/);
  });

  it('comes up with docker-compose up -d and is used through its router on 127.0.0.1', async () => {
    must('compose up', p.compose(['up', '-d']));
    await exercise(p, 'http');
    await killLeader(p);
  }, 300_000);

  it('goes with down -v: no container, network or volume of the project is left', () => {
    p.down();
    expect(leftovers(p)).toEqual([]);
  }, 180_000);
});

describe('docker-compose.tls.yml over docker-compose.yml', () => {
  let p: Project;
  let certs: string;
  beforeAll(async () => {
    certs = mkdtempSync(join(tmpdir(), `${PREFIX}-certs-`));
    must('compose-certs', sh('bash', [join(ROOT, 'scripts', 'compose-certs.sh'), certs]));
    // The servers run as uid 10001; as root the script gave them the keys, otherwise these throwaway ones are opened up.
    if (process.getuid?.() !== 0) for (const f of readdirSync(certs)) chmodSync(join(certs, f), 0o644);
    p = await project(`${PREFIX}tls${process.pid}`, ['docker-compose.yml', 'docker-compose.tls.yml'], { SVC_CERTS_DIR: certs });
  });
  afterAll(() => {
    try {
      p?.down();
    } finally {
      rmSync(certs, { recursive: true, force: true });
      rmSync(`${certs}.ca.key`, { force: true });
    }
  }, 180_000);

  it('serves TLS everywhere with SVC_INSECURE off, and plain HTTP is refused', async () => {
    must('compose up (TLS)', p.compose(['up', '-d']));
    const ca = readFileSync(join(certs, 'ca.pem'), 'utf8');
    await exercise(p, 'https', ca);
    await expect(fetch(`http://127.0.0.1:${p.rest}/healthz`)).rejects.toThrow();
    const id = p.compose(['ps', '-q', 'shard-1-1']).stdout.trim();
    expect(must('inspect', sh('docker', ['inspect', '--format', '{{range .Config.Env}}{{println .}}{{end}}', id]))).toContain('SVC_INSECURE=false');
    p.down();
    expect(leftovers(p)).toEqual([]);
  }, 300_000);
});
