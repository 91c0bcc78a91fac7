/**
 * Messages of proto/svc.proto to and from the service's REST-shaped bodies. Field names are the same
 * (snake_case on both sides); what changes is only what protobuf cannot say: absent lists, `null`,
 * bytes. Nothing is validated here: the engine validates every argument, so gRPC and REST refuse the
 * same bodies with the same messages.
 */
import { CONSISTENCIES } from '../../core/base/bodies.js';
import { invalidArgument } from '../../core/base/errors.js';
import type { CollectionInfo, CollectionParams, FetchQuery, Hit, HybridQuery, PointInput, PointOutput, SearchQuery } from '../../core/base/model.js';
import type {
  CountQuery, DatabaseStats, DeletePointsBody, DocumentInput, MultiVectorQuery, SetPayloadBody, SnapshotResult, TextPointInput, TextQuery,
} from '../../core/service/api.js';
import type * as pb from '../../proto/gen/svc.js';
import * as schemas from '../rest/schemas.js';
import { checkBody } from '../rest/validate.js';
// Struct keeps `__proto__` keys as own keys, so the engine refuses them as for every transport.
import './struct-keys.js';

/**
 * A copy without the keys whose value is undefined: an absent optional field stays absent, so the
 * engine's "unknown or misplaced field" checks and defaults see what a JSON body without it would give.
 */
export function defined<T extends object>(o: T): T {
  const out: Record<string, unknown> = {};
  for (const [k, v] of Object.entries(o)) if (v !== undefined) out[k] = v;
  return out as T;
}

/**
 * The REST body a request converts to, checked against the REST route's JSON schema: enumerated strings
 * (metric, consistency, ...) and everything else the schema says are refused with the same
 * invalid_argument message as REST. Deep checks (dimension, limits, filter shape) are the engine's.
 */
function asBody<T>(schema: Record<string, unknown>, o: object): T {
  return checkBody<T>(schema, defined(o));
}

// ---------------------------------------------------------------------------------------------------
// Requests

export function createCollectionParams(r: pb.CreateCollectionRequest): CollectionParams {
  return asBody<CollectionParams>(schemas.createCollectionBody, {
    name: r.name,
    dim: r.dim,
    // proto3 cannot tell an unset string from an empty one: empty is unset, the default metric (cosine), as in REST.
    metric: r.metric === '' ? undefined : r.metric,
    index: r.index,
    index_params: r.index_params === undefined ? undefined : defined({ ...r.index_params }),
    quantization: r.quantization,
    pq_subspaces: r.pq_subspaces,
    filterable: r.filterable.length > 0 ? r.filterable.map((f) => ({ path: f.path, field_type: f.field_type })) : undefined,
    multivector: r.multivector,
    vector_encryption: r.vector_encryption,
    exist_ok: r.exist_ok,
  });
}

export function pointInput(p: pb.PointInput): PointInput {
  return defined({ id: p.id, vector: p.vector, payload: p.payload });
}

/** REST's `vector_b64` is a base64 string: the raw bytes of the message are encoded back to it, so the
 *  engine checks their length and dimension exactly as it does for REST. */
export function bulkPointInput(p: pb.BulkPointInput): PointInput | (Omit<PointInput, 'vector'> & { vector_b64: string }) {
  if (p.vector_b64.length > 0) {
    return defined({ id: p.id, vector_b64: Buffer.from(p.vector_b64).toString('base64'), payload: p.payload });
  }
  return pointInput(p);
}

export function fetchQuery(r: pb.FetchRequest): FetchQuery {
  return asBody<FetchQuery>(schemas.fetchBody, {
    filter: r.filter, limit: r.limit, cursor: r.cursor, with_vector: r.with_vector, consistency: r.consistency,
  });
}

export function countQuery(r: pb.CountRequest): CountQuery {
  return asBody<CountQuery>(schemas.countBody, { filter: r.filter });
}

export function setPayloadBody(r: pb.SetPayloadRequest): SetPayloadBody {
  // A payload is required, as on REST: an absent Struct is refused (an empty one, `{}`, is sent as such).
  return asBody<SetPayloadBody>(schemas.setPayloadBody, {
    points: r.points.map((p) => defined({ id: p.id, payload: p.payload })),
    mode: r.mode,
  });
}

/** With a filter, the filter (ids must then be empty); without one, the ids, an empty list included. */
export function deletePointsBody(r: pb.DeletePointsRequest): DeletePointsBody {
  return asBody<DeletePointsBody>(schemas.deletePointsBody, r.filter === undefined
    ? { ids: r.ids }
    : { filter: r.filter, ids: r.ids.length > 0 ? r.ids : undefined });
}

/** A SearchRequest as the server decodes it: the vector may be a Float32Array (packed-vector.ts). */
export type SearchRequestIn = Omit<pb.SearchRequest, 'vector'> & { vector: number[] | Float32Array };

const CONSISTENCY: ReadonlySet<unknown> = new Set(CONSISTENCIES);

/**
 * The search body, checked on the typed message itself (the hot path: no copy through `defined`, no
 * JSON-schema run over every float). What REST's schema checks that protobuf's types do not already
 * guarantee is only `consistency` among its values; the message is REST's. convert.test.ts holds this
 * equal to the schema check over random messages.
 */
export function searchQuery(r: SearchRequestIn): SearchQuery {
  // As ajv's `number` type: a non-finite float (which protobuf can carry and JSON cannot) is refused here too.
  for (let i = 0; i < r.vector.length; i++) {
    if (!Number.isFinite(r.vector[i])) throw invalidArgument(`body/vector/${i} must be number`);
  }
  const q: Record<string, unknown> = { vector: r.vector };
  if (r.k !== undefined) q.k = r.k;
  if (r.filter !== undefined) q.filter = r.filter;
  if (r.ef_search !== undefined) q.ef_search = r.ef_search;
  if (r.with_payload !== undefined) q.with_payload = r.with_payload;
  if (r.with_vector !== undefined) q.with_vector = r.with_vector;
  if (r.consistency !== undefined) {
    if (!CONSISTENCY.has(r.consistency)) throw invalidArgument('body/consistency must be one of: eventual, strong');
    q.consistency = r.consistency;
  }
  return q as unknown as SearchQuery;
}

/** searchQuery as the other bodies are checked: the REST body, then REST's JSON schema (ajv). */
export function searchQueryBySchema(r: pb.SearchRequest): SearchQuery {
  return asBody<SearchQuery>(schemas.queryBody, {
    vector: r.vector,
    k: r.k,
    filter: r.filter,
    ef_search: r.ef_search,
    with_payload: r.with_payload,
    with_vector: r.with_vector,
    consistency: r.consistency,
  });
}

/** An empty dense vector means "no dense query"; an absent SparseVector means "no sparse query". */
export function hybridQuery(r: pb.HybridSearchRequest): HybridQuery {
  return asBody<HybridQuery>(schemas.hybridBody, {
    vector: r.vector.length > 0 ? r.vector : undefined,
    sparse_indices: r.sparse?.indices,
    sparse_values: r.sparse?.values,
    query_text: r.query_text,
    k: r.k,
    filter: r.filter,
    ef_search: r.ef_search,
    rrf_k0: r.rrf_k0,
    with_payload: r.with_payload,
    with_vector: r.with_vector,
    consistency: r.consistency,
  });
}

export function upsertBody(r: pb.UpsertRequest): { points: PointInput[] } {
  return checkBody(schemas.upsertBody, { points: r.points.map(pointInput) });
}

export function bulkBody(r: pb.BulkUpsertRequest): { points: ReturnType<typeof bulkPointInput>[] } {
  return checkBody(schemas.bulkBody, { points: r.points.map(bulkPointInput) });
}

export function textPointsBody(r: pb.UpsertTextRequest): { points: TextPointInput[] } {
  return checkBody(schemas.textPointsBody, { points: r.points.map(textPointInput) });
}

export function documentsBody(r: pb.UpsertDocumentsRequest): { documents: DocumentInput[] } {
  return checkBody(schemas.documentsBody, { documents: r.documents.map(documentInput) });
}

export function snapshotBody(r: pb.SnapshotRequest): { name: string } {
  return checkBody(schemas.snapshotBody, { name: r.name });
}

export function textPointInput(p: pb.TextPointInput): TextPointInput {
  return defined({ id: p.id, text: p.text, payload: p.payload });
}

export function textQuery(r: pb.SearchTextRequest): TextQuery {
  return asBody<TextQuery>(schemas.textQueryBody, {
    text: r.text,
    k: r.k,
    filter: r.filter,
    rerank: r.rerank,
    rerank_pool: r.rerank_pool,
    with_payload: r.with_payload,
    with_vector: r.with_vector,
    consistency: r.consistency,
  });
}

export function documentInput(d: pb.DocumentInput): DocumentInput {
  return defined({ id: d.id, vectors: d.vectors.map((v) => v.values), payload: d.payload });
}

/** `consistency` is carried for every query body (CONTRACT.md section 1), multi-vector included. */
export function multiVectorQuery(r: pb.SearchMultiVectorRequest): MultiVectorQuery {
  return asBody<MultiVectorQuery>(schemas.multiQueryBody, {
    vectors: r.vectors.map((v) => v.values),
    k: r.k,
    filter: r.filter,
    ef_search: r.ef_search,
    with_payload: r.with_payload,
    with_vector: r.with_vector,
    consistency: r.consistency,
  });
}

// ---------------------------------------------------------------------------------------------------
// Responses

export function collectionInfo(c: CollectionInfo): pb.CollectionInfo {
  return {
    name: c.name,
    dim: c.dim,
    metric: c.metric,
    index: c.index,
    index_params: { ...c.index_params },
    quantization: c.quantization,
    pq_subspaces: c.pq_subspaces ?? undefined,
    filterable: c.filterable.map((f) => ({ path: f.path, field_type: f.field_type })),
    multivector: c.multivector,
    vector_encryption: c.vector_encryption ?? undefined,
    count: c.count,
    index_state: c.index_state,
  };
}

export function point(p: PointOutput): pb.Point {
  return { id: p.id, vector: p.vector ?? [], payload: p.payload };
}

export function hit(h: Hit): pb.Hit {
  return { id: h.id, rank: h.rank, score: h.score, payload: h.payload, vector: h.vector ?? [], vectors: (h.vectors ?? []).map((values) => ({ values })) };
}

export function hits(r: { hits: Hit[] }): pb.SearchResponse {
  return { hits: r.hits.map(hit) };
}

export function fetchResponse(r: { points: PointOutput[]; next_cursor: string | null }): pb.FetchResponse {
  return { points: r.points.map(point), next_cursor: r.next_cursor ?? undefined };
}

export function databaseStats(s: DatabaseStats): pb.DatabaseStats {
  return {
    collections: s.collections,
    total_points: s.total_points,
    per_collection: s.per_collection.map((p) => ({
      name: p.name, count: p.count, index: p.index, index_state: p.index_state, vector_bytes: p.vector_bytes, graph_bytes: p.graph_bytes,
    })),
    snapshot_status: { ...s.snapshot_status },
  };
}

export function snapshotResponse(s: SnapshotResult): pb.SnapshotResponse {
  return { name: s.name, path: s.path, manifest_version: s.manifest_version, disk_bytes: s.disk_bytes };
}
