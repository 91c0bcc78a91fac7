import { execFileSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { credentials, Metadata, status, type ChannelCredentials, type ServiceError } from '@grpc/grpc-js';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { SvcError } from '../../core/base/errors.js';
import { resolveLimits, type Limits } from '../../core/base/limits.js';
import type { CollectionInfo } from '../../core/base/model.js';
import type { EngineApi } from '../../core/service/api.js';
import type { RequestLabels } from '../../core/service/metrics.js';
import { silentLogger } from '../../core/service/log.js';
import { createService, type ApiKey } from '../../core/service/service.js';
import type { AuditRecord } from '../../core/service/audit.js';
import { SvcClient, type ReplicationEvent } from '../../proto/gen/svc.js';
import { createPromMetrics, type PromMetrics } from '../rest/metrics.js';
import { startGrpcServer, type GrpcServerHandle, type GrpcTls, type ReplicationSource } from './server.js';

// The transport is tested against the real service layer (auth, roles, scopes, audit) over a recording
// stand-in for the engine: the engine's own semantics are tested with the engine, and end to end in e2e/.

const INFO: CollectionInfo = {
  name: 'docs', dim: 2, metric: 'l2', index: 'hnsw', index_params: { m: 16, ef_construction: 200, ef_search: 64 },
  quantization: 'none', pq_subspaces: null, filterable: [], multivector: false, vector_encryption: null, count: 1,
  index_state: 'current',
};

type Calls = { op: string; args: unknown[] }[];

function recordingEngine(calls: Calls, override: Partial<Record<keyof EngineApi, (...a: unknown[]) => Promise<unknown>>> = {}): EngineApi {
  const answers: Record<string, unknown> = {
    listCollections: { collections: [INFO, { ...INFO, name: 'secret' }] },
    collectionInfo: INFO,
    createCollection: INFO,
    deleteCollection: { existed: true },
    upsert: { upserted: 1 },
    bulkUpsert: { upserted: 1 },
    get: { id: 'a', payload: { n: 1 } },
    delete: { deleted: true },
    fetch: { points: [{ id: 'a', payload: {} }], next_cursor: null },
    count: { count: 7 },
    setPayload: { updated: 2 },
    deletePoints: { deleted: 3 },
    search: { hits: [{ id: 'a', rank: 0, score: 0.5, payload: { n: 1 } }] },
    hybridSearch: { hits: [] },
    upsertText: { upserted: 2 },
    searchText: { hits: [] },
    upsertDocuments: { upserted: 1 },
    searchMultiVector: { hits: [] },
    deleteDocument: { deleted: false },
    stats: {
      collections: 2, total_points: 3,
      per_collection: [
        { name: 'docs', count: 1, index: 'hnsw', index_state: 'current', vector_bytes: 16, graph_bytes: 8196 },
        { name: 'secret', count: 2, index: 'hnsw', index_state: 'current', vector_bytes: 32, graph_bytes: 8196 },
      ],
      snapshot_status: { manifest_version: 4, disk_bytes: 100 },
    },
    snapshot: { name: 's1', path: '/snap/s1', manifest_version: 4, disk_bytes: 100 },
  };
  const engine: Record<string, unknown> = { close: async () => undefined };
  for (const op of Object.keys(answers)) {
    engine[op] = async (...args: unknown[]) => {
      calls.push({ op, args });
      const o = override[op as keyof EngineApi];
      return o ? o(...args) : answers[op];
    };
  }
  // The database's stream is a snapshot then a live tail; this engine's has nothing and ends at once.
  engine.replicate = async function* () { /* no events */ };
  return engine as EngineApi;
}

const KEYS: ApiKey[] = [
  { name: 'admin', role: 'admin', collections: ['*'], secret: 'admin-secret' },
  { name: 'reader', role: 'read', collections: ['docs'], secret: 'read-secret' },
  { name: 'team-admin', role: 'admin', collections: ['team_a.*'], secret: 'team-secret' },
];

interface Harness {
  server: GrpcServerHandle;
  calls: Calls;
  finished: { labels: RequestLabels; status: number }[];
  errors: object[];
  audits: AuditRecord[];
}

async function startHarness(opts: {
  limits?: Limits; tls?: GrpcTls; replication?: ReplicationSource; engine?: (calls: Calls) => EngineApi; prom?: PromMetrics;
} = {}): Promise<Harness> {
  const calls: Calls = [];
  const finished: Harness['finished'] = [];
  const errors: object[] = [];
  const audits: AuditRecord[] = [];
  const limits = opts.limits ?? resolveLimits();
  const metrics = opts.prom ?? { requestFinished: (labels: RequestLabels, s: number) => void finished.push({ labels, status: s }), authFailure: () => undefined, rateLimited: () => undefined };
  const log = { ...silentLogger, error: (o: object) => void errors.push(o) };
  const service = createService((opts.engine ?? recordingEngine)(calls), {
    keys: KEYS, insecure: false, limits, rateLimit: { requestsPerSecond: 0, burst: 0 },
    audit: { append: (r) => void audits.push(r) }, clock: { nowMs: () => 0, monotonicMs: () => 0 }, metrics, log,
  });
  const server = await startGrpcServer({ service, host: '127.0.0.1', port: 0, limits, log, metrics, tls: opts.tls, replication: opts.replication, shutdownGraceMs: 1000 });
  return { server, calls, finished, errors, audits };
}

function client(port: number, creds: ChannelCredentials = credentials.createInsecure(), host = '127.0.0.1'): SvcClient {
  return new SvcClient(`${host}:${port}`, creds, { 'grpc.max_send_message_length': -1, 'grpc.max_receive_message_length': -1 });
}

function auth(key?: string): Metadata {
  const md = new Metadata();
  if (key !== undefined) md.set('authorization', `Bearer ${key}`);
  return md;
}

/** Calls a unary method of the generated client and resolves to the response, or to the ServiceError. */
function call<Req, Res>(c: SvcClient, method: string, req: Req, md: Metadata): Promise<{ res?: Res; err?: ServiceError }> {
  return new Promise((resolve) => {
    (c as unknown as Record<string, (r: Req, m: Metadata, cb: (e: ServiceError | null, r?: Res) => void) => void>)[method](req, md, (err, res) => {
      resolve(err ? { err } : { res });
    });
  });
}

const codeOf = (err: ServiceError | undefined): unknown => err?.metadata.get('svc-error-code')[0];

describe('gRPC server over the service', () => {
  let h: Harness;
  let c: SvcClient;
  beforeAll(async () => {
    h = await startHarness();
    c = client(h.server.port);
  });
  afterAll(async () => {
    c.close();
    await h.server.close();
  });

  it('answers every RPC from its service operation, with the REST body converted', async () => {
    const admin = auth('admin-secret');
    const cases: [string, object, string, unknown[], unknown][] = [
      ['createCollection', { name: 'docs', dim: 2, metric: 'l2', filterable: [] }, 'createCollection', [{ name: 'docs', dim: 2, metric: 'l2' }], { name: 'docs', count: 1, index_state: 'current' }],
      ['listCollections', {}, 'listCollections', [], { collections: [expect.objectContaining({ name: 'docs' }), expect.objectContaining({ name: 'secret' })] }],
      ['getCollection', { collection: 'docs' }, 'collectionInfo', ['docs'], { dim: 2, metric: 'l2' }],
      ['deleteCollection', { collection: 'docs' }, 'deleteCollection', ['docs'], { existed: true }],
      ['upsert', { collection: 'docs', points: [{ id: 'a', vector: [1, 2], payload: { n: 1 } }] }, 'upsert', ['docs', { points: [{ id: 'a', vector: [1, 2], payload: { n: 1 } }] }], { upserted: 1 }],
      ['bulkUpsert', { collection: 'docs', points: [{ id: 'a', vector: [], vector_b64: Buffer.from(Float32Array.from([1, 2]).buffer) }] }, 'bulkUpsert', ['docs', { points: [{ id: 'a', vector_b64: Buffer.from(Float32Array.from([1, 2]).buffer).toString('base64') }] }], { upserted: 1 }],
      ['getPoint', { collection: 'docs', id: 'a', with_vector: true }, 'get', ['docs', 'a', { with_vector: true }], { id: 'a', vector: [], payload: { n: 1 } }],
      ['deletePoint', { collection: 'docs', id: 'a' }, 'delete', ['docs', 'a'], { deleted: true }],
      ['fetch', { collection: 'docs', limit: 5 }, 'fetch', ['docs', { limit: 5 }], { points: [{ id: 'a', vector: [], payload: {} }] }],
      ['count', { collection: 'docs' }, 'count', ['docs', {}], { count: 7 }],
      ['count', { collection: 'docs', filter: { eq: { field: 'n', value: 1 } } }, 'count', ['docs', { filter: { eq: { field: 'n', value: 1 } } }], { count: 7 }],
      ['setPayload', { collection: 'docs', points: [{ id: 'a', payload: { n: 2 } }, { id: 'b', payload: {} }], mode: 'replace' }, 'setPayload',
        ['docs', { points: [{ id: 'a', payload: { n: 2 } }, { id: 'b', payload: {} }], mode: 'replace' }], { updated: 2 }],
      ['setPayload', { collection: 'docs', points: [{ id: 'a', payload: { n: 2 } }] }, 'setPayload', ['docs', { points: [{ id: 'a', payload: { n: 2 } }] }], { updated: 2 }],
      ['deletePoints', { collection: 'docs', ids: ['a', 'b'] }, 'deletePoints', ['docs', { ids: ['a', 'b'] }], { deleted: 3 }],
      // Without a filter, no ids is an empty list (proto3 has no absent list); with one, no ids are sent.
      ['deletePoints', { collection: 'docs', ids: [] }, 'deletePoints', ['docs', { ids: [] }], { deleted: 3 }],
      ['deletePoints', { collection: 'docs', ids: [], filter: { eq: { field: 'n', value: 1 } } }, 'deletePoints', ['docs', { filter: { eq: { field: 'n', value: 1 } } }], { deleted: 3 }],
      ['deletePoints', { collection: 'docs', ids: ['a'], filter: { eq: { field: 'n', value: 1 } } }, 'deletePoints', ['docs', { ids: ['a'], filter: { eq: { field: 'n', value: 1 } } }], { deleted: 3 }],
      ['createCollection', { name: 'docs', dim: 2, metric: 'l2', filterable: [], exist_ok: true }, 'createCollection', [{ name: 'docs', dim: 2, metric: 'l2', exist_ok: true }], { name: 'docs' }],
      // The search vector reaches the service as the Float32Array it was on the wire (packed-vector.ts).
      ['search', { collection: 'docs', vector: [1, 2], k: 3, filter: { eq: { field: 'n', value: 1 } } }, 'search', ['docs', { vector: Float32Array.of(1, 2), k: 3, filter: { eq: { field: 'n', value: 1 } } }], { hits: [{ id: 'a', rank: 0, score: 0.5, payload: { n: 1 }, vector: [] }] }],
      ['hybridSearch', { collection: 'docs', vector: [], sparse: { indices: [1], values: [2] }, query_text: 'x' }, 'hybridSearch', ['docs', { sparse_indices: [1], sparse_values: [2], query_text: 'x' }], { hits: [] }],
      ['upsertText', { collection: 'docs', points: [{ id: 't', text: 'hello' }] }, 'upsertText', ['docs', { points: [{ id: 't', text: 'hello' }] }], { upserted: 2 }],
      ['searchText', { collection: 'docs', text: 'hello', rerank: true }, 'searchText', ['docs', { text: 'hello', rerank: true }], { hits: [] }],
      ['upsertDocuments', { collection: 'docs', documents: [{ id: 'd', vectors: [{ values: [1, 0] }] }] }, 'upsertDocuments', ['docs', { documents: [{ id: 'd', vectors: [[1, 0]] }] }], { upserted: 1 }],
      ['searchMultiVector', { collection: 'docs', vectors: [{ values: [1, 0] }], k: 2 }, 'searchMultiVector', ['docs', { vectors: [[1, 0]], k: 2 }], { hits: [] }],
      ['deleteDocument', { collection: 'docs', id: 'd' }, 'deleteDocument', ['docs', 'd'], { deleted: false }],
      ['stats', {}, 'stats', [], {
        collections: 2, total_points: 3, snapshot_status: { manifest_version: 4, disk_bytes: 100 },
        per_collection: [{ name: 'docs', vector_bytes: 16, graph_bytes: 8196 }, { name: 'secret', vector_bytes: 32, graph_bytes: 8196 }],
      }],
      ['snapshot', { name: 's1' }, 'snapshot', [{ name: 's1' }], { name: 's1', path: '/snap/s1', manifest_version: 4, disk_bytes: 100 }],
    ];
    for (const [method, req, op, args, want] of cases) {
      h.calls.length = 0;
      const { res, err } = await call(c, method, req, admin);
      expect(err, method).toBeUndefined();
      expect(h.calls, method).toEqual([{ op, args }]);
      expect(res, method).toMatchObject(want as object);
    }
  });

  it('refuses a call without a key, or with an unknown one, as UNAUTHENTICATED', async () => {
    for (const md of [auth(), auth('nope'), (() => { const m = new Metadata(); m.set('authorization', 'Basic eA=='); return m; })()]) {
      h.calls.length = 0;
      const { err } = await call(c, 'listCollections', {}, md);
      expect(err?.code).toBe(status.UNAUTHENTICATED);
      expect(codeOf(err)).toBe('unauthenticated');
      expect(h.calls).toEqual([]);
    }
  });

  it('refuses a role or scope that is too small as PERMISSION_DENIED, before the engine runs', async () => {
    const reader = auth('read-secret');
    for (const [method, req] of [
      ['upsert', { collection: 'docs', points: [] }],
      ['setPayload', { collection: 'docs', points: [{ id: 'a', payload: {} }], mode: 'nonsense' }],
      ['deletePoints', { collection: 'docs', ids: ['a'] }],
      ['count', { collection: 'other' }],
      ['search', { collection: 'other', vector: [1, 2] }],
      ['createCollection', { name: 'docs', dim: 2, metric: 'l2', filterable: [] }],
      ['snapshot', { name: 's' }],
    ] as const) {
      h.calls.length = 0;
      const { err } = await call(c, method, req, reader);
      expect(err?.code, method).toBe(status.PERMISSION_DENIED);
      expect(codeOf(err), method).toBe('permission_denied');
      expect(h.calls, method).toEqual([]);
    }
    const { err } = await call(c, 'createCollection', { name: 'team_b.x', dim: 2, metric: 'l2', filterable: [] }, auth('team-secret'));
    expect(err?.code).toBe(status.PERMISSION_DENIED);
  });

  it('refuses what the REST schema refuses, with the same message, and only after role and scope', async () => {
    h.calls.length = 0;
    const bad = await call(c, 'createCollection', { name: 'docs', dim: 2, metric: 'hamming', filterable: [] }, auth('admin-secret'));
    expect([bad.err?.code, codeOf(bad.err), bad.err?.details]).toEqual([status.INVALID_ARGUMENT, 'invalid_argument', 'body/metric must be one of: cosine, dot, l2']);
    const mode = await call(c, 'setPayload', { collection: 'docs', points: [{ id: 'a', payload: {} }], mode: 'upsert' }, auth('admin-secret'));
    expect([mode.err?.code, mode.err?.details]).toEqual([status.INVALID_ARGUMENT, 'body/mode must be one of: merge, replace']);
    const noPayload = await call(c, 'setPayload', { collection: 'docs', points: [{ id: 'a' }] }, auth('admin-secret'));
    expect([noPayload.err?.code, noPayload.err?.details]).toEqual([status.INVALID_ARGUMENT, "body/points/0 must have required property 'payload'"]);
    const consistency = await call(c, 'search', { collection: 'docs', vector: [1, 2], consistency: 'sometimes' }, auth('admin-secret'));
    expect([consistency.err?.code, consistency.err?.details]).toEqual([status.INVALID_ARGUMENT, 'body/consistency must be one of: eventual, strong']);
    expect(h.calls).toEqual([]);
    const denied = await call(c, 'createCollection', { name: 'docs', dim: 2, metric: 'hamming', filterable: [] }, auth('read-secret'));
    expect(denied.err?.code).toBe(status.PERMISSION_DENIED);
    const outOfScope = await call(c, 'search', { collection: 'other', vector: [1, 2], consistency: 'sometimes' }, auth('read-secret'));
    expect(outOfScope.err?.code).toBe(status.PERMISSION_DENIED);
  });

  it('lists only what the key may see', async () => {
    const { res } = await call<object, { collections: { name: string }[] }>(c, 'listCollections', {}, auth('read-secret'));
    expect(res?.collections.map((x) => x.name)).toEqual(['docs']);
  });

  it('records each call under its RPC path', async () => {
    h.finished.length = 0;
    await call(c, 'search', { collection: 'docs', vector: [1, 2] }, auth('admin-secret'));
    await call(c, 'search', { collection: 'docs', vector: [1, 2] }, auth());
    expect(h.finished).toEqual([
      { labels: { method: 'GRPC', route: '/svc.v1.Svc/Search' }, status: 200 },
      { labels: { method: 'GRPC', route: '/svc.v1.Svc/Search' }, status: 401 },
    ]);
  });

  it('sends the request id back, and takes the one the client gave', async () => {
    const md = auth('admin-secret');
    md.set('x-request-id', 'client-chosen-1');
    const got = await new Promise<Metadata>((resolve) => {
      const callObj = c.stats({}, md, () => undefined);
      callObj.on('status', (s) => resolve(s.metadata));
    });
    expect(got.get('x-request-id')).toEqual(['client-chosen-1']);
  });

  it('refuses a Replicate stream to a key that is not admin over every collection, and ends it for one that is', async () => {
    for (const key of ['read-secret', 'team-secret']) {
      const err = await new Promise<ServiceError | undefined>((resolve) => {
        const s = c.replicate({}, auth(key));
        s.on('data', () => undefined);
        s.on('error', (e: ServiceError) => resolve(e));
        s.on('end', () => resolve(undefined));
      });
      expect(err?.code, key).toBe(status.PERMISSION_DENIED);
    }
    const events: unknown[] = [];
    const end = await new Promise<string>((resolve) => {
      const s = c.replicate({}, auth('admin-secret'));
      s.on('data', (e) => events.push(e));
      s.on('error', (e: ServiceError) => resolve(`error ${e.code}`));
      s.on('end', () => resolve('end'));
    });
    expect(end).toBe('end');
    expect(events).toEqual([]);
    const noKey = await new Promise<number | undefined>((resolve) => {
      const s = c.replicate({}, auth());
      s.on('data', () => undefined);
      s.on('error', (e: ServiceError) => resolve(e.code));
      s.on('end', () => resolve(undefined));
    });
    expect(noKey).toBe(status.UNAUTHENTICATED);
  });
});

describe('gRPC errors and limits', () => {
  it('maps engine errors to the contract status and keeps the code and message', async () => {
    const h = await startHarness({
      engine: (calls) => recordingEngine(calls, {
        search: async () => { throw new SvcError('limit_exceeded', 'k is 20000, above SVC_MAX_K=10000'); },
        collectionInfo: async () => { throw new SvcError('not_found', 'collection nope does not exist'); },
        createCollection: async () => { throw new SvcError('already_exists', 'collection docs exists'); },
        upsertText: async () => { throw new SvcError('provider_error', 'embedding provider failed'); },
        fetch: async () => { throw new TypeError('cannot read x of undefined at /src/secret.ts'); },
      }),
    });
    const c = client(h.server.port);
    const admin = auth('admin-secret');
    try {
      const k = await call(c, 'search', { collection: 'docs', vector: [1, 2], k: 20000 }, admin);
      expect([k.err?.code, codeOf(k.err), k.err?.details]).toEqual([status.INVALID_ARGUMENT, 'limit_exceeded', 'k is 20000, above SVC_MAX_K=10000']);
      const nf = await call(c, 'getCollection', { collection: 'nope' }, admin);
      expect([nf.err?.code, codeOf(nf.err)]).toEqual([status.NOT_FOUND, 'not_found']);
      const ae = await call(c, 'createCollection', { name: 'docs', dim: 2, metric: 'l2', filterable: [] }, admin);
      expect([ae.err?.code, codeOf(ae.err)]).toEqual([status.ALREADY_EXISTS, 'already_exists']);
      const pe = await call(c, 'upsertText', { collection: 'docs', points: [] }, admin);
      expect([pe.err?.code, codeOf(pe.err)]).toEqual([status.UNAVAILABLE, 'provider_error']);
      const bug = await call(c, 'fetch', { collection: 'docs' }, admin);
      expect([bug.err?.code, codeOf(bug.err)]).toEqual([status.INTERNAL, 'internal']);
      expect(bug.err?.details).not.toContain('secret');
      expect(JSON.stringify(h.errors)).toContain('cannot read x of undefined');
    } finally {
      c.close();
      await h.server.close();
    }
  });

  it('refuses a request message above SVC_MAX_REQUEST_BODY_BYTES as INVALID_ARGUMENT naming the variable', async () => {
    const h = await startHarness({ limits: resolveLimits({ maxRequestBodyBytes: 4096 }) });
    const c = client(h.server.port);
    try {
      const points = [{ id: 'a', vector: new Array(1200).fill(1) }]; // about 4.8 KB
      const { err } = await call(c, 'upsert', { collection: 'docs', points }, auth('admin-secret'));
      expect([err?.code, codeOf(err)]).toEqual([status.INVALID_ARGUMENT, 'limit_exceeded']);
      expect(err?.details).toContain('SVC_MAX_REQUEST_BODY_BYTES');
      expect(h.calls).toEqual([]);
      // Without a valid key, the size is nobody's business: the answer is UNAUTHENTICATED.
      const anon = await call(c, 'upsert', { collection: 'docs', points }, auth());
      expect(anon.err?.code).toBe(status.UNAUTHENTICATED);
      // Far above the limit, the transport refuses without reading the message.
      const huge = await call(c, 'upsert', { collection: 'docs', points: [{ id: 'a', vector: new Array(5000).fill(1) }] }, auth('admin-secret'));
      expect(huge.err?.code).toBe(status.RESOURCE_EXHAUSTED);
    } finally {
      c.close();
      await h.server.close();
    }
  });

  it('refuses to send a response above SVC_MAX_REQUEST_BODY_BYTES, saying how to ask for less', async () => {
    const big = { points: Array.from({ length: 200 }, (_, i) => ({ id: `p${i}`, vector: [1, 2, 3, 4, 5, 6, 7, 8], payload: {} })), next_cursor: null };
    const h = await startHarness({ limits: resolveLimits({ maxRequestBodyBytes: 4096 }), engine: (calls) => recordingEngine(calls, { fetch: async () => big }) });
    const c = client(h.server.port);
    try {
      const { err } = await call(c, 'fetch', { collection: 'docs', with_vector: true }, auth('admin-secret'));
      expect([err?.code, codeOf(err)]).toEqual([status.INVALID_ARGUMENT, 'limit_exceeded']);
      expect(err?.details).toContain('SVC_MAX_REQUEST_BODY_BYTES');
    } finally {
      c.close();
      await h.server.close();
    }
  });

  it('refuses bytes that are not a valid message as INVALID_ARGUMENT', async () => {
    const h = await startHarness();
    const c = client(h.server.port);
    try {
      const err = await new Promise<ServiceError | null>((resolve) => {
        c.makeUnaryRequest('/svc.v1.Svc/Search', (b: Buffer) => b, (b: Buffer) => b, Buffer.from([0x0a, 0xff, 0xff, 0xff, 0x0f]), auth('admin-secret'), (e) => resolve(e));
      });
      expect([err?.code, codeOf(err ?? undefined)]).toEqual([status.INVALID_ARGUMENT, 'invalid_argument']);
    } finally {
      c.close();
      await h.server.close();
    }
  });

  it('streams what the replication source yields to an admin', async () => {
    const source: ReplicationSource = {
      async *stream(_ctx, resume) {
        const from = (resume.after_seq ?? 0) + 1;
        for (let seq = from; seq < from + 3; seq++) yield { seq, record: Buffer.from(`r${seq}`) };
      },
    };
    const h = await startHarness({ replication: source });
    const c = client(h.server.port);
    try {
      const events = await new Promise<ReplicationEvent[]>((resolve, reject) => {
        const got: ReplicationEvent[] = [];
        const s = c.replicate({ after_seq: 10 }, auth('admin-secret'));
        s.on('data', (e: ReplicationEvent) => got.push(e));
        s.on('error', reject);
        s.on('end', () => resolve(got));
      });
      expect(events.map((e) => [e.seq, Buffer.from(e.record).toString()])).toEqual([[11, 'r11'], [12, 'r12'], [13, 'r13']]);
    } finally {
      c.close();
      await h.server.close();
    }
  });
});

/** A CA, a server certificate for 127.0.0.1/localhost and a client certificate, made with the openssl CLI. */
function makeCerts(dir: string): Record<'ca' | 'serverCert' | 'serverKey' | 'clientCert' | 'clientKey' | 'otherCa' | 'otherCert' | 'otherKey', Buffer> {
  const ssl = (...args: string[]): void => void execFileSync('openssl', args, { cwd: dir, stdio: 'pipe' });
  const ca = (name: string): void => {
    ssl('req', '-x509', '-newkey', 'rsa:2048', '-nodes', '-keyout', `${name}.key`, '-out', `${name}.crt`, '-days', '2', '-subj', `/CN=${name}`);
  };
  const leaf = (name: string, caName: string, ext: string): void => {
    writeFileSync(join(dir, `${name}.ext`), ext);
    ssl('req', '-newkey', 'rsa:2048', '-nodes', '-keyout', `${name}.key`, '-out', `${name}.csr`, '-subj', `/CN=${name}`);
    ssl('x509', '-req', '-in', `${name}.csr`, '-CA', `${caName}.crt`, '-CAkey', `${caName}.key`, '-CAcreateserial', '-out', `${name}.crt`, '-days', '2', '-extfile', `${name}.ext`);
  };
  ca('ca');
  ca('other-ca');
  leaf('server', 'ca', 'subjectAltName=DNS:localhost,IP:127.0.0.1\nextendedKeyUsage=serverAuth\n');
  leaf('client', 'ca', 'extendedKeyUsage=clientAuth\n');
  leaf('other', 'other-ca', 'extendedKeyUsage=clientAuth\n');
  const r = (f: string): Buffer => readFileSync(join(dir, f));
  return {
    ca: r('ca.crt'), serverCert: r('server.crt'), serverKey: r('server.key'), clientCert: r('client.crt'), clientKey: r('client.key'),
    otherCa: r('other-ca.crt'), otherCert: r('other.crt'), otherKey: r('other.key'),
  };
}

describe('gRPC over TLS', () => {
  let dir: string;
  let certs: ReturnType<typeof makeCerts>;
  beforeAll(() => {
    dir = mkdtempSync(join(tmpdir(), 'svc-grpc-tls-'));
    certs = makeCerts(dir);
  });
  afterAll(() => rmSync(dir, { recursive: true, force: true }));

  const outcome = async (c: SvcClient): Promise<number | 'ok'> => {
    const { err } = await call(c, 'listCollections', {}, auth('admin-secret'));
    c.close();
    return err ? err.code : 'ok';
  };

  it('serves TLS clients that trust the CA, and no plaintext client', async () => {
    const h = await startHarness({ tls: { cert: certs.serverCert, key: certs.serverKey } });
    try {
      expect(await outcome(client(h.server.port, credentials.createSsl(certs.ca), 'localhost'))).toBe('ok');
      expect(await outcome(client(h.server.port))).toBe(status.UNAVAILABLE);
      expect(await outcome(client(h.server.port, credentials.createSsl(certs.otherCa), 'localhost'))).toBe(status.UNAVAILABLE);
    } finally {
      await h.server.close();
    }
  });

  it('with a client CA, serves only clients whose certificate chains to it, and still asks for the key', async () => {
    const h = await startHarness({ tls: { cert: certs.serverCert, key: certs.serverKey, clientCa: certs.ca } });
    try {
      expect(await outcome(client(h.server.port, credentials.createSsl(certs.ca, certs.clientKey, certs.clientCert), 'localhost'))).toBe('ok');
      expect(await outcome(client(h.server.port, credentials.createSsl(certs.ca), 'localhost'))).toBe(status.UNAVAILABLE);
      expect(await outcome(client(h.server.port, credentials.createSsl(certs.ca, certs.otherKey, certs.otherCert), 'localhost'))).toBe(status.UNAVAILABLE);
      const c = client(h.server.port, credentials.createSsl(certs.ca, certs.clientKey, certs.clientCert), 'localhost');
      const { err } = await call(c, 'listCollections', {}, auth());
      c.close();
      expect(err?.code).toBe(status.UNAUTHENTICATED);
    } finally {
      await h.server.close();
    }
  });
});

describe('gRPC Replicate: the end of a stream is audited and counted', () => {
  type Ending = 'wait' | 'end' | 'retention' | 'error';
  /** An engine whose stream sends three commits (records 'r1'..'r3'), then ends as `ending` says. */
  const streamingEngine = (ending: Ending) => (calls: Calls): EngineApi => {
    const engine = recordingEngine(calls);
    engine.replicate = async function* (_body, signal) {
      for (let seq = 1; seq <= 3; seq++) yield { seq, record: new Uint8Array(Buffer.from(`r${seq}`)) };
      if (ending === 'retention') {
        throw new SvcError('unavailable', 'replication stream ended: the reader fell behind', { reason: 'retention_exceeded' });
      }
      if (ending === 'error') throw new SvcError('internal', 'boom');
      if (ending === 'wait') await new Promise<void>((r) => signal!.addEventListener('abort', () => r(), { once: true }));
    };
    return engine;
  };

  async function scrape(prom: PromMetrics): Promise<Record<string, number>> {
    const text = await prom.registry.metrics();
    const out: Record<string, number> = {};
    for (const m of text.matchAll(/^(svc_replication_(?:followers|bytes_streamed_total)) (\d+)$/gm)) out[m[1]] = Number(m[2]);
    return out;
  }

  async function endAudit(h: Harness): Promise<AuditRecord> {
    for (let i = 0; i < 200 && !h.audits.some((a) => a.action === 'replicate_end'); i++) await new Promise((r) => setTimeout(r, 5));
    const ends = h.audits.filter((a) => a.action === 'replicate_end');
    expect(ends).toHaveLength(1);
    return ends[0];
  }

  /** Reads three events, then runs `then`; resolves with how the stream ended on the client. */
  function follow(c: SvcClient, then: (s: ReturnType<SvcClient['replicate']>) => void = () => undefined): Promise<string> {
    return new Promise((resolve) => {
      let n = 0;
      const s = c.replicate({}, auth('admin-secret'));
      s.on('data', () => { if (++n === 3) then(s); });
      s.on('error', (e: ServiceError) => resolve(`error ${e.code}`));
      s.on('end', () => resolve('end'));
    });
  }

  it('client cancel: audited with what was sent; the follower gauge and byte counter move', async () => {
    const prom = createPromMetrics();
    const h = await startHarness({ engine: streamingEngine('wait'), prom });
    const c = client(h.server.port);
    try {
      let during: Record<string, number> = {};
      const ended = await follow(c, (s) => void scrape(prom).then((m) => { during = m; s.cancel(); }));
      expect(ended).toBe(`error ${status.CANCELLED}`);
      const end = await endAudit(h);
      expect(end).toMatchObject({
        key: 'admin', action: 'replicate_end', resource: 'database', outcome: 'ok', status: 200,
        stream: { reason: 'client_cancel', events: 3, bytes: 6, last_seq: 3 },
      });
      expect(h.audits.map((a) => a.action)).toEqual(['replicate', 'replicate_end']);
      expect(during).toEqual({ svc_replication_followers: 1, svc_replication_bytes_streamed_total: 6 });
      expect(await scrape(prom)).toEqual({ svc_replication_followers: 0, svc_replication_bytes_streamed_total: 6 });
    } finally {
      c.close();
      await h.server.close();
    }
  });

  it('leader closing: the server shutting down, or the database closing the stream', async () => {
    const h = await startHarness({ engine: streamingEngine('wait') });
    const c = client(h.server.port);
    const ended = await follow(c, () => void h.server.close());
    c.close();
    expect(ended).toBe(`error ${status.UNAVAILABLE}`);
    expect((await endAudit(h)).stream).toEqual({ reason: 'leader_closing', events: 3, bytes: 6, last_seq: 3 });

    const h2 = await startHarness({ engine: streamingEngine('end') });
    const c2 = client(h2.server.port);
    try {
      expect(await follow(c2)).toBe('end');
      expect(await endAudit(h2)).toMatchObject({ outcome: 'ok', stream: { reason: 'leader_closing', events: 3 } });
    } finally {
      c2.close();
      await h2.server.close();
    }
  });

  it('a follower past retention, and any other error, end as errors with their reason and status', async () => {
    for (const [ending, reason, grpc, http] of [['retention', 'retention_exceeded', status.UNAVAILABLE, 503], ['error', 'error', status.INTERNAL, 500]] as const) {
      const h = await startHarness({ engine: streamingEngine(ending) });
      const c = client(h.server.port);
      try {
        expect(await follow(c)).toBe(`error ${grpc}`);
        expect(await endAudit(h)).toMatchObject({ outcome: 'error', status: http, stream: { reason, events: 3, bytes: 6, last_seq: 3 } });
      } finally {
        c.close();
        await h.server.close();
      }
    }
  });
});
