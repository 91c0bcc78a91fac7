import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { MASTER, api, serve, tempDir, type Server } from './harness.js';

let server: Server | undefined;
afterAll(async () => { await server?.stop('SIGKILL'); });

describe('kill -9 during acknowledged writes', () => {
  it('loses no acknowledged write across a restart', async () => {
    const dir = tempDir();
    const env = { SVC_API_KEYS: 'k', SVC_ENCRYPTION_KEY: MASTER, SVC_DATA_DIR: join(dir, 'data') };
    server = await serve(env);
    const call = api(server.base, 'k');
    expect((await call('POST', '/v1/collections', { name: 'c', dim: 4, metric: 'l2' })).status).toBe(201);
    const acked: string[] = [];
    let stop = false;
    const writer = async (w: number) => {
      for (let i = 0; !stop; i++) {
        const points = Array.from({ length: 5 }, (_, j) => ({ id: `w${w}-${i}-${j}`, vector: [w, i, j, 1], payload: { w, i } }));
        const r = await call('PUT', '/v1/collections/c/points', { points }).catch(() => null);
        if (r === null) return;
        if (r.status === 200) acked.push(...points.map((p) => p.id));
      }
    };
    const writers = [0, 1, 2, 3].map(writer);
    while (acked.length < 400) await new Promise((r) => setTimeout(r, 20));
    server.child.kill('SIGKILL');
    stop = true;
    await Promise.all(writers);
    await server.exited;
    const ackedAtKill = [...acked];

    server = await serve(env);
    const again = api(server.base, 'k');
    const seen = new Set<string>();
    let cursor: string | null = null;
    do {
      const r: { status: number; json: any } = await again('POST', '/v1/collections/c/points:fetch', { limit: 1000, cursor });
      expect(r.status).toBe(200);
      for (const p of r.json.points) seen.add(p.id);
      cursor = r.json.next_cursor;
    } while (cursor !== null);
    const lost = ackedAtKill.filter((id) => !seen.has(id));
    expect(lost).toEqual([]);
    expect(seen.size).toBeGreaterThanOrEqual(ackedAtKill.length);
  });
});
