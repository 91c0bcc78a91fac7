/**
 * Connection limits of `svc serve` from outside (issue 19), over TLS: REST over HTTP/2 and gRPC, with the
 * caps and timeouts set low through SVC_* variables. HTTP/2 streams that announce a large body and send
 * almost none get their 401 and are reset at once, or are answered and reset at the request timeout; raw
 * sockets beyond the caps are refused; a normal client is served throughout; /metrics counts it all.
 * (HTTP/1.1 is tested on a listening server in roles/rest/connections.test.ts.) Imports no project code.
 */
import { readFileSync } from 'node:fs';
import http2, { constants, type ClientHttp2Session } from 'node:http2';
import { connect } from 'node:net';
import { join } from 'node:path';
import { credentials } from '@grpc/grpc-js';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { SvcGrpc } from './grpc-client.js';
import { makeCerts, MASTER, serve, tempDir, type Server } from './harness.js';

const dir = tempDir('svc-conn-');
const ca = () => readFileSync(join(dir, 'ca.pem'));
const KEY = 'conn-key';
let server: Server;

const within = (p: Promise<unknown>, ms: number): Promise<boolean> =>
  Promise.race([p.then(() => true), new Promise<boolean>((r) => setTimeout(() => r(false), ms))]);

function session(port: number): ClientHttp2Session {
  const s = http2.connect(`https://127.0.0.1:${port}`, { ca: ca() });
  s.on('error', () => undefined);
  return s;
}

/** One HTTP/2 request; with `pendingBytes` it announces that many body bytes, sends two and never ends. */
function request(s: ClientHttp2Session, path: string, headers: Record<string, string>, body: string | { pendingBytes: number }) {
  const pending = typeof body !== 'string';
  const stream = s.request({
    ':method': 'POST', ':path': path, 'content-type': 'application/json',
    ...(pending ? { 'content-length': String(body.pendingBytes) } : {}), ...headers,
  });
  stream.on('error', () => undefined);
  let status = 0;
  let text = '';
  stream.on('response', (h) => { status = Number(h[':status']); });
  stream.on('data', (d: Buffer) => { text += d.toString(); });
  if (pending) stream.write('{"');
  else stream.end(body);
  const closed = new Promise<void>((r) => stream.on('close', () => r()));
  return { closed, status: () => status, text: () => text, rstCode: () => stream.rstCode };
}

/** GET /metrics (Prometheus text) over HTTP/2. */
async function scrape(): Promise<string> {
  const s = session(server.port);
  try {
    return await new Promise<string>((resolve, reject) => {
      const st = s.request({ ':path': '/metrics' });
      let t = '';
      st.on('data', (d: Buffer) => { t += d.toString(); });
      st.on('end', () => resolve(t));
      st.on('error', reject);
    });
  } finally {
    s.close();
  }
}
const refused = (text: string, transport: string, reason: string): number =>
  Number(new RegExp(`^svc_connections_refused_total\\{transport="${transport}",reason="${reason}"\\} (\\d+)`, 'm').exec(text)?.[1] ?? NaN);

/** A search on a fresh HTTP/2 connection, retried while the listener is full; the time it took. */
async function searched(deadlineMs: number): Promise<number> {
  const started = performance.now();
  for (;;) {
    const s = session(server.port);
    try {
      const r = request(s, '/v1/collections/c/query', { authorization: `Bearer ${KEY}` }, JSON.stringify({ vector: [1, 0], k: 1 }));
      if (!(await within(r.closed, 2000))) throw new Error('no answer');
      if (r.status() !== 200) throw new Error(`status ${r.status()}: ${r.text()}`);
      expect(JSON.parse(r.text()).hits).toHaveLength(1);
      return performance.now() - started;
    } catch (e) {
      if (performance.now() - started > deadlineMs) throw e;
      await new Promise((r) => setTimeout(r, 50));
    } finally {
      s.destroy();
    }
  }
}

beforeAll(async () => {
  makeCerts(dir);
  const probe = async (b: string) => {
    const s = http2.connect(b, { ca: ca() });
    s.on('error', () => undefined);
    try {
      return await new Promise<boolean>((resolve) => {
        const st = s.request({ ':path': '/readyz' });
        st.on('response', (h) => resolve(h[':status'] === 200));
        st.on('error', () => resolve(false));
        st.resume();
      });
    } finally {
      s.close();
    }
  };
  server = await serve({
    SVC_API_KEYS: KEY, SVC_ENCRYPTION_KEY: MASTER, SVC_DATA_DIR: join(dir, 'data'),
    SVC_TLS_CERT: join(dir, 'server.pem'), SVC_TLS_KEY: join(dir, 'server.key'),
    SVC_MAX_CONNECTIONS: '50', SVC_GRPC_MAX_CONNECTIONS: '20', SVC_HEADERS_TIMEOUT_SECS: '1', SVC_REQUEST_TIMEOUT_SECS: '1.5',
    SVC_KEEPALIVE_TIMEOUT_SECS: '1', SVC_IDLE_TIMEOUT_SECS: '1',
  }, { scheme: 'https', ready: probe });
  const s = session(server.port);
  try {
    const create = request(s, '/v1/collections', { authorization: `Bearer ${KEY}` }, JSON.stringify({ name: 'c', dim: 2, metric: 'l2' }));
    await create.closed;
    expect(create.status()).toBe(201);
    const put = request(s, '/v1/collections/c/points', { authorization: `Bearer ${KEY}`, ':method': 'PUT' }, JSON.stringify({ points: [{ id: 'p', vector: [1, 0] }] }));
    await put.closed;
    expect(put.status()).toBe(200);
  } finally {
    s.close();
  }
}, 120_000);
afterAll(async () => { await server?.stop(); });

describe('connection limits of svc serve', () => {
  it('HTTP/2: resets a stream answered 401 before its body at once, and one whose body does not come at the request timeout', async () => {
    const before = await scrape();
    const s = session(server.port);
    try {
      // Hot path (a search with a content-length) and fastify (another route) alike.
      const unauthenticated = Array.from({ length: 40 }, (_, i) => request(s, i % 2 ? '/v1/collections/c/query' : '/v1/collections/c/points:fetch', {}, { pendingBytes: 900_000 }));
      const slow = Array.from({ length: 40 }, (_, i) => request(s, i % 2 ? '/v1/collections/c/query' : '/v1/collections/c/points:fetch', { authorization: `Bearer ${KEY}` }, { pendingBytes: 900_000 }));
      // The 401s are answered and their streams reset (a stream closed by the request timeout instead
      // would be a 400 request_timeout: the checks below tell them apart, without a clock).
      expect(await within(Promise.all(unauthenticated.map((r) => r.closed)), 10_000)).toBe(true);
      for (const r of unauthenticated) {
        expect(r.status()).toBe(401);
        expect(JSON.parse(r.text()).error.code).toBe('unauthenticated');
        expect(r.rstCode()).toBe(constants.NGHTTP2_NO_ERROR);
      }
      // A normal client meanwhile.
      expect(await searched(5000)).toBeLessThan(5000);
      expect(await within(Promise.all(slow.map((r) => r.closed)), 10_000)).toBe(true);
      for (const r of slow) {
        expect(r.status()).toBe(400);
        expect(JSON.parse(r.text()).error).toMatchObject({ code: 'limit_exceeded' });
        expect(r.text()).toContain('SVC_REQUEST_TIMEOUT_SECS');
      }
      const after = await scrape();
      expect(refused(after, 'rest', 'unread_body')).toBeGreaterThanOrEqual(refused(before, 'rest', 'unread_body') + 40);
      expect(refused(after, 'rest', 'timeout')).toBeGreaterThanOrEqual(refused(before, 'rest', 'timeout') + 40);
    } finally {
      s.destroy();
    }
  });

  it('refuses raw sockets beyond each listener\'s cap, closes the rest, and serves normal clients on both', async () => {
    const before = await scrape();
    const flood: Promise<void>[] = [];
    const sockets: ReturnType<typeof connect>[] = [];
    for (let i = 0; i < 300; i++) {
      // Half on each listener; none completes a TLS handshake.
      const socket = connect(i % 2 ? server.port : server.grpcPort, '127.0.0.1');
      socket.on('error', () => undefined);
      socket.resume();
      sockets.push(socket);
      flood.push(new Promise((r) => socket.on('close', () => r())));
    }
    const grpc = new SvcGrpc(`127.0.0.1:${server.grpcPort}`, credentials.createSsl(ca()));
    try {
      expect(await searched(10_000)).toBeLessThan(10_000);
      expect(await within(Promise.all(flood), 15_000)).toBe(true);
      const r = await grpc.call('Search', { collection: 'c', vector: [1, 0], k: 1 }, KEY);
      expect(r.err).toBeUndefined();
      expect(r.res.hits).toHaveLength(1);
      const after = await scrape();
      for (const t of ['rest', 'grpc']) {
        expect(refused(after, t, 'limit'), t).toBeGreaterThan(refused(before, t, 'limit'));
        expect(refused(after, t, 'timeout'), t).toBeGreaterThan(refused(before, t, 'timeout'));
      }
      expect(after).toMatch(/^svc_connections_open\{transport="rest"\} \d+$/m);
      expect(after).toMatch(/^svc_connections_open\{transport="grpc"\} \d+$/m);
    } finally {
      grpc.close();
      for (const s of sockets) s.destroy();
    }
  });
});
