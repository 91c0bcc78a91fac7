import { readFileSync } from 'node:fs';
import http2 from 'node:http2';
import https from 'node:https';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { makeCerts, MASTER, serve, tempDir, type Server } from './harness.js';


const dir = tempDir('svc-tls-');
const f = (n: string) => readFileSync(join(dir, n));
let tls: Server;
let mtls: Server;

function h1(port: number, extra: https.RequestOptions = {}, path = '/healthz'): Promise<{ status: number; alpn: string | false; body: string }> {
  return new Promise((res, rej) => {
    const req = https.request({ host: '127.0.0.1', port, path, ca: f('ca.pem'), ALPNProtocols: ['http/1.1'], agent: false, ...extra }, (r) => {
      let body = '';
      const alpn = (r.socket as import('node:tls').TLSSocket).alpnProtocol ?? false;
      r.on('data', (d) => { body += d; });
      r.on('end', () => res({ status: r.statusCode ?? 0, alpn, body }));
    });
    req.on('error', rej);
    req.end();
  });
}

function h2(
  port: number, path: string, headers: Record<string, string> = {}, extra: http2.SecureClientSessionOptions = {}, send?: { method: string; body: string },
): Promise<{ status: number; alpn: string | undefined; body: string }> {
  return new Promise((res, rej) => {
    const session = http2.connect(`https://127.0.0.1:${port}`, { ca: f('ca.pem'), ...extra });
    session.on('error', rej);
    const req = session.request({ ':path': path, ...(send ? { ':method': send.method } : {}), ...headers });
    if (send) req.write(send.body);
    let status = 0;
    let body = '';
    req.on('response', (h) => { status = Number(h[':status']); });
    req.on('data', (d) => { body += d; });
    req.on('end', () => { const alpn = session.alpnProtocol; session.close(); res({ status, alpn, body }); });
    req.on('error', rej);
    req.end();
  });
}

beforeAll(async () => {
  makeCerts(dir);
  const base = { SVC_API_KEYS: 'k', SVC_ENCRYPTION_KEY: MASTER, SVC_TLS_CERT: join(dir, 'server.pem'), SVC_TLS_KEY: join(dir, 'server.key') };
  const probe = (extra: https.RequestOptions) => async (b: string) => (await h1(Number(new URL(b).port), extra, '/readyz')).status === 200;
  tls = await serve({ ...base, SVC_DATA_DIR: join(dir, 'd1') }, { scheme: 'https', ready: probe({}) });
  mtls = await serve({ ...base, SVC_DATA_DIR: join(dir, 'd2'), SVC_TLS_CLIENT_CA: join(dir, 'ca.pem') },
    { scheme: 'https', ready: probe({ cert: f('client.pem'), key: f('client.key') }) });
});
afterAll(async () => { await Promise.all([tls?.stop(), mtls?.stop()]); });

describe('TLS', () => {
  it('serves HTTP/2 and HTTP/1.1 on one port, chosen by ALPN', async () => {
    const a = await h2(tls.port, '/v1/collections', { authorization: 'Bearer k' });
    expect([a.status, a.alpn, JSON.parse(a.body)]).toEqual([200, 'h2', { collections: [] }]);
    const b = await h1(tls.port);
    expect([b.status, b.alpn]).toEqual([200, 'http/1.1']);
    const c = await h2(tls.port, '/v1/collections');
    expect(c.status).toBe(401);
  });

  it('answers a search over HTTP/2 the same with or without a content-length (hot path or fastify)', async () => {
    const json = { authorization: 'Bearer k', 'content-type': 'application/json' };
    const post = (path: string, body: unknown, headers: Record<string, string> = {}, method = 'POST') =>
      h2(tls.port, path, { ...json, ...headers }, {}, { method, body: typeof body === 'string' ? body : JSON.stringify(body) });
    expect((await post('/v1/collections', { name: 'h2c', dim: 2, metric: 'l2' })).status).toBe(201);
    const points = Array.from({ length: 10 }, (_, i) => ({ id: `p${i}`, vector: [i, 1] }));
    expect((await post('/v1/collections/h2c/points', { points }, {}, 'PUT')).status).toBe(200);
    const q = JSON.stringify({ vector: [3.2, 1], k: 3, consistency: 'strong' });
    const withLength = await post('/v1/collections/h2c/query', q, { 'content-length': String(Buffer.byteLength(q)) });
    const without = await post('/v1/collections/h2c/query', q);
    expect(withLength.status).toBe(200);
    expect(JSON.parse(withLength.body).hits.map((h: { id: string }) => h.id)).toEqual(['p3', 'p4', 'p2']);
    expect(JSON.parse(without.body)).toEqual(JSON.parse(withLength.body));
    const bad = '{"vector": [1,';
    const broken = await post('/v1/collections/h2c/query', bad, { 'content-length': String(bad.length) });
    expect([broken.status, JSON.parse(broken.body).error.code]).toEqual([400, 'invalid_argument']);
  });

  it('refuses plain HTTP on the TLS port', async () => {
    await expect(fetch(`http://127.0.0.1:${tls.port}/healthz`).then((r) => r.status)).rejects.toThrow();
  });
});

describe('mTLS', () => {
  it('requires a client certificate from SVC_TLS_CLIENT_CA, in addition to the key', async () => {
    const ok = await h2(mtls.port, '/v1/collections', { authorization: 'Bearer k' }, { cert: f('client.pem'), key: f('client.key') });
    expect(ok.status).toBe(200);
    const noKey = await h2(mtls.port, '/v1/collections', {}, { cert: f('client.pem'), key: f('client.key') });
    expect(noKey.status).toBe(401);
    // Refused in the handshake (TLS 1.3 reports it after the client's Finished): no HTTP response at all.
    const refused = (p: Promise<{ status: number }>) => p.then((r) => r.status, () => 0);
    expect(await refused(h2(mtls.port, '/v1/collections', { authorization: 'Bearer k' }))).toBe(0);
    expect(await refused(h2(mtls.port, '/v1/collections', { authorization: 'Bearer k' }, { cert: f('stranger.pem'), key: f('stranger.key') }))).toBe(0);
    expect(await refused(h1(mtls.port))).toBe(0);
  });
});
