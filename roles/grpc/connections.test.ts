import { connect as connectHttp2, constants, type ClientHttp2Session, type ClientHttp2Stream } from 'node:http2';
import { connect } from 'node:net';
import { credentials, makeGenericClientConstructor, type Client } from '@grpc/grpc-js';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { ConnectionLimits, ConnectionMetrics, RefusalReason } from '../connection-limits.js';
import { createGrpcTransport, frameGrpcMessage, type GrpcTransport, type MethodHandler } from './transport.js';

/**
 * The gRPC listener under connections and streams that announce a message and never send it (issue 19),
 * on a real listening transport over loopback with a low cap and short timeouts: a stream's message must
 * arrive within the request timeout, an answer given before the message was read resets the stream, a
 * connection that opens no stream (or stays idle) is closed, connections beyond the cap are refused at
 * accept, and a normal client is served throughout. Every wait is for an eventual outcome, bounded.
 */
const CAP = 20;
const LIMITS: ConnectionLimits = {
  restMaxConnections: CAP, grpcMaxConnections: CAP,
  headersTimeoutMs: 1000, requestTimeoutMs: 1500, keepAliveTimeoutMs: 1000, idleTimeoutMs: 1000,
};

const id = (b: Buffer) => b;
const SERVICE = { echo: { path: '/t.T/Echo', requestStream: false, responseStream: false, requestSerialize: id, requestDeserialize: id, responseSerialize: id, responseDeserialize: id } };

const refusals: Record<RefusalReason, number> = { limit: 0, timeout: 0, unread_body: 0 };
let open = 0;
const metrics: ConnectionMetrics = {
  connectionOpened: () => { open++; },
  connectionClosed: () => { open--; },
  connectionRefused: (t, reason) => { if (t === 'grpc') refusals[reason]++; },
};

let transport: GrpcTransport;
let port: number;

beforeAll(async () => {
  const methods = new Map<string, MethodHandler>([['/t.T/Echo', { kind: 'unary', handle: async (_call, m) => ({ message: m }) }]]);
  transport = createGrpcTransport({
    methods, maxReceiveBytes: 1_000_000, onUnexpected: () => ({ code: 13, details: 'bug', metadata: {} }),
    connections: LIMITS, connectionMetrics: metrics,
    requestTimeoutStatus: () => ({ code: 3, details: 'the request did not arrive in time (SVC_REQUEST_TIMEOUT_SECS=1.5)', metadata: { 'svc-error-code': 'limit_exceeded' } }),
  });
  port = await transport.listen('127.0.0.1', 0);
});
afterAll(async () => { await transport.close(100); });

const within = (p: Promise<unknown>, ms: number): Promise<boolean> =>
  Promise.race([p.then(() => true), new Promise<boolean>((r) => setTimeout(() => r(false), ms))]);

/** A stream whose message announces `announced` bytes and sends only the first few. */
interface Pending { stream: ClientHttp2Stream; headers: Promise<Record<string, unknown>>; closed: Promise<void>; rstCode(): number }
function pendingCall(session: ClientHttp2Session, headers: Record<string, string>, announced = 900_000): Pending {
  const stream = session.request({ ':method': 'POST', ':path': '/t.T/Echo', 'content-type': 'application/grpc', te: 'trailers', ...headers });
  stream.on('error', () => undefined);
  const prefix = Buffer.alloc(5);
  prefix.writeUInt32BE(announced, 1);
  stream.write(Buffer.concat([prefix, Buffer.from('abc')]));
  const all: Record<string, unknown> = {};
  const got = new Promise<Record<string, unknown>>((resolve) => {
    stream.on('response', (h) => { Object.assign(all, h); if (h['grpc-status'] !== undefined) resolve(all); });
    stream.on('trailers', (h) => { Object.assign(all, h); resolve(all); });
  });
  stream.resume();
  const closed = new Promise<void>((resolve) => stream.on('close', () => resolve()));
  return { stream, headers: got, closed, rstCode: () => stream.rstCode ?? -1 };
}

function h2(): ClientHttp2Session {
  const s = connectHttp2(`http://127.0.0.1:${port}`);
  s.on('error', () => undefined);
  return s;
}

async function echo(deadlineMs: number): Promise<number> {
  const Ctor = makeGenericClientConstructor(SERVICE, 'T');
  const started = performance.now();
  for (;;) {
    const c = new Ctor(`127.0.0.1:${port}`, credentials.createInsecure()) as unknown as Client & { echo(m: Buffer, o: object, cb: (e: Error | null, r?: Buffer) => void): void };
    try {
      const r = await new Promise<Buffer>((resolve, reject) => c.echo(Buffer.from('hi'), { deadline: Date.now() + 2000 }, (e, v) => (e ? reject(e) : resolve(v!))));
      expect(r.toString()).toBe('hi');
      return performance.now() - started;
    } catch (e) {
      if (performance.now() - started > deadlineMs) throw e;
      await new Promise((r) => setTimeout(r, 50));
    } finally {
      c.close();
    }
  }
}

describe('gRPC connection limits', () => {
  it('ends a call whose message does not arrive within the request timeout, and resets its stream', async () => {
    const before = refusals.timeout;
    const session = h2();
    try {
      const calls = Array.from({ length: 30 }, () => pendingCall(session, {}));
      expect(await within(Promise.all(calls.map((c) => c.closed)), 10_000)).toBe(true);
      for (const c of calls) {
        const h = await c.headers;
        expect(h['grpc-status']).toBe('3');
        expect(String(h['grpc-message'])).toContain('SVC_REQUEST_TIMEOUT_SECS');
      }
      expect(refusals.timeout).toBeGreaterThanOrEqual(before + 30);
      // The connection itself stays usable.
      expect(await echo(2000)).toBeLessThan(2000);
    } finally {
      session.destroy();
    }
  });

  it('resets a stream answered before its message was read, at once', async () => {
    const before = refusals.unread_body;
    const session = h2();
    try {
      const calls = [
        pendingCall(session, { ':path': '/t.T/Nope' }),
        pendingCall(session, { 'content-type': 'text/plain' }),
        pendingCall(session, { ':method': 'PUT' }),
      ];
      expect(await within(Promise.all(calls.map((c) => c.closed)), LIMITS.requestTimeoutMs - 300)).toBe(true);
      for (const c of calls) expect(c.rstCode()).toBe(constants.NGHTTP2_NO_ERROR);
      expect(refusals.unread_body).toBeGreaterThanOrEqual(before + 3);
    } finally {
      session.destroy();
    }
  });

  it('closes an HTTP/2 connection that opens no stream, and one left idle', async () => {
    const silent = h2();
    const idle = h2();
    await new Promise<void>((resolve) => idle.on('connect', () => resolve()));
    expect(await echo(2000)).toBeLessThan(2000);
    const used = idle.request({ ':method': 'POST', ':path': '/t.T/Echo', 'content-type': 'application/grpc', te: 'trailers' });
    used.on('error', () => undefined);
    used.end(frameGrpcMessage(Buffer.from('x')));
    used.resume();
    await new Promise((r) => used.on('close', r));
    const closed = (s: ClientHttp2Session) => new Promise<void>((resolve) => s.on('close', () => resolve()));
    expect(await within(Promise.all([closed(silent), closed(idle)]), 10_000)).toBe(true);
  });

  it('under a flood of 200 sockets: refuses beyond the cap, closes every one, and keeps serving a normal client', async () => {
    const before = { ...refusals };
    const flood: { name: string; destroy(): void; closed: Promise<void>; isClosed?: boolean }[] = [];
    const sessions: ClientHttp2Session[] = [];
    for (let i = 0; i < 200; i++) {
      if (i % 2 === 0) {
        const socket = connect(port, '127.0.0.1');
        socket.on('error', () => undefined);
        socket.resume(); // reads what comes, so it sees the server's FIN
        flood.push({ name: 'tcp', destroy: () => socket.destroy(), closed: new Promise((r) => socket.on('close', () => r())) });
      } else {
        // A session with a stream whose message never comes.
        const s = h2();
        sessions.push(s);
        pendingCall(s, {});
        flood.push({ name: 'h2', destroy: () => s.destroy(), closed: new Promise((r) => s.on('close', () => r())) });
      }
    }
    try {
      expect(await echo(10_000)).toBeLessThan(10_000);
      for (const f of flood) void f.closed.then(() => { f.isClosed = true; });
      const allClosed = await within(Promise.all(flood.map((f) => f.closed)), 15_000);
      expect(allClosed, JSON.stringify(flood.filter((f) => !f.isClosed).map((f) => f.name))).toBe(true);
      expect(refusals.limit).toBeGreaterThan(before.limit);
      expect(refusals.timeout).toBeGreaterThan(before.timeout);
      // Idle connections (the normal client's too) are closed after the idle timeout: nothing stays open.
      for (let i = 0; i < 100 && open > 0; i++) await new Promise((r) => setTimeout(r, 100));
      expect(open).toBe(0);
      expect(await echo(2000)).toBeLessThan(2000);
    } finally {
      for (const f of flood) f.destroy();
      for (const s of sessions) s.destroy();
    }
  });
});
