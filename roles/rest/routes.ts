import { collectionExisted, type CollectionInfo } from '../../core/base/model.js';
import type { CallContext, OperationName } from '../../core/service/api.js';
import type { Service } from '../../core/service/service.js';
import * as s from './schemas.js';
import * as m from './schemas-move.js';

/**
 * Every REST route of CONTRACT.md section 1, in one table: the template (also the metrics label), the
 * service operation (whose role is in core/service/roles.ts), the body schema and the call.
 */
export interface RouteRequest {
  params: Record<string, string>;
  body: any;
  query: Record<string, string | undefined>;
}

export interface RestRoute {
  method: 'GET' | 'POST' | 'PUT' | 'DELETE';
  template: string;
  op: OperationName;
  status?: number;
  /** The status of a success when it depends on the result (a create answered by exist_ok: 200). */
  statusOf?(result: unknown): number;
  body?: Record<string, unknown>;
  query?: Record<string, unknown>;
  /** The reply's JSON schema, when the route's reply has a fixed shape worth a compiled serializer. */
  response?: Record<string, unknown>;
  /** A search route: answered by the hot path (hot-path.ts) over HTTP, by fastify under inject and as fallback. */
  hot?: true;
  /** The collection the scope check applies to, read before the body is validated. */
  collection(req: RouteRequest): unknown;
  call(svc: Service, ctx: CallContext, req: RouteRequest): Promise<unknown>;
}

const C = '/v1/collections/{name}';
const byPath = (req: RouteRequest): unknown => req.params.name;
const none = (): undefined => undefined;

export const REST_ROUTES: readonly RestRoute[] = [
  { method: 'POST', template: '/v1/collections', op: 'createCollection', status: 201, body: s.createCollectionBody,
    statusOf: (info) => (collectionExisted(info as CollectionInfo) ? 200 : 201),
    collection: (r) => (r.body as { name?: unknown } | undefined)?.name, call: (v, c, r) => v.createCollection(c, r.body) },
  { method: 'GET', template: '/v1/collections', op: 'listCollections', collection: none, call: (v, c) => v.listCollections(c) },
  { method: 'GET', template: C, op: 'collectionInfo', collection: byPath, call: (v, c, r) => v.collectionInfo(c, r.params.name) },
  { method: 'DELETE', template: C, op: 'deleteCollection', collection: byPath, call: (v, c, r) => v.deleteCollection(c, r.params.name) },
  { method: 'PUT', template: `${C}/points`, op: 'upsert', body: s.upsertBody, collection: byPath, call: (v, c, r) => v.upsert(c, r.params.name, r.body) },
  { method: 'POST', template: `${C}/points:bulk`, op: 'bulkUpsert', body: s.bulkBody, collection: byPath, call: (v, c, r) => v.bulkUpsert(c, r.params.name, r.body) },
  { method: 'GET', template: `${C}/points/{id}`, op: 'get', query: s.getPointQuery, collection: byPath,
    call: (v, c, r) => v.get(c, r.params.name, r.params.id, { with_vector: r.query.with_vector === 'true' }) },
  { method: 'DELETE', template: `${C}/points/{id}`, op: 'delete', collection: byPath, call: (v, c, r) => v.delete(c, r.params.name, r.params.id) },
  { method: 'POST', template: `${C}/points:fetch`, op: 'fetch', body: s.fetchBody, collection: byPath, call: (v, c, r) => v.fetch(c, r.params.name, r.body ?? {}) },
  { method: 'POST', template: `${C}/points:count`, op: 'count', body: s.countBody, collection: byPath, call: (v, c, r) => v.count(c, r.params.name, r.body ?? {}) },
  { method: 'POST', template: `${C}/points:payload`, op: 'setPayload', body: s.setPayloadBody, collection: byPath, call: (v, c, r) => v.setPayload(c, r.params.name, r.body) },
  { method: 'POST', template: `${C}/points:delete`, op: 'deletePoints', body: s.deletePointsBody, collection: byPath, call: (v, c, r) => v.deletePoints(c, r.params.name, r.body) },
  { method: 'POST', template: `${C}/query`, op: 'search', hot: true, body: s.queryBody, response: s.hitsReply, collection: byPath, call: (v, c, r) => v.search(c, r.params.name, r.body) },
  { method: 'POST', template: `${C}/query/hybrid`, op: 'hybridSearch', hot: true, body: s.hybridBody, response: s.hitsReply, collection: byPath, call: (v, c, r) => v.hybridSearch(c, r.params.name, r.body) },
  { method: 'POST', template: `${C}/points:text`, op: 'upsertText', body: s.textPointsBody, collection: byPath, call: (v, c, r) => v.upsertText(c, r.params.name, r.body) },
  { method: 'POST', template: `${C}/query/text`, op: 'searchText', hot: true, body: s.textQueryBody, response: s.hitsReply, collection: byPath, call: (v, c, r) => v.searchText(c, r.params.name, r.body) },
  { method: 'PUT', template: `${C}/documents`, op: 'upsertDocuments', body: s.documentsBody, collection: byPath, call: (v, c, r) => v.upsertDocuments(c, r.params.name, r.body) },
  { method: 'POST', template: `${C}/query/multi`, op: 'searchMultiVector', hot: true, body: s.multiQueryBody, response: s.hitsReply, collection: byPath, call: (v, c, r) => v.searchMultiVector(c, r.params.name, r.body) },
  { method: 'DELETE', template: `${C}/documents/{id}`, op: 'deleteDocument', collection: byPath, call: (v, c, r) => v.deleteDocument(c, r.params.name, r.params.id) },
  // Internal: what a router asks of its shards for hybrid and text queries (docs/cluster.md, Router).
  { method: 'POST', template: `${C}/query/rankings`, op: 'rankings', body: s.rankingsBody, collection: byPath, call: (v, c, r) => v.rankings(c, r.params.name, r.body) },
  { method: 'POST', template: `${C}/query/text-stats`, op: 'textStats', body: s.textStatsBody, collection: byPath, call: (v, c, r) => v.textStats(c, r.params.name, r.body) },
  // Internal: a coordinator's rebalance steps (docs/cluster.md, Rebalancing).
  { method: 'POST', template: '/v1/cluster/move/batch', op: 'moveBatch', body: m.moveBatchBody, collection: none, call: (v, c, r) => v.moveBatch(c, r.body) },
  { method: 'POST', template: '/v1/cluster/move/commit', op: 'moveCommit', body: m.moveCommitBody, collection: none, call: (v, c, r) => v.moveCommit(c, r.body) },
  { method: 'POST', template: '/v1/cluster/move/apply', op: 'moveApply', body: m.moveApplyBody, collection: none, call: (v, c, r) => v.moveApply(c, r.body) },
  { method: 'GET', template: '/v1/stats', op: 'stats', collection: none, call: (v, c) => v.stats(c) },
  { method: 'POST', template: '/v1/snapshots', op: 'snapshot', body: s.snapshotBody, collection: none, call: (v, c, r) => v.snapshot(c, r.body) },
];

/** `/v1/collections/{name}/points:bulk` -> `/v1/collections/:name/points::bulk` (fastify's syntax). */
export function fastifyPath(template: string): string {
  return template.replace(/:/g, '::').replace(/\{(\w+)\}/g, ':$1');
}
