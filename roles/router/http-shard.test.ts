import { mkdtempSync, rmSync } from 'node:fs';
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import { createServer as createTcpServer, type AddressInfo, type Socket } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { SvcError } from '../../core/base/errors.js';
import { DEFAULT_LIMITS } from '../../core/base/limits.js';
import { collectionExisted } from '../../core/base/model.js';
import { openDatabase, type Database } from '../../core/embedded.js';
import { silentLogger } from '../../core/service/log.js';
import { createService } from '../../core/service/service.js';
import { createPromMetrics } from '../rest/metrics.js';
import { buildRestApp } from '../rest/server.js';
import { freePort } from '../testing/free-port.js';
import { HttpShard, shardPool, type CallOutcome } from './http-shard.js';

/**
 * A shard over HTTP against a real node's REST app: answers equal the database's own, contract errors
 * arrive as the same SvcError, and everything else is `unavailable` naming the shard; reads are tried
 * again, writes never.
 */
const pool = shardPool();
let root: string;
let db: Database;
let app: ReturnType<typeof buildRestApp>;
let url: string;

const shard = (o: Partial<ConstructorParameters<typeof HttpShard>[0]> = {}) => new HttpShard({
  id: 2, url, key: 'shard-key', timeoutMs: 5_000, dispatcher: pool, ...o,
});

async function codeAndMessage(p: Promise<unknown>): Promise<{ code: string; message: string; detail?: unknown }> {
  try {
    await p;
    return { code: 'ok', message: '' };
  } catch (e) {
    if (!(e instanceof SvcError)) throw e;
    return { code: e.code, message: e.message, detail: e.detail };
  }
}

beforeAll(async () => {
  root = mkdtempSync(join(tmpdir(), 'svc-http-shard-'));
  db = await openDatabase({ dataDir: join(root, 'data'), insecure: true, limitsFrom: 'environment' });
  const metrics = createPromMetrics();
  const service = createService(db, {
    keys: [{ name: 'shard', role: 'admin', collections: ['*'], secret: 'shard-key' }], insecure: false, limits: DEFAULT_LIMITS,
    rateLimit: { requestsPerSecond: 0, burst: 0 }, audit: { append: () => undefined },
    clock: { nowMs: () => Date.now(), monotonicMs: () => performance.now() }, metrics, log: silentLogger,
  });
  app = buildRestApp({ service }, { limits: DEFAULT_LIMITS, metrics, log: silentLogger });
  await app.listen({ host: '127.0.0.1', port: 0 });
  url = `http://127.0.0.1:${(app.server.address() as AddressInfo).port}`;
});

afterAll(async () => {
  await app?.close();
  await db?.close();
  await pool.close();
  rmSync(root, { recursive: true, force: true });
});

describe('a shard over HTTP', () => {
  it('answers as the node does, marks a create answered by exist_ok, and keeps odd ids intact', async () => {
    const s = shard();
    const created = await s.createCollection({ name: 'c', dim: 2, metric: 'l2', index: 'flat' });
    expect(collectionExisted(created)).toBe(false);
    const again = await s.createCollection({ name: 'c', dim: 2, metric: 'l2', index: 'flat', exist_ok: true });
    expect(collectionExisted(again)).toBe(true);
    const ids = ['plain', 'a/b', 'sp ace', 'ünï?#%', '..'];
    expect(await s.upsert('c', { points: ids.map((id, i) => ({ id, vector: [i, 1], payload: { i } })) })).toEqual({ upserted: ids.length });
    for (const id of ids) expect(await s.get('c', id, { with_vector: true })).toEqual(await db.get('c', id, { with_vector: true }));
    const q = { vector: new Float32Array([1, 1]), k: 3 } as unknown as { vector: number[]; k: number };
    expect(await s.search('c', q)).toEqual(await db.search('c', { vector: [1, 1], k: 3 }));
    expect(await s.rankings('c', { vector: [1, 1], depth: 4 })).toEqual(await db.rankings('c', { vector: [1, 1], depth: 4 }));
    expect(await s.count('c', {})).toEqual({ count: ids.length });
    expect(await s.delete('c', 'a/b')).toEqual({ deleted: true });
    expect(await s.stats()).toEqual(await db.stats());
  });

  it('passes the contract errors about the request through as the node says them', async () => {
    const s = shard();
    const pairs: [() => Promise<unknown>, () => Promise<unknown>][] = [
      [() => s.collectionInfo('nope'), () => db.collectionInfo('nope')],
      [() => s.get('c', 'missing'), () => db.get('c', 'missing')],
      [() => s.createCollection({ name: 'c', dim: 2, metric: 'l2', index: 'flat' }), () => db.createCollection({ name: 'c', dim: 2, metric: 'l2', index: 'flat' })],
      [() => s.search('c', { vector: [1, 1], k: DEFAULT_LIMITS.maxK + 1 }), () => db.search('c', { vector: [1, 1], k: DEFAULT_LIMITS.maxK + 1 })],
      [() => s.upsert('c', { points: [{ id: 'x', vector: [1, 2, 3] }] }), () => db.upsert('c', { points: [{ id: 'x', vector: [1, 2, 3] }] })],
    ];
    for (const [p, q] of pairs) {
      const [got, want] = [await codeAndMessage(p()), await codeAndMessage(q())];
      expect(got.code).not.toBe('ok');
      expect({ code: got.code, message: got.message }).toEqual({ code: want.code, message: want.message });
    }
  });

  it('a refused key, a closed port and a shard that never answers are unavailable, naming the shard', async () => {
    const wrongKey = await codeAndMessage(shard({ key: 'wrong' }).count('c', {}));
    expect(wrongKey).toMatchObject({ code: 'unavailable', detail: { shard: 2 } });
    expect(wrongKey.message).toContain(`shard 2 (${url}) could not answer`);
    expect(wrongKey.message).toContain('SVC_CLUSTER_SHARD_KEY');

    const closed = `http://127.0.0.1:${await freePort()}`;
    const refused = await codeAndMessage(new HttpShard({ id: 1, url: closed, key: null, timeoutMs: 2_000, dispatcher: pool }).count('c', {}));
    expect(refused).toMatchObject({ code: 'unavailable', message: `shard 1 (${closed}) could not answer: connection refused`, detail: { shard: 1 } });

    const sockets = new Set<Socket>();
    const silent = createTcpServer((sock) => { sockets.add(sock); sock.on('error', () => undefined); });
    await new Promise<void>((r) => silent.listen(0, '127.0.0.1', r));
    const hanging = `http://127.0.0.1:${(silent.address() as AddressInfo).port}`;
    const t0 = performance.now();
    const late = await codeAndMessage(new HttpShard({ id: 3, url: hanging, key: null, timeoutMs: 300, dispatcher: pool }).search('c', { vector: [1, 1] }));
    const took = performance.now() - t0;
    expect(late).toMatchObject({ code: 'unavailable', message: `shard 3 (${hanging}) could not answer: no answer within 0.3 s (SVC_CLUSTER_TIMEOUT_SECS)` });
    expect(took).toBeGreaterThanOrEqual(250);
    expect(took).toBeLessThan(2_000);
    for (const sock of sockets) sock.destroy();
    await new Promise<void>((r) => silent.close(() => r()));
  });

  it('keeps a shard\'s Retry-After, and cuts an answer too large or trickling past the deadline', async () => {
    const stand = createServer((req: IncomingMessage, res: ServerResponse) => {
      req.resume();
      req.on('end', () => {
        if (req.url === '/v1/collections/c/points:count') {
          res.writeHead(429, { 'content-type': 'application/json', 'retry-after': '7' });
          res.end('{"error":{"code":"rate_limited","message":"slow down"}}');
        } else if (req.url === '/v1/stats') {
          res.writeHead(200, { 'content-type': 'application/json' });
          res.end(JSON.stringify({ pad: 'x'.repeat(500) }));
        } else {
          res.writeHead(200, { 'content-type': 'application/json' });
          res.write('{"hits":[');
          const t = setInterval(() => { if (!res.destroyed) res.write(' '); }, 50);
          setTimeout(() => { clearInterval(t); res.end(']}'); }, 3_000);
        }
      });
    });
    await new Promise<void>((r) => stand.listen(0, '127.0.0.1', r));
    const at = `http://127.0.0.1:${(stand.address() as AddressInfo).port}`;
    const s = new HttpShard({ id: 4, url: at, key: null, timeoutMs: 400, dispatcher: pool, answerBytesMax: 100 });
    expect(await codeAndMessage(s.count('c', {}))).toEqual({ code: 'rate_limited', message: 'slow down', detail: { retryAfterSeconds: 7 } });
    expect(await codeAndMessage(s.stats())).toMatchObject({ code: 'unavailable', message: `shard 4 (${at}) could not answer: its answer is larger than 100 bytes` });
    const t0 = performance.now();
    expect(await codeAndMessage(s.search('c', { vector: [1] }))).toMatchObject({ code: 'unavailable', message: `shard 4 (${at}) could not answer: no answer within 0.4 s (SVC_CLUSTER_TIMEOUT_SECS)` });
    expect(performance.now() - t0).toBeLessThan(2_000);
    stand.closeAllConnections();
    await new Promise<void>((r) => stand.close(() => r()));
  });

  it('tries a read again on 503 and a dropped connection, a write never', async () => {
    let calls = 0;
    let failFirst = 2;
    const flaky: Server = createServer((req: IncomingMessage, res: ServerResponse) => {
      req.resume();
      req.on('end', () => {
        calls++;
        if (failFirst-- > 0) {
          if (calls % 2 === 1) { res.writeHead(503, { 'content-type': 'application/json' }); res.end('{"error":{"code":"not_ready","message":"storage is not open yet"}}'); }
          else req.socket.destroy();
          return;
        }
        res.writeHead(200, { 'content-type': 'application/json' });
        res.end(req.method === 'PUT' ? '{"upserted":1}' : '{"count":7}');
      });
    });
    await new Promise<void>((r) => flaky.listen(0, '127.0.0.1', r));
    const at = `http://127.0.0.1:${(flaky.address() as AddressInfo).port}`;
    const outcomes: CallOutcome[] = [];
    const s = new HttpShard({ id: 0, url: at, key: null, timeoutMs: 5_000, dispatcher: pool, observe: (o) => outcomes.push(o) });
    expect(await s.count('c', {})).toEqual({ count: 7 });
    expect(calls).toBe(3);

    calls = 0;
    failFirst = 1;
    const w = await codeAndMessage(s.upsert('c', { points: [{ id: 'a', vector: [1, 2] }] }));
    expect(w).toMatchObject({ code: 'unavailable', message: `shard 0 (${at}) could not answer: it answered 503 not_ready: storage is not open yet` });
    expect(calls).toBe(1);

    calls = 0;
    failFirst = 5;
    expect((await codeAndMessage(s.count('c', {}))).code).toBe('unavailable');
    expect(calls).toBe(3); // the first try and two more
    expect(outcomes).toEqual(['ok', 'unavailable', 'unavailable']);
    await new Promise<void>((r) => flaky.close(() => r()));
  });
});
