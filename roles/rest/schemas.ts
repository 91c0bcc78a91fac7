import { INDEX_KINDS, METRICS } from '../../core/base/model.js';

/**
 * One JSON schema per REST body (CONTRACT.md section 1). fastify validates with them (no coercion, no
 * removal of unknown fields: an unknown field is a 400). Deep checks (dimension, limits, filter shape,
 * names) belong to the engine, which applies them on every transport.
 */
type Schema = Record<string, unknown>;

const obj = (properties: Record<string, Schema>, required: string[] = []): Schema => ({
  type: 'object', additionalProperties: false, properties, required,
});
const str: Schema = { type: 'string' };
const int: Schema = { type: 'integer' };
const num: Schema = { type: 'number' };
const bool: Schema = { type: 'boolean' };
const payload: Schema = { type: 'object' };
const filter: Schema = { type: 'object' };
const vector: Schema = { type: 'array', items: num };
const consistency: Schema = { type: 'string', enum: ['eventual', 'strong'] };

/** `metric` defaults to `cosine` (DEFAULT_METRIC), as in the embedded API, MCP and gRPC. */
export const createCollectionBody = obj({
  name: str, dim: int, metric: { type: 'string', enum: [...METRICS] },
  index: { type: 'string', enum: [...INDEX_KINDS] },
  index_params: obj({ m: int, ef_construction: int, ef_search: int }),
  quantization: { type: 'string', enum: ['none', 'scalar', 'product', 'binary'] },
  pq_subspaces: int,
  filterable: { type: 'array', items: obj({ path: str, field_type: { type: 'string', enum: ['keyword', 'numeric'] } }, ['path', 'field_type']) },
  multivector: bool,
  vector_encryption: { anyOf: [{ type: 'string', enum: ['dcpe', 'client_side'] }, { type: 'null' }] },
  exist_ok: bool,
}, ['name', 'dim']);

export const upsertBody = obj({ points: { type: 'array', items: obj({ id: str, vector, payload }, ['id', 'vector']) } }, ['points']);

export const bulkBody = obj({
  points: {
    type: 'array',
    items: {
      ...obj({ id: str, vector, vector_b64: str, payload }, ['id']),
      oneOf: [{ required: ['vector'] }, { required: ['vector_b64'] }],
    },
  },
}, ['points']);

export const countBody = obj({ filter });

export const setPayloadBody = obj({
  points: { type: 'array', items: obj({ id: str, payload }, ['id', 'payload']) },
  mode: { type: 'string', enum: ['merge', 'replace'] },
}, ['points']);

export const deletePointsBody = obj({ ids: { type: 'array', items: str }, filter });

export const fetchBody = obj({ filter, limit: int, cursor: { type: ['string', 'null'] }, with_vector: bool, consistency });

export const queryBody = obj({
  vector, k: int, filter, ef_search: int, with_payload: bool, with_vector: bool, consistency,
}, ['vector']);

export const hybridBody = obj({
  vector, sparse_indices: { type: 'array', items: int }, sparse_values: vector, query_text: str, k: int, filter,
  ef_search: int, rrf_k0: num, with_payload: bool, with_vector: bool, consistency,
});

/**
 * Internal (what a router asks of its shards): a hybrid body's query fields without k and rrf_k0, how
 * deep each ranking goes, and the whole collection's BM25 statistics to score query_text against.
 */
export const rankingsBody = obj({
  vector, sparse_indices: { type: 'array', items: int }, sparse_values: vector, query_text: str, filter,
  ef_search: int, with_payload: bool, with_vector: bool, consistency, depth: int,
  text_stats: {
    anyOf: [
      obj({ docs: int, total_length: int, df: { type: 'object', additionalProperties: int } }, ['docs', 'total_length', 'df']),
      { type: 'null' },
    ],
  },
});

/** Internal: the BM25 statistics of a query text's terms. */
export const textStatsBody = obj({ text: str }, ['text']);

export const textPointsBody = obj({ points: { type: 'array', items: obj({ id: str, text: str, payload }, ['id', 'text']) } }, ['points']);

export const textQueryBody = obj({
  text: str, k: int, filter, rerank: bool, rerank_pool: int, with_payload: bool, with_vector: bool, consistency,
}, ['text']);

export const documentsBody = obj({
  documents: { type: 'array', items: obj({ id: str, vectors: { type: 'array', items: vector }, payload }, ['id', 'vectors']) },
}, ['documents']);

export const multiQueryBody = obj({
  vectors: { type: 'array', items: vector }, k: int, filter, with_payload: bool, consistency,
}, ['vectors']);

export const snapshotBody = obj({ name: str }, ['name']);

export const getPointQuery = obj({ with_vector: { type: 'string', enum: ['true', 'false'] } });

/**
 * The reply of every search route, `{"hits":[{id, rank, score, ...}]}`, for fast-json-stringify. It
 * names the fields it types and passes every other one through as JSON.stringify would (payloads are
 * any JSON; vectors of floats; fields a later engine adds), so the bytes are those of JSON.stringify.
 */
const any: Schema = {};
export const hitsReply: Schema = {
  type: 'object',
  additionalProperties: true,
  properties: {
    hits: {
      type: 'array',
      items: {
        type: 'object',
        additionalProperties: true,
        properties: { id: str, rank: int, score: num, payload: any, vector: { type: 'array', items: num }, vectors: any },
      },
    },
  },
};
