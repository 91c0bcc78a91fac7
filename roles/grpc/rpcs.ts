/**
 * Each unary RPC of proto/svc.proto bound to its service operation. The mapped type makes the compiler
 * refuse an RPC without a binding, and each binding is one line of conversion around one service call.
 */
import type { CallContext, OperationName, SvcApi } from '../../core/service/api.js';
import { SearchRequest, type SvcService } from '../../proto/gen/svc.js';
import * as c from './convert.js';
import { decodeWithPackedFloats } from './packed-vector.js';

type Def = typeof SvcService;
export type Method = keyof Def;
/** The RPCs answered with one message (every one but Replicate). */
export type UnaryMethod = { [M in Method]: Def[M]['responseStream'] extends false ? M : never }[Method];
/** What a handler receives: the decoded message (Search's vector may be a Float32Array, see REQUEST_DECODERS). */
export type RequestOf<M extends Method> = M extends 'search' ? c.SearchRequestIn : ReturnType<Def[M]['requestDeserialize']>;
export type ResponseOf<M extends Method> = Parameters<Def[M]['responseSerialize']>[0];

export interface Binding<M extends UnaryMethod> {
  /** The service operation: its name is the one the role table and the audit log use. */
  op: OperationName;
  /** The collection the scope check applies to, before the body is converted and validated. */
  collection(req: RequestOf<M>): unknown;
  invoke(s: SvcApi, ctx: CallContext, req: RequestOf<M>): Promise<ResponseOf<M>>;
}

/**
 * Decoders that replace the generated one for a method: Search, the hot path, takes its vector as one
 * Float32Array copy (packed-vector.ts). Hybrid search keeps the generated decoder: its body goes
 * through REST's JSON schema, which wants an array.
 */
export const REQUEST_DECODERS: { readonly [M in UnaryMethod]?: (bytes: Uint8Array) => RequestOf<M> } = {
  search: (bytes) => decodeWithPackedFloats(bytes, 2, (b) => SearchRequest.decode(b)),
};

export const UNARY_BINDINGS: { readonly [M in UnaryMethod]: Binding<M> } = {
  createCollection: {
    op: 'createCollection',
    collection: (r) => r.name,
    invoke: async (s, ctx, r) => c.collectionInfo(await s.createCollection(ctx, c.createCollectionParams(r))),
  },
  listCollections: {
    op: 'listCollections',
    collection: () => undefined,
    invoke: async (s, ctx) => ({ collections: (await s.listCollections(ctx)).collections.map(c.collectionInfo) }),
  },
  getCollection: {
    op: 'collectionInfo',
    collection: (r) => r.collection,
    invoke: async (s, ctx, r) => c.collectionInfo(await s.collectionInfo(ctx, r.collection)),
  },
  deleteCollection: {
    op: 'deleteCollection',
    collection: (r) => r.collection,
    invoke: (s, ctx, r) => s.deleteCollection(ctx, r.collection),
  },
  upsert: {
    op: 'upsert',
    collection: (r) => r.collection,
    invoke: (s, ctx, r) => s.upsert(ctx, r.collection, c.upsertBody(r)),
  },
  bulkUpsert: {
    op: 'bulkUpsert',
    collection: (r) => r.collection,
    invoke: (s, ctx, r) => s.bulkUpsert(ctx, r.collection, c.bulkBody(r)),
  },
  getPoint: {
    op: 'get',
    collection: (r) => r.collection,
    invoke: async (s, ctx, r) => c.point(await s.get(ctx, r.collection, r.id, c.defined({ with_vector: r.with_vector }))),
  },
  deletePoint: {
    op: 'delete',
    collection: (r) => r.collection,
    invoke: (s, ctx, r) => s.delete(ctx, r.collection, r.id),
  },
  fetch: {
    op: 'fetch',
    collection: (r) => r.collection,
    invoke: async (s, ctx, r) => c.fetchResponse(await s.fetch(ctx, r.collection, c.fetchQuery(r))),
  },
  count: {
    op: 'count',
    collection: (r) => r.collection,
    invoke: (s, ctx, r) => s.count(ctx, r.collection, c.countQuery(r)),
  },
  setPayload: {
    op: 'setPayload',
    collection: (r) => r.collection,
    invoke: (s, ctx, r) => s.setPayload(ctx, r.collection, c.setPayloadBody(r)),
  },
  deletePoints: {
    op: 'deletePoints',
    collection: (r) => r.collection,
    invoke: (s, ctx, r) => s.deletePoints(ctx, r.collection, c.deletePointsBody(r)),
  },
  search: {
    op: 'search',
    collection: (r) => r.collection,
    invoke: async (s, ctx, r) => c.hits(await s.search(ctx, r.collection, c.searchQuery(r))),
  },
  hybridSearch: {
    op: 'hybridSearch',
    collection: (r) => r.collection,
    invoke: async (s, ctx, r) => c.hits(await s.hybridSearch(ctx, r.collection, c.hybridQuery(r))),
  },
  upsertText: {
    op: 'upsertText',
    collection: (r) => r.collection,
    invoke: (s, ctx, r) => s.upsertText(ctx, r.collection, c.textPointsBody(r)),
  },
  searchText: {
    op: 'searchText',
    collection: (r) => r.collection,
    invoke: async (s, ctx, r) => c.hits(await s.searchText(ctx, r.collection, c.textQuery(r))),
  },
  upsertDocuments: {
    op: 'upsertDocuments',
    collection: (r) => r.collection,
    invoke: (s, ctx, r) => s.upsertDocuments(ctx, r.collection, c.documentsBody(r)),
  },
  searchMultiVector: {
    op: 'searchMultiVector',
    collection: (r) => r.collection,
    invoke: async (s, ctx, r) => c.hits(await s.searchMultiVector(ctx, r.collection, c.multiVectorQuery(r))),
  },
  deleteDocument: {
    op: 'deleteDocument',
    collection: (r) => r.collection,
    invoke: (s, ctx, r) => s.deleteDocument(ctx, r.collection, r.id),
  },
  stats: {
    op: 'stats',
    collection: () => undefined,
    invoke: async (s, ctx) => c.databaseStats(await s.stats(ctx)),
  },
  snapshot: {
    op: 'snapshot',
    collection: () => undefined,
    invoke: async (s, ctx, r) => c.snapshotResponse(await s.snapshot(ctx, c.snapshotBody(r))),
  },
};
