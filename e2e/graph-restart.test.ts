import { existsSync, readdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { MASTER, api, serve, tempDir, type Server } from './harness.js';

let server: Server | undefined;
afterAll(async () => { await server?.stop('SIGKILL'); });

/** A seeded generator (xorshift32), so the points and queries are the same every run. */
function gen(seed: number): () => number {
  let x = seed >>> 0 || 1;
  return () => {
    x ^= x << 13; x >>>= 0;
    x ^= x >>> 17;
    x ^= x << 5; x >>>= 0;
    return x / 0x100000000 - 0.5;
  };
}

describe('graphs across a restart of svc serve', () => {
  it('reads the graph back after a graceful stop (same answers), and rebuilds past a damaged graph file with a warning', async () => {
    const dir = tempDir();
    const dataDir = join(dir, 'data');
    const env = { SVC_API_KEYS: 'k', SVC_ENCRYPTION_KEY: MASTER, SVC_DATA_DIR: dataDir };
    const rnd = gen(77);
    const vec = () => Array.from({ length: 16 }, rnd);
    server = await serve(env);
    let call = api(server.base, 'k');
    expect((await call('POST', '/v1/collections', { name: 'c', dim: 16, metric: 'l2' })).status).toBe(201);
    for (let b = 0; b < 3000; b += 1000) {
      const points = Array.from({ length: 1000 }, (_, i) => ({ id: `p${b + i}`, vector: vec() }));
      expect((await call('PUT', '/v1/collections/c/points', { points })).status).toBe(200);
    }
    const queries = Array.from({ length: 10 }, vec);
    const ask = async () => {
      const out: string[][] = [];
      for (const q of queries) {
        const r = await call('POST', '/v1/collections/c/query', { vector: q, k: 10, ef_search: 200, with_payload: false, consistency: 'strong' });
        expect(r.status).toBe(200);
        out.push(r.json.hits.map((h: { id: string }) => h.id));
      }
      return out;
    };
    const before = await ask();
    expect(await server.stop('SIGTERM')).toBe(0);
    const uid = readdirSync(join(dataDir, 'collections'))[0];
    const graph = join(dataDir, 'collections', uid, 'graph');
    expect(existsSync(graph)).toBe(true);

    server = await serve(env);
    call = api(server.base, 'k');
    expect(await ask()).toEqual(before);
    expect(`${server.stdout()}${server.stderr()}`).not.toMatch(/graph file/);
    expect(await server.stop('SIGTERM')).toBe(0);

    const bytes = readFileSync(graph);
    bytes[bytes.length >> 1] ^= 0x40;
    writeFileSync(graph, bytes);
    server = await serve(env);
    call = api(server.base, 'k');
    expect(await ask()).toEqual(before);
    expect(`${server.stdout()}${server.stderr()}`).toMatch(/graph file unreadable; rebuilding the graph/);
    await server.stop('SIGTERM');
  }, 120_000);
});
