/**
 * A read replica of a leader that requires mutual TLS (issue 15): the follower trusts the leader's CA
 * (SVC_LEADER_CA) and shows its client certificate (SVC_LEADER_CLIENT_CERT, SVC_LEADER_CLIENT_KEY); one
 * without the certificate never gets a stream and never reports ready.
 */
import { readFileSync } from 'node:fs';
import https from 'node:https';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { KEY, allPoints, eventually, startNode } from './cluster-harness.js';
import { MASTER, makeCerts, run, serve, tempDir, cleanEnv, freePort, type Proc, type Server } from './harness.js';

const dir = tempDir('svc-repl-tls-');
const f = (n: string) => readFileSync(join(dir, n));
const started: Server[] = [];
const procs: Proc[] = [];
afterAll(async () => {
  await Promise.all(started.map((s) => s.stop('SIGKILL')));
  for (const p of procs) p.child.kill('SIGKILL');
});

/** REST over HTTPS with the client certificate, as the mTLS leader requires. */
function leaderCall(port: number, method: string, path: string, body?: unknown): Promise<{ status: number; json: any }> {
  return new Promise((resolve, reject) => {
    const data = body === undefined ? undefined : JSON.stringify(body);
    const req = https.request({
      host: '127.0.0.1', port, path, method, ca: f('ca.pem'), cert: f('client.pem'), key: f('client.key'), agent: false,
      headers: { authorization: `Bearer ${KEY}`, ...(data === undefined ? {} : { 'content-type': 'application/json' }) },
    }, (r) => {
      let text = '';
      r.on('data', (d) => { text += d; });
      r.on('end', () => resolve({ status: r.statusCode ?? 0, json: JSON.parse(text) }));
    });
    req.on('error', reject);
    req.end(data);
  });
}

describe('replication over mutual TLS', () => {
  it('a follower with the CA and a client certificate replicates; one without the certificate is refused', async () => {
    makeCerts(dir);
    const leader = await serve({
      SVC_API_KEYS: KEY, SVC_ENCRYPTION_KEY: MASTER, SVC_DATA_DIR: join(dir, 'leader'),
      SVC_TLS_CERT: join(dir, 'server.pem'), SVC_TLS_KEY: join(dir, 'server.key'), SVC_TLS_CLIENT_CA: join(dir, 'ca.pem'),
    }, { scheme: 'https', ready: async (b) => (await leaderCall(Number(new URL(b).port), 'GET', '/readyz')).status === 200 });
    started.push(leader);
    expect((await leaderCall(leader.port, 'POST', '/v1/collections', { name: 'c', dim: 2, metric: 'l2' })).status).toBe(201);
    const points = Array.from({ length: 50 }, (_, i) => ({ id: `p${i}`, vector: [i, 1], payload: { i } }));
    expect((await leaderCall(leader.port, 'PUT', '/v1/collections/c/points', { points })).status).toBe(200);

    const leaderUrl = `https://127.0.0.1:${leader.grpcPort}`;
    const follower = await startNode(join(dir, 'f1'), {
      SVC_LEADER_URL: leaderUrl, SVC_LEADER_API_KEY: KEY, SVC_LEADER_CA: join(dir, 'ca.pem'),
      SVC_LEADER_CLIENT_CERT: join(dir, 'client.pem'), SVC_LEADER_CLIENT_KEY: join(dir, 'client.key'),
    }, 'c3'.repeat(32));
    started.push(follower);
    expect((await allPoints(follower, 'c')).map((p) => p.id).sort()).toEqual(points.map((p) => p.id).sort());
    expect((await leaderCall(leader.port, 'DELETE', '/v1/collections/c/points/p7')).json).toEqual({ deleted: true });
    await eventually('the delete reaches the follower', async () => ((await allPoints(follower, 'c')).some((p) => p.id === 'p7') ? 'p7 still there' : true));

    // Without the client certificate: the leader refuses the handshake, the follower stays unready.
    const port = await freePort();
    const bare = run(['serve'], cleanEnv({
      SVC_API_KEYS: KEY, SVC_ENCRYPTION_KEY: 'd4'.repeat(32), SVC_DATA_DIR: join(dir, 'f2'),
      SVC_REST_ADDR: `127.0.0.1:${port}`, SVC_GRPC_ADDR: `127.0.0.1:${await freePort()}`,
      SVC_LEADER_URL: leaderUrl, SVC_LEADER_API_KEY: KEY, SVC_LEADER_CA: join(dir, 'ca.pem'),
    }));
    procs.push(bare);
    await eventually('the follower without a certificate has tried to connect more than once', async () => {
      const m = await (await fetch(`http://127.0.0.1:${port}/metrics`)).text();
      const n = Number(/^svc_replication_reconnects_total (\d+)$/m.exec(m)?.[1] ?? 0);
      return n >= 2 ? true : `reconnects ${n}`;
    });
    expect((await fetch(`http://127.0.0.1:${port}/readyz`)).status).toBe(503);
  });
});
