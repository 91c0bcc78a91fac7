/**
 * The domain model shared by every layer: collections, points, filters, hits. These mirror the REST
 * bodies of CONTRACT.md section 1 (snake_case on the wire and here, so no layer renames fields); the
 * request bodies' types are inferred from their one schema, in bodies.ts.
 */

import type * as z from 'zod';
import { INDEX_KINDS, METRICS, type Body, type BulkPointBody, type DocumentBody, type FilterableFieldBody, type PointBody, type TextPointBody } from './bodies.js';
import type { CONSISTENCIES, FIELD_TYPES, QUANTIZATIONS, VECTOR_ENCRYPTIONS } from './bodies.js';

export { METRICS, INDEX_KINDS };
export type { Filter, Scalar } from './bodies.js';

export type Metric = (typeof METRICS)[number];
/** A collection created without `metric`, on every transport (the spec's default for a new collection, as `svc admin import --metric`). */
export const DEFAULT_METRIC: Metric = 'cosine';

/** The index families this build has (core/base/bodies.ts): the spec's others come with their issues. */
export type IndexKind = (typeof INDEX_KINDS)[number];

export type FieldType = (typeof FIELD_TYPES)[number];
export type FilterableField = z.output<typeof FilterableFieldBody>;

export type VectorEncryption = (typeof VECTOR_ENCRYPTIONS)[number];
export type Quantization = (typeof QUANTIZATIONS)[number];

export interface HnswParams {
  m: number;
  ef_construction: number;
  ef_search: number;
}

/**
 * createCollection's body, inferred from its schema (bodies.ts) as every request body below: `metric`
 * defaults to `cosine` (DEFAULT_METRIC); `exist_ok` answers an existing collection of the same shape.
 */
export type CollectionParams = Body<'createCollection'>;

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

export type PointInput = z.input<typeof PointBody>;

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

export type Consistency = (typeof CONSISTENCIES)[number];

export type SearchQuery = Body<'search'>;
/** `points:fetch`: `limit` default 100; `cursor` the previous page's next_cursor. */
export type FetchQuery = Body<'fetch'>;
export type HybridQuery = Body<'hybridSearch'>;
/** `points:count` (CONTRACT.md section 1): the points matching `filter`, or every point. */
export type CountQuery = Body<'count'>;
/**
 * `points:payload`: new payloads for existing points, vectors untouched. `merge` (the default): the keys
 * given replace those keys, the others stay; `replace`: the payload becomes the one given.
 */
export type SetPayloadBody = Body<'setPayload'>;
/** `points:delete`: by ids, or every point matching a filter (one of the two). */
export type DeletePointsBody = Body<'deletePoints'>;
export type UpsertBody = Body<'upsert'>;
/**
 * A points:bulk point: its schema's fields (bodies.ts), with the schema's "one of vector, vector_b64"
 * (a JSON-schema oneOf, which zod's inference cannot see) said in the type too.
 */
export type BulkPointInput = Omit<z.input<typeof BulkPointBody>, 'vector' | 'vector_b64'> & (
  | { vector: NonNullable<z.input<typeof BulkPointBody>['vector']>; vector_b64?: never }
  | { vector_b64: string; vector?: never }
);
export type BulkUpsertBody = Omit<Body<'bulkUpsert'>, 'points'> & { points: BulkPointInput[] };
export type GetOptions = Body<'get'>;
export type TextPointInput = z.input<typeof TextPointBody>;
export type TextQuery = Body<'searchText'>;
export type DocumentInput = z.input<typeof DocumentBody>;
export type MultiVectorQuery = Body<'searchMultiVector'>;
export type SnapshotBody = Body<'snapshot'>;
export type UpsertTextBody = Body<'upsertText'>;
export type UpsertDocumentsBody = Body<'upsertDocuments'>;


/**
 * Set (not enumerable, so never in JSON) on the info `createCollection` answers with `exist_ok` for a
 * collection that was already there: REST answers it with 200 rather than 201.
 */
export const COLLECTION_EXISTED: unique symbol = Symbol('svc.collection_existed');

export function collectionExisted(info: CollectionInfo): boolean {
  return (info as { [COLLECTION_EXISTED]?: boolean })[COLLECTION_EXISTED] === true;
}

/** Marks `info` as the answer of exist_ok for a collection already there (a symbol: never serialized). */
export function markCollectionExisted<T extends object>(info: T): T {
  Object.defineProperty(info, COLLECTION_EXISTED, { value: true, enumerable: false });
  return info;
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
