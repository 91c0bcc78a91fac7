import { mkdtempSync, rmSync } from 'node:fs';
import type { AddressInfo } from 'node:net';
import { connect, type Socket } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { systemClock } from '../../core/base/clock.js';
import { resolveLimits } from '../../core/base/limits.js';
import { openDatabase, type Database } from '../../core/embedded.js';
import { silentLogger } from '../../core/service/log.js';
import { createService } from '../../core/service/service.js';
import type { ConnectionLimits } from '../connection-limits.js';
import { createPromMetrics } from './metrics.js';
import { buildRestApp, type RestState } from './server.js';

/**
 * The REST listener under a flood of sockets that announce a large body and never send it (issue 19): on
 * a real listening server over loopback, with a low cap and short timeouts. What a user sees: an answer
 * given before the body was read closes its connection; a request whose body does not come is answered
 * and closed at the request timeout; connections beyond the cap are refused; a normal client is served
 * throughout; /metrics counts it all. The margins are wide: every wait is for an eventual outcome.
 */
const CAP = 50;
const CONNECTIONS: ConnectionLimits = {
  restMaxConnections: CAP, grpcMaxConnections: CAP,
  headersTimeoutMs: 1000, requestTimeoutMs: 1500, keepAliveTimeoutMs: 1000, idleTimeoutMs: 1000,
};
const BIG = 900_000;

let root: string;
let db: Database;
let app: ReturnType<typeof buildRestApp>;
let port: number;
const state: RestState = { service: null };
const metrics = createPromMetrics();
const limits = resolveLimits({ maxRequestBodyBytes: 1_000_000 });

beforeAll(async () => {
  root = mkdtempSync(join(tmpdir(), 'svc-conn-'));
  db = await openDatabase({ dataDir: join(root, 'data'), insecure: true });
  state.service = createService(db, {
    keys: [{ name: 'env:0', role: 'admin', collections: ['*'], secret: 'admin' }],
    insecure: false, limits, rateLimit: { requestsPerSecond: 0, burst: 1 }, audit: { append: () => undefined },
    clock: systemClock, metrics, log: silentLogger,
  });
  app = buildRestApp(state, { limits, metrics, log: silentLogger, connections: CONNECTIONS });
  await app.listen({ host: '127.0.0.1', port: 0 });
  port = (app.server.address() as AddressInfo).port;
  const r = await app.inject({ method: 'POST', url: '/v1/collections', headers: { authorization: 'Bearer admin' }, payload: { name: 'a1', dim: 2, metric: 'l2' } });
  expect(r.statusCode).toBe(201);
  await app.inject({ method: 'PUT', url: '/v1/collections/a1/points', headers: { authorization: 'Bearer admin' }, payload: { points: [{ id: 'p', vector: [1, 2] }] } });
});

afterAll(async () => {
  await app.close();
  await db.close();
  rmSync(root, { recursive: true, force: true });
});

/** A raw socket: what it received, and whether (and when) the server closed it. */
interface Raw {
  socket: Socket;
  text(): string;
  closed: Promise<void>;
  isClosed(): boolean;
  stopTrickle(): void;
}

/** Connects and sends a request head announcing `length` body bytes; trickles a byte every 100 ms if asked. */
function rawRequest(head: string, opts: { trickle?: boolean } = {}): Raw {
  const socket = connect(port, '127.0.0.1');
  let text = '';
  let closed = false;
  let timer: NodeJS.Timeout | undefined;
  socket.on('data', (d) => { text += d.toString(); });
  socket.on('error', () => undefined);
  socket.write(head);
  if (opts.trickle) timer = setInterval(() => { if (!socket.destroyed && socket.writable) socket.write('1'); }, 100);
  const done = new Promise<void>((resolve) => socket.on('close', () => {
    closed = true;
    if (timer !== undefined) clearInterval(timer);
    resolve();
  }));
  return { socket, text: () => text, closed: done, isClosed: () => closed, stopTrickle: () => clearInterval(timer) };
}

const post = (path: string, headers: Record<string, string>, length = BIG): string =>
  `POST ${path} HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\ncontent-length: ${length}\r\n${Object.entries(headers).map(([k, v]) => `${k}: ${v}\r\n`).join('')}\r\n`;
const chunked = (path: string, headers: Record<string, string>): string =>
  `POST ${path} HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\ntransfer-encoding: chunked\r\n${Object.entries(headers).map(([k, v]) => `${k}: ${v}\r\n`).join('')}\r\n1\r\n{\r\n`;

/** Resolves true once `p` settles within `ms`, false otherwise. */
const within = (p: Promise<unknown>, ms: number): Promise<boolean> =>
  Promise.race([p.then(() => true), new Promise<boolean>((r) => setTimeout(() => r(false), ms))]);

async function scrape(): Promise<string> {
  return (await app.inject({ method: 'GET', url: '/metrics' })).body;
}
function counter(text: string, name: string, labels: string): number {
  const m = new RegExp(`^${name}\\{${labels.replace(/[{}]/g, '\\$&')}\\} (\\d+)`, 'm').exec(text);
  return m ? Number(m[1]) : 0;
}
const refused = (text: string, reason: string) => counter(text, 'svc_connections_refused_total', `transport="rest",reason="${reason}"`);

/** A normal client: a search on a fresh connection, retried while the listener is full; the time it took. */
async function served(deadlineMs: number): Promise<number> {
  const started = performance.now();
  for (;;) {
    try {
      const r = await fetch(`http://127.0.0.1:${port}/v1/collections/a1/query`, {
        method: 'POST', headers: { authorization: 'Bearer admin', 'content-type': 'application/json' }, body: JSON.stringify({ vector: [1, 2], k: 1 }),
        signal: AbortSignal.timeout(2000),
      });
      expect(r.status).toBe(200);
      expect(((await r.json()) as { hits: unknown[] }).hits).toHaveLength(1);
      return performance.now() - started;
    } catch (e) {
      if (performance.now() - started > deadlineMs) throw e;
      await new Promise((r) => setTimeout(r, 50));
    }
  }
}

describe('REST connection limits', () => {
  it('closes the connection after a 401 given before the body, on the hot path and on fastify alike', async () => {
    const before = refused(await scrape(), 'unread_body');
    // The hot path takes a search with a content-length; fastify takes it chunked, and every other route.
    const sockets = [
      rawRequest(post('/v1/collections/a1/query', {}), { trickle: true }),
      rawRequest(chunked('/v1/collections/a1/query', {}), { trickle: true }),
      rawRequest(post('/v1/collections/a1/points:fetch', { authorization: 'Bearer wrong' }), { trickle: true }),
      rawRequest('GET /healthz HTTP/1.1\r\nhost: x\r\ncontent-length: 1000\r\n\r\n', { trickle: true }),
    ];
    try {
      // Closed by the server, long before the request timeout would have closed them.
      const closed = await Promise.all(sockets.map((s) => within(s.closed, CONNECTIONS.requestTimeoutMs - 200)));
      expect(closed, sockets.map((s) => s.text()).join('\n---\n')).toEqual([true, true, true, true]);
      const heads = sockets.map((s) => s.text().split('\r\n\r\n')[0].toLowerCase());
      for (const h of heads.slice(0, 3)) {
        expect(h).toMatch(/^http\/1\.1 401/);
        expect(h).toContain('connection: close');
        expect(h).toContain('www-authenticate: bearer');
      }
      // An open route answered without reading its body closes too.
      expect(heads[3]).toMatch(/^http\/1\.1 200/);
      expect(heads[3]).toContain('connection: close');
      expect(refused(await scrape(), 'unread_body')).toBeGreaterThanOrEqual(before + 4);
    } finally {
      for (const s of sockets) s.socket.destroy();
    }
  });

  it('answers and closes a body over the limit without waiting for it', async () => {
    const s = rawRequest(post('/v1/collections/a1/query', { authorization: 'Bearer admin' }, limits.maxRequestBodyBytes + 1), { trickle: true });
    try {
      expect(await within(s.closed, CONNECTIONS.requestTimeoutMs - 200)).toBe(true);
      expect(s.text()).toMatch(/^HTTP\/1\.1 400/);
      expect(s.text().toLowerCase()).toContain('connection: close');
      expect(s.text()).toContain('"limit_exceeded"');
    } finally {
      s.socket.destroy();
    }
  });

  it('answers and closes a request whose body does not arrive within the request timeout', async () => {
    const before = refused(await scrape(), 'timeout');
    const sockets = [
      rawRequest(post('/v1/collections/a1/query', { authorization: 'Bearer admin' })),
      rawRequest(post('/v1/collections/a1/points:fetch', { authorization: 'Bearer admin' })),
      rawRequest(post('/v1/collections/a1/query', { authorization: 'Bearer admin' }), { trickle: true }),
      rawRequest('GET /healthz HTTP/1.1\r\nhost: x\r\n'), // headers never finished
    ];
    try {
      for (const s of sockets) expect(await within(s.closed, 10_000)).toBe(true);
      for (const s of sockets) {
        expect(s.text()).toMatch(/^HTTP\/1\.1 400/);
        expect(s.text()).toContain('"code":"limit_exceeded"');
        expect(s.text()).toContain('SVC_REQUEST_TIMEOUT_SECS');
      }
      expect(refused(await scrape(), 'timeout')).toBeGreaterThanOrEqual(before + 4);
    } finally {
      for (const s of sockets) s.socket.destroy();
    }
  });

  it('under a flood of 300 slow sockets: refuses beyond the cap, closes every one, and keeps serving a normal client', async () => {
    const before = await scrape();
    const flood: Raw[] = [];
    for (let i = 0; i < 300; i++) {
      // A third unauthenticated with a trickling body, a third authenticated with no body, a third silent.
      const kind = i % 3;
      flood.push(kind === 0 ? rawRequest(post('/v1/collections/a1/query', {}), { trickle: true })
        : kind === 1 ? rawRequest(post('/v1/collections/a1/query', { authorization: 'Bearer admin' }))
          : rawRequest(''));
    }
    try {
      // Served while the flood is on (it retries while the listener is full), well before the flood is gone.
      expect(await served(10_000)).toBeLessThan(10_000);
      // Every flood socket is closed by the server: at accept, after its 401, or at its timeout.
      expect(await within(Promise.all(flood.map((s) => s.closed)), 15_000)).toBe(true);
      const after = await scrape();
      expect(refused(after, 'limit')).toBeGreaterThan(refused(before, 'limit'));
      expect(refused(after, 'unread_body')).toBeGreaterThan(refused(before, 'unread_body'));
      expect(refused(after, 'timeout')).toBeGreaterThan(refused(before, 'timeout'));
      // The flood is gone: at most the scrape's own connection (none under inject) is open.
      expect(counter(after, 'svc_connections_open', 'transport="rest"')).toBeLessThanOrEqual(1);
      expect(await served(2_000)).toBeLessThan(2_000);
    } finally {
      for (const s of flood) s.socket.destroy();
    }
  });

  it('closes a keep-alive connection idle for the keep-alive timeout', async () => {
    const s = rawRequest('GET /healthz HTTP/1.1\r\nhost: x\r\n\r\n');
    try {
      expect(await within(s.closed, 10_000)).toBe(true);
      expect(s.text()).toMatch(/^HTTP\/1\.1 200/);
      expect(s.text().toLowerCase()).toContain('keep-alive');
    } finally {
      s.socket.destroy();
    }
  });
});
