import type {
  BulkUpsertBody, CollectionInfo, CollectionParams, FetchQuery, GetOptions, Hit, HybridQuery, PointOutput, SearchQuery, SnapshotBody,
  UpsertBody, UpsertDocumentsBody, UpsertTextBody,
} from '../base/model.js';
import type {
  CountQuery, DatabaseStats, DeletePointsBody, MultiVectorQuery, ReplicateRequest, ReplicationEvent, SetPayloadBody, SnapshotResult, TextQuery,
} from '../base/model.js';

import type { Rankings, RankingsBody, TextStats, TextStatsBody } from '../query/ranking.js';

export type { Rankings, RankingsBody, TextStats, TextStatsBody } from '../query/ranking.js';

export type {
  CountQuery, DatabaseStats, DeletePointsBody, DocumentInput, MultiVectorQuery, ReplicateRequest, ReplicationEvent, SetPayloadBody,
  SnapshotResult, TextPointInput, TextQuery,
} from '../base/model.js';

/**
 * The one service surface. REST, gRPC, MCP and the embedded API are thin adapters over this:
 * each call takes the caller's context first; auth, scope, limits, audit and metrics happen behind it.
 * Request and response bodies are CONTRACT.md section 1's, with `collection` for the path's {name}; each
 * request body's type is inferred from its one schema (core/base/bodies.ts).
 */

export type Role = 'read' | 'write' | 'admin';

/** Who is calling. `keyName` is a name for audit (never the secret); `null` principal means insecure mode. */
export interface Principal {
  keyName: string;
  role: Role;
  /** Exact names or trailing-`*` prefixes; `['*']` is every collection. */
  collections: readonly string[];
}

export interface CallContext {
  principal: Principal;
  requestId: string;
  transport: 'rest' | 'grpc' | 'mcp' | 'embedded';
  remote?: string;
}

/** Every operation, by the name used in the role table, audit lines and spans. */
export interface SvcApi {
  listCollections(ctx: CallContext): Promise<{ collections: CollectionInfo[] }>;
  collectionInfo(ctx: CallContext, name: string): Promise<CollectionInfo>;
  /** 201 on REST; 200 when `exist_ok` answered an existing collection (collectionExisted(info)). */
  createCollection(ctx: CallContext, params: CollectionParams): Promise<CollectionInfo>;
  deleteCollection(ctx: CallContext, name: string): Promise<{ existed: boolean }>;
  upsert(ctx: CallContext, collection: string, body: UpsertBody): Promise<{ upserted: number }>;
  bulkUpsert(ctx: CallContext, collection: string, body: BulkUpsertBody): Promise<{ upserted: number }>;
  get(ctx: CallContext, collection: string, id: string, opts?: GetOptions): Promise<PointOutput>;
  delete(ctx: CallContext, collection: string, id: string): Promise<{ deleted: boolean }>;
  fetch(ctx: CallContext, collection: string, query: FetchQuery): Promise<{ points: PointOutput[]; next_cursor: string | null }>;
  count(ctx: CallContext, collection: string, query?: CountQuery): Promise<{ count: number }>;
  setPayload(ctx: CallContext, collection: string, body: SetPayloadBody): Promise<{ updated: number }>;
  deletePoints(ctx: CallContext, collection: string, body: DeletePointsBody): Promise<{ deleted: number }>;
  search(ctx: CallContext, collection: string, query: SearchQuery): Promise<{ hits: Hit[] }>;
  hybridSearch(ctx: CallContext, collection: string, query: HybridQuery): Promise<{ hits: Hit[] }>;
  upsertText(ctx: CallContext, collection: string, body: UpsertTextBody): Promise<{ upserted: number }>;
  searchText(ctx: CallContext, collection: string, query: TextQuery): Promise<{ hits: Hit[] }>;
  upsertDocuments(ctx: CallContext, collection: string, body: UpsertDocumentsBody): Promise<{ upserted: number }>;
  searchMultiVector(ctx: CallContext, collection: string, query: MultiVectorQuery): Promise<{ hits: Hit[] }>;
  deleteDocument(ctx: CallContext, collection: string, id: string): Promise<{ deleted: boolean }>;
  /** Internal (a router asks it of its shards): a hybrid or text query's rankings before fusion. */
  rankings(ctx: CallContext, collection: string, body: RankingsBody): Promise<Rankings>;
  /** Internal (a router asks it of its shards): the BM25 statistics of a query text's terms. */
  textStats(ctx: CallContext, collection: string, body: TextStatsBody): Promise<TextStats>;
  stats(ctx: CallContext): Promise<DatabaseStats>;
  /**
   * Internal (a coordinator asks it of a shard during a rebalance, docs/cluster.md): `batch` and `commit`
   * move this node's points away, `apply` brings points here. REST only.
   */
  moveBatch(ctx: CallContext, body: unknown): Promise<unknown>;
  moveCommit(ctx: CallContext, body: unknown): Promise<unknown>;
  moveApply(ctx: CallContext, body: unknown): Promise<unknown>;
  snapshot(ctx: CallContext, body: SnapshotBody): Promise<SnapshotResult>;
  /**
   * The leader's replication stream: a logical snapshot, then the live commit tail, until `signal` aborts.
   * Authorization happens when it is called (it throws then); a bad body fails the first step.
   */
  replicate(ctx: CallContext, body?: ReplicateRequest, signal?: AbortSignal): AsyncIterable<ReplicationEvent>;
}

export type OperationName = keyof SvcApi;

type DropFirst<T extends unknown[]> = T extends [unknown, ...infer R] ? R : never;

/**
 * The engine's surface: the same operations without a caller context. `core/engine/engine.ts`
 * implements it: over remote shards (a router), or as NodeEngine over a node's own Database (a single
 * node and the embedded API, core/engine/node.ts). Engine and Database validate every argument and
 * enforce every per-request limit themselves, so no transport can skip one. The service layer wraps it
 * with auth, audit and metrics.
 */
export type EngineApi = {
  [K in OperationName]: (...args: DropFirst<Parameters<SvcApi[K]>>) => ReturnType<SvcApi[K]>;
} & { close(): Promise<void> };
