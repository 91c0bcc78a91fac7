import { invalidArgument } from '../../core/base/errors.js';
import type {
  CountQuery, DeletePointsBody, DocumentInput, FetchQuery, HybridQuery, MultiVectorQuery, PointInput, SearchQuery, SetPayloadBody, TextQuery,
} from '../../core/base/model.js';
import type { CallContext, OperationName, SvcApi } from '../../core/service/api.js';
import type { ToolArgs, ToolName } from './schemas.js';

/**
 * Every tool of the spec's MCP table: its description for a model and its call into the service layer.
 * server.ts checks role and scope for `op` on `collection(args)` first, then shapes the arguments by the
 * tool's schema; the service checks limits, and the engine everything else, exactly as for REST and gRPC.
 */
export interface ToolDef<T extends ToolName> {
  title: string;
  description: string;
  /** Mutates nothing: lets a client know the call is safe to retry or auto-approve. */
  readOnly: boolean;
  /** The service operation (role table, audit action) the tool performs. */
  op: OperationName;
  /** The collection the scope check applies to, read from the raw arguments (default `collection`). */
  collection?: (args: Record<string, unknown>) => unknown;
  call(svc: SvcApi, ctx: CallContext, args: ToolArgs<T>): Promise<object>;
}

/** Reads over MCP see their session's own writes unless the caller asks for `eventual`. */
const strong = <T extends { consistency?: 'eventual' | 'strong' }>(q: T): T => ({ ...q, consistency: q.consistency ?? 'strong' });

/**
 * `{collection, ...rest}` -> the collection name and the REST body. The body's deep shape (a filter's
 * tree, for one) is the engine's to check, so it is typed here as the engine's query type.
 */
function split<B>(args: { collection: string }): [string, B] {
  const { collection, ...rest } = args;
  return [collection, rest as B];
}

/**
 * The spec's single item (`{collection, id, <vectors>, payload?}`) or a batch (`{collection, <list>}`), as
 * the batch the service takes. Both, or neither, is invalid_argument.
 */
function oneOrBatch<T>(args: Record<string, unknown>, list: string, vectors: string, what: string): T[] {
  const single = args.id !== undefined || args[vectors] !== undefined || args.payload !== undefined;
  const batch = args[list];
  if (batch !== undefined) {
    if (single) throw invalidArgument(`give one ${what} (id, ${vectors}, payload) or \`${list}\`, not both`);
    return batch as T[];
  }
  if (args.id === undefined || args[vectors] === undefined) throw invalidArgument(`give one ${what} as id and ${vectors} (payload optional), or a batch as \`${list}\``);
  const one: Record<string, unknown> = { id: args.id, [vectors]: args[vectors] };
  if (args.payload !== undefined) one.payload = args.payload;
  return [one as T];
}

export const TOOLS: { [K in ToolName]: ToolDef<K> } = {
  list_collections: {
    title: 'List collections',
    description: 'List the collections this key may see, each with dim, metric, index, filterable fields, point count and index state.',
    readOnly: true,
    op: 'listCollections',
    collection: () => undefined,
    call: (svc, ctx) => svc.listCollections(ctx),
  },
  collection_info: {
    title: 'Collection info',
    description: 'Shape of one collection: dim, metric, index and its parameters, quantization, filterable fields, multivector, encryption, point count, index state.',
    readOnly: true,
    op: 'collectionInfo',
    call: (svc, ctx, a) => svc.collectionInfo(ctx, a.collection),
  },
  database_stats: {
    title: 'Database stats',
    description: 'Whole-database overview: collection count, total points, per-collection summary, and snapshot status (manifest_version, disk_bytes).',
    readOnly: true,
    op: 'stats',
    collection: () => undefined,
    call: (svc, ctx) => svc.stats(ctx),
  },
  create_collection: {
    title: 'Create collection',
    description: 'Create a collection with a fixed vector dimension and metric (admin key). Declare in `filterable` every payload field you will filter on.',
    readOnly: false,
    op: 'createCollection',
    // `name` is the REST field; `collection` is accepted too (the same name is checked for scope either way).
    collection: (a) => a.name ?? a.collection,
    call: (svc, ctx, a) => {
      const { collection, name, ...rest } = a;
      // `name` is the REST field; `collection` is accepted too, as every other tool takes it.
      const chosen = name ?? collection;
      if (name !== undefined && collection !== undefined && name !== collection) {
        return Promise.reject(invalidArgument('give either name or collection, not two different names'));
      }
      return svc.createCollection(ctx, { ...rest, name: chosen } as Parameters<SvcApi['createCollection']>[1]);
    },
  },
  delete_collection: {
    title: 'Delete collection',
    description: 'Drop a collection and all its points (admin key). Its data key is destroyed: the data cannot be recovered. Reports whether it existed.',
    readOnly: false,
    op: 'deleteCollection',
    call: (svc, ctx, a) => svc.deleteCollection(ctx, a.collection),
  },
  snapshot: {
    title: 'Snapshot',
    description: 'Consistent online backup of the whole database into the server\'s snapshot directory under `name` (admin key scoped to *). Restore by starting svc with its data directory pointing at the snapshot, with the same master key.',
    readOnly: false,
    op: 'snapshot',
    collection: () => undefined,
    call: (svc, ctx, a) => svc.snapshot(ctx, { name: a.name }),
  },
  upsert: {
    title: 'Upsert points',
    description: 'Insert or replace one point (id, vector, optional payload) or a batch (`points`). Durable when the call returns. Returns {upserted}.',
    readOnly: false,
    op: 'upsert',
    call: async (svc, ctx, a) => svc.upsert(ctx, a.collection, { points: oneOrBatch<PointInput>(a, 'points', 'vector', 'point') }),
  },
  search: {
    title: 'Vector search',
    description: 'k-nearest-neighbour search with an optional payload filter. Hits are best first: {id, rank, score, payload?, vector?}; score is cosine similarity, inner product, or Euclidean distance (l2: lower is better).',
    readOnly: true,
    op: 'search',
    call: (svc, ctx, a) => {
      const [c, q] = split<SearchQuery>(a);
      return svc.search(ctx, c, strong(q));
    },
  },
  fetch: {
    title: 'Fetch points',
    description: 'List points matching an optional filter, unranked, in id order, one page at a time: pass `next_cursor` back as `cursor` until it is null.',
    readOnly: true,
    op: 'fetch',
    call: (svc, ctx, a) => {
      const [c, q] = split<FetchQuery>(a);
      return svc.fetch(ctx, c, q);
    },
  },
  count: {
    title: 'Count points',
    description: 'How many points the collection holds, or how many match a filter. Returns {count}.',
    readOnly: true,
    op: 'count',
    call: (svc, ctx, a) => {
      const [c, q] = split<CountQuery>(a);
      return svc.count(ctx, c, q);
    },
  },
  set_payload: {
    title: 'Set payloads',
    description: 'Change the payloads of existing points without resending vectors: "merge" (default) sets the keys given, "replace" replaces the whole payload. All or nothing: an unknown id changes nothing (not_found). Returns {updated}.',
    readOnly: false,
    op: 'setPayload',
    call: (svc, ctx, a) => {
      const [c, body] = split<SetPayloadBody>(a);
      return svc.setPayload(ctx, c, body);
    },
  },
  delete_points: {
    title: 'Delete points',
    description: 'Delete points by a list of ids, or every point matching a filter (give one of the two). Returns {deleted}: how many were deleted.',
    readOnly: false,
    op: 'deletePoints',
    call: (svc, ctx, a) => {
      const [c, body] = split<DeletePointsBody>(a);
      return svc.deletePoints(ctx, c, body);
    },
  },
  get: {
    title: 'Get point',
    description: 'One point by id: {id, payload, vector?}.',
    readOnly: true,
    op: 'get',
    call: (svc, ctx, a) => svc.get(ctx, a.collection, a.id, a.with_vector === undefined ? {} : { with_vector: a.with_vector }),
  },
  delete: {
    title: 'Delete point',
    description: 'Delete one point by id. Returns {deleted: false} when there was no such point.',
    readOnly: false,
    op: 'delete',
    call: (svc, ctx, a) => svc.delete(ctx, a.collection, a.id),
  },
  upsert_document: {
    title: 'Upsert multi-vector documents',
    description: 'Insert or replace one multi-vector document (id, vectors: its token vectors, optional payload) or a batch (`documents`), in a collection created with multivector: true. Returns {upserted}.',
    readOnly: false,
    op: 'upsertDocuments',
    call: async (svc, ctx, a) => svc.upsertDocuments(ctx, a.collection, { documents: oneOrBatch<DocumentInput>(a, 'documents', 'vectors', 'document') }),
  },
  search_multi_vector: {
    title: 'Multi-vector search',
    description: 'Rank multi-vector documents by MaxSim against a set of query token vectors, with an optional filter.',
    readOnly: true,
    op: 'searchMultiVector',
    call: (svc, ctx, a) => {
      const [c, q] = split<MultiVectorQuery>(a);
      return svc.searchMultiVector(ctx, c, strong(q));
    },
  },
  delete_document: {
    title: 'Delete multi-vector document',
    description: 'Delete one multi-vector document by id.',
    readOnly: false,
    op: 'deleteDocument',
    call: (svc, ctx, a) => svc.deleteDocument(ctx, a.collection, a.id),
  },
  hybrid_search: {
    title: 'Hybrid search',
    description: 'Fuse dense (vector), sparse (sparse_indices/sparse_values) and BM25 (query_text) rankings with reciprocal rank fusion; give at least one of them. Score is the fused RRF score.',
    readOnly: true,
    op: 'hybridSearch',
    call: (svc, ctx, a) => {
      const [c, q] = split<HybridQuery>(a);
      return svc.hybridSearch(ctx, c, strong(q));
    },
  },
  upsert_text: {
    title: 'Upsert text',
    description: 'Insert or replace points given as text: the server embeds each text with the collection\'s provider and indexes it for BM25.',
    readOnly: false,
    op: 'upsertText',
    call: (svc, ctx, a) => svc.upsertText(ctx, a.collection, { points: a.points }),
  },
  search_text: {
    title: 'Text search',
    description: 'Search with a text query: embedded by the collection\'s provider, fused with BM25, optionally reranked (rerank: true) by its rerank provider.',
    readOnly: true,
    op: 'searchText',
    call: (svc, ctx, a) => {
      const [c, q] = split<TextQuery>(a);
      return svc.searchText(ctx, c, strong(q));
    },
  },
};
