import { INDEX_KINDS, METRICS, QUANTIZATIONS } from '../../core/base/bodies.js';
import { DEFAULT_METRIC } from '../../core/base/model.js';

/**
 * What the route table does not say of a REST route (CONTRACT.md section 1): a one-line summary and the
 * JSON schema of its 2xx answer, for the OpenAPI document and docs/reference/rest.md (a body's fields are
 * described where the body is defined, core/base/bodies.ts). Keyed by
 * `METHOD template`, the contract's own name for a route, so a route added to REST_ROUTES finds its
 * entry by its wire address (and without one still appears, with its body, as an object answer). A route
 * whose reply has a fixed shape worth a compiled serializer carries it in the route table (`response`,
 * the search routes); that one wins. Documentation only: nothing here checks what a handler returns.
 * An entry for a route of the contract that REST_ROUTES does not have yet (points:count, points:payload,
 * points:delete) waits unused until the route lands; roles/rest/openapi.test.ts checks every answer
 * documented here against a real answer of the route.
 */
type Schema = Record<string, unknown>;

const str: Schema = { type: 'string' };
const int: Schema = { type: 'integer' };
const bool: Schema = { type: 'boolean' };
const payload: Schema = { type: 'object', description: 'any JSON object' };
const vector: Schema = { type: 'array', items: { type: 'number' } };
const obj = (properties: Record<string, Schema>, required: string[] = Object.keys(properties)): Schema => ({
  type: 'object', properties, required,
});

export const collectionInfo: Schema = obj({
  name: str,
  dim: int,
  metric: { type: 'string', enum: [...METRICS] },
  index: { type: 'string', enum: [...INDEX_KINDS] },
  index_params: obj({ m: int, ef_construction: int, ef_search: int }),
  quantization: { type: 'string', enum: [...QUANTIZATIONS] },
  pq_subspaces: { type: ['integer', 'null'] },
  filterable: { type: 'array', items: obj({ path: str, field_type: { type: 'string', enum: ['keyword', 'numeric'] } }) },
  multivector: bool,
  vector_encryption: { type: ['string', 'null'], enum: ['dcpe', 'client_side', null] },
  count: int,
  index_state: { type: 'string', enum: ['current', 'stale'] },
});

const point: Schema = obj({
  id: str,
  vector: { ...vector, description: 'with with_vector' },
  vectors: { type: 'array', items: vector, description: "a multi-vector document's token vectors, with with_vector" },
  payload,
}, ['id', 'payload']);

const upserted = obj({ upserted: int });

const stats: Schema = obj({
  collections: int,
  total_points: int,
  per_collection: {
    type: 'array',
    items: obj({ name: str, count: int, index: str, index_state: str, vector_bytes: int, graph_bytes: int }),
  },
  snapshot_status: obj({ manifest_version: int, disk_bytes: int }),
  replication: {
    type: 'object',
    description: "this node's part in replication: a leader's commit_seq, or a follower's state and applied seq",
  },
}, ['collections', 'total_points', 'per_collection', 'snapshot_status']);

const ranked: Schema = {
  type: 'array',
  items: obj({ id: str, score: { type: 'number' }, payload, vector }, ['id', 'score']),
  description: 'best first, equal scores by id (UTF-8 bytes)',
};

const textStats: Schema = obj({
  docs: int,
  total_length: { type: 'number', description: "the documents' lengths summed (a __svc_sparse__ document's: its positive weights)" },
  df: { type: 'object', additionalProperties: int, description: 'documents holding each query term, by term id' },
});

const C = '/v1/collections/{name}';

export interface RouteDoc {
  summary: string;
  /** The 2xx answer; the search routes' is the route table's `response`. */
  reply?: Schema;
}

export const ROUTE_DOCS: Readonly<Record<string, RouteDoc>> = {
  'POST /v1/collections': {
    summary: `Create a collection (metric defaults to ${DEFAULT_METRIC}, index to hnsw); 201 with its info`,
    reply: collectionInfo,
  },
  'GET /v1/collections': { summary: 'List the collections the key may see', reply: obj({ collections: { type: 'array', items: collectionInfo } }) },
  [`GET ${C}`]: { summary: 'One collection\'s info', reply: collectionInfo },
  [`DELETE ${C}`]: { summary: 'Drop a collection and destroy its key (its data is unrecoverable)', reply: obj({ existed: bool }) },
  [`PUT ${C}/points`]: { summary: 'Insert or replace points (at most SVC_MAX_BATCH_SIZE)', reply: upserted },
  [`POST ${C}/points:bulk`]: {
    summary: 'Bulk insert or replace (at most SVC_MAX_BULK_BATCH_SIZE); a vector may be vector_b64, base64 of little-endian float32',
    reply: upserted,
  },
  [`GET ${C}/points/{id}`]: { summary: 'One point by id (query with_vector=true for its vector)', reply: point },
  [`DELETE ${C}/points/{id}`]: { summary: 'Delete one point', reply: obj({ deleted: bool }) },
  [`POST ${C}/points:fetch`]: { summary: 'Page through points by filter, unranked (limit default 100)', reply: obj({ points: { type: 'array', items: point }, next_cursor: { type: ['string', 'null'] } }) },
  [`POST ${C}/query`]: { summary: 'Nearest neighbours of a vector (k default 10), with an optional filter' },
  [`POST ${C}/query/hybrid`]: { summary: 'Dense and sparse (or query_text, BM25) rankings fused by RRF (rrf_k0 default 60)' },
  [`POST ${C}/points:text`]: { summary: 'Insert texts, embedded by the collection\'s provider and indexed for BM25', reply: upserted },
  [`POST ${C}/query/text`]: { summary: 'Search by text: embedded query fused with BM25, optionally reranked' },
  [`PUT ${C}/documents`]: { summary: 'Insert or replace multi-vector documents', reply: upserted },
  [`POST ${C}/query/multi`]: { summary: 'Multi-vector (MaxSim) search' },
  [`DELETE ${C}/documents/{id}`]: { summary: 'Delete one multi-vector document', reply: obj({ deleted: bool }) },
  [`POST ${C}/points:count`]: { summary: 'Count points, optionally by filter', reply: obj({ count: int }) },
  [`POST ${C}/points:payload`]: { summary: 'Update payloads without resending vectors (mode merge or replace), all or nothing', reply: obj({ updated: int }) },
  [`POST ${C}/points:delete`]: { summary: 'Delete points by ids or by filter', reply: obj({ deleted: int }) },
  [`POST ${C}/query/rankings`]: {
    summary: 'Internal: what a router asks of its shards (REST only, not on gRPC or MCP). A hybrid or text query\'s rankings before fusion, depth deep; BM25 over text_stats when given',
    reply: obj({ dense: ranked, sparse: ranked, text: ranked }, []),
  },
  [`POST ${C}/query/text-stats`]: {
    summary: 'Internal: what a router asks of its shards (REST only, not on gRPC or MCP). BM25 statistics of a query text\'s terms over this node\'s part of the collection',
    reply: textStats,
  },
  'POST /v1/cluster/move/batch': {
    summary: 'Internal: a coordinator\'s rebalance step (admin key scoped to *; REST only; on a consensus group, run by its leader: a follower forwards it). Holds this node\'s point writes and answers the next batch of points it does not own in targets, as logical records, with a token and a lease; {done: true} once nothing is left',
    reply: {
      type: 'object',
      properties: {
        done: bool, move: str, token: str, collection: str, params: { type: 'object' }, cursor: str,
        records: { type: 'array', items: str }, deletes: { type: 'array', items: str }, count: int, bytes: int, lease_ms: int,
      },
      required: ['done', 'move'],
    },
  },
  'POST /v1/cluster/move/commit': {
    summary: 'Internal: a rebalance batch\'s points leave this node and the move\'s cursor advances, in one WAL record (on a consensus group, one command of its log); writes flow again. A token this node holds no lease for is answered from the cursor: {moved: 0} when that batch was committed, else 404',
    reply: obj({ moved: int }),
  },
  'POST /v1/cluster/move/apply': {
    summary: 'Internal: a rebalance batch\'s logical records written here (the collection created with params when missing), and ids to delete',
    reply: obj({ applied: int, deleted: int }),
  },
  'GET /v1/stats': { summary: 'Database overview, limited to the key\'s collections', reply: stats },
  'POST /v1/snapshots': { summary: 'Consistent online backup of the whole database under the snapshot root', reply: obj({ name: str, path: str, manifest_version: int, disk_bytes: int }) },
};
