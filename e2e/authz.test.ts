import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { MASTER, api, serve, tempDir, type Server } from './harness.js';

/**
 * The authorization matrix: every REST route x {no key, bad key, read, write, admin} x {in scope, out of
 * scope}, compared with CONTRACT.md section 3 (written out here, independently of the server's table).
 */
type Role = 'read' | 'write' | 'admin';
interface Route { method: string; path: string; role: Role; scoped: boolean; body?: (c: string) => unknown }

const V = [0.5, 0.25];
const ROUTES: Route[] = [
  { method: 'POST', path: '/v1/collections', role: 'admin', scoped: true, body: (c) => ({ name: `${c}.new`, dim: 2, metric: 'l2' }) },
  { method: 'GET', path: '/v1/collections', role: 'read', scoped: false },
  { method: 'GET', path: '/v1/collections/{c}', role: 'read', scoped: true },
  { method: 'DELETE', path: '/v1/collections/{c}.absent', role: 'admin', scoped: true },
  { method: 'PUT', path: '/v1/collections/{c}/points', role: 'write', scoped: true, body: () => ({ points: [{ id: 'w', vector: V }] }) },
  { method: 'POST', path: '/v1/collections/{c}/points:bulk', role: 'write', scoped: true, body: () => ({ points: [{ id: 'b', vector: V }] }) },
  { method: 'GET', path: '/v1/collections/{c}/points/p1', role: 'read', scoped: true },
  { method: 'DELETE', path: '/v1/collections/{c}/points/absent', role: 'write', scoped: true },
  { method: 'POST', path: '/v1/collections/{c}/points:fetch', role: 'read', scoped: true, body: () => ({}) },
  { method: 'POST', path: '/v1/collections/{c}/points:count', role: 'read', scoped: true, body: () => ({}) },
  { method: 'POST', path: '/v1/collections/{c}/points:payload', role: 'write', scoped: true, body: () => ({ points: [{ id: 'p1', payload: { seen: true } }] }) },
  { method: 'POST', path: '/v1/collections/{c}/points:delete', role: 'write', scoped: true, body: () => ({ ids: ['absent'] }) },
  { method: 'POST', path: '/v1/collections/{c}/query', role: 'read', scoped: true, body: () => ({ vector: V, k: 1 }) },
  { method: 'POST', path: '/v1/collections/{c}/query/hybrid', role: 'read', scoped: true, body: () => ({ vector: V, k: 1 }) },
  { method: 'POST', path: '/v1/collections/{c}/points:text', role: 'write', scoped: true, body: () => ({ points: [{ id: 't', text: 'hello' }] }) },
  { method: 'POST', path: '/v1/collections/{c}/query/text', role: 'read', scoped: true, body: () => ({ text: 'hello', k: 1 }) },
  { method: 'PUT', path: '/v1/collections/{c}/documents', role: 'write', scoped: true, body: () => ({ documents: [{ id: 'd', vectors: [V] }] }) },
  { method: 'POST', path: '/v1/collections/{c}/query/multi', role: 'read', scoped: true, body: () => ({ vectors: [V], k: 1 }) },
  { method: 'DELETE', path: '/v1/collections/{c}/documents/absent', role: 'write', scoped: true },
  { method: 'GET', path: '/v1/stats', role: 'read', scoped: false },
  { method: 'POST', path: '/v1/snapshots', role: 'admin', scoped: false, body: () => ({ name: `snap-${Math.floor(Math.random() * 1e9)}` }) },
];

const RANK: Record<Role, number> = { read: 1, write: 2, admin: 3 };
const CALLERS = ['none', 'bad', 'read', 'write', 'admin'] as const;
const SECRET: Record<string, string | undefined> = { none: undefined, bad: 'not-a-key', read: 'r-key', write: 'w-key', admin: 'a-key' };

let server: Server;
beforeAll(async () => {
  const cwd = tempDir();
  const keys = (['read', 'write', 'admin'] as Role[]).map((role) =>
    `[[api_keys]]\nname = "${role}-in"\nrole = "${role}"\ncollections = ["in.*"]\nkey = "${role[0]}-key"\n`).join('');
  writeFileSync(join(cwd, 'svc.toml'), keys);
  server = await serve({ SVC_API_KEYS: 'root', SVC_ENCRYPTION_KEY: MASTER, SVC_DATA_DIR: join(cwd, 'data'), SVC_AUDIT_LOG: join(cwd, 'audit.log') }, { cwd });
  const root = api(server.base, 'root');
  for (const c of ['in.c', 'out.c']) {
    expect((await root('POST', '/v1/collections', { name: c, dim: 2, metric: 'l2' })).status).toBe(201);
    expect((await root('PUT', `/v1/collections/${c}/points`, { points: [{ id: 'p1', vector: V }] })).status).toBe(200);
  }
});
afterAll(async () => { await server?.stop(); });

describe('authorization matrix over REST', () => {
  it('matches CONTRACT.md section 3 for every route, caller and scope', async () => {
    const mismatches: string[] = [];
    let cells = 0;
    for (const route of ROUTES) {
      for (const caller of CALLERS) {
        for (const scope of ['in', 'out'] as const) {
          const c = `${scope}.c`;
          const path = route.path.replace('{c}', c);
          const r = await api(server.base, SECRET[caller])(route.method, path, route.body?.(scope === 'in' ? 'in' : 'out'));
          cells++;
          let expected: string;
          if (caller === 'none' || caller === 'bad') expected = '401';
          else if (RANK[caller] < RANK[route.role]) expected = '403';
          // Keys here are scoped to in.*: out of scope is refused; a snapshot reaches every collection.
          else if (route.scoped && scope === 'out') expected = '403';
          else if (route.path === '/v1/snapshots') expected = '403';
          else expected = 'allowed';
          const got = r.status === 401 || r.status === 403 ? String(r.status) : 'allowed';
          if (got !== expected) mismatches.push(`${caller} ${route.method} ${path}: got ${r.status} ${JSON.stringify(r.json)}, expected ${expected}`);
          if (r.status === 401) expect(r.headers.get('www-authenticate')).toBe('Bearer');
          if (got === 'allowed') expect(r.status, `${caller} ${route.method} ${path} ${JSON.stringify(r.json)}`).toBeLessThan(500);
        }
      }
    }
    expect(mismatches).toEqual([]);
    expect(cells).toBe(ROUTES.length * CALLERS.length * 2);
  });

  it('an all-collection admin key may snapshot; listing hides what is out of scope', async () => {
    const root = api(server.base, 'root');
    expect((await root('POST', '/v1/snapshots', { name: 'full' })).status).toBe(200);
    const listed = await api(server.base, 'r-key')('GET', '/v1/collections');
    expect(listed.json.collections.map((c: { name: string }) => c.name).sort()).not.toContain('out.c');
    const stats = await api(server.base, 'r-key')('GET', '/v1/stats');
    expect(stats.json.per_collection.map((c: { name: string }) => c.name)).not.toContain('out.c');
  });
});
