import type { Limits } from '../base/limits.js';
import type { CollectionSpec } from '../collection/params.js';
import type { EngineApi } from '../service/api.js';

/**
 * One shard as the engine sees it: a whole node's operations on its part of every collection, plus the
 * two a scatter-gather needs that a client never calls: a query's rankings before fusion, and its BM25
 * statistics. A local one is the node's own Database (core/collection/database.ts, a NodeShard); a remote one speaks
 * the node's REST API (roles/router/http-shard.ts) with SVC_CLUSTER_SHARD_KEY.
 *
 * A call that the shard cannot answer in time, or that fails for another reason than the request
 * itself, rejects with SvcError `unavailable` naming the shard: an engine never answers short.
 */
export type DataShard = Pick<EngineApi,
  | 'listCollections' | 'collectionInfo' | 'createCollection' | 'deleteCollection'
  | 'upsert' | 'bulkUpsert' | 'get' | 'delete' | 'fetch' | 'count' | 'setPayload' | 'deletePoints'
  | 'search' | 'searchMultiVector' | 'upsertDocuments' | 'deleteDocument' | 'stats' | 'snapshot'
  // A hybrid or text query's rankings (`depth` deep, BM25 over `text_stats` when given), and the BM25
  // statistics of a query text's terms over this shard's part of the collection.
  | 'rankings' | 'textStats'
>;

/**
 * A node's own storage as its engine sees it (core/engine/node.ts): a shard, plus what only a node has
 * and a client may still ask of it (a coordinator's move steps, the replication stream), and close;
 * its limits and its collections' parameters, read in place.
 * core/collection/database.ts is one. What it lacks of EngineApi is orchestration: hybridSearch,
 * searchText and upsertText, which the engine does over its shards' rankings and upserts.
 */
export type NodeShard = DataShard & Pick<EngineApi, 'moveBatch' | 'moveCommit' | 'moveApply' | 'replicate' | 'close'> & {
  /** The limits it enforces (the engine's parsing enforces the same). */
  readonly limits: Limits;
  /** A collection's parameters as they are now (not_found as collectionInfo): read, never changed. */
  collectionSpec(name: string): CollectionSpec;
};

/** A shard of the map: its id (what rendezvous hashing ranks) and how to reach it. */
export interface ShardRef {
  id: number;
  /** For messages: `shard 2 (http://s2:6333)`. */
  name: string;
  shard: DataShard;
  /**
   * The shard's primary, where `shard` may read from its replicas (roles/router/replica-set.ts): what a
   * read that feeds a write, or must see every acknowledged write, asks. Absent: `shard` is the primary.
   */
  primary?: DataShard;
  /** Its state in the map (absent: active). */
  state?: 'active' | 'joining' | 'draining';
}
