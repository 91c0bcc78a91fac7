import { BODIES, jsonSchemaOf } from '../../core/base/bodies.js';

/**
 * The JSON schema of every REST body (CONTRACT.md section 1), derived from the one schema of each body
 * (core/base/bodies.ts), which MCP, the engine and the embedded API derive from too. fastify validates
 * with them (no coercion, no removal of unknown fields: an unknown field is a 400, and named). Deep
 * checks (dimension, limits, filter shape, names) belong to the engine, which applies them on every transport.
 */
type Schema = Record<string, unknown>;

export const createCollectionBody = jsonSchemaOf(BODIES.createCollection);
export const upsertBody = jsonSchemaOf(BODIES.upsert);
export const bulkBody = jsonSchemaOf(BODIES.bulkUpsert);
export const countBody = jsonSchemaOf(BODIES.count);
export const setPayloadBody = jsonSchemaOf(BODIES.setPayload);
export const deletePointsBody = jsonSchemaOf(BODIES.deletePoints);
export const fetchBody = jsonSchemaOf(BODIES.fetch);
export const queryBody = jsonSchemaOf(BODIES.search);
export const hybridBody = jsonSchemaOf(BODIES.hybridSearch);
/** Internal: what a router asks of its shards for hybrid and text queries. */
export const rankingsBody = jsonSchemaOf(BODIES.rankings);
/** Internal: the BM25 statistics of a query text's terms. */
export const textStatsBody = jsonSchemaOf(BODIES.textStats);
export const textPointsBody = jsonSchemaOf(BODIES.upsertText);
export const textQueryBody = jsonSchemaOf(BODIES.searchText);
export const documentsBody = jsonSchemaOf(BODIES.upsertDocuments);
export const multiQueryBody = jsonSchemaOf(BODIES.searchMultiVector);
export const snapshotBody = jsonSchemaOf(BODIES.snapshot);

/** `get`'s options as a query string: each boolean as the word `true` or `false`. */
export const getPointQuery: Schema = {
  type: 'object',
  additionalProperties: false,
  properties: Object.fromEntries(Object.keys(BODIES.get.shape).map((k) => [k, { type: 'string', enum: ['true', 'false'] }])),
};

const str: Schema = { type: 'string' };
const int: Schema = { type: 'integer' };
const num: Schema = { type: 'number' };

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
