/**
 * A re-bootstrap as real processes (issue 15): a replica whose leader no longer holds the log after its
 * position (here: it is pointed at another leader, whose history is shorter) streams a full snapshot into
 * a side directory while it goes on answering reads from its last state, builds the new graph there,
 * then swaps it in (which reads the graph back from its file). Every read meanwhile answers with the
 * old state or the new one, never an error and never a part of either.
 */
import { existsSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { KEY, allPoints, call, caughtUp, startNode } from './cluster-harness.js';
import { tempDir, type Server } from './harness.js';

const nodes: Server[] = [];
afterAll(async () => { await Promise.all(nodes.map((n) => n.stop('SIGKILL'))); });

async function node(dataDir: string, env: Record<string, string> = {}, master?: string): Promise<Server> {
  const s = await startNode(dataDir, env, master);
  nodes.push(s);
  return s;
}

const DIM = 64;
const vec = (i: number) => Array.from({ length: DIM }, (_, d) => Math.sin(i * 0.37 + d));

describe('a replica re-bootstraps while it answers reads', () => {
  it('serves its old state during the new snapshot, swaps it in whole, and keeps it across a restart', async () => {
    const dir = tempDir('svc-rebootstrap-');
    const a = await node(join(dir, 'a'));
    const b = await node(join(dir, 'b'));
    // Leader a: a long history (many small records); leader b: a short one with many more points.
    await call(a)('POST', '/v1/collections', { name: 'c', dim: DIM, metric: 'l2' });
    for (let i = 0; i < 60; i++) await call(a)('PUT', '/v1/collections/c/points', { points: [{ id: `a${i}`, vector: vec(i) }] });
    await call(b)('POST', '/v1/collections', { name: 'c', dim: DIM, metric: 'l2' });
    for (let i = 0; i < 30; i++) {
      const points = Array.from({ length: 1000 }, (_, j) => ({ id: `b${i * 1000 + j}`, vector: vec(i * 1000 + j) }));
      expect((await call(b)('POST', '/v1/collections/c/points:bulk', { points })).status).toBe(200);
    }
    const replicaDir = join(dir, 'replica');
    const master = 'e5'.repeat(32);
    const env = (leader: Server) => ({ SVC_LEADER_URL: `http://127.0.0.1:${leader.grpcPort}`, SVC_LEADER_API_KEY: KEY });
    let r = await node(replicaDir, env(a), master);
    await caughtUp(a, r);
    const old = (await allPoints(r, 'c')).map((p) => p.id);
    expect(old).toHaveLength(60);
    await r.stop();

    // Pointed at b, whose log ends before the replica's position: b sends a full snapshot.
    r = await node(replicaDir, { ...env(b), RUST_LOG: 'info' }, master);
    const seen = new Map<string, number>();
    for (;;) {
      const q = await call(r)('POST', '/v1/collections/c/query', { vector: vec(3), k: 3 });
      const info = await call(r)('GET', '/v1/collections/c');
      // Two requests, each answered whole by the old state or the new (the swap may fall between them).
      const top = q.status === 200 ? ({ a3: 'old', b3: 'new' } as Record<string, string>)[q.json.hits[0].id] ?? `top ${q.json.hits[0].id}` : `error ${q.status}`;
      const count = info.status === 200 ? ({ 60: 'old', 30000: 'new' } as Record<number, string>)[info.json.count] ?? `count ${info.json.count}` : `error ${info.status}`;
      for (const w of [top, count]) expect(['old', 'new'], `a read during the re-bootstrap answered ${w}`).toContain(w);
      const what = top === count ? top : 'across the swap';
      seen.set(what, (seen.get(what) ?? 0) + 1);
      if (what === 'new') break;
    }
    expect(seen.get('old') ?? 0).toBeGreaterThan(0);
    await caughtUp(b, r, 60_000);
    expect((await allPoints(r, 'c')).length).toBe(30_000);
    const metrics = await (await fetch(`${r.base}/metrics`)).text();
    expect(metrics).toMatch(/^svc_replication_bootstraps_total 1$/m);
    expect(existsSync(`${replicaDir}.bootstrap`) || existsSync(`${replicaDir}.old`)).toBe(false);
    // The new graph was built in the side directory before the swap, and the directory swapped in read it
    // back from its graph file rather than building it again: the log says which.
    const logged = async (msg: string) => {
      for (let i = 0; i < 600; i++) {
        const line = r.stderr().split('\n').find((l) => l.includes(msg));
        if (line !== undefined) return JSON.parse(line) as Record<string, unknown>;
        await new Promise((res) => setTimeout(res, 100));
      }
      throw new Error(`no log line with '${msg}'`);
    };
    const built = await logged('graphs before swapping it in');
    expect(built).toMatchObject({ collections: 1, points: 30_000 });
    expect(await logged('graphs of the swapped-in directory ready')).toMatchObject({ loaded: ['c'], rebuilt: [] });
    const order = ['graphs before swapping it in', 'swapped in the re-bootstrapped directory'].map((m) => r.stderr().indexOf(m));
    expect(order[0]).toBeGreaterThanOrEqual(0);
    expect(order[0]).toBeLessThan(order[1]);

    // kill -9 and a restart: the swapped-in directory is the one opened, and it resumes on b.
    r.child.kill('SIGKILL');
    await r.exited;
    r = await node(replicaDir, env(b), master);
    await call(b)('PUT', '/v1/collections/c/points', { points: [{ id: 'late', vector: vec(7) }] });
    await caughtUp(b, r);
    expect((await call(r)('GET', '/v1/collections/c')).json.count).toBe(30_001);
  }, 180_000);
});
