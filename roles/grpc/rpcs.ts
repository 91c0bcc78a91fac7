/**
 * Each unary RPC of proto/svc.proto bound to its service operation. The mapped type makes the compiler
 * refuse an RPC without a binding, and each binding is one line of conversion around one service call.
 */
import type { CallContext, OperationName, SvcApi } from '../../core/service/api.js';
import type { SvcService } from '../../proto/gen/svc.js';
import * as c from './convert.js';

type Def = typeof SvcService;
export type Method = keyof Def;
/** The RPCs answered with one message (every one but Replicate). */
export type UnaryMethod = { [M in Method]: Def[M]['responseStream'] extends false ? M : never }[Method];
export type RequestOf<M extends Method> = ReturnType<Def[M]['requestDeserialize']>;
export type ResponseOf<M extends Method> = Parameters<Def[M]['responseSerialize']>[0];

export interface Binding<M extends UnaryMethod> {
  /** The service operation: its name is the one the role table and the audit log use. */
  op: OperationName;
  invoke(s: SvcApi, ctx: CallContext, req: RequestOf<M>): Promise<ResponseOf<M>>;
}

export const UNARY_BINDINGS: { readonly [M in UnaryMethod]: Binding<M> } = {
  createCollection: {
    op: 'createCollection',
    invoke: async (s, ctx, r) => c.collectionInfo(await s.createCollection(ctx, c.createCollectionParams(r))),
  },
  listCollections: {
    op: 'listCollections',
    invoke: async (s, ctx) => ({ collections: (await s.listCollections(ctx)).collections.map(c.collectionInfo) }),
  },
  getCollection: {
    op: 'collectionInfo',
    invoke: async (s, ctx, r) => c.collectionInfo(await s.collectionInfo(ctx, r.collection)),
  },
  deleteCollection: {
    op: 'deleteCollection',
    invoke: (s, ctx, r) => s.deleteCollection(ctx, r.collection),
  },
  upsert: {
    op: 'upsert',
    invoke: (s, ctx, r) => s.upsert(ctx, r.collection, { points: r.points.map(c.pointInput) }),
  },
  bulkUpsert: {
    op: 'bulkUpsert',
    invoke: (s, ctx, r) => s.bulkUpsert(ctx, r.collection, { points: r.points.map(c.bulkPointInput) }),
  },
  getPoint: {
    op: 'get',
    invoke: async (s, ctx, r) => c.point(await s.get(ctx, r.collection, r.id, c.defined({ with_vector: r.with_vector }))),
  },
  deletePoint: {
    op: 'delete',
    invoke: (s, ctx, r) => s.delete(ctx, r.collection, r.id),
  },
  fetch: {
    op: 'fetch',
    invoke: async (s, ctx, r) => c.fetchResponse(await s.fetch(ctx, r.collection, c.fetchQuery(r))),
  },
  search: {
    op: 'search',
    invoke: async (s, ctx, r) => c.hits(await s.search(ctx, r.collection, c.searchQuery(r))),
  },
  hybridSearch: {
    op: 'hybridSearch',
    invoke: async (s, ctx, r) => c.hits(await s.hybridSearch(ctx, r.collection, c.hybridQuery(r))),
  },
  upsertText: {
    op: 'upsertText',
    invoke: (s, ctx, r) => s.upsertText(ctx, r.collection, { points: r.points.map(c.textPointInput) }),
  },
  searchText: {
    op: 'searchText',
    invoke: async (s, ctx, r) => c.hits(await s.searchText(ctx, r.collection, c.textQuery(r))),
  },
  upsertDocuments: {
    op: 'upsertDocuments',
    invoke: (s, ctx, r) => s.upsertDocuments(ctx, r.collection, { documents: r.documents.map(c.documentInput) }),
  },
  searchMultiVector: {
    op: 'searchMultiVector',
    invoke: async (s, ctx, r) => c.hits(await s.searchMultiVector(ctx, r.collection, c.multiVectorQuery(r))),
  },
  deleteDocument: {
    op: 'deleteDocument',
    invoke: (s, ctx, r) => s.deleteDocument(ctx, r.collection, r.id),
  },
  stats: {
    op: 'stats',
    invoke: async (s, ctx) => c.databaseStats(await s.stats(ctx)),
  },
  snapshot: {
    op: 'snapshot',
    invoke: async (s, ctx, r) => c.snapshotResponse(await s.snapshot(ctx, { name: r.name })),
  },
};
