import { connect, constants, type ClientHttp2Session } from 'node:http2';
import { credentials, makeGenericClientConstructor, Metadata, status, type Client, type ServiceError } from '@grpc/grpc-js';
import { afterEach, describe, expect, it } from 'vitest';
import { createGrpcTransport, encodeGrpcMessage, GrpcStatusError, parseGrpcTimeout, type GrpcTransport, type MethodHandler } from './transport.js';

// The protocol half of the gRPC server, against grpc-js's client (what most callers use) and against raw
// HTTP/2 frames for what a well-behaved client never sends.

const id = (b: Buffer) => b;
const SERVICE = {
  echo: { path: '/t.T/Echo', requestStream: false, responseStream: false, requestSerialize: id, requestDeserialize: id, responseSerialize: id, responseDeserialize: id },
  slow: { path: '/t.T/Slow', requestStream: false, responseStream: false, requestSerialize: id, requestDeserialize: id, responseSerialize: id, responseDeserialize: id },
  fail: { path: '/t.T/Fail', requestStream: false, responseStream: false, requestSerialize: id, requestDeserialize: id, responseSerialize: id, responseDeserialize: id },
  late: { path: '/t.T/Late', requestStream: false, responseStream: false, requestSerialize: id, requestDeserialize: id, responseSerialize: id, responseDeserialize: id },
  tail: { path: '/t.T/Tail', requestStream: false, responseStream: true, requestSerialize: id, requestDeserialize: id, responseSerialize: id, responseDeserialize: id },
};
type TestClient = Client & Record<string, (...a: unknown[]) => unknown>;

let transport: GrpcTransport | undefined;
let port = 0;
const aborted: string[] = [];
let lateStarted = 0;

/** Polls until `ok()` (a loaded machine may take far longer than the few ms these calls need). */
async function until(ok: () => boolean, ms = 10_000): Promise<void> {
  for (const t0 = Date.now(); !ok() && Date.now() - t0 < ms;) await new Promise((r) => setTimeout(r, 10));
}

async function start(): Promise<void> {
  const methods = new Map<string, MethodHandler>([
    ['/t.T/Echo', { kind: 'unary', handle: async (call, m) => ({ message: Buffer.concat([Buffer.from('echo:'), m]), trailers: { 'x-seen': String(call.headers['x-tag'] ?? '') } }) }],
    ['/t.T/Slow', {
      kind: 'unary',
      handle: (call) => new Promise((_resolve, reject) => {
        call.signal.addEventListener('abort', () => { aborted.push('slow'); reject(new Error('aborted')); });
      }),
    }],
    ['/t.T/Late', {
      kind: 'unary',
      // Looks at its signal only when done: a cancel that came before must show there all the same.
      handle: (call) => {
        lateStarted++;
        return new Promise((resolve) => setTimeout(() => {
          aborted.push(`late: aborted ${call.signal.aborted}`);
          resolve({ message: Buffer.from('late') });
        }, 150));
      },
    }],
    ['/t.T/Fail', { kind: 'unary', handle: async () => { throw new GrpcStatusError({ code: status.NOT_FOUND, details: 'no such thing: ünïcode 100%', metadata: { 'svc-error-code': 'not_found' } }); } }],
    ['/t.T/Tail', {
      kind: 'serverStream',
      handle: async (call, m, send) => {
        const big = m.toString() === 'big';
        try {
          for (let i = 0; i < (big ? 10_000 : Number(m.toString())); i++) await send(big ? Buffer.alloc(64 << 10, 1) : Buffer.from(`event ${i}`));
        } catch (e) {
          aborted.push(`tail send: ${(e as Error).message}`);
          throw e;
        }
        // Then a live tail: waits until the call ends.
        await new Promise<void>((resolve) => call.signal.addEventListener('abort', () => { aborted.push('tail'); resolve(); }));
      },
    }],
  ]);
  transport = createGrpcTransport({ methods, maxReceiveBytes: 1000, onUnexpected: () => ({ code: status.INTERNAL, details: 'bug', metadata: {} }) });
  port = await transport.listen('127.0.0.1', 0);
}

function grpcClient(): TestClient {
  const Ctor = makeGenericClientConstructor(SERVICE, 'T');
  return new Ctor(`127.0.0.1:${port}`, credentials.createInsecure()) as unknown as TestClient;
}

/** Starts a unary call, cancels it after `ms`, then waits `settleMs` for the server to see the reset. */
async function cancelAfter(c: TestClient, method: string, ms: number, settleMs: number): Promise<void> {
  const call = c[method](Buffer.from(''), new Metadata(), () => undefined) as { cancel(): void };
  await new Promise((res) => setTimeout(res, ms));
  call.cancel();
  await new Promise((res) => setTimeout(res, settleMs));
}

function unary(c: TestClient, method: string, msg: Buffer, opts: { md?: Metadata; deadlineMs?: number } = {}): Promise<{ res?: Buffer; err?: ServiceError; trailers?: Metadata }> {
  return new Promise((resolve) => {
    let trailers: Metadata | undefined;
    const call = c[method](msg, opts.md ?? new Metadata(), opts.deadlineMs ? { deadline: Date.now() + opts.deadlineMs } : {}, (err: ServiceError | null, res?: Buffer) => {
      setImmediate(() => resolve(err ? { err } : { res, trailers }));
    }) as { on(e: string, f: (s: { metadata: Metadata }) => void): void };
    call.on('status', (s) => { trailers = s.metadata; });
  });
}

/** One raw HTTP/2 request: the reply's headers, body and trailers. */
function raw(headers: Record<string, string>, body: Buffer): Promise<{ headers: Record<string, unknown>; body: Buffer; trailers: Record<string, unknown> }> {
  const session: ClientHttp2Session = connect(`http://127.0.0.1:${port}`);
  return new Promise((resolve, reject) => {
    const s = session.request({ [constants.HTTP2_HEADER_METHOD]: 'POST', 'content-type': 'application/grpc', te: 'trailers', ...headers });
    let h: Record<string, unknown> = {};
    let t: Record<string, unknown> = {};
    const chunks: Buffer[] = [];
    s.on('response', (x) => { h = x; });
    s.on('trailers', (x) => { t = x; });
    s.on('data', (c: Buffer) => chunks.push(c));
    s.on('error', () => undefined);
    s.on('close', () => { session.close(); resolve({ headers: h, body: Buffer.concat(chunks), trailers: t }); });
    session.on('error', reject);
    s.end(body);
  });
}

const framed = (m: Buffer, flag = 0) => Buffer.concat([Buffer.from([flag]), Buffer.from([0, 0, 0, 0].map((_, i) => (m.length >>> (24 - 8 * i)) & 0xff)), m]);

afterEach(async () => {
  await transport?.close(200);
  transport = undefined;
  aborted.length = 0;
});

describe('gRPC transport', () => {
  it('answers a unary call with the message and its trailing metadata, to grpc-js', async () => {
    await start();
    const c = grpcClient();
    const md = new Metadata();
    md.set('x-tag', 'abc');
    const r = await unary(c, 'echo', Buffer.from('hi'), { md });
    expect(r.err).toBeUndefined();
    expect(r.res?.toString()).toBe('echo:hi');
    expect(r.trailers?.get('x-seen')).toEqual(['abc']);
    c.close();
  });

  it('sends a handler\'s status with its message (percent-encoded on the wire) and metadata', async () => {
    await start();
    const c = grpcClient();
    const r = await unary(c, 'fail', Buffer.from(''));
    expect(r.err?.code).toBe(status.NOT_FOUND);
    expect(r.err?.details).toBe('no such thing: ünïcode 100%');
    expect(r.err?.metadata.get('svc-error-code')).toEqual(['not_found']);
    c.close();
    expect(encodeGrpcMessage('a%b\n')).toBe('a%25b%0A');
  });

  it('ends a call at its deadline with DEADLINE_EXCEEDED and aborts the handler', async () => {
    await start();
    const c = grpcClient();
    const r = await unary(c, 'slow', Buffer.from(''), { deadlineMs: 150 });
    expect(r.err?.code).toBe(status.DEADLINE_EXCEEDED);
    await new Promise((res) => setTimeout(res, 100));
    expect(aborted).toContain('slow');
    c.close();
    expect(parseGrpcTimeout('150m')).toBe(150);
    expect(parseGrpcTimeout('2S')).toBe(2000);
    expect(parseGrpcTimeout('123456789m')).toBeUndefined();
  });

  it('aborts the handler when the client cancels', async () => {
    await start();
    const c = grpcClient();
    await cancelAfter(c, 'slow', 100, 100);
    expect(aborted).toEqual(['slow']);
    c.close();
  });

  it('drops the answer of a call the client cancelled, and keeps serving', async () => {
    await start();
    const c = grpcClient();
    // Cancelled once the handler runs (not before the call reached it), and answered after the reset.
    const started = lateStarted;
    const call = c.late(Buffer.from(''), new Metadata(), () => undefined) as { cancel(): void };
    await until(() => lateStarted > started);
    call.cancel();
    await until(() => aborted.includes('late: aborted true'));
    expect(aborted).toContain('late: aborted true');
    const r = await unary(c, 'echo', Buffer.from('still'));
    expect(r.res?.toString()).toBe('echo:still');
    const fine = await unary(c, 'late', Buffer.from(''));
    expect(fine.res?.toString()).toBe('late');
    expect(aborted).toContain('late: aborted false');
    c.close();
  });

  it('streams messages, and ends a live stream with UNAVAILABLE when the server shuts down', async () => {
    await start();
    const c = grpcClient();
    const got: string[] = [];
    const ended = new Promise<ServiceError | undefined>((resolve) => {
      const call = c.tail(Buffer.from('3'), new Metadata()) as NodeJS.EventEmitter;
      call.on('data', (b: Buffer) => got.push(b.toString()));
      call.on('error', (e: ServiceError) => resolve(e));
      call.on('end', () => resolve(undefined));
    });
    while (got.length < 3) await new Promise((res) => setTimeout(res, 10));
    const closed = transport!.close(2000);
    const err = await ended;
    await closed;
    transport = undefined;
    expect(got).toEqual(['event 0', 'event 1', 'event 2']);
    expect(err?.code).toBe(status.UNAVAILABLE);
    expect(aborted).toEqual(['tail']);
    c.close();
  });

  it('at shutdown, ends a stream whose client stopped reading without waiting for it, then cuts the connection at the grace period', async () => {
    await start();
    const session = connect(`http://127.0.0.1:${port}`);
    session.on('error', () => undefined);
    const s = session.request({ [constants.HTTP2_HEADER_METHOD]: 'POST', [constants.HTTP2_HEADER_PATH]: '/t.T/Tail', 'content-type': 'application/grpc', te: 'trailers' });
    s.on('error', () => undefined);
    s.pause(); // never reads: the server's writes back up
    s.end(framed(Buffer.from('big')));
    await new Promise((res) => setTimeout(res, 300));
    const t0 = performance.now();
    const closed = transport!.close(1500);
    transport = undefined;
    await new Promise((res) => setTimeout(res, 200));
    // The handler was not left waiting for a 'drain' that never comes: its send failed at once.
    expect(aborted).toEqual(['tail send: the call ended']);
    await closed; // the stuck connection itself is cut when the grace period ends
    expect(performance.now() - t0).toBeLessThan(3000);
    session.destroy();
  });

  it('refuses an unknown method, a compressed message, a missing or second message, a large message and a non-gRPC body', async () => {
    await start();
    const unknown = await raw({ [constants.HTTP2_HEADER_PATH]: '/t.T/Nope' }, framed(Buffer.from('x')));
    expect(unknown.headers['grpc-status']).toBe(String(status.UNIMPLEMENTED));

    const compressed = await raw({ [constants.HTTP2_HEADER_PATH]: '/t.T/Echo', 'grpc-encoding': 'gzip' }, framed(Buffer.from('x'), 1));
    expect(compressed.headers['grpc-status']).toBe(String(status.UNIMPLEMENTED));
    expect(compressed.headers['grpc-accept-encoding']).toBe('identity');

    const none = await raw({ [constants.HTTP2_HEADER_PATH]: '/t.T/Echo' }, Buffer.alloc(0));
    expect(none.headers['grpc-status']).toBe(String(status.INTERNAL));
    const two = await raw({ [constants.HTTP2_HEADER_PATH]: '/t.T/Echo' }, Buffer.concat([framed(Buffer.from('a')), framed(Buffer.from('b'))]));
    expect(two.headers['grpc-status']).toBe(String(status.INTERNAL));

    const large = await raw({ [constants.HTTP2_HEADER_PATH]: '/t.T/Echo' }, framed(Buffer.alloc(5000)));
    expect(large.headers['grpc-status']).toBe(String(status.RESOURCE_EXHAUSTED));

    const json = await raw({ [constants.HTTP2_HEADER_PATH]: '/t.T/Echo', 'content-type': 'application/json' }, Buffer.from('{}'));
    expect(json.headers[constants.HTTP2_HEADER_STATUS]).toBe(415);

    // And the transport still answers properly afterwards.
    const ok = await raw({ [constants.HTTP2_HEADER_PATH]: '/t.T/Echo' }, framed(Buffer.from('z')));
    expect(ok.body.subarray(5).toString()).toBe('echo:z');
    expect(ok.trailers['grpc-status']).toBe('0');
  });
});
