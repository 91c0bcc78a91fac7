import { createHash } from 'node:crypto';
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { SvcError } from '../base/errors.js';
import { DEFAULT_LIMITS } from '../base/limits.js';
import { COLLECTION_EXISTED, type CollectionInfo } from '../base/model.js';
import type { CallContext, EngineApi, OperationName, Principal } from './api.js';
import { AuditChain, verifyAuditChain, type AuditRecord } from './audit.js';

const AUDIT_KEY = new Uint8Array(32).fill(7);
import { silentLogger } from './log.js';
import { OPERATION_POLICIES, policyFor, scopeAllows } from './roles.js';
import { createService, type ApiKey, type Service } from './service.js';

function info(name: string, count = 1): CollectionInfo {
  return {
    name, dim: 2, metric: 'l2', index: 'flat', index_params: { m: 16, ef_construction: 200, ef_search: 64 },
    quantization: 'none', pq_subspaces: null, filterable: [], multivector: false, vector_encryption: null, count, index_state: 'current',
  };
}

/** Every engine method records its call; collections a.x, b.y exist. */
function fakeEngine(): { engine: EngineApi; calls: string[] } {
  const calls: string[] = [];
  const rec = <T>(name: string, v: T) => async (..._a: unknown[]): Promise<T> => { calls.push(name); return v; };
  const engine: EngineApi = {
    listCollections: rec('listCollections', { collections: [info('a.x', 2), info('b.y', 3)] }),
    collectionInfo: rec('collectionInfo', info('a.x')),
    createCollection: rec('createCollection', info('a.x')),
    deleteCollection: rec('deleteCollection', { existed: true }),
    upsert: rec('upsert', { upserted: 1 }),
    bulkUpsert: rec('bulkUpsert', { upserted: 1 }),
    get: rec('get', { id: 'p', payload: {} }),
    delete: rec('delete', { deleted: true }),
    fetch: rec('fetch', { points: [], next_cursor: null }),
    count: rec('count', { count: 3 }),
    setPayload: rec('setPayload', { updated: 1 }),
    deletePoints: rec('deletePoints', { deleted: 2 }),
    search: rec('search', { hits: [] }),
    hybridSearch: rec('hybridSearch', { hits: [] }),
    upsertText: rec('upsertText', { upserted: 1 }),
    searchText: rec('searchText', { hits: [] }),
    upsertDocuments: rec('upsertDocuments', { upserted: 1 }),
    searchMultiVector: rec('searchMultiVector', { hits: [] }),
    deleteDocument: rec('deleteDocument', { deleted: true }),
    replicate: () => (async function* () { calls.push('replicate'); yield { seq: 1, record: new Uint8Array(4) }; })(),
    stats: rec('stats', {
      collections: 2, total_points: 5,
      per_collection: [
        { name: 'a.x', count: 2, index: 'flat', index_state: 'current', vector_bytes: 32, graph_bytes: 0 },
        { name: 'b.y', count: 3, index: 'flat', index_state: 'current', vector_bytes: 48, graph_bytes: 0 },
      ],
      snapshot_status: { manifest_version: 1, disk_bytes: 10 },
    }),
    snapshot: rec('snapshot', { name: 's', path: '/x', manifest_version: 1, disk_bytes: 1 }),
    rankings: rec('rankings', { dense: [] }),
    textStats: rec('textStats', { docs: 0, total_length: 0, df: {} }),
    moveBatch: rec('moveBatch', { done: true }),
    moveCommit: rec('moveCommit', { moved: 0 }),
    moveApply: rec('moveApply', { applied: 0, deleted: 0 }),
    close: async () => undefined,
  };
  return { engine, calls };
}

const KEYS: ApiKey[] = [
  { name: 'env:0', role: 'admin', collections: ['*'], secret: 'admin-secret' },
  { name: 'reader', role: 'read', collections: ['a.*'], secret: 'read-secret' },
  { name: 'writer', role: 'write', collections: ['a.x'], sha256: createHash('sha256').update('write-secret').digest('hex') },
  { name: 'scoped-admin', role: 'admin', collections: ['a.*'], secret: 'sa-secret' },
];

function setup(opts: { rps?: number; burst?: number; insecure?: boolean; keys?: ApiKey[] } = {}) {
  const { engine, calls } = fakeEngine();
  const records: AuditRecord[] = [];
  let nowMs = 1_700_000_000_000;
  const counters = { auth: 0, rate: 0 };
  const svc = createService(engine, {
    keys: opts.keys ?? KEYS, insecure: opts.insecure ?? false, limits: DEFAULT_LIMITS,
    rateLimit: { requestsPerSecond: opts.rps ?? 0, burst: opts.burst ?? 0 },
    audit: { append: (r) => records.push(r) },
    clock: { nowMs: () => nowMs, monotonicMs: () => nowMs },
    metrics: { requestFinished: () => undefined, authFailure: () => { counters.auth++; }, rateLimited: () => { counters.rate++; } },
    log: silentLogger,
  });
  const ctx = (p: Principal): CallContext => ({ principal: p, requestId: 'r1', transport: 'embedded', remote: '127.0.0.1' });
  return { svc, calls, records, counters, ctx, advance: (ms: number) => { nowMs += ms; } };
}

/** Calls `op` with plausible arguments on collection `c`. */
function call(svc: Service, ctx: CallContext, op: OperationName, c: string): Promise<unknown> {
  const v = { vector: [1, 2] };
  switch (op) {
    case 'listCollections': return svc.listCollections(ctx);
    case 'stats': return svc.stats(ctx);
    case 'snapshot': return svc.snapshot(ctx, { name: 's' });
    case 'createCollection': return svc.createCollection(ctx, { name: c, dim: 2, metric: 'l2' });
    case 'collectionInfo': return svc.collectionInfo(ctx, c);
    case 'deleteCollection': return svc.deleteCollection(ctx, c);
    case 'upsert': return svc.upsert(ctx, c, { points: [] });
    case 'bulkUpsert': return svc.bulkUpsert(ctx, c, { points: [] });
    case 'get': return svc.get(ctx, c, 'p');
    case 'delete': return svc.delete(ctx, c, 'p');
    case 'fetch': return svc.fetch(ctx, c, {});
    case 'count': return svc.count(ctx, c, {});
    case 'setPayload': return svc.setPayload(ctx, c, { points: [] });
    case 'deletePoints': return svc.deletePoints(ctx, c, { ids: [] });
    case 'search': return svc.search(ctx, c, v);
    case 'hybridSearch': return svc.hybridSearch(ctx, c, v);
    case 'upsertText': return svc.upsertText(ctx, c, { points: [] });
    case 'searchText': return svc.searchText(ctx, c, { text: 'x' });
    case 'upsertDocuments': return svc.upsertDocuments(ctx, c, { documents: [] });
    case 'searchMultiVector': return svc.searchMultiVector(ctx, c, { vectors: [[1, 2]] });
    case 'deleteDocument': return svc.deleteDocument(ctx, c, 'd');
    case 'rankings': return svc.rankings(ctx, c, { vector: [1, 2], depth: 10 });
    case 'textStats': return svc.textStats(ctx, c, { text: 'x' });
    case 'moveBatch': return svc.moveBatch(ctx, {});
    case 'moveCommit': return svc.moveCommit(ctx, {});
    case 'moveApply': return svc.moveApply(ctx, {});
    case 'replicate': return (async () => { for await (const _ of svc.replicate(ctx)) { /* drain */ } })();
  }
}

async function codeOf(p: Promise<unknown>): Promise<string> {
  try { await p; return 'ok'; } catch (e) { return e instanceof SvcError ? e.code : 'thrown'; }
}

// CONTRACT.md section 3, written out independently of roles.ts.
const CONTRACT_ROLE: Record<string, 'read' | 'write' | 'admin'> = {
  listCollections: 'read', collectionInfo: 'read', get: 'read', fetch: 'read', count: 'read', search: 'read', hybridSearch: 'read',
  searchText: 'read', searchMultiVector: 'read', stats: 'read',
  upsert: 'write', bulkUpsert: 'write', delete: 'write', setPayload: 'write', deletePoints: 'write', upsertText: 'write',
  upsertDocuments: 'write', deleteDocument: 'write',
  createCollection: 'admin', deleteCollection: 'admin', snapshot: 'admin', replicate: 'admin',
  // Not in the contract's table: what a router asks of its shards, reads like the queries they serve.
  rankings: 'read', textStats: 'read',
  // A coordinator's rebalance steps on a shard (docs/cluster.md): admin, every collection.
  moveBatch: 'admin', moveCommit: 'admin', moveApply: 'admin',
};

describe('authentication', () => {
  it('accepts plain and sha256 keys and refuses missing, malformed and unknown ones', () => {
    const { svc, counters, records } = setup();
    expect(svc.authenticate('Bearer admin-secret').keyName).toBe('env:0');
    expect(svc.authenticate('bearer write-secret').keyName).toBe('writer');
    for (const h of [undefined, '', 'Bearer', 'Basic admin-secret', 'Bearer nope', 'Bearer admin-secre']) {
      expect(() => svc.authenticate(h)).toThrow(expect.objectContaining({ code: 'unauthenticated' }));
    }
    expect(counters.auth).toBe(6);
    expect(records.every((r) => r.outcome === 'denied' && r.status === 401 && !JSON.stringify(r).includes('admin-secre'))).toBe(true);
  });

  it('a key that authenticated before keeps resolving to its own principal; wrong keys stay refused and audited', () => {
    const { svc, counters, records } = setup();
    for (let i = 0; i < 3; i++) {
      expect(svc.authenticate('Bearer admin-secret').keyName).toBe('env:0');
      expect(svc.authenticate('Bearer  write-secret ').keyName).toBe('writer');
      expect(svc.authenticate('bearer read-secret').role).toBe('read');
      for (const h of ['Bearer admin-secret2', 'Bearer admin-secre', 'Bearer ADMIN-SECRET', 'Basic admin-secret']) {
        expect(() => svc.authenticate(h)).toThrow(expect.objectContaining({ code: 'unauthenticated' }));
      }
    }
    expect(counters.auth).toBe(12);
    expect(records.filter((r) => r.action === 'authenticate')).toHaveLength(12);
  });

  it('insecure mode without keys is an all-collection admin; with keys, keys are still required', () => {
    expect(setup({ insecure: true, keys: [] }).svc.authenticate(undefined).role).toBe('admin');
    expect(() => setup({ insecure: false, keys: [] }).svc.authenticate(undefined)).toThrow();
    expect(() => setup({ insecure: true }).svc.authenticate(undefined)).toThrow();
  });
});

describe('authorization', () => {
  it('the role table is the contract\'s and unknown operations are refused', () => {
    for (const [op, role] of Object.entries(CONTRACT_ROLE)) expect(OPERATION_POLICIES[op as OperationName].role).toBe(role);
    expect(Object.keys(OPERATION_POLICIES).sort()).toEqual(Object.keys(CONTRACT_ROLE).sort());
    expect(policyFor('toString')).toBeUndefined();
    const { svc, ctx } = setup();
    expect(() => svc.authorize(ctx(svc.authenticate('Bearer admin-secret')), 'dropEverything', 'a.x')).toThrow(expect.objectContaining({ code: 'permission_denied' }));
  });

  it('every operation x role x scope gives what the contract says, and the engine runs only when allowed', async () => {
    const rank = { read: 1, write: 2, admin: 3 };
    const principals: Principal[] = [
      { keyName: 'r', role: 'read', collections: ['a.*'] },
      { keyName: 'w', role: 'write', collections: ['a.*'] },
      { keyName: 'ad', role: 'admin', collections: ['a.*'] },
    ];
    for (const op of Object.keys(CONTRACT_ROLE) as OperationName[]) {
      for (const p of principals) {
        for (const c of ['a.x', 'b.y']) {
          const { svc, calls, ctx } = setup();
          const got = await codeOf(call(svc, ctx(p), op, c));
          const roleOk = rank[p.role] >= rank[CONTRACT_ROLE[op]];
          const scoped = !['listCollections', 'stats'].includes(op);
          const scopeOk = ['snapshot', 'replicate', 'moveBatch', 'moveCommit', 'moveApply'].includes(op) ? false : !scoped || c === 'a.x';
          expect({ op, p: p.role, c, got }).toEqual({ op, p: p.role, c, got: roleOk && scopeOk ? 'ok' : 'permission_denied' });
          expect(calls.length).toBe(got === 'ok' ? 1 : 0);
        }
      }
    }
  });

  it('listing and stats hide collections out of scope', async () => {
    const { svc, ctx } = setup();
    const reader = ctx(svc.authenticate('Bearer read-secret'));
    expect((await svc.listCollections(reader)).collections.map((c) => c.name)).toEqual(['a.x']);
    const s = await svc.stats(reader);
    expect(s).toMatchObject({ collections: 1, total_points: 2, per_collection: [{ name: 'a.x' }] });
    const admin = ctx(svc.authenticate('Bearer admin-secret'));
    expect((await svc.stats(admin)).total_points).toBe(5);
  });

  it('scopes match exactly or by trailing * prefix', () => {
    fc.assert(fc.property(fc.string(), fc.string(), (a, b) => {
      fc.pre(!a.endsWith('*'));
      expect(scopeAllows([a], a + b)).toBe(b === '');
      expect(scopeAllows([`${a}*`], a + b)).toBe(true);
      expect(scopeAllows(['*'], b)).toBe(true);
    }));
  });
});

describe('rate limiting', () => {
  it('refuses past the burst with retryAfterSeconds, per key, and refills with time', async () => {
    const { svc, ctx, counters, advance } = setup({ rps: 2, burst: 3 });
    const admin = svc.authenticate('Bearer admin-secret');
    const reader = svc.authenticate('Bearer read-secret');
    for (let i = 0; i < 3; i++) await svc.stats(ctx(admin));
    const err = await svc.stats(ctx(admin)).catch((e: unknown) => e);
    expect(err).toMatchObject({ code: 'rate_limited', detail: { retryAfterSeconds: 1 } });
    expect(counters.rate).toBe(1);
    await svc.stats(ctx(reader));
    advance(500);
    await svc.stats(ctx(admin));
    await expect(svc.stats(ctx(admin))).rejects.toMatchObject({ code: 'rate_limited' });
  });

  it('authorize then the operation on one context takes one token', async () => {
    const { svc, ctx } = setup({ rps: 1, burst: 1 });
    const c = ctx(svc.authenticate('Bearer admin-secret'));
    svc.authorize(c, 'stats');
    await svc.stats(c);
    await expect(svc.stats(ctx(c.principal))).rejects.toMatchObject({ code: 'rate_limited' });
  });
});

describe('audit', () => {
  it('records mutations, denials and errors, not reads, and the lines chain', async () => {
    const { svc, ctx, records } = setup();
    const writer = ctx(svc.authenticate('Bearer write-secret'));
    await svc.upsert(writer, 'a.x', { points: [] });
    await svc.search(writer, 'a.x', { vector: [1, 2] });
    await svc.upsert(writer, 'b.y', { points: [] }).catch(() => undefined);
    await svc.createCollection(writer, { name: 'a.x', dim: 2, metric: 'l2' }).catch(() => undefined);
    expect(records.map((r) => [r.key, r.action, r.resource, r.outcome, r.status])).toEqual([
      ['writer', 'upsert', 'collection/a.x', 'ok', 200],
      ['writer', 'upsert', 'collection/b.y', 'denied', 403],
      ['writer', 'createCollection', 'collection/a.x', 'denied', 403],
    ]);
    expect(records[0]).toMatchObject({ ts: '2023-11-14T22:13:20.000Z', request_id: 'r1', remote: '127.0.0.1' });
    const chain = new AuditChain(AUDIT_KEY);
    const text = records.map((r) => chain.line(r)).join('\n') + '\n';
    expect(verifyAuditChain(text, AUDIT_KEY)).toEqual({ ok: true, lines: 3 });
  });

  it('payload updates and deletes are audited as writes; a count is a read and is not', async () => {
    const { svc, ctx, records } = setup();
    const writer = ctx(svc.authenticate('Bearer write-secret'));
    expect(await svc.count(writer, 'a.x', {})).toEqual({ count: 3 });
    expect(await svc.setPayload(writer, 'a.x', { points: [{ id: 'p', payload: {} }] })).toEqual({ updated: 1 });
    expect(await svc.deletePoints(writer, 'a.x', { ids: ['p'] })).toEqual({ deleted: 2 });
    const reader = ctx(svc.authenticate('Bearer read-secret'));
    await expect(svc.deletePoints(reader, 'a.x', { ids: ['p'] })).rejects.toMatchObject({ code: 'permission_denied' });
    expect(records.map((r) => [r.key, r.action, r.resource, r.outcome, r.status])).toEqual([
      ['writer', 'setPayload', 'collection/a.x', 'ok', 200],
      ['writer', 'deletePoints', 'collection/a.x', 'ok', 200],
      ['reader', 'deletePoints', 'collection/a.x', 'denied', 403],
    ]);
  });

  it('a create answered by exist_ok with the existing collection is audited 200, a new one 201', async () => {
    const { engine } = fakeEngine();
    const records: AuditRecord[] = [];
    let existed = false;
    engine.createCollection = async () => {
      const i = info('a.x');
      if (existed) Object.defineProperty(i, COLLECTION_EXISTED, { value: true, enumerable: false });
      return i;
    };
    const svc = createService(engine, {
      keys: KEYS, insecure: false, limits: DEFAULT_LIMITS, rateLimit: { requestsPerSecond: 0, burst: 0 },
      audit: { append: (r) => records.push(r) }, clock: { nowMs: () => 0, monotonicMs: () => 0 },
      metrics: { requestFinished: () => undefined, authFailure: () => undefined, rateLimited: () => undefined }, log: silentLogger,
    });
    const c: CallContext = { principal: svc.authenticate('Bearer admin-secret'), requestId: 'q', transport: 'rest' };
    await svc.createCollection(c, { name: 'a.x', dim: 2, metric: 'l2', exist_ok: true });
    existed = true;
    await svc.createCollection(c, { name: 'a.x', dim: 2, metric: 'l2', exist_ok: true });
    expect(records.map((r) => r.status)).toEqual([201, 200]);
  });

  it('engine failures are audited as errors with the contract status', async () => {
    const { engine } = fakeEngine();
    const records: AuditRecord[] = [];
    engine.deleteCollection = async () => { throw new SvcError('not_found', 'no such collection'); };
    const svc = createService(engine, {
      keys: KEYS, insecure: false, limits: DEFAULT_LIMITS, rateLimit: { requestsPerSecond: 0, burst: 0 },
      audit: { append: (r) => records.push(r) }, clock: { nowMs: () => 0, monotonicMs: () => 0 },
      metrics: { requestFinished: () => undefined, authFailure: () => undefined, rateLimited: () => undefined }, log: silentLogger,
    });
    const c: CallContext = { principal: svc.authenticate('Bearer admin-secret'), requestId: 'q', transport: 'rest' };
    await expect(svc.deleteCollection(c, 'zz')).rejects.toMatchObject({ code: 'not_found' });
    expect(records).toMatchObject([{ action: 'deleteCollection', outcome: 'error', status: 404 }]);
  });
});
