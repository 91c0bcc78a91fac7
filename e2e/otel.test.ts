/**
 * OpenTelemetry end to end: `svc serve` exports its spans over OTLP/gRPC to a real collector stand-in
 * started here (a @grpc/grpc-js server implementing
 * opentelemetry.proto.collector.trace.v1.TraceService/Export, decoded with a minimal copy of the OTLP
 * proto). Spans carry names and secret-free attributes; an unreachable or malformed endpoint is a
 * warning and the server serves anyway.
 */
import { join } from 'node:path';
import { Server as GrpcServer, ServerCredentials, type sendUnaryData, type ServerUnaryCall } from '@grpc/grpc-js';
import protobuf from 'protobufjs';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { api, freePort, MASTER, serve, tempDir, type Server } from './harness.js';

// The fields of opentelemetry/proto/{collector/trace,trace,common,resource}/v1 that the test reads.
const OTLP_PROTO = `
syntax = "proto3";
package otlp;
message ExportTraceServiceRequest { repeated ResourceSpans resource_spans = 1; }
message ResourceSpans { Resource resource = 1; repeated ScopeSpans scope_spans = 2; }
message Resource { repeated KeyValue attributes = 1; }
message ScopeSpans { InstrumentationScope scope = 1; repeated Span spans = 2; }
message InstrumentationScope { string name = 1; }
message Span {
  bytes trace_id = 1; bytes span_id = 2; string name = 5; int32 kind = 6;
  fixed64 start_time_unix_nano = 7; fixed64 end_time_unix_nano = 8;
  repeated KeyValue attributes = 9; Status status = 15;
}
message Status { string message = 2; int32 code = 3; }
message KeyValue { string key = 1; AnyValue value = 2; }
message AnyValue { oneof value { string string_value = 1; bool bool_value = 2; int64 int_value = 3; double double_value = 4; } }
`;
const ExportRequest = protobuf.parse(OTLP_PROTO, { keepCase: true }).root.lookupType('otlp.ExportTraceServiceRequest');

interface ReceivedSpan { name: string; attributes: Record<string, unknown>; status: { code?: number; message?: string }; resource: Record<string, unknown> }

function attrs(list: { key: string; value: Record<string, unknown> }[] = []): Record<string, unknown> {
  return Object.fromEntries(list.map((kv) => [kv.key, Object.values(kv.value ?? {})[0]]));
}

/** A collector stand-in: keeps every raw request (to search for secrets) and the decoded spans. */
async function startCollector(): Promise<{ port: number; raw: Buffer[]; spans: ReceivedSpan[]; close(): void }> {
  const raw: Buffer[] = [];
  const spans: ReceivedSpan[] = [];
  const server = new GrpcServer();
  server.addService({
    Export: {
      path: '/opentelemetry.proto.collector.trace.v1.TraceService/Export',
      requestStream: false, responseStream: false,
      requestDeserialize: (b: Buffer) => b, requestSerialize: (b: Buffer) => b,
      responseSerialize: () => Buffer.alloc(0), responseDeserialize: (b: Buffer) => b,
    },
  }, {
    Export: (call: ServerUnaryCall<Buffer, Buffer>, cb: sendUnaryData<Buffer>) => {
      raw.push(call.request);
      const req = ExportRequest.toObject(ExportRequest.decode(call.request), { longs: Number, bytes: String, defaults: false }) as any;
      for (const rs of req.resource_spans ?? []) {
        for (const ss of rs.scope_spans ?? []) {
          for (const s of ss.spans ?? []) {
            spans.push({ name: s.name, attributes: attrs(s.attributes), status: s.status ?? {}, resource: attrs(rs.resource?.attributes) });
          }
        }
      }
      cb(null, Buffer.alloc(0));
    },
  });
  const port = await new Promise<number>((res, rej) => server.bindAsync('127.0.0.1:0', ServerCredentials.createInsecure(), (e, p) => (e ? rej(e) : res(p))));
  return { port, raw, spans, close: () => server.forceShutdown() };
}

async function waitFor(what: string, ok: () => boolean): Promise<void> {
  for (let i = 0; i < 200 && !ok(); i++) await new Promise((r) => setTimeout(r, 100));
  if (!ok()) throw new Error(`never happened: ${what}`);
}

const KEY = 'otel-admin-key-5f1c';
const PAYLOAD_MARK = 'payload-marker-83ad1';
const VECTOR = [0.123456, 0.654321, 0.5, 0.25];

describe('OTLP/gRPC span export', () => {
  let collector: Awaited<ReturnType<typeof startCollector>>;
  let server: Server;

  beforeAll(async () => {
    collector = await startCollector();
    const dir = tempDir('svc-otel-e2e-');
    server = await serve({
      SVC_API_KEYS: KEY, SVC_ENCRYPTION_KEY: MASTER, SVC_DATA_DIR: join(dir, 'data'),
      SVC_OTLP_ENDPOINT: `http://127.0.0.1:${collector.port}`, SVC_OTLP_SERVICE_NAME: 'svc-e2e', SVC_OTLP_TIMEOUT_SECS: '2',
    }, { cwd: dir });
  });

  afterAll(async () => {
    await server?.stop();
    collector?.close();
  });

  it('exports a span per engine operation with collection, k and counts, and no vector, payload or key', async () => {
    const call = api(server.base, KEY);
    expect((await call('POST', '/v1/collections', { name: 'otel_c', dim: 4, metric: 'cosine' })).status).toBe(201);
    expect((await call('PUT', '/v1/collections/otel_c/points', { points: [{ id: 'p1', vector: VECTOR, payload: { note: PAYLOAD_MARK } }, { id: 'p2', vector: [1, 0, 0, 0] }] })).status).toBe(200);
    expect((await call('POST', '/v1/collections/otel_c/query', { vector: VECTOR, k: 2 })).json.hits).toHaveLength(2);
    expect((await call('GET', '/v1/collections/missing_c')).status).toBe(404);
    await waitFor('four spans at the collector', () => ['svc.createCollection', 'svc.upsert', 'svc.search', 'svc.collectionInfo']
      .every((n) => collector.spans.some((s) => s.name === n)));

    const byName = (n: string) => collector.spans.find((s) => s.name === n)!;
    expect(byName('svc.search').attributes).toMatchObject({ 'svc.collection': 'otel_c', 'svc.k': 2, 'svc.hits': 2, 'svc.transport': 'rest', 'svc.outcome': 'ok' });
    expect(byName('svc.upsert').attributes).toMatchObject({ 'svc.collection': 'otel_c', 'svc.count': 2, 'svc.outcome': 'ok' });
    const failed = byName('svc.collectionInfo');
    expect(failed.attributes).toMatchObject({ 'svc.collection': 'missing_c', 'svc.outcome': 'not_found' });
    expect(failed.status).toMatchObject({ code: 2, message: 'not_found' });
    expect(byName('svc.search').resource['service.name']).toBe('svc-e2e');

    // Nothing secret anywhere in what left the process: not the key, not a payload, not a vector's bytes.
    const all = Buffer.concat(collector.raw);
    expect(all.includes(Buffer.from(KEY))).toBe(false);
    expect(all.includes(Buffer.from(PAYLOAD_MARK))).toBe(false);
    expect(all.includes(Buffer.from(new Float32Array(VECTOR).buffer))).toBe(false);
    expect(all.includes(Buffer.from(new Float64Array(VECTOR).buffer))).toBe(false);
    for (const s of collector.spans) {
      for (const k of Object.keys(s.attributes)) expect(k).toMatch(/^svc\.(transport|request_id|collection|k|count|hits|outcome)$/);
    }
  });
});

describe('an OTLP endpoint that does not work', () => {
  it.each([
    ['unreachable', async () => `http://127.0.0.1:${await freePort()}`, /OTLP export failed/],
    ['malformed', async () => 'ftp://not-otlp', /OTLP exporter could not start/],
  ])('%s: a warning in the log, and the server serves', async (_what, endpoint, warning) => {
    const dir = tempDir('svc-otel-bad-');
    const server = await serve({
      SVC_API_KEYS: KEY, SVC_ENCRYPTION_KEY: MASTER, SVC_DATA_DIR: join(dir, 'data'),
      SVC_OTLP_ENDPOINT: await endpoint(), SVC_OTLP_TIMEOUT_SECS: '1', RUST_LOG: 'warn',
    }, { cwd: dir });
    try {
      const call = api(server.base, KEY);
      expect((await call('POST', '/v1/collections', { name: 'c', dim: 2, metric: 'l2' })).status).toBe(201);
      expect((await call('PUT', '/v1/collections/c/points', { points: [{ id: 'a', vector: [1, 2] }] })).status).toBe(200);
      await waitFor('the warning', () => warning.test(server.stderr()));
      expect((await call('POST', '/v1/collections/c/query', { vector: [1, 2], k: 1 })).json.hits.map((h: { id: string }) => h.id)).toEqual(['a']);
      expect(server.stderr()).not.toContain(KEY);
    } finally {
      expect(await server.stop()).toBe(0);
    }
  });
});
