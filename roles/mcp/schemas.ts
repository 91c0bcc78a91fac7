import * as z from 'zod';
import { INDEX_KINDS, METRICS } from '../../core/base/model.js';

/**
 * The input schema of every MCP tool: the REST body's field names (CONTRACT.md section 1) plus
 * `collection` for the path's {name} (section 9). Objects are strict, as the REST schemas are: an unknown
 * field is an error, never silently dropped. Shape only; the engine does every deep check (dimension,
 * limits, names, filter fields) and reports it with the contract's code.
 */

const collection = z.string().describe('Name of the collection (letters, digits, ".", "_", "-"; at most 128 characters).');
const pointId = z.string().describe('Point id: a string of 1 to 256 characters.');
const vector = z.array(z.number()).describe('Dense vector: exactly `dim` numbers (the collection\'s dimension).');
const payload = z.record(z.string(), z.unknown())
  .describe('JSON object stored with the point and returned with hits. Reserved keys: "__svc_text__" (text for BM25) and "__svc_sparse__" ({indices, values}).');
const filter = z.record(z.string(), z.unknown()).describe(
  'Payload filter on fields declared filterable at creation. Conditions: {"eq":{"field":F,"value":V}}, "ne", '
  + '"gt", "gte", "lt", "lte" (numbers), {"in":{"field":F,"value":[V,...]}}; combinators {"and":[...]}, {"or":[...]}, {"not":{...}}.',
);
const k = z.number().int().describe('How many hits to return, best first (default 10, at most SVC_MAX_K).');
const efSearch = z.number().int().describe('HNSW beam width for this query (higher: better recall, slower; at most SVC_MAX_EF_SEARCH).');
const withPayload = z.boolean().describe('Return each hit\'s payload (default true).');
const withVector = z.boolean().describe('Return stored vectors too (default false).');
const consistency = z.enum(['eventual', 'strong'])
  .describe('"strong" (the default over MCP) waits until the index holds every acknowledged write; "eventual" may answer from an index that misses the latest writes.');

export const TOOL_SCHEMAS = {
  list_collections: z.strictObject({}),
  collection_info: z.strictObject({ collection }),
  database_stats: z.strictObject({}),
  create_collection: z.strictObject({
    name: z.string().describe('Name of the new collection: ^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$ without "..".').optional(),
    collection: z.string().describe('Same as `name` (give one of the two).').optional(),
    dim: z.number().int().describe('Vector dimension, fixed for the life of the collection (at most SVC_MAX_VECTOR_DIM).'),
    metric: z.enum(METRICS as [string, ...string[]]).describe('"cosine" (the default; usual for text embeddings), "dot" (inner product) or "l2" (Euclidean; lower is better).').optional(),
    index: z.enum(INDEX_KINDS as [string, ...string[]]).describe('Index family (default "hnsw"; "flat" is exact search).').optional(),
    index_params: z.strictObject({
      m: z.number().int().describe('HNSW links per node (default 16).').optional(),
      ef_construction: z.number().int().describe('HNSW build beam width (default 200).').optional(),
      ef_search: z.number().int().describe('Default query beam width.').optional(),
    }).describe('HNSW parameters; every field optional.').optional(),
    quantization: z.enum(['none', 'scalar', 'product', 'binary']).describe('Vector compression (default "none").').optional(),
    pq_subspaces: z.number().int().describe('Product-quantization subspaces (with quantization "product").').optional(),
    filterable: z.array(z.strictObject({
      path: z.string().describe('Payload field, e.g. "category" or "meta.year".'),
      field_type: z.enum(['keyword', 'numeric']).describe('"keyword" (exact match) or "numeric" (ranges).'),
    })).describe('Payload fields usable in filters; a filter on any other field is refused.').optional(),
    multivector: z.boolean().describe('true: each document is a set of token vectors ranked by MaxSim.').optional(),
    vector_encryption: z.enum(['dcpe', 'client_side']).nullable().describe('Vector encryption mode; omit or null for none.').optional(),
    exist_ok: z.boolean().describe('true: if a collection of this name and the same shape exists, return it instead of failing (a different shape still fails with already_exists).').optional(),
  }),
  delete_collection: z.strictObject({ collection: collection.describe('Collection to drop with all its points (its key is destroyed: unrecoverable).') }),
  snapshot: z.strictObject({
    name: z.string().describe('Snapshot name (same rule as a collection name; never a path). It is written under the server\'s snapshot directory.'),
  }),
  upsert: z.strictObject({
    collection,
    id: pointId.describe('One point: its id (give id and vector, or `points`).').optional(),
    vector: vector.describe('One point: its vector, exactly `dim` numbers.').optional(),
    payload: payload.optional(),
    points: z.array(z.strictObject({
      id: pointId, vector, payload: payload.optional(),
    })).describe('A batch of points to insert or replace (same id replaces); at most SVC_MAX_BATCH_SIZE. Instead of id/vector/payload.').optional(),
  }),
  search: z.strictObject({
    collection,
    vector: vector.describe('Query vector: exactly `dim` numbers.'),
    k: k.optional(), filter: filter.optional(), ef_search: efSearch.optional(),
    with_payload: withPayload.optional(), with_vector: withVector.optional(), consistency: consistency.optional(),
  }),
  fetch: z.strictObject({
    collection,
    filter: filter.optional(),
    limit: z.number().int().describe('Page size (default 100, at most SVC_MAX_FETCH_LIMIT).').optional(),
    cursor: z.string().nullable().describe('The `next_cursor` of the previous page; omit for the first page.').optional(),
    with_vector: withVector.optional(),
  }),
  count: z.strictObject({
    collection,
    filter: filter.describe('Count only the points matching this filter (fields declared filterable); omit to count every point.').optional(),
  }),
  set_payload: z.strictObject({
    collection,
    points: z.array(z.strictObject({
      id: pointId.describe('Id of an existing point.'),
      payload: payload.describe('The new payload, or the keys to set (mode "merge").'),
    })).describe('Existing points and their new payloads; at most SVC_MAX_BATCH_SIZE. If any id does not exist, nothing changes (not_found).'),
    mode: z.enum(['merge', 'replace'])
      .describe('"merge" (default): the keys given replace those keys, the others stay; "replace": the payload becomes the one given.').optional(),
  }),
  delete_points: z.strictObject({
    collection,
    ids: z.array(pointId).describe('Ids of the points to delete (at most SVC_MAX_BATCH_SIZE). Give ids or filter, not both.').optional(),
    filter: filter.describe('Delete every point matching this filter. Give ids or filter, not both.').optional(),
  }),
  get: z.strictObject({ collection, id: pointId, with_vector: withVector.optional() }),
  delete: z.strictObject({ collection, id: pointId.describe('Id of the point to delete.') }),
  upsert_document: z.strictObject({
    collection,
    id: z.string().describe('One document: its id (give id and vectors, or `documents`).').optional(),
    vectors: z.array(vector).describe('One document: its token vectors, each of `dim` numbers.').optional(),
    payload: payload.optional(),
    documents: z.array(z.strictObject({
      id: z.string().describe('Document id: a string of 1 to 256 characters.'),
      vectors: z.array(vector).describe('The document\'s token vectors, each of `dim` numbers.'),
      payload: payload.optional(),
    })).describe('A batch of multi-vector documents to insert or replace (collection created with multivector: true). Instead of id/vectors/payload.').optional(),
  }),
  search_multi_vector: z.strictObject({
    collection,
    vectors: z.array(vector).describe('Query token vectors; documents are ranked by MaxSim.'),
    k: k.optional(), filter: filter.optional(), ef_search: efSearch.optional(),
    with_payload: withPayload.optional(), with_vector: withVector.optional(), consistency: consistency.optional(),
  }),
  delete_document: z.strictObject({ collection, id: z.string().describe('Id of the multi-vector document to delete.') }),
  hybrid_search: z.strictObject({
    collection,
    vector: vector.describe('Dense query vector (optional).').optional(),
    sparse_indices: z.array(z.number().int()).describe('Sparse query: dimension ids, parallel to sparse_values.').optional(),
    sparse_values: z.array(z.number()).describe('Sparse query: weights, parallel to sparse_indices.').optional(),
    query_text: z.string().describe('Words scored with BM25 against the points\' "__svc_text__".').optional(),
    k: k.optional(), filter: filter.optional(), ef_search: efSearch.optional(),
    rrf_k0: z.number().describe('Reciprocal-rank-fusion constant (default 60).').optional(),
    with_payload: withPayload.optional(), with_vector: withVector.optional(), consistency: consistency.optional(),
  }),
  upsert_text: z.strictObject({
    collection,
    points: z.array(z.strictObject({
      id: pointId,
      text: z.string().describe('Text embedded by the collection\'s configured provider and indexed for BM25.'),
      payload: payload.optional(),
    })).describe('Text points; needs an [embedding.<collection>] provider in svc.toml.'),
  }),
  search_text: z.strictObject({
    collection,
    text: z.string().describe('Query text: embedded for dense retrieval and fused with BM25 when the collection has text.'),
    k: k.optional(), filter: filter.optional(),
    rerank: z.boolean().describe('Reorder a candidate pool with the collection\'s rerank provider (default false).').optional(),
    rerank_pool: z.number().int().describe('Candidates given to the reranker (default max(4*k, 50)).').optional(),
    with_payload: withPayload.optional(), with_vector: withVector.optional(), consistency: consistency.optional(),
  }),
} as const;

export type ToolName = keyof typeof TOOL_SCHEMAS;
export type ToolArgs<T extends ToolName> = z.infer<(typeof TOOL_SCHEMAS)[T]>;
