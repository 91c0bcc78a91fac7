import { createHash, timingSafeEqual } from 'node:crypto';
import type { Clock } from '../base/clock.js';
import { SvcError, toSvcError } from '../base/errors.js';
import type { Limits } from '../base/limits.js';
import { collectionExisted, type CollectionInfo, type ReplicationEvent } from '../base/model.js';
import type { CallContext, EngineApi, OperationName, Principal, Role, SvcApi } from './api.js';
import type { AuditOutcome, AuditSink, StreamEnd } from './audit.js';
import { HTTP_STATUS } from './http-status.js';
import type { ServiceLogger } from './log.js';
import type { Metrics } from './metrics.js';
import { TokenBuckets, type RateLimiter, type RateLimitOptions } from './rate-limit.js';
import { policyFor, roleAllows, scopeAllows, type ClusterOperationName } from './roles.js';
import { logTracer, type SpanAttributes, type Tracer } from './tracing.js';

/** A configured key. Exactly one of `secret` (the bearer value) or `sha256` (hex of its SHA-256) is set. */
export interface ApiKey {
  name: string;
  role: Role;
  collections: readonly string[];
  secret?: string;
  sha256?: string;
}

export interface ServiceOptions {
  keys: readonly ApiKey[];
  insecure: boolean;
  limits: Limits;
  rateLimit: RateLimitOptions;
  audit: AuditSink;
  clock: Clock;
  metrics: Metrics;
  log: ServiceLogger;
  /** Where audit records go as log events (target `svc::audit`); defaults to `log` with that target field. */
  auditLog?: ServiceLogger;
  /** Defaults to spans written to `log` at debug level. */
  tracer?: Tracer;
  /** Where the per-key tokens come from; default this service's own buckets (`rateLimit`). */
  rateLimiter?: RateLimiter;
}

export interface AuthMeta {
  requestId?: string;
  remote?: string;
}

export interface Service extends SvcApi {
  readonly limits: Limits;
  /** Resolves a bearer header to a principal; throws SvcError('unauthenticated'). */
  authenticate(authorization: string | undefined, meta?: AuthMeta): Principal;
  /**
   * Rate limit, role and scope for `op` on `collection`; throws SvcError. Transports call it before
   * validating a body so a caller without the right learns nothing from validation errors. Every operation
   * checks again itself; the token is taken once per context.
   */
  authorize(ctx: CallContext, op: string, collection?: unknown): void;
  /**
   * An operation beyond the engine's (the coordinator's membership API, core/service/cluster.ts), with
   * the same rate limit, role and scope check, span and audit as every engine operation.
   */
  guarded<T>(op: ClusterOperationName, ctx: CallContext, resource: string, fn: () => Promise<T>): Promise<T>;
  /** Audits what the server did on its own (an autoscale decision): who acted, what, and why. */
  auditEvent(event: ServerEvent): void;
}

/** Something the server decided without a caller (no key acted; `actor` names the part that did). */
export interface ServerEvent {
  actor: string;
  action: string;
  resource: string;
  outcome: AuditOutcome;
  status: number;
  requestId: string;
  reason: string;
}

/** The principal of a server started with SVC_INSECURE=true and no key configured. */
export const INSECURE_PRINCIPAL: Principal = Object.freeze({ keyName: 'insecure', role: 'admin', collections: Object.freeze(['*']) });

interface KeyEntry { digest: Buffer; principal: Principal }

function keyEntries(keys: readonly ApiKey[]): KeyEntry[] {
  return keys.map((k) => {
    const digest = k.sha256 !== undefined
      ? Buffer.from(k.sha256.toLowerCase(), 'hex')
      : createHash('sha256').update(k.secret ?? '', 'utf8').digest();
    if (digest.length !== 32 || (k.sha256 === undefined && !k.secret)) {
      throw new SvcError('invalid_argument', `API key ${k.name} needs a non-empty key or a 64-hex key_sha256`);
    }
    return { digest, principal: Object.freeze({ keyName: k.name, role: k.role, collections: Object.freeze([...k.collections]) }) };
  });
}

/** The status of a success that is not 200 (CONTRACT.md sections 1 and 11), as the audit log records it. */
const OK_STATUS: Readonly<Partial<Record<OperationName | ClusterOperationName, number>>> = { createCollection: 201, registerShard: 201, drainShard: 202 };

/** The HTTP status an audit line gives a success: 201 for a create, 200 when exist_ok found it there. */
function okStatus(op: OperationName | ClusterOperationName, result: unknown): number {
  if (op === 'createCollection' && collectionExisted(result as CollectionInfo)) return 200;
  return OK_STATUS[op] ?? 200;
}

/** The reason a transport gives when it aborts a stream because the server is shutting down. */
export const SERVER_CLOSING_REASON = 'server_closing';

/**
 * Why a Replicate stream ended: the leader's log no longer held what the follower needed, another error,
 * the leader shutting down (the database closed, or the transport aborted with SERVER_CLOSING_REASON),
 * or the client going away (its cancel, or the consumer no longer reading).
 */
function streamEndReason(error: SvcError | undefined, completed: boolean, signal: AbortSignal | undefined): StreamEnd['reason'] {
  if (error !== undefined) return error.detail.reason === 'retention_exceeded' ? 'retention_exceeded' : 'error';
  if (signal?.aborted === true) {
    const why: unknown = signal.reason;
    return why instanceof SvcError && why.detail.reason === SERVER_CLOSING_REASON ? 'leader_closing' : 'client_cancel';
  }
  return completed ? 'leader_closing' : 'client_cancel';
}

export function createService(engine: EngineApi, opts: ServiceOptions): Service {
  const entries = keyEntries(opts.keys);
  const buckets = opts.rateLimiter ?? new TokenBuckets(opts.rateLimit, opts.clock);
  const tracer = opts.tracer ?? logTracer(opts.log, opts.clock);
  const admitted = new WeakSet<CallContext>();
  /**
   * Tokens that authenticated before, to their principal: the SHA-256 and the comparisons with every key
   * run once per token, not per request. Only a token that matched a key enters, so the map holds at
   * most one entry per configured key whatever callers send; a token that never matched takes the
   * constant-time path every time.
   */
  const known = new Map<string, Principal>();

  function audit(action: string, key: string, resource: string, outcome: AuditOutcome, status: number, requestId: string, remote: string,
    extra: { stream?: StreamEnd; reason?: string } = {}): void {
    const record = {
      ts: new Date(opts.clock.nowMs()).toISOString(), key, action, resource, outcome, status,
      request_id: requestId, remote, ...extra,
    };
    try {
      opts.audit.append(record);
    } catch (e) {
      opts.log.error({ target: 'svc::audit', err: e instanceof Error ? e.message : String(e) }, 'audit sink failed');
    }
    if (opts.auditLog) opts.auditLog.info(record, 'audit');
    else opts.log.info({ target: 'svc::audit', ...record }, 'audit');
  }

  function deny(ctx: CallContext, op: string, resource: string, err: SvcError): never {
    audit(op, ctx.principal.keyName, resource, 'denied', HTTP_STATUS[err.code], ctx.requestId, ctx.remote ?? '');
    throw err;
  }

  function authorize(ctx: CallContext, op: string, collection?: unknown): void {
    const resource = typeof collection === 'string' ? `collection/${collection}` : 'database';
    const policy = policyFor(op);
    if (policy === undefined) {
      deny(ctx, op, resource, new SvcError('permission_denied', `operation ${op} is not allowed for any role`));
    }
    if (!admitted.has(ctx)) {
      const taken = buckets.take(ctx.principal.keyName);
      if (!taken.ok) {
        opts.metrics.rateLimited();
        deny(ctx, op, resource, new SvcError('rate_limited', `rate limit of this key exceeded; retry in ${taken.retryAfterSeconds} s`, { retryAfterSeconds: taken.retryAfterSeconds }));
      }
      admitted.add(ctx);
    }
    if (!roleAllows(ctx.principal.role, policy.role)) {
      deny(ctx, op, resource, new SvcError('permission_denied', `${op} needs the ${policy.role} role; this key has ${ctx.principal.role}`));
    }
    if (policy.collection !== 'none' && typeof collection === 'string' && !scopeAllows(ctx.principal.collections, collection)) {
      deny(ctx, op, resource, new SvcError('permission_denied', `collection ${collection} is outside this key's scope`));
    }
    if (policy.collection === 'all' && !ctx.principal.collections.includes('*')) {
      deny(ctx, op, resource, new SvcError('permission_denied', `${op} reaches every collection; it needs a key scoped to *`));
    }
  }

  /** One operation: authorize, span, engine call, audit. */
  async function run<T>(op: OperationName | ClusterOperationName, ctx: CallContext, collection: unknown, resource: string, attrs: SpanAttributes,
    fn: () => Promise<T>, resultAttrs?: (r: T) => SpanAttributes): Promise<T> {
    authorize(ctx, op, collection);
    const policy = policyFor(op)!;
    const span = tracer.startSpan(`svc.${op}`, { transport: ctx.transport, request_id: ctx.requestId, ...attrs });
    try {
      const result = await fn();
      if (resultAttrs) span.setAttributes(resultAttrs(result));
      span.end();
      if (policy.audited) audit(op, ctx.principal.keyName, resource, 'ok', okStatus(op, result), ctx.requestId, ctx.remote ?? '');
      return result;
    } catch (e) {
      const err = toSvcError(e);
      span.end(err.code);
      if (err.code === 'internal') {
        opts.log.error({ request_id: ctx.requestId, op, cause: err.detail.cause }, 'internal error');
      }
      if (policy.audited) audit(op, ctx.principal.keyName, resource, 'error', HTTP_STATUS[err.code], ctx.requestId, ctx.remote ?? '');
      throw err;
    }
  }

  /**
   * One span for a whole stream, with the number of events sent and how it ended; the end audited
   * (`replicate_end`: reason, events, bytes, last seq) and counted (followers, bytes streamed).
   */
  async function* traced(ctx: CallContext, source: AsyncIterable<ReplicationEvent>, signal?: AbortSignal): AsyncGenerator<ReplicationEvent> {
    const span = tracer.startSpan('svc.replicate', { transport: ctx.transport, request_id: ctx.requestId });
    const sent = { events: 0, bytes: 0, last_seq: 0 };
    let error: SvcError | undefined;
    let completed = false;
    opts.metrics.replicationFollowers?.(1);
    try {
      for await (const item of source) {
        sent.events++;
        sent.bytes += item.record.byteLength;
        if (item.seq > 0) sent.last_seq = item.seq;
        opts.metrics.replicationBytesStreamed?.(item.record.byteLength);
        yield item;
      }
      completed = true;
    } catch (e) {
      error = toSvcError(e);
      if (error.code === 'internal') opts.log.error({ request_id: ctx.requestId, op: 'replicate', cause: error.detail.cause }, 'internal error');
      throw error;
    } finally {
      opts.metrics.replicationFollowers?.(-1);
      span.setAttributes({ count: sent.events });
      span.end(error?.code);
      const reason = streamEndReason(error, completed, signal);
      audit('replicate_end', ctx.principal.keyName, 'database', error === undefined ? 'ok' : 'error', error === undefined ? 200 : HTTP_STATUS[error.code],
        ctx.requestId, ctx.remote ?? '', { stream: { reason, ...sent } });
    }
  }

  const col = (c: unknown): string => `collection/${typeof c === 'string' ? c : '?'}`;
  const pt = (c: unknown, id: unknown): string => `${col(c)}/point/${typeof id === 'string' ? id : '?'}`;
  const kOf = (q: unknown): SpanAttributes => {
    const k = (q as { k?: unknown } | null)?.k;
    return typeof k === 'number' ? { k } : {};
  };
  const countOf = (b: unknown, field: string): SpanAttributes => {
    const list = (b as Record<string, unknown> | null)?.[field];
    return Array.isArray(list) ? { count: list.length } : {};
  };
  const hitsOf = (r: { hits: unknown[] }): SpanAttributes => ({ hits: r.hits.length });
  const inScope = (p: Principal, name: string): boolean => scopeAllows(p.collections, name);

  return {
    limits: opts.limits,

    authenticate(authorization, meta = {}) {
      const fail = (message: string): never => {
        opts.metrics.authFailure();
        audit('authenticate', '-', '-', 'denied', 401, meta.requestId ?? '', meta.remote ?? '');
        throw new SvcError('unauthenticated', message);
      };
      if (entries.length === 0) {
        if (opts.insecure) return INSECURE_PRINCIPAL;
        return fail('no API key is configured on this server');
      }
      if (authorization === undefined || authorization === '') return fail('missing API key: send the header authorization: Bearer <key>');
      const m = /^Bearer +(\S+) *$/i.exec(authorization);
      if (!m) return fail('malformed authorization header: expected Bearer <key>');
      const token = m[1];
      const seen = known.get(token);
      if (seen !== undefined) return seen;
      const presented = createHash('sha256').update(token, 'utf8').digest();
      let found: Principal | undefined;
      for (const e of entries) {
        // Every key is compared, in constant time, whatever matched before.
        if (timingSafeEqual(presented, e.digest) && found === undefined) found = e.principal;
      }
      if (found === undefined) return fail('unknown API key');
      if (known.size < entries.length) known.set(token, found);
      return found;
    },

    authorize,

    guarded: (op, ctx, resource, fn) => run(op, ctx, undefined, resource, {}, fn),

    auditEvent: (e) => audit(e.action, e.actor, e.resource, e.outcome, e.status, e.requestId, '', { reason: e.reason }),

    listCollections: (ctx) => run('listCollections', ctx, undefined, 'database', {}, async () => {
      const r = await engine.listCollections();
      return { collections: r.collections.filter((c) => inScope(ctx.principal, c.name)) };
    }, (r) => ({ count: r.collections.length })),

    collectionInfo: (ctx, name) => run('collectionInfo', ctx, name, col(name), { collection: String(name) }, () => engine.collectionInfo(name)),

    createCollection: (ctx, params) => {
      const name = (params as { name?: unknown } | null)?.name;
      return run('createCollection', ctx, name, col(name), { collection: String(name) }, () => engine.createCollection(params));
    },

    deleteCollection: (ctx, name) => run('deleteCollection', ctx, name, col(name), { collection: String(name) }, () => engine.deleteCollection(name)),

    upsert: (ctx, c, body) => run('upsert', ctx, c, col(c), { collection: String(c), ...countOf(body, 'points') }, () => engine.upsert(c, body)),

    bulkUpsert: (ctx, c, body) => run('bulkUpsert', ctx, c, col(c), { collection: String(c), ...countOf(body, 'points') }, () => engine.bulkUpsert(c, body)),

    get: (ctx, c, id, o) => run('get', ctx, c, pt(c, id), { collection: String(c) }, () => engine.get(c, id, o)),

    delete: (ctx, c, id) => run('delete', ctx, c, pt(c, id), { collection: String(c) }, () => engine.delete(c, id)),

    fetch: (ctx, c, q) => run('fetch', ctx, c, col(c), { collection: String(c) }, () => engine.fetch(c, q), (r) => ({ count: r.points.length })),

    count: (ctx, c, q) => run('count', ctx, c, col(c), { collection: String(c) }, () => engine.count(c, q), (r) => ({ count: r.count })),

    setPayload: (ctx, c, body) => run('setPayload', ctx, c, col(c), { collection: String(c), ...countOf(body, 'points') }, () => engine.setPayload(c, body)),

    deletePoints: (ctx, c, body) => run('deletePoints', ctx, c, col(c), { collection: String(c) }, () => engine.deletePoints(c, body), (r) => ({ count: r.deleted })),

    search: (ctx, c, q) => run('search', ctx, c, col(c), { collection: String(c), ...kOf(q) }, () => engine.search(c, q), hitsOf),

    hybridSearch: (ctx, c, q) => run('hybridSearch', ctx, c, col(c), { collection: String(c), ...kOf(q) }, () => engine.hybridSearch(c, q), hitsOf),

    upsertText: (ctx, c, body) => run('upsertText', ctx, c, col(c), { collection: String(c), ...countOf(body, 'points') }, () => engine.upsertText(c, body)),

    searchText: (ctx, c, q) => run('searchText', ctx, c, col(c), { collection: String(c), ...kOf(q) }, () => engine.searchText(c, q), hitsOf),

    upsertDocuments: (ctx, c, body) => run('upsertDocuments', ctx, c, col(c), { collection: String(c), ...countOf(body, 'documents') }, () => engine.upsertDocuments(c, body)),

    searchMultiVector: (ctx, c, q) => run('searchMultiVector', ctx, c, col(c), { collection: String(c), ...kOf(q) }, () => engine.searchMultiVector(c, q), hitsOf),

    deleteDocument: (ctx, c, id) => run('deleteDocument', ctx, c, `${col(c)}/document/${String(id)}`, { collection: String(c) }, () => engine.deleteDocument(c, id)),

    rankings: (ctx, c, body) => run('rankings', ctx, c, col(c), { collection: String(c) }, () => engine.rankings(c, body),
      (r) => ({ hits: (r.dense?.length ?? 0) + (r.sparse?.length ?? 0) + (r.text?.length ?? 0) })),

    textStats: (ctx, c, body) => run('textStats', ctx, c, col(c), { collection: String(c) }, () => engine.textStats(c, body)),

    stats: (ctx) => run('stats', ctx, undefined, 'database', {}, async () => {
      const s = await engine.stats();
      const per = s.per_collection.filter((p) => inScope(ctx.principal, p.name));
      return { ...s, collections: per.length, total_points: per.reduce((n, p) => n + p.count, 0), per_collection: per };
    }),

    snapshot: (ctx, body) => {
      const name = (body as { name?: unknown } | null)?.name;
      return run('snapshot', ctx, undefined, `snapshot/${typeof name === 'string' ? name : '?'}`, {}, () => engine.snapshot(body));
    },

    moveBatch: (ctx, body) => run('moveBatch', ctx, undefined, 'cluster/move', {}, () => engine.moveBatch(body)),
    moveCommit: (ctx, body) => run('moveCommit', ctx, undefined, 'cluster/move', {}, () => engine.moveCommit(body)),
    moveApply: (ctx, body) => run('moveApply', ctx, undefined, 'cluster/move', {}, () => engine.moveApply(body)),

    replicate: (ctx, body, signal) => {
      authorize(ctx, 'replicate', undefined);
      audit('replicate', ctx.principal.keyName, 'database', 'ok', 200, ctx.requestId, ctx.remote ?? '');
      return traced(ctx, engine.replicate(body, signal), signal);
    },
  };
}
