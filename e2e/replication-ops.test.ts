/**
 * Payload updates and deletes by filter reach a read replica (issue 21): a leader and one follower as
 * real processes, each with its own data directory and master key. The follower ends with the leader's
 * points and payloads, answers counts by filter as the leader does, and refuses the new writes.
 */
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { KEY, allPoints, call, caughtUp, startNode } from './cluster-harness.js';
import { tempDir, type Server } from './harness.js';

const nodes: Server[] = [];
afterAll(async () => {
  await Promise.all(nodes.map((n) => n.stop('SIGKILL')));
});

describe('a follower applies payload updates and deletes by filter', () => {
  it('ends with the leader\'s points, payloads and counts, and refuses those writes itself', async () => {
    const dir = tempDir('svc-repl-ops-');
    const leader = await startNode(join(dir, 'leader'));
    nodes.push(leader);
    const l = call(leader);
    expect((await l('POST', '/v1/collections', { name: 'c', dim: 2, metric: 'l2', filterable: [{ path: 'g', field_type: 'keyword' }] })).status).toBe(201);
    const points = Array.from({ length: 40 }, (_, i) => ({ id: `p${i}`, vector: [i, 1], payload: { g: ['a', 'b', 'c', 'd'][i % 4], i } }));
    expect((await l('PUT', '/v1/collections/c/points', { points: points.slice(0, 20) })).status).toBe(200);
    // One update before the follower exists (it comes in the bootstrap), the rest in its live tail.
    expect((await l('POST', '/v1/collections/c/points:payload', { points: [{ id: 'p0', payload: { g: 'z' } }] })).json).toEqual({ updated: 1 });
    const follower = await startNode(join(dir, 'follower'), { SVC_LEADER_URL: `http://127.0.0.1:${leader.grpcPort}`, SVC_LEADER_API_KEY: KEY }, 'c3'.repeat(32));
    nodes.push(follower);
    await caughtUp(leader, follower);
    expect((await l('PUT', '/v1/collections/c/points', { points: points.slice(20) })).status).toBe(200);
    expect((await l('POST', '/v1/collections/c/points:payload', { points: [{ id: 'p1', payload: { g: 'a', extra: true } }, { id: 'p2', payload: { g: 'a' } }] })).json).toEqual({ updated: 2 });
    expect((await l('POST', '/v1/collections/c/points:payload', { mode: 'replace', points: [{ id: 'p3', payload: { only: 1 } }] })).json).toEqual({ updated: 1 });
    expect((await l('POST', '/v1/collections/c/points:delete', { filter: { eq: { field: 'g', value: 'b' } } })).json).toEqual({ deleted: 9 });
    expect((await l('POST', '/v1/collections/c/points:delete', { ids: ['p4', 'p8'] })).json).toEqual({ deleted: 2 });

    await caughtUp(leader, follower);
    const f = call(follower);
    expect(await allPoints(follower, 'c')).toEqual(await allPoints(leader, 'c'));
    expect((await f('GET', '/v1/collections/c/points/p1')).json.payload).toEqual({ g: 'a', i: 1, extra: true });
    expect((await f('GET', '/v1/collections/c/points/p3')).json.payload).toEqual({ only: 1 });
    for (const g of ['a', 'b', 'c', 'd', 'z']) {
      const body = { filter: { eq: { field: 'g', value: g } } };
      expect((await f('POST', '/v1/collections/c/points:count', body)).json, g).toEqual((await l('POST', '/v1/collections/c/points:count', body)).json);
    }
    expect((await f('POST', '/v1/collections/c/points:count', {})).json).toEqual({ count: 29 });

    const before = await allPoints(follower, 'c');
    for (const [action, body] of [['points:payload', { points: [{ id: 'p1', payload: { g: 'q' } }] }], ['points:delete', { ids: ['p1'] }]] as const) {
      const r = await f('POST', `/v1/collections/c/${action}`, body);
      expect([r.status, r.json.error?.code], action).toEqual([403, 'read_only_replica']);
    }
    expect(await allPoints(follower, 'c')).toEqual(before);
  }, 120_000);
});
