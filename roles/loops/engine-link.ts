import { SvcError } from '../../core/base/errors.js';
import { collectionExisted, markCollectionExisted, type CollectionInfo } from '../../core/base/model.js';
import type { Limits } from '../../core/base/limits.js';
import type { Embedder, Reranker } from '../../core/base/model.js';
import { Engine } from '../../core/engine/engine.js';
import type { DataShard } from '../../core/engine/shard.js';
import type { EngineApi, OperationName } from '../../core/service/api.js';
import type { Link } from './link.js';
import type { LocalReads } from './local-reads.js';

/**
 * The engine across a Link: a request loop holds `engineOverLink`, an EngineApi whose every operation
 * runs on the engine thread, where `serveEngine` calls the one engine of the process. The engine
 * validates every argument and enforces every limit itself (core/service/api.ts), so a loop hands it
 * the parsed body as it came. Replicate is a stream with credit (link.ts); close is the engine
 * thread's, never a loop's.
 */
const CALLS = [
  'listCollections', 'collectionInfo', 'createCollection', 'deleteCollection', 'upsert', 'bulkUpsert', 'get', 'delete', 'fetch', 'count',
  'setPayload', 'deletePoints', 'search', 'hybridSearch', 'upsertText', 'searchText', 'upsertDocuments', 'searchMultiVector', 'deleteDocument',
  'rankings', 'textStats', 'stats', 'moveBatch', 'moveCommit', 'moveApply', 'snapshot',
] as const satisfies readonly Exclude<OperationName, 'replicate'>[];

// Every operation but replicate is a call: the compiler says so if one is added to the API and not here.
type Missing = Exclude<OperationName, 'replicate' | (typeof CALLS)[number]>;
const everyCall: Missing extends never ? true : Missing = true;
void everyCall;

const CALL_SET: ReadonlySet<string> = new Set(CALLS);

const F32_MAX = 3.4028234663852886e38;

/**
 * A list of finite numbers within float32 range as a Float32Array, which a structured clone copies as
 * bytes rather than number by number (a 784-d query: one copy instead of 784 tagged doubles each way).
 * The engine takes either and stores float32 alike. Anything else (a non-number, a value no float32
 * holds, not a list) goes as it came, for the engine to refuse with its own message.
 */
function packed(v: unknown): unknown {
  if (!Array.isArray(v) || v.length === 0) return v;
  const out = new Float32Array(v.length);
  for (let i = 0; i < v.length; i++) {
    const x: unknown = v[i];
    if (typeof x !== 'number' || !(Math.abs(x) <= F32_MAX)) return v;
    out[i] = x;
  }
  return out;
}

/** `body` with its `vector` packed (a search), when it is an object with one. */
function withPackedVector(body: unknown): unknown {
  if (body === null || typeof body !== 'object' || Array.isArray(body)) return body;
  const v = (body as { vector?: unknown }).vector;
  const p = packed(v);
  return p === v ? body : { ...body, vector: p };
}

/** `body` with each point's `vector` packed (an upsert), when it has a list of points. */
function withPackedPoints(body: unknown): unknown {
  if (body === null || typeof body !== 'object' || Array.isArray(body)) return body;
  const points = (body as { points?: unknown }).points;
  if (!Array.isArray(points)) return body;
  return { ...body, points: points.map((p) => withPackedVector(p)) };
}

/** A loop's own answer, or null: a view that fails (a bug) costs the loop its shortcut, never the answer. */
function tryLocal<T>(read: () => T | null): T | null {
  try {
    return read();
  } catch {
    return null;
  }
}

/**
 * What a loop needs to answer text queries itself: the providers of the config (its own adapters, built
 * as the engine thread builds them) and the limits.
 */
export interface LoopText {
  readonly limits: Limits;
  readonly embedders: ReadonlyMap<string, Embedder>;
  readonly rerankers: ReadonlyMap<string, Reranker>;
}

export function engineOverLink(link: Link, reads: LocalReads | null = null, text: LoopText | null = null): EngineApi {
  const engine: Record<string, unknown> = {};
  for (const op of CALLS) engine[op] = (...args: unknown[]) => link.call('engine', op, args);
  // A plain dense search this loop can answer over shared memory never crosses the link.
  engine.search = (c: unknown, q: unknown) => {
    const local = tryLocal(() => reads?.search(c, q) ?? null);
    return local !== null ? Promise.resolve(local) : link.call('engine', 'search', [c, withPackedVector(q)]);
  };
  // So are a hybrid search (dense, sparse and BM25 rankings fused), a shard's rankings (a router's ask),
  // a multi-vector search, a count, a point read (of a point that is here) and a page of points.
  engine.hybridSearch = (c: unknown, q: unknown) => {
    const local = tryLocal(() => reads?.hybrid(c, q) ?? null);
    return local !== null ? Promise.resolve(local) : link.call('engine', 'hybridSearch', [c, withPackedVector(q)]);
  };
  engine.searchMultiVector = (c: unknown, q: unknown) => {
    const local = tryLocal(() => reads?.multiVector(c, q) ?? null);
    return local !== null ? Promise.resolve(local) : link.call('engine', 'searchMultiVector', [c, q]);
  };
  engine.get = (c: unknown, id: unknown, opts: unknown) => {
    const local = tryLocal(() => reads?.get(c, id, opts) ?? null);
    return local !== null ? Promise.resolve(local) : link.call('engine', 'get', opts === undefined ? [c, id] : [c, id, opts]);
  };
  engine.fetch = (c: unknown, q: unknown) => {
    const local = tryLocal(() => reads?.fetch(c, q) ?? null);
    return local !== null ? Promise.resolve(local) : link.call('engine', 'fetch', q === undefined ? [c] : [c, q]);
  };
  engine.count = (c: unknown, q: unknown) => {
    const local = tryLocal(() => reads?.count(c, q) ?? null);
    return local !== null ? Promise.resolve(local) : link.call('engine', 'count', q === undefined ? [c] : [c, q]);
  };
  engine.rankings = (c: unknown, b: unknown) => {
    const local = tryLocal(() => reads?.rankings(c, b) ?? null);
    return local !== null ? Promise.resolve(local) : link.call('engine', 'rankings', [c, withPackedVector(b)]);
  };
  if (reads !== null && text !== null && text.embedders.size > 0) {
    // A text query (embedded here, then its rankings: this loop's own, or the engine thread's, then fused
    // and reranked here) runs the Engine's code over this node as its one shard, so its answers and
    // errors are the engine thread's. A loop without a current view of the collection hands it on whole.
    // The spec is looked up once, when the query starts (the view may go while the provider answers:
    // its rankings are then the engine thread's, which checks the collection again): an Engine per query
    // (a few fields) that holds it.
    const shards = [{ id: 0, name: 'this node', shard: { rankings: engine.rankings } as unknown as DataShard }];
    engine.searchText = (c: unknown, q: unknown) => {
      const consistency = q !== null && typeof q === 'object' ? (q as { consistency?: unknown }).consistency : undefined;
      // A strong read goes whole to the engine thread, whose read rules (a consensus member's barrier
      // first, before any check or embedding) are the reference; so does anything without a current view.
      const spec = consistency === undefined || consistency === null || consistency === 'eventual' ? reads.specOf(c) : null;
      if (spec === null) return link.call('engine', 'searchText', [c, q]);
      const own = new Engine({
        shards: () => shards, limits: text.limits, embedders: text.embedders, rerankers: text.rerankers,
        specOf: () => spec, monotonicMs: () => performance.now(),
      });
      return own.searchText(c as string, q as never);
    };
  }
  engine.upsert = (c: unknown, b: unknown) => link.call('engine', 'upsert', [c, withPackedPoints(b)]);
  engine.bulkUpsert = (c: unknown, b: unknown) => link.call('engine', 'bulkUpsert', [c, withPackedPoints(b)]);
  // exist_ok's answer is marked with a symbol, which a structured clone drops: it travels beside it.
  engine.createCollection = async (params: unknown) => {
    const { info, existed } = await link.call('engine', 'createCollection', [params]) as { info: CollectionInfo; existed: boolean };
    return existed ? markCollectionExisted(info) : info;
  };
  engine.replicate = (body: unknown, signal?: AbortSignal) => link.stream('replicate', [body], signal);
  engine.close = () => Promise.resolve();
  return engine as unknown as EngineApi;
}

/** Answers a loop's engine calls with `engine()`, or not_ready while it is null (storage not open yet). */
export function serveEngine(link: Link, engine: () => EngineApi | null): void {
  const current = (): EngineApi => {
    const e = engine();
    if (e === null) throw new SvcError('not_ready', 'storage is not open yet');
    return e;
  };
  link.handle('engine', (op, args) => {
    if (typeof op !== 'string' || !CALL_SET.has(op) || !Array.isArray(args)) {
      throw new SvcError('internal', 'internal error', { cause: `no engine operation ${String(op)}` });
    }
    const e = current() as unknown as Record<string, (...a: unknown[]) => unknown>;
    if (op === 'createCollection') {
      return (e[op](...args) as Promise<CollectionInfo>).then((info) => ({ info, existed: collectionExisted(info) }));
    }
    return e[op](...args);
  });
  link.handleStream('replicate', (signal, body) => current().replicate(body as never, signal));
}
