/**
 * Read consistency over REST against a real `svc serve`: after a bulk load the graph is stale; an
 * eventual query answers from the prior index (plus an exact scan of the unindexed tail) without waiting,
 * a `consistency: "strong"` query waits until the graph holds every acknowledged write. And readiness:
 * after a restart /readyz stays 503 until every collection's graph is built from storage.
 */
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { api, MASTER, serve, tempDir, type Server } from './harness.js';

const KEY = 'consistency-admin';
const DIM = 32;
const N = 6_000;

/** Seeded, so that a failure reproduces: xorshift32 in [-1, 1). */
function vectors(n: number, dim: number, seed: number): Float32Array {
  const out = new Float32Array(n * dim);
  let s = seed >>> 0 || 1;
  for (let i = 0; i < out.length; i++) {
    s ^= s << 13; s >>>= 0;
    s ^= s >>> 17;
    s ^= s << 5; s >>>= 0;
    out[i] = s / 2 ** 31 - 1;
  }
  return out;
}

function b64(v: Float32Array, i: number): string {
  return Buffer.from(v.buffer, i * DIM * 4, DIM * 4).toString('base64');
}

/** Bulk-loads N points into `name` (stale afterwards: a bulk load is absorbed by a rebuild). */
async function bulkLoad(call: ReturnType<typeof api>, name: string, seed: number, prefix: string): Promise<Float32Array> {
  const v = vectors(N, DIM, seed);
  const chunk = 3000;
  for (let at = 0; at < N; at += chunk) {
    const points = Array.from({ length: chunk }, (_, j) => ({ id: `${prefix}${at + j}`, vector_b64: b64(v, at + j) }));
    const r = await call('POST', `/v1/collections/${name}/points:bulk`, { points });
    expect(r.status, JSON.stringify(r.json)).toBe(200);
  }
  return v;
}

const queryOf = (v: Float32Array, i: number): number[] => Array.from(v.subarray(i * DIM, (i + 1) * DIM));

describe('consistency of server reads', () => {
  let server: Server;
  let call: ReturnType<typeof api>;
  let dataDir: string;

  beforeAll(async () => {
    const dir = tempDir('svc-consistency-');
    dataDir = join(dir, 'data');
    server = await serve({ SVC_API_KEYS: KEY, SVC_ENCRYPTION_KEY: MASTER, SVC_DATA_DIR: dataDir }, { cwd: dir });
    call = api(server.base, KEY);
    expect((await call('POST', '/v1/collections', { name: 'bulk', dim: DIM, metric: 'l2', index_params: { ef_construction: 200 } })).status).toBe(201);
  });

  afterAll(async () => {
    await server?.stop();
  });

  it('strong waits for the graph; eventual answers from the prior index at once', async () => {
    const v = await bulkLoad(call, 'bulk', 7, 'a');
    expect((await call('GET', '/v1/collections/bulk')).json.index_state).toBe('stale');

    // Both at once: the eventual read does not wait for the rebuild the strong one waits for.
    const order: string[] = [];
    const strong = call('POST', '/v1/collections/bulk/query', { vector: queryOf(v, 123), k: 5, consistency: 'strong' })
      .then((r) => { order.push('strong'); return r; });
    const eventual = call('POST', '/v1/collections/bulk/query', { vector: queryOf(v, 456), k: 5, consistency: 'eventual' })
      .then((r) => { order.push('eventual'); return r; });
    const e = await eventual;
    const stateAfterEventual = (await call('GET', '/v1/collections/bulk')).json.index_state;
    const s = await strong;
    expect(order).toEqual(['eventual', 'strong']);
    expect(stateAfterEventual).toBe('stale');
    // Both are right: the eventual read scans what the prior graph lacks.
    expect(e.json.hits[0]).toMatchObject({ id: 'a456', rank: 0 });
    expect(s.json.hits[0]).toMatchObject({ id: 'a123', rank: 0 });
    // The strong read returned only once the graph held every acknowledged write.
    expect((await call('GET', '/v1/collections/bulk')).json.index_state).toBe('current');
  });

  it('a strong read right after a write sees the graph current and the write in it', async () => {
    const v = await bulkLoad(call, 'bulk', 11, 'b');
    const r = await call('POST', '/v1/collections/bulk/query', { vector: queryOf(v, 999), k: 3, consistency: 'strong', ef_search: 16 });
    expect(r.status).toBe(200);
    expect(r.json.hits[0].id).toBe('b999');
    expect((await call('GET', '/v1/collections/bulk')).json).toMatchObject({ index_state: 'current', count: 2 * N });
    expect((await call('POST', '/v1/collections/bulk/query', { vector: queryOf(v, 1), k: 1, consistency: 'sometimes' })).status).toBe(400);
  });

  it('after a restart, /readyz is 503 until every graph is built, and 200 only then', async () => {
    expect(await server.stop()).toBe(0);
    const seen: number[] = [];
    let statesAtReady: string[] = [];
    server = await serve({ SVC_API_KEYS: KEY, SVC_ENCRYPTION_KEY: MASTER, SVC_DATA_DIR: dataDir }, {
      ready: async (base) => {
        const st = (await fetch(`${base}/readyz`)).status;
        seen.push(st);
        if (st !== 200) return false;
        const cols = (await api(base, KEY)('GET', '/v1/collections')).json.collections as { index_state: string }[];
        statesAtReady = cols.map((c) => c.index_state);
        return true;
      },
    });
    call = api(server.base, KEY);
    expect(seen).toContain(503);
    expect(seen.at(-1)).toBe(200);
    expect(statesAtReady).toEqual(['current']);
    expect((await call('GET', '/v1/collections/bulk')).json).toMatchObject({ count: 2 * N, index_state: 'current' });
  });
});
