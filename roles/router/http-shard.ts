import { setTimeout as delay } from 'node:timers/promises';
import { Agent, type Dispatcher } from 'undici';
import { ERROR_CODES, SvcError, type ErrorCode } from '../../core/base/errors.js';
import { markCollectionExisted, type CollectionInfo } from '../../core/base/model.js';
import type { DataShard } from '../../core/engine/shard.js';

/**
 * A shard over its REST API (core/engine/shard.ts `DataShard`): what a router's engine calls, as one
 * node's routes, with SVC_CLUSTER_SHARD_KEY as the bearer key.
 *
 * - Each call has one deadline (SVC_CLUSTER_TIMEOUT_SECS), attempts included.
 * - A read that could not reach the shard (refused, reset, closed before an answer) or that the shard
 *   answered 503 is tried again, at most `readRetries` times, while the deadline allows. A write is
 *   never sent twice: a write that may or may not have landed is reported, not repeated behind the
 *   caller's back (an upsert sent again by the caller is harmless; a silent second one is not ours to send).
 * - An answer of the contract about the request itself (invalid_argument, limit_exceeded, not_found,
 *   already_exists, rate_limited, provider_error) is thrown as that same SvcError, message and all: the
 *   caller sees what a single node would say.
 * - Anything else (no connection, no answer in time, a 5xx, a shard refusing the router's key, an answer
 *   that is not the contract's) is `unavailable` naming the shard: `shard 2 (http://s2:6333) could not
 *   answer: ...`, detail `{shard: 2}`. Never a made-up answer.
 */
export interface HttpShardOptions {
  id: number;
  /** The shard's REST base URL in canonical form (core/cluster/routing/shard-map.ts). */
  url: string;
  /** SVC_CLUSTER_SHARD_KEY; null sends no key (shards started with SVC_INSECURE). */
  key: string | null;
  /** SVC_CLUSTER_TIMEOUT_SECS, in ms: the most one call may take, retries included. */
  timeoutMs: number;
  /** The connection pool shared by every shard of a router (keep-alive). */
  dispatcher: Dispatcher;
  /** Set for a shard's read replica: its index in the shard's replica list (messages name it so). */
  replica?: number;
  /** Extra attempts of a read (default 2). */
  readRetries?: number;
  /** The most bytes of one answer (default 256 MiB: a page of points with vectors, not more). */
  answerBytesMax?: number;
  /** Told of each call's end: how long it took and how it went (router metrics). */
  observe?(outcome: CallOutcome, seconds: number): void;
}

/** `ok`; `error`: the shard answered with an error of the request; `unavailable`: it could not answer. */
export type CallOutcome = 'ok' | 'error' | 'unavailable';

/** The keep-alive pool of a router: a few sockets per shard, reused across requests. */
export function shardPool(): Agent {
  // keepAliveTimeout below a node's own (5 s default): the router lets a socket go before the shard
  // would, so a request is not written into a socket the shard is closing.
  return new Agent({ keepAliveTimeout: 4_000, keepAliveMaxTimeout: 4_000, connections: SOCKETS_PER_SHARD_MAX, pipelining: 1 });
}

/** Sockets the router opens to one shard at most; requests beyond wait for one (undici queues them). */
const SOCKETS_PER_SHARD_MAX = 128;
const READ_RETRIES = 2;
const ANSWER_BYTES_MAX = 256 << 20;
/** First pause before a read is tried again; doubled each time, cut to what is left of the deadline. */
const RETRY_PAUSE_MS = 25;

/** Codes that describe the request, not the shard: passed to the caller as the shard said them. */
const PASSED_THROUGH: ReadonlySet<ErrorCode> = new Set<ErrorCode>([
  'invalid_argument', 'limit_exceeded', 'not_found', 'already_exists', 'rate_limited', 'provider_error',
]);

type Kind = 'read' | 'write';
type Method = 'GET' | 'POST' | 'PUT' | 'DELETE';

interface Answer { status: number; body: unknown }

export class HttpShard implements DataShard {
  /** For messages: `shard 2 (http://s2:6333)`, or `shard 2 replica 0 (http://s2r:6333)`. */
  readonly name: string;
  private readonly headers: Record<string, string>;
  private readonly jsonHeaders: Record<string, string>;
  private readonly retries: number;
  private readonly bytesMax: number;
  /** Set on a view made by `until`: the deadline of its calls (performance.now() ms) instead of now + timeoutMs. */
  private deadlineAt: number | null = null;

  constructor(private readonly opts: HttpShardOptions) {
    this.name = opts.replica === undefined ? `shard ${opts.id} (${opts.url})` : `shard ${opts.id} replica ${opts.replica} (${opts.url})`;
    this.headers = { accept: 'application/json', ...(opts.key === null ? {} : { authorization: `Bearer ${opts.key}` }) };
    this.jsonHeaders = { ...this.headers, 'content-type': 'application/json' };
    this.retries = opts.readRetries ?? READ_RETRIES;
    this.bytesMax = opts.answerBytesMax ?? ANSWER_BYTES_MAX;
  }

  /**
   * This shard with every call's deadline at `deadline` (performance.now() ms) rather than timeoutMs
   * after it starts: a read that falls over from a replica to the next, then to the primary, stays
   * within one SVC_CLUSTER_TIMEOUT_SECS (roles/router/replica-set.ts).
   */
  until(deadline: number): HttpShard {
    const view = Object.create(this) as HttpShard;
    view.deadlineAt = deadline;
    return view;
  }

  // ---------------------------------------------------------------- collections

  async listCollections(): Promise<{ collections: CollectionInfo[] }> {
    return this.json('read', 'GET', '/v1/collections');
  }

  async collectionInfo(name: string): Promise<CollectionInfo> {
    return this.json('read', 'GET', col(name));
  }

  /** 201: created here; 200: it was there already (exist_ok), marked as a single node marks it. */
  async createCollection(params: Parameters<DataShard['createCollection']>[0]): Promise<CollectionInfo> {
    const a = await this.call('write', 'POST', '/v1/collections', params);
    const info = a.body as CollectionInfo;
    return a.status === 200 ? markCollectionExisted(info) : info;
  }

  async deleteCollection(name: string): Promise<{ existed: boolean }> {
    return this.json('write', 'DELETE', col(name));
  }

  // ---------------------------------------------------------------- points

  async upsert(name: string, body: Parameters<DataShard['upsert']>[1]): Promise<{ upserted: number }> {
    return this.json('write', 'PUT', `${col(name)}/points`, body);
  }

  async bulkUpsert(name: string, body: Parameters<DataShard['bulkUpsert']>[1]): Promise<{ upserted: number }> {
    return this.json('write', 'POST', `${col(name)}/points:bulk`, body);
  }

  async get(name: string, id: string, opts: { with_vector?: boolean } = {}): ReturnType<DataShard['get']> {
    return this.json('read', 'GET', `${col(name)}/points/${encodeURIComponent(id)}${opts.with_vector === true ? '?with_vector=true' : ''}`);
  }

  async delete(name: string, id: string): Promise<{ deleted: boolean }> {
    return this.json('write', 'DELETE', `${col(name)}/points/${encodeURIComponent(id)}`);
  }

  async fetch(name: string, query: Parameters<DataShard['fetch']>[1]): ReturnType<DataShard['fetch']> {
    return this.json('read', 'POST', `${col(name)}/points:fetch`, query ?? {});
  }

  async count(name: string, query: Parameters<DataShard['count']>[1]): ReturnType<DataShard['count']> {
    return this.json('read', 'POST', `${col(name)}/points:count`, query ?? {});
  }

  async setPayload(name: string, body: Parameters<DataShard['setPayload']>[1]): ReturnType<DataShard['setPayload']> {
    return this.json('write', 'POST', `${col(name)}/points:payload`, body);
  }

  async deletePoints(name: string, body: Parameters<DataShard['deletePoints']>[1]): ReturnType<DataShard['deletePoints']> {
    return this.json('write', 'POST', `${col(name)}/points:delete`, body);
  }

  async upsertDocuments(name: string, body: Parameters<DataShard['upsertDocuments']>[1]): ReturnType<DataShard['upsertDocuments']> {
    return this.json('write', 'PUT', `${col(name)}/documents`, body);
  }

  async deleteDocument(name: string, id: string): ReturnType<DataShard['deleteDocument']> {
    return this.json('write', 'DELETE', `${col(name)}/documents/${encodeURIComponent(id)}`);
  }

  // ---------------------------------------------------------------- queries

  async search(name: string, query: Parameters<DataShard['search']>[1]): ReturnType<DataShard['search']> {
    return this.json('read', 'POST', `${col(name)}/query`, query);
  }

  async searchMultiVector(name: string, query: Parameters<DataShard['searchMultiVector']>[1]): ReturnType<DataShard['searchMultiVector']> {
    return this.json('read', 'POST', `${col(name)}/query/multi`, query);
  }

  async rankings(name: string, body: Parameters<DataShard['rankings']>[1]): ReturnType<DataShard['rankings']> {
    return this.json('read', 'POST', `${col(name)}/query/rankings`, body);
  }

  async textStats(name: string, body: Parameters<DataShard['textStats']>[1]): ReturnType<DataShard['textStats']> {
    return this.json('read', 'POST', `${col(name)}/query/text-stats`, body);
  }

  // ---------------------------------------------------------------- the node

  async stats(): ReturnType<DataShard['stats']> {
    return this.json('read', 'GET', '/v1/stats');
  }

  async snapshot(body: { name: string }): ReturnType<DataShard['snapshot']> {
    return this.json('write', 'POST', '/v1/snapshots', body);
  }

  /** Resolves once the shard answers `GET /readyz` with 200 (a router's readiness); else `unavailable`. */
  async ready(): Promise<void> {
    await this.call('read', 'GET', '/readyz');
  }

  // ---------------------------------------------------------------- the wire

  private async json<T>(kind: Kind, method: Method, path: string, body?: unknown): Promise<T> {
    return (await this.call(kind, method, path, body)).body as T;
  }

  /** One call: attempts within the deadline, then the answer, the contract error, or `unavailable`. */
  private async call(kind: Kind, method: Method, path: string, body?: unknown): Promise<Answer> {
    const started = performance.now();
    const deadline = this.deadlineAt ?? started + this.opts.timeoutMs;
    const payload = body === undefined ? undefined : bodyJson(body);
    const attempts = kind === 'read' ? this.retries + 1 : 1;
    let outcome: CallOutcome = 'unavailable';
    try {
      for (let attempt = 1; ; attempt++) {
        const r = await this.attempt(method, path, payload, deadline);
        const again = attempt < attempts && r.retry && performance.now() + pause(attempt) < deadline;
        if (!again) {
          if (r.answer !== undefined) {
            outcome = 'ok';
            return r.answer;
          }
          outcome = r.error!.code === 'unavailable' ? 'unavailable' : 'error';
          throw r.error!;
        }
        await delay(pause(attempt));
      }
    } finally {
      this.opts.observe?.(outcome, (performance.now() - started) / 1000);
    }
  }

  /** One request: an answer, or an error and whether another attempt of a read may help. */
  private async attempt(method: Method, path: string, payload: string | undefined, deadline: number): Promise<{ answer?: Answer; error?: SvcError; retry: boolean }> {
    const left = deadline - performance.now();
    if (left <= 0) return { error: this.unavailable(`no answer within ${this.opts.timeoutMs / 1000} s (SVC_CLUSTER_TIMEOUT_SECS)`), retry: false };
    let status: number;
    let retryAfter: string | undefined;
    let text: string;
    try {
      ({ status, retryAfter, text } = await this.send(method, path, payload, Math.ceil(left), deadline));
    } catch (e) {
      if (isTimeout(e)) return { error: this.unavailable(`no answer within ${this.opts.timeoutMs / 1000} s (SVC_CLUSTER_TIMEOUT_SECS)`), retry: false };
      if (e instanceof AnswerTooLarge) return { error: this.unavailable(e.message), retry: false };
      return { error: this.unavailable(networkCause(e)), retry: true };
    }
    let body: unknown;
    try {
      body = JSON.parse(text);
    } catch {
      return { error: this.unavailable(`it answered ${status} with a body that is not JSON`), retry: status === 503 };
    }
    if (status >= 200 && status < 300) return { answer: { status, body }, retry: false };
    return { error: this.fromAnswer(status, body, retryAfter), retry: status === 503 };
  }

  /**
   * One request on the wire: its status, Retry-After and body, or the error that ended it. undici's
   * dispatch with a handler that gathers the chunks, rather than `request()` and its body stream read by
   * an async iterator, and undici's own headers and body timeouts rather than an AbortSignal.timeout:
   * bench/router-call.ts measured 290 us of CPU per call with the signal and the stream, 204 without the
   * signal, 142 with neither (client and a stand-in shard together, the median of 5 rounds). The path is
   * sent as given: a URL would resolve an id of '.' or '..' away.
   */
  private send(method: Method, path: string, payload: string | undefined, waitMs: number, deadline: number): Promise<{ status: number; retryAfter?: string; text: string }> {
    const bytesMax = this.bytesMax;
    return new Promise((resolve, reject) => {
      const chunks: Buffer[] = [];
      let n = 0;
      let status = 0;
      let retryAfter: string | undefined;
      let abort: ((e: Error) => void) | null = null;
      let settled = false;
      const handler = {
        onConnect(a: (e: Error) => void) { abort = a; },
        onHeaders(code: number, raw: Buffer[]) {
          status = code;
          for (let i = 0; i + 1 < raw.length; i += 2) if (raw[i].toString('latin1').toLowerCase() === 'retry-after') retryAfter = raw[i + 1].toString('latin1');
          return true;
        },
        onData(chunk: Buffer) {
          n += chunk.length;
          if (n > bytesMax) abort?.(new AnswerTooLarge(`its answer is larger than ${bytesMax} bytes`));
          else if (performance.now() > deadline) abort?.(new PastDeadline());
          else chunks.push(chunk);
          return true;
        },
        onComplete() {
          if (settled) return;
          settled = true;
          resolve({ status, retryAfter, text: chunks.length === 1 ? chunks[0].toString('utf8') : Buffer.concat(chunks, n).toString('utf8') });
        },
        onError(e: Error) {
          if (settled) return;
          settled = true;
          reject(e);
        },
      };
      try {
        this.opts.dispatcher.dispatch({
          origin: this.opts.url, path, method,
          headers: payload === undefined ? this.headers : this.jsonHeaders,
          ...(payload === undefined ? {} : { body: payload }),
          headersTimeout: waitMs, bodyTimeout: waitMs,
        }, handler as unknown as Dispatcher.DispatchHandler);
      } catch (e) {
        handler.onError(e as Error);
      }
    });
  }

  /** A shard's error answer: the same SvcError for the request's own faults, else `unavailable` naming it. */
  private fromAnswer(status: number, body: unknown, retryAfter: string | undefined): SvcError {
    const err = (body as { error?: { code?: unknown; message?: unknown } } | null)?.error;
    const code = typeof err?.code === 'string' && (ERROR_CODES as readonly string[]).includes(err.code) ? err.code as ErrorCode : null;
    const message = typeof err?.message === 'string' ? err.message.slice(0, 2000) : '';
    // Mid-rebalance: the ids that left this shard and the move's target set, for the engine to follow.
    if (code === 'moved') return new SvcError('moved', message, { moved: (body as { error: { moved?: unknown } }).error.moved, shard: this.opts.id });
    if (code !== null && PASSED_THROUGH.has(code)) {
      const detail: Record<string, unknown> = {};
      if (code === 'rate_limited') detail.retryAfterSeconds = Number(retryAfter ?? 1) || 1;
      return new SvcError(code, message, detail);
    }
    const said = `${status}${code === null ? '' : ` ${code}`}${message === '' ? '' : `: ${message}`}`;
    if (code === 'read_only_replica') return this.unavailable(`it is a read replica (name its leader in SVC_CLUSTER_SHARDS): ${said}`);
    if (status === 401 || status === 403) {
      return this.unavailable(`it refused the router's key (SVC_CLUSTER_SHARD_KEY must be an admin key scoped to * on every shard): ${said}`);
    }
    return this.unavailable(`it answered ${said}`);
  }

  private unavailable(why: string): SvcError {
    return new SvcError('unavailable', `${this.name} could not answer: ${why}`, { shard: this.opts.id });
  }
}

/** `/v1/collections/{name}`, the name encoded as a path segment. */
function col(name: string): string {
  return `/v1/collections/${encodeURIComponent(String(name))}`;
}

function pause(attempt: number): number {
  return RETRY_PAUSE_MS * 2 ** (attempt - 1);
}


/**
 * A body as JSON, written once however many shards it goes to: the engine hands every shard of a
 * scatter the same object (a 128-float query vector is most of a search's body; writing it again for each
 * shard was about 4% of a router's event loop at 2 shards). Bodies are not changed once handed over.
 */
const written = new WeakMap<object, string>();
function bodyJson(body: unknown): string {
  if (typeof body !== 'object' || body === null) return toJson(body);
  let text = written.get(body);
  if (text === undefined) {
    text = toJson(body);
    written.set(body, text);
  }
  return text;
}

/**
 * A body as JSON. A gRPC search hands its vector over as a Float32Array (roles/grpc/packed-vector.ts),
 * which JSON.stringify would write as an object: a top-level typed array is written as the list it is.
 */
function toJson(body: unknown): string {
  if (typeof body !== 'object' || body === null) return JSON.stringify(body);
  let copy: Record<string, unknown> | null = null;
  for (const [k, v] of Object.entries(body)) {
    if (ArrayBuffer.isView(v) && !(v instanceof DataView)) {
      copy ??= { ...body };
      copy[k] = Array.from(v as Float32Array);
    }
  }
  return JSON.stringify(copy ?? body);
}

class AnswerTooLarge extends Error {}

class PastDeadline extends Error {}

/** undici's headers or body timeout, or the body read past the deadline. */
function isTimeout(e: unknown): boolean {
  if (e instanceof PastDeadline) return true;
  const code = (e as { code?: string } | null)?.code;
  return code === 'UND_ERR_HEADERS_TIMEOUT' || code === 'UND_ERR_BODY_TIMEOUT';
}

function networkCause(e: unknown): string {
  const err = e as { code?: string; message?: string; cause?: { code?: string; message?: string } };
  const code = err?.cause?.code ?? err?.code;
  const message = err?.cause?.message ?? err?.message ?? String(e);
  if (code === 'ECONNREFUSED') return 'connection refused';
  if (code === 'ECONNRESET' || code === 'UND_ERR_SOCKET') return `connection closed (${message.slice(0, 200)})`;
  return `${code === undefined ? '' : `${code}: `}${message.slice(0, 200)}`;
}
