/**
 * The domain model shared by every layer: collections, points, filters, hits. These mirror the REST
 * bodies of CONTRACT.md section 1 (snake_case on the wire and here, so no layer renames fields).
 */

export type Metric = 'cosine' | 'dot' | 'l2';
export const METRICS: readonly Metric[] = ['cosine', 'dot', 'l2'];
/** A collection created without `metric`, on every transport (the spec's default for a new collection, as `svc admin import --metric`). */
export const DEFAULT_METRIC: Metric = 'cosine';

/** Every index family of the spec. Those not built yet are refused with invalid_argument at create. */
export type IndexKind = 'hnsw' | 'flat' | 'ivf' | 'vamana' | 'disk_vamana' | 'colbert';
export const INDEX_KINDS: readonly IndexKind[] = ['hnsw', 'flat', 'ivf', 'vamana', 'disk_vamana', 'colbert'];

export type FieldType = 'keyword' | 'numeric';
export interface FilterableField {
  path: string;
  field_type: FieldType;
}

export type VectorEncryption = 'dcpe' | 'client_side';
export type Quantization = 'none' | 'scalar' | 'product' | 'binary';

export interface HnswParams {
  m: number;
  ef_construction: number;
  ef_search: number;
}

export interface CollectionParams {
  name: string;
  dim: number;
  /** Default `cosine` (DEFAULT_METRIC). */
  metric?: Metric;
  index?: IndexKind;
  index_params?: Partial<HnswParams>;
  quantization?: Quantization;
  pq_subspaces?: number;
  filterable?: FilterableField[];
  multivector?: boolean;
  vector_encryption?: VectorEncryption | null;
  /** Chroma's get_or_create: an existing collection of the same shape is answered, not refused. */
  exist_ok?: boolean;
}

export type IndexState = 'current' | 'stale';

export interface CollectionInfo {
  name: string;
  dim: number;
  metric: Metric;
  index: IndexKind;
  index_params: HnswParams;
  quantization: Quantization;
  pq_subspaces: number | null;
  filterable: FilterableField[];
  multivector: boolean;
  vector_encryption: VectorEncryption | null;
  count: number;
  index_state: IndexState;
}

export type Payload = Record<string, unknown>;

export interface PointInput {
  id: string;
  vector: number[] | Float32Array;
  payload?: Payload;
}

export interface PointOutput {
  id: string;
  vector?: number[];
  /** A multi-vector document's token vectors (with_vector). */
  vectors?: number[][];
  payload: Payload;
}

export interface Hit {
  id: string;
  rank: number;
  score: number;
  payload?: Payload;
  vector?: number[];
  /** A multi-vector document's token vectors (with_vector). */
  vectors?: number[][];
}

/** Filter expressions (CONTRACT.md section 1). A condition names a declared filterable field. */
export type Scalar = string | number | boolean;
export type Filter =
  | { and: Filter[] }
  | { or: Filter[] }
  | { not: Filter }
  | { eq: { field: string; value: Scalar } }
  | { ne: { field: string; value: Scalar } }
  | { in: { field: string; value: Scalar[] } }
  | { gt: { field: string; value: number } }
  | { gte: { field: string; value: number } }
  | { lt: { field: string; value: number } }
  | { lte: { field: string; value: number } };

export type Consistency = 'eventual' | 'strong';

export interface SearchQuery {
  vector: number[] | Float32Array;
  k?: number;
  filter?: Filter;
  ef_search?: number;
  with_payload?: boolean;
  with_vector?: boolean;
  consistency?: Consistency;
}

export interface FetchQuery {
  filter?: Filter;
  limit?: number;
  cursor?: string | null;
  with_vector?: boolean;
}

export interface HybridQuery {
  vector?: number[] | Float32Array;
  sparse_indices?: number[];
  sparse_values?: number[];
  query_text?: string;
  k?: number;
  filter?: Filter;
  ef_search?: number;
  rrf_k0?: number;
  with_payload?: boolean;
  with_vector?: boolean;
  consistency?: Consistency;
}

/** `points:count` (CONTRACT.md section 1): the points matching `filter`, or every point. */
export interface CountQuery {
  filter?: Filter;
}

/**
 * `points:payload`: new payloads for existing points, vectors untouched. `merge` (the default): the keys
 * given replace those keys, the others stay; `replace`: the payload becomes the one given.
 */
export interface SetPayloadBody {
  points: { id: string; payload: Payload }[];
  mode?: 'merge' | 'replace';
}

/** `points:delete`: by ids, or every point matching a filter (one of the two). */
export interface DeletePointsBody {
  ids?: string[];
  filter?: Filter;
}

/**
 * Set (not enumerable, so never in JSON) on the info `createCollection` answers with `exist_ok` for a
 * collection that was already there: REST answers it with 200 rather than 201.
 */
export const COLLECTION_EXISTED: unique symbol = Symbol('svc.collection_existed');

export function collectionExisted(info: CollectionInfo): boolean {
  return (info as { [COLLECTION_EXISTED]?: boolean })[COLLECTION_EXISTED] === true;
}

/** Reserved payload keys (spec, Point). */
export const TEXT_KEY = '__svc_text__';
export const SPARSE_KEY = '__svc_sparse__';

/** Bodies and results of the database-level, text and multi-vector operations (CONTRACT.md section 1). */
export interface DatabaseStats {
  collections: number;
  total_points: number;
  /**
   * `vector_bytes`: the collection's vectors in memory (every slot written, padded, until compaction);
   * `graph_bytes`: its search graph's arrays as allocated. Payloads, ids and text postings are not counted.
   */
  per_collection: { name: string; count: number; index: string; index_state: string; vector_bytes: number; graph_bytes: number }[];
  snapshot_status: { manifest_version: number; disk_bytes: number };
  /**
   * The node's part in replication: a leader's last durable commit seq (what followers catch up to), or a
   * follower's state and the leader seq it has applied.
   */
  replication?:
    | { role: 'leader'; commit_seq: number }
    | { role: 'follower'; state: string; applied_seq: number | null; leader: string };
}

export interface SnapshotResult {
  name: string;
  path: string;
  manifest_version: number;
  disk_bytes: number;
}

export interface TextPointInput {
  id: string;
  text: string;
  payload?: Payload;
}

export interface TextQuery {
  text: string;
  k?: number;
  filter?: Filter;
  rerank?: boolean;
  rerank_pool?: number;
  with_payload?: boolean;
  with_vector?: boolean;
  consistency?: 'eventual' | 'strong';
}

export interface DocumentInput {
  id: string;
  vectors: number[][];
  payload?: Payload;
}

export interface MultiVectorQuery {
  vectors: number[][];
  k?: number;
  filter?: Filter;
  with_payload?: boolean;
}


/** A text embedding provider (core/providers implements the kinds of the spec). */
export interface Embedder {
  readonly dim: number;
  embed(texts: string[], kind: 'document' | 'query'): Promise<Float32Array[]>;
}

/** A rerank provider: indexes into `documents`, best first, with the provider's relevance score. */
export interface Reranker {
  rerank(query: string, documents: string[], topN: number): Promise<{ index: number; score: number }[]>;
}

/**
 * One item of the replication stream (`Replicate`): `seq` is the commit sequence number the follower is
 * at after applying it (0 for snapshot chunks); `record` is versioned bytes, laid out in
 * core/collection/replication.ts.
 */
export interface ReplicationEvent {
  seq: number;
  record: Uint8Array;
}

export interface ReplicateRequest {
  /**
   * Resume after this commit seq of `history`; absent, no longer retained, or counted in another history
   * than the leader's own means a full logical snapshot first.
   */
  after_seq?: number;
  /** The leader history `after_seq` counts in (the id the leader sent with the follower's last snapshot). */
  history?: string;
}

/** Where a follower stands: its applied seq in its leader's history. */
export interface ReplicaResume {
  history: string;
  seq: number;
}
