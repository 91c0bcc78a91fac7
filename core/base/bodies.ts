import * as z from 'zod';

/**
 * Every request body of CONTRACT.md section 1, written once (STYLE.md habit 10). Each transport derives
 * what it needs from these: REST validates with their JSON schemas (jsonSchemaOf) and the OpenAPI document
 * shows them; the MCP tools' input schemas are these plus `collection`; the engine takes its known-field
 * lists from them (bodyKeys); the embedded API's argument types are inferred from them (model.ts); and
 * roles/grpc/proto-drift.test.ts holds proto/svc.proto's request messages to their fields.
 *
 * Shape only: an object is strict (an unknown field is refused, and named), a field has its JSON type and,
 * for a closed set of words, the words. Everything that needs a collection or a limit (dimension, batch
 * sizes, names, a filter's tree, ranges) is the engine's to check, with its own messages, on every
 * transport. No transport knowledge here: these are the bodies, not the routes.
 */

export const METRICS = ['cosine', 'dot', 'l2'] as const;
/** The index families this build has. The spec's others (ivf, vamana, disk_vamana, colbert) come with their issues. */
export const INDEX_KINDS = ['hnsw', 'flat'] as const;
/** The quantizers this build has (product and binary come with their issues). */
export const QUANTIZATIONS = ['none', 'scalar'] as const;
export const VECTOR_ENCRYPTIONS = ['dcpe', 'client_side'] as const;
export const FIELD_TYPES = ['keyword', 'numeric'] as const;
export const CONSISTENCIES = ['eventual', 'strong'] as const;
export const PAYLOAD_MODES = ['merge', 'replace'] as const;

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

// ---------------------------------------------------------------------------------------------------
// Fields, each with the one description every transport shows

const int = (): z.ZodNumber => z.number().int();
const bool = (): z.ZodBoolean => z.boolean();

const collectionName = z.string().describe('matches ^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$, never ".."');
const pointId = z.string().describe('1 to 256 characters');
/**
 * A dense vector. JSON holds a list of numbers; the embedded API also takes a Float32Array (typed so
 * here: the runtime schema, which REST and MCP check, is the list).
 */
const vector = (z.array(z.number()) as unknown as z.ZodType<number[] | Float32Array, number[] | Float32Array>)
  .describe("as many numbers as the collection's dim");
const tokenVectors = z.array(z.array(z.number())).describe("token vectors, each as many numbers as the collection's dim");
const payload = z.record(z.string(), z.unknown())
  .describe('any JSON object, at most SVC_MAX_PAYLOAD_BYTES serialized; __svc_text__ (text for BM25) and __svc_sparse__ ({indices, values}) are reserved keys');
/** A filter is an object here; its tree (typed as Filter) is checked by the engine against the collection's filterable fields. */
const filter = (z.record(z.string(), z.unknown()) as unknown as z.ZodType<Filter, Filter>).describe(
  'on fields declared filterable: {"eq":{"field":F,"value":V}}, "ne", "gt", "gte", "lt", "lte" (numbers), '
  + '{"in":{"field":F,"value":[V,...]}}; combined with {"and":[...]}, {"or":[...]}, {"not":{...}} (docs/filters.md)',
);
const k = int().describe('hits to return, default 10, at most SVC_MAX_K');
const efSearch = int().describe("HNSW beam width for this query (default: the collection's); at most SVC_MAX_EF_SEARCH");
const withPayload = bool().describe('default true');
const withVector = bool().describe('default false');
export const consistency = z.enum(CONSISTENCIES).describe(
  'eventual (default) answers at once, from the prior graph plus an exact scan of newer points; '
  + 'strong waits until the graph holds every write acknowledged before the query',
);
const sparseIndices = z.array(int()).describe('sparse query dimensions, parallel to sparse_values; at most SVC_MAX_SPARSE_TERMS');
const sparseValues = z.array(z.number()).describe('sparse query weights, parallel to sparse_indices');
const queryText = z.string().describe("words scored with BM25 against the points' __svc_text__");

// ---------------------------------------------------------------------------------------------------
// Items of the batch bodies

export const IndexParamsBody = z.strictObject({
  m: int().describe('links per node, default 16').optional(),
  ef_construction: int().describe('build beam width, default 200').optional(),
  ef_search: int().describe("the collection's default query beam width, default 64").optional(),
}).describe('HNSW parameters, each optional');

export const FilterableFieldBody = z.strictObject({
  path: z.string().describe('payload field, e.g. "lang" or "meta.year"'),
  field_type: z.enum(FIELD_TYPES).describe('keyword (exact match) or numeric (ranges)'),
});

export const PointBody = z.strictObject({ id: pointId, vector, payload: payload.optional() });

/** points:bulk: a vector as numbers or as `vector_b64` (one of the two). */
export const BulkPointBody = z.strictObject({
  id: pointId,
  vector: vector.optional(),
  vector_b64: z.string().describe('base64 of the vector as little-endian float32').optional(),
  payload: payload.optional(),
}).meta({ oneOf: [{ required: ['vector'] }, { required: ['vector_b64'] }] });

export const PayloadPatchBody = z.strictObject({
  id: pointId,
  payload: payload.describe('the new payload (replace), or the keys to set (merge)'),
});

export const TextPointBody = z.strictObject({
  id: pointId,
  text: z.string().describe("the text, embedded by the collection's provider ([embedding.<collection>] in svc.toml) and indexed for BM25"),
  payload: payload.optional(),
});

export const DocumentBody = z.strictObject({ id: pointId, vectors: tokenVectors, payload: payload.optional() });

const TextStatsValue = z.strictObject({
  docs: int(),
  total_length: z.number().describe("the documents' lengths summed (a __svc_sparse__ document's: its positive weights)"),
  df: z.record(z.string(), int()).describe('documents holding each query term, by term id'),
});

// ---------------------------------------------------------------------------------------------------
// The bodies, by the service operation that takes them (core/service/api.ts)

export const BODIES = {
  createCollection: z.strictObject({
    name: collectionName,
    dim: int().describe('vector dimension, fixed for the life of the collection; at most SVC_MAX_VECTOR_DIM'),
    metric: z.enum(METRICS).describe('default cosine; l2 (Euclidean distance) is the one score where lower is better').optional(),
    index: z.enum(INDEX_KINDS).describe('default hnsw; flat is exact search').optional(),
    index_params: IndexParamsBody.optional(),
    quantization: z.enum(QUANTIZATIONS).describe('default none; scalar is one byte per dimension (hnsw only)').optional(),
    pq_subspaces: int().describe('product quantization subspaces (product quantization is not in this build)').optional(),
    filterable: z.array(FilterableFieldBody).describe('the payload fields filters may use (a filter on another field is a 400)').optional(),
    multivector: bool().describe('default false; true: each document is a set of token vectors ranked by MaxSim').optional(),
    vector_encryption: z.enum(VECTOR_ENCRYPTIONS).nullable().describe('absent or null; dcpe and client_side are refused by this build').optional(),
    exist_ok: bool().describe('default false; true: an existing collection of the same shape answers with its info (200 on REST)').optional(),
  }),
  upsert: z.strictObject({
    points: z.array(PointBody).describe('the batch, at most SVC_MAX_BATCH_SIZE; a later point of the same id replaces an earlier one'),
  }),
  bulkUpsert: z.strictObject({ points: z.array(BulkPointBody).describe('the batch, at most SVC_MAX_BULK_BATCH_SIZE') }),
  /** The options of `get` (REST: the query string). */
  get: z.strictObject({ with_vector: withVector.optional() }),
  fetch: z.strictObject({
    filter: filter.optional(),
    limit: int().describe('points per page, default 100, at most SVC_MAX_FETCH_LIMIT').optional(),
    cursor: z.string().nullable().describe("the previous page's next_cursor; absent or null for the first page").optional(),
    with_vector: withVector.optional(),
    consistency: consistency.describe('accepted as on every read, and the same either way: a page holds every write acknowledged before it (fetch reads the point table, not the graph)').optional(),
  }),
  count: z.strictObject({ filter: filter.describe('count only the points matching it; absent: every point').optional() }),
  setPayload: z.strictObject({
    points: z.array(PayloadPatchBody).describe('existing points, at most SVC_MAX_BATCH_SIZE; an unknown id changes nothing (not_found)'),
    mode: z.enum(PAYLOAD_MODES).describe('merge (default: the keys given replace those keys) or replace (the whole payload)').optional(),
  }),
  deletePoints: z.strictObject({
    ids: z.array(pointId).describe('ids of the points to delete, at most SVC_MAX_BATCH_SIZE; give ids or filter').optional(),
    filter: filter.describe('delete every point matching it; give ids or filter').optional(),
  }),
  search: z.strictObject({
    vector,
    k: k.optional(),
    filter: filter.optional(),
    ef_search: efSearch.optional(),
    with_payload: withPayload.optional(),
    with_vector: withVector.optional(),
    consistency: consistency.optional(),
  }),
  hybridSearch: z.strictObject({
    vector: vector.optional(),
    sparse_indices: sparseIndices.optional(),
    sparse_values: sparseValues.optional(),
    query_text: queryText.optional(),
    k: k.optional(),
    filter: filter.optional(),
    ef_search: efSearch.optional(),
    rrf_k0: z.number().describe('RRF constant, default 60 (0 to 1,000,000)').optional(),
    with_payload: withPayload.optional(),
    with_vector: withVector.optional(),
    consistency: consistency.optional(),
  }),
  /**
   * Internal (what a router asks of its shards): a hybrid body's query fields without k and rrf_k0, how
   * deep each ranking goes, and the whole collection's BM25 statistics to score query_text against.
   */
  rankings: z.strictObject({
    vector: vector.optional(),
    sparse_indices: sparseIndices.optional(),
    sparse_values: sparseValues.optional(),
    query_text: queryText.optional(),
    filter: filter.optional(),
    ef_search: efSearch.optional(),
    with_payload: withPayload.optional(),
    with_vector: withVector.optional(),
    consistency: consistency.optional(),
    depth: int().describe('how many entries each ranking holds, default 100, at most SVC_MAX_K').optional(),
    text_stats: TextStatsValue.nullable()
      .describe("the whole collection's BM25 statistics (the sum of every shard's query/text-stats); absent: this node's own").optional(),
  }),
  /** Internal: the BM25 statistics of a query text's terms. */
  textStats: z.strictObject({
    text: z.string().describe('the query text, analysed as query_text is (not embedded)'),
    consistency: consistency.describe("a strong hybrid search's statistics: on a consensus member, counted once its state is confirmed current").optional(),
  }),
  upsertText: z.strictObject({ points: z.array(TextPointBody).describe('the batch, at most SVC_MAX_BATCH_SIZE') }),
  searchText: z.strictObject({
    text: z.string().describe('the query text: embedded for dense retrieval and fused with BM25 when the collection has text'),
    k: k.optional(),
    filter: filter.optional(),
    rerank: bool().describe("default false; true reorders a candidate pool with the collection's rerank provider").optional(),
    rerank_pool: int().describe('candidates to rerank, default max(4k, 50), at most SVC_MAX_K').optional(),
    with_payload: withPayload.optional(),
    with_vector: withVector.optional(),
    consistency: consistency.optional(),
  }),
  upsertDocuments: z.strictObject({ documents: z.array(DocumentBody).describe('the batch, at most SVC_MAX_BATCH_SIZE') }),
  searchMultiVector: z.strictObject({
    vectors: tokenVectors.describe('query token vectors; documents are ranked by MaxSim'),
    k: k.optional(),
    filter: filter.optional(),
    ef_search: efSearch.optional(),
    with_payload: withPayload.optional(),
    with_vector: withVector.describe("default false; true: each hit's token vectors as `vectors`").optional(),
    consistency: consistency.optional(),
  }),
  snapshot: z.strictObject({ name: collectionName.describe('the snapshot name: the collection-name rule, never a path; written under the snapshot root') }),
} as const;

export type BodyName = keyof typeof BODIES;
/** A body as a caller writes it (optional fields optional). */
export type Body<N extends BodyName> = z.input<(typeof BODIES)[N]>;

/** The fields a body may have, in the schema's order: the engine's "unknown field" checks. */
export function bodyKeys(schema: z.ZodObject): readonly string[] {
  return Object.keys(schema.shape);
}

const SAFE_INT = Number.MAX_SAFE_INTEGER;
const jsonCache = new WeakMap<z.ZodType, Record<string, unknown>>();

/**
 * The JSON schema (draft-07, as fastify's ajv takes it) of a body or item: what REST validates with and
 * the OpenAPI document shows. zod's own bounds on an integer (the safe range) and a record's key schema
 * are left out: the engine bounds every number by a named limit, and JSON keys are strings.
 */
export function jsonSchemaOf(schema: z.ZodType): Record<string, unknown> {
  let out = jsonCache.get(schema);
  if (out === undefined) {
    const { $schema: _drop, ...rest } = z.toJSONSchema(schema, {
      target: 'draft-7',
      io: 'input',
      override: ({ jsonSchema: j }) => {
        if (j.type === 'integer' && j.minimum === -SAFE_INT && j.maximum === SAFE_INT) {
          delete j.minimum;
          delete j.maximum;
        }
        if (j.type === 'object' && j.propertyNames !== undefined) {
          delete j.propertyNames;
          if (typeof j.additionalProperties === 'object' && Object.keys(j.additionalProperties).length === 0) delete j.additionalProperties;
        }
      },
    }) as Record<string, unknown>;
    out = rest;
    jsonCache.set(schema, out);
  }
  return out;
}
