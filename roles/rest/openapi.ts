import { ERROR_CODES } from '../../core/base/errors.js';
import { NAME_PATTERN, POINT_ID_MAX_LENGTH } from '../../core/base/names.js';
import { HTTP_STATUS } from '../../core/service/http-status.js';
import { OPERATION_POLICIES, type OperationPolicy } from '../../core/service/roles.js';
import { ROUTE_DOCS } from './route-docs.js';
import { REST_ROUTES, type RestRoute } from './routes.js';

/**
 * The OpenAPI 3.1 document of the REST API, generated from the route table (routes.ts), its body schemas
 * (schemas.ts, the ones fastify validates with, derived with their field descriptions from the one
 * schema of each body, core/base/bodies.ts), the role table (core/service/roles.ts) and the error
 * table (core/service/http-status.ts): nothing in it is written twice, and a route added to REST_ROUTES
 * appears in it, with its body, without touching this file (STYLE.md habit 10).
 *
 * `GET /openapi.json` serves it without a key, as CONTRACT.md section 1 says: it describes only what the
 * source code already says. It holds nothing of a deployment (no address, no limits, no collection names,
 * no key names, not even the package version), so the same bytes are served by every svc of this build
 * to anyone, and an open port tells no more than the repository does.
 */
type Schema = Record<string, unknown>;

export const OPENAPI_PATH = '/openapi.json';

/** The routes outside the table, answered without a key (registered by hand in server.ts). */
export interface OpenRoute {
  method: 'GET';
  template: string;
  summary: string;
  contentType: string;
  reply: Schema;
}

const statusOk: Schema = { type: 'object', properties: { status: { const: 'ok' } }, required: ['status'] };

export const OPEN_ROUTES: readonly OpenRoute[] = [
  { method: 'GET', template: '/healthz', summary: 'Liveness: 200 while the process serves', contentType: 'application/json', reply: statusOk },
  {
    method: 'GET', template: '/readyz', summary: 'Readiness: 503 not_ready until the storage is open and the indexes are loaded, and while a consensus member restores a snapshot',
    contentType: 'application/json', reply: statusOk,
  },
  { method: 'GET', template: '/metrics', summary: 'Prometheus metrics (text exposition format)', contentType: 'text/plain', reply: { type: 'string' } },
  {
    method: 'GET', template: OPENAPI_PATH, summary: 'This document: the OpenAPI 3.1 description of the REST API, generated from its route table',
    contentType: 'application/json', reply: { type: 'object' },
  },
];

export const routeKey = (r: { method: string; template: string }): string => `${r.method} ${r.template}`;

const clone = <T>(v: T): T => JSON.parse(JSON.stringify(v)) as T;

const SCOPE_TEXT: Readonly<Record<OperationPolicy['collection'], string>> = {
  arg: 'cover the collection in the path',
  'params.name': 'cover the collection named in the body',
  none: 'may be any (the answer holds only the collections in scope)',
  all: 'must be `*` (it reaches every collection)',
};

const PATH_PARAMS: Readonly<Record<string, { description: string; schema: Schema }>> = {
  name: { description: 'collection name (never `..`)', schema: { type: 'string', pattern: NAME_PATTERN } },
  id: { description: 'point or document id', schema: { type: 'string', minLength: 1, maxLength: POINT_ID_MAX_LENGTH } },
};

function tagOf(template: string): string {
  if (template.includes('/query')) return 'search';
  if (template.includes('/documents')) return 'documents';
  if (template.includes('/points')) return 'points';
  if (template.startsWith('/v1/collections')) return 'collections';
  return 'database';
}

function pathParameters(template: string): Schema[] {
  return [...template.matchAll(/\{(\w+)\}/g)].map(([, name]) => ({
    name, in: 'path', required: true,
    description: PATH_PARAMS[name]?.description ?? name,
    schema: clone(PATH_PARAMS[name]?.schema ?? { type: 'string' }),
  }));
}

function queryParameters(query: Schema | undefined): Schema[] {
  if (query === undefined) return [];
  const required = new Set((query.required as string[] | undefined) ?? []);
  return Object.entries((query.properties ?? {}) as Record<string, Schema>)
    .map(([name, schema]) => ({ name, in: 'query', required: required.has(name), schema: clone(schema) }));
}

const ERROR_RESPONSE = { $ref: '#/components/responses/Error' };

/** The 2xx answer's schema: the route table's serializer schema, else the documented reply. */
export function replySchema(r: RestRoute): Schema {
  return r.response ?? ROUTE_DOCS[routeKey(r)]?.reply ?? { type: 'object' };
}

function operation(r: RestRoute): Schema {
  const policy = OPERATION_POLICIES[r.op];
  const status = r.status ?? 200;
  const required = (r.body?.required as string[] | undefined) ?? [];
  return {
    operationId: r.op,
    summary: ROUTE_DOCS[routeKey(r)]?.summary ?? r.op,
    description: `Needs a key of role \`${policy.role}\` or above, whose scopes ${SCOPE_TEXT[policy.collection]}.${policy.audited ? ' Written to the audit log.' : ''}`,
    tags: [tagOf(r.template)],
    parameters: [...pathParameters(r.template), ...queryParameters(r.query)],
    ...(r.body ? { requestBody: { required: required.length > 0, content: { 'application/json': { schema: clone(r.body) } } } } : {}),
    responses: {
      [String(status)]: { description: 'success', content: { 'application/json': { schema: clone(replySchema(r)) } } },
      default: ERROR_RESPONSE,
    },
    'x-svc-role': policy.role,
  };
}

function openOperation(r: OpenRoute): Schema {
  const id = r.template.replace(/^\//, '').replace(/\W+(\w)/g, (_m, c: string) => c.toUpperCase()).replace(/\W/g, '');
  return {
    operationId: id,
    summary: r.summary,
    description: 'Open: no key needed.',
    tags: ['operations'],
    security: [],
    responses: {
      200: { description: 'success', content: { [r.contentType]: { schema: clone(r.reply) } } },
      default: ERROR_RESPONSE,
    },
  };
}

/** The error body, and which status each contract code is answered with. */
function errorComponent(): { schema: Schema; description: string } {
  const byStatus = new Map<number, string[]>();
  for (const code of ERROR_CODES) byStatus.set(HTTP_STATUS[code], [...(byStatus.get(HTTP_STATUS[code]) ?? []), code]);
  const table = [...byStatus.entries()].sort(([a], [b]) => a - b).map(([s, codes]) => `${s}: ${codes.join(', ')}`).join('; ');
  return {
    description: `The error body of CONTRACT.md section 2, on every failure. Status by code: ${table}.`,
    schema: {
      type: 'object', required: ['error'],
      properties: {
        error: {
          type: 'object', required: ['code', 'message'],
          properties: { code: { type: 'string', enum: [...ERROR_CODES] }, message: { type: 'string' } },
        },
      },
    },
  };
}

export function openApiDocument(routes: readonly RestRoute[] = REST_ROUTES): Schema {
  const paths: Record<string, Record<string, Schema>> = {};
  for (const r of routes) (paths[r.template] ??= {})[r.method.toLowerCase()] = operation(r);
  for (const r of OPEN_ROUTES) (paths[r.template] ??= {})[r.method.toLowerCase()] = openOperation(r);
  const error = errorComponent();
  return {
    openapi: '3.1.0',
    info: {
      title: 'svc REST API',
      version: 'v1',
      summary: 'A vector database: collections of vectors with JSON payloads; dense, filtered, hybrid, text and multi-vector search',
      description: 'Generated from the REST route table of svc (roles/rest/routes.ts) and the one schema of each body (core/base/bodies.ts). '
        + 'Every route but the open ones needs `authorization: Bearer <key>`; a request body is JSON, and a field the schema does not list is refused.',
      license: { name: 'Apache-2.0', identifier: 'Apache-2.0' },
    },
    security: [{ bearer: [] }],
    tags: [
      { name: 'collections' }, { name: 'points' }, { name: 'search' }, { name: 'documents', description: 'multi-vector documents' },
      { name: 'database' }, { name: 'operations', description: 'open routes: health, readiness, metrics, this document' },
    ],
    paths,
    components: {
      securitySchemes: { bearer: { type: 'http', scheme: 'bearer', description: 'an API key (SVC_API_KEYS or [[api_keys]] in svc.toml)' } },
      schemas: { Error: error.schema },
      responses: { Error: { description: error.description, content: { 'application/json': { schema: { $ref: '#/components/schemas/Error' } } } } },
    },
  };
}
