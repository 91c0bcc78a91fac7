import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Ajv2020 } from 'ajv/dist/2020.js';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { DEFAULT_LIMITS } from '../../core/base/limits.js';
import { openDatabase, type Database } from '../../core/embedded.js';
import { silentLogger } from '../../core/service/log.js';
import { createService } from '../../core/service/service.js';
import { createPromMetrics } from './metrics.js';
import { OPEN_ROUTES, OPENAPI_PATH, openApiDocument, replySchema, routeKey } from './openapi.js';
import { ROUTE_DOCS } from './route-docs.js';
import { REST_ROUTES, type RestRoute } from './routes.js';
import { buildRestApp } from './server.js';

type Json = Record<string, any>;

/**
 * No OpenAPI validator is among the dependencies, so the structure OpenAPI 3.1.0 requires is checked
 * here (the fields each object must or may have, path templates against their parameters, unique
 * operation ids, every $ref and security scheme defined), and every schema in the document is compiled
 * as JSON Schema 2020-12, the dialect of OpenAPI 3.1, in ajv's strict mode.
 */
const METHODS = ['get', 'put', 'post', 'delete', 'options', 'head', 'patch', 'trace'];
const ROOT_FIELDS = ['openapi', 'info', 'jsonSchemaDialect', 'servers', 'paths', 'webhooks', 'components', 'security', 'tags', 'externalDocs'];
const OPERATION_FIELDS = ['tags', 'summary', 'description', 'externalDocs', 'operationId', 'parameters', 'requestBody', 'responses', 'callbacks', 'deprecated', 'security', 'servers'];
const PATH_ITEM_FIELDS = ['$ref', 'summary', 'description', 'servers', 'parameters', ...METHODS];

function openApiProblems(doc: Json): string[] {
  const problems: string[] = [];
  const fail = (where: string, what: string) => problems.push(`${where}: ${what}`);
  const isObj = (v: unknown): v is Json => typeof v === 'object' && v !== null && !Array.isArray(v);
  const onlyFields = (where: string, o: Json, allowed: string[]) => {
    for (const k of Object.keys(o)) if (!allowed.includes(k) && !k.startsWith('x-')) fail(where, `unknown field ${k}`);
  };
  // strictRequired is a lint (a `required` inside oneOf names properties declared beside it), not validity.
  const ajv = new Ajv2020({ strict: true, strictRequired: false, allErrors: true });
  const schemaOk = (where: string, schema: unknown) => {
    if (!isObj(schema)) return fail(where, 'schema is not an object');
    if ('$ref' in schema) return resolve(where, schema.$ref);
    try {
      ajv.compile(schema);
    } catch (e) {
      fail(where, `not a valid JSON Schema 2020-12: ${(e as Error).message}`);
    }
  };
  const resolve = (where: string, ref: unknown) => {
    if (typeof ref !== 'string' || !ref.startsWith('#/')) return fail(where, `$ref ${String(ref)} is not local`);
    let at: unknown = doc;
    for (const part of ref.slice(2).split('/')) at = isObj(at) ? at[part.replace(/~1/g, '/').replace(/~0/g, '~')] : undefined;
    if (at === undefined) fail(where, `$ref ${ref} does not resolve`);
  };
  const content = (where: string, c: unknown) => {
    if (!isObj(c)) return fail(where, 'content must be a map of media types');
    for (const [media, m] of Object.entries(c)) {
      if (!/^[\w.+-]+\/[\w.+*-]+$/.test(media)) fail(where, `bad media type ${media}`);
      if (!isObj(m)) fail(`${where} ${media}`, 'media type object is not an object');
      else if (m.schema !== undefined) schemaOk(`${where} ${media}`, m.schema);
    }
  };

  if (typeof doc.openapi !== 'string' || !/^3\.1\.\d+$/.test(doc.openapi)) fail('openapi', 'must be 3.1.x');
  onlyFields('root', doc, ROOT_FIELDS);
  if (!isObj(doc.info) || typeof doc.info.title !== 'string' || typeof doc.info.version !== 'string') fail('info', 'needs title and version strings');
  if (isObj(doc.info?.license) && (typeof doc.info.license.name !== 'string' || ('identifier' in doc.info.license && 'url' in doc.info.license))) {
    fail('info.license', 'needs a name, and not both identifier and url');
  }
  if (!isObj(doc.paths)) fail('paths', 'missing');
  const schemes = isObj(doc.components?.securitySchemes) ? doc.components.securitySchemes : {};
  for (const [name, s] of Object.entries(schemes as Json)) {
    if (!['apiKey', 'http', 'mutualTLS', 'oauth2', 'openIdConnect'].includes(s.type)) fail(`securityScheme ${name}`, 'bad type');
    if (s.type === 'http' && typeof s.scheme !== 'string') fail(`securityScheme ${name}`, 'http needs a scheme');
  }
  const security = (where: string, reqs: unknown) => {
    if (!Array.isArray(reqs)) return fail(where, 'security must be a list');
    for (const r of reqs) for (const k of Object.keys(r)) if (!(k in schemes)) fail(where, `security scheme ${k} is not defined`);
  };
  if (doc.security !== undefined) security('security', doc.security);
  for (const [name, s] of Object.entries((doc.components?.schemas ?? {}) as Json)) schemaOk(`components.schemas.${name}`, s);
  for (const [name, r] of Object.entries((doc.components?.responses ?? {}) as Json)) {
    if (typeof r.description !== 'string') fail(`components.responses.${name}`, 'needs a description');
    if (r.content !== undefined) content(`components.responses.${name}`, r.content);
  }

  const ids = new Set<string>();
  const shapes = new Set<string>();
  for (const [path, item] of Object.entries((doc.paths ?? {}) as Json)) {
    if (!path.startsWith('/')) fail(path, 'a path must start with /');
    const shape = path.replace(/\{[^}]+\}/g, '{}');
    if (shapes.has(shape)) fail(path, 'same template as another path');
    shapes.add(shape);
    onlyFields(path, item, PATH_ITEM_FIELDS);
    const templated = [...path.matchAll(/\{([^}]+)\}/g)].map((m) => m[1]);
    for (const method of METHODS.filter((m) => m in item)) {
      const op = item[method] as Json;
      const where = `${method.toUpperCase()} ${path}`;
      onlyFields(where, op, OPERATION_FIELDS);
      if (typeof op.operationId === 'string') {
        if (ids.has(op.operationId)) fail(where, `operationId ${op.operationId} is used twice`);
        ids.add(op.operationId);
      }
      const params = (op.parameters ?? []) as Json[];
      const seen = new Set<string>();
      for (const p of params) {
        if (typeof p.name !== 'string' || !['query', 'header', 'path', 'cookie'].includes(p.in)) fail(where, 'a parameter needs a name and a valid in');
        if (seen.has(`${p.in}:${p.name}`)) fail(where, `parameter ${p.name} twice`);
        seen.add(`${p.in}:${p.name}`);
        if (p.in === 'path' && p.required !== true) fail(where, `path parameter ${p.name} must be required`);
        if (('schema' in p) === ('content' in p)) fail(where, `parameter ${p.name} needs exactly one of schema and content`);
        if (p.schema !== undefined) schemaOk(`${where} parameter ${p.name}`, p.schema);
      }
      const inPath = params.filter((p) => p.in === 'path').map((p) => p.name).sort();
      if (JSON.stringify(inPath) !== JSON.stringify([...templated].sort())) fail(where, `path parameters ${inPath} do not match the template's ${templated}`);
      if (op.requestBody !== undefined) {
        if (!isObj(op.requestBody) || !isObj(op.requestBody.content)) fail(where, 'requestBody needs content');
        else content(`${where} requestBody`, op.requestBody.content);
      }
      if (!isObj(op.responses) || Object.keys(op.responses).length === 0) fail(where, 'needs responses');
      for (const [code, r] of Object.entries((op.responses ?? {}) as Json)) {
        if (code !== 'default' && !/^[1-5](\d\d|XX)$/.test(code)) fail(where, `bad response key ${code}`);
        if ('$ref' in r) resolve(`${where} ${code}`, r.$ref);
        else {
          if (typeof r.description !== 'string') fail(`${where} ${code}`, 'a response needs a description');
          if (r.content !== undefined) content(`${where} ${code}`, r.content);
        }
      }
      if (op.security !== undefined) security(where, op.security);
    }
  }
  return problems;
}

const doc = openApiDocument() as Json;


describe('the OpenAPI document', () => {
  it('is structurally valid OpenAPI 3.1', () => {
    expect(openApiProblems(doc)).toEqual([]);
    // The checker itself sees a broken document.
    const broken = JSON.parse(JSON.stringify(doc)) as Json;
    broken.openapi = '3.0.3';
    broken.paths['/v1/collections/{name}'].get.parameters = [];
    broken.paths['/v1/collections'].post.requestBody.content['application/json'].schema = { type: 'objekt' };
    broken.paths['/healthz'].get.responses.default = { $ref: '#/components/responses/Nope' };
    expect(openApiProblems(broken)).toHaveLength(4);
  });

  it('lists every route of the table with its method, body schema, query, role and answer', () => {
    for (const r of REST_ROUTES) {
      const op = doc.paths[r.template]?.[r.method.toLowerCase()] as Json | undefined;
      expect(op, `${routeKey(r)} is missing`).toBeDefined();
      expect(op!.operationId).toBe(r.op);
      // The body schema fastify validates with, descriptions included (both come from core/base/bodies.ts).
      if (r.body) expect(op!.requestBody.content['application/json'].schema).toEqual(r.body);
      else expect(op!.requestBody).toBeUndefined();
      expect(op!.parameters.filter((p: Json) => p.in === 'query').map((p: Json) => p.name)).toEqual(Object.keys((r.query?.properties ?? {}) as Json));
      expect(op!.responses[String(r.status ?? 200)].content['application/json'].schema).toEqual(replySchema(r));
    }
    const listed = Object.entries(doc.paths as Json).flatMap(([p, item]) => Object.keys(item).map((m) => `${m.toUpperCase()} ${p}`));
    expect(listed.sort()).toEqual([...REST_ROUTES, ...OPEN_ROUTES].map(routeKey).sort());
  });

  it('every route of the table has a summary, and an answer schema of its own or in route-docs.ts', () => {
    for (const r of REST_ROUTES) {
      expect(ROUTE_DOCS[routeKey(r)]?.summary, `add ${routeKey(r)} to roles/rest/route-docs.ts`).toBeTruthy();
      expect(r.response ?? ROUTE_DOCS[routeKey(r)]?.reply, `document the answer of ${routeKey(r)} in roles/rest/route-docs.ts`).toBeDefined();
    }
  });

  it('a route added to the table appears by itself', () => {
    const extra: RestRoute = {
      method: 'POST', template: '/v1/collections/{name}/points:frobnicate', op: 'fetch', body: { type: 'object', properties: { x: { type: 'integer' } } },
      collection: () => undefined, call: async () => ({}),
    };
    const grown = openApiDocument([...REST_ROUTES, extra]) as Json;
    expect(grown.paths['/v1/collections/{name}/points:frobnicate'].post.requestBody.content['application/json'].schema).toEqual(extra.body);
  });

  it('holds nothing of a deployment: no servers, no version of the package, no limits', () => {
    const pkg = JSON.parse(readFileSync(new URL('../../package.json', import.meta.url), 'utf8')) as { version: string };
    expect(doc.servers).toBeUndefined();
    expect(doc.info.version).toBe('v1');
    expect(JSON.stringify(doc)).not.toContain(pkg.version);
    expect(JSON.stringify(doc)).not.toMatch(/"maxItems"|"maximum"|"maxLength":(?!256)/);
  });
});

describe('GET /openapi.json and the answers it documents', () => {
  let root: string;
  let db: Database;
  let app: ReturnType<typeof buildRestApp>;
  const admin = { authorization: 'Bearer admin' };

  beforeAll(async () => {
    root = mkdtempSync(join(tmpdir(), 'svc-openapi-'));
    db = await openDatabase({
      dataDir: join(root, 'data'), insecure: true, limitsFrom: 'environment',
      providers: { embedding: { t: { provider: 'fake', model: 'hash', dim: 4 } } },
    });
    const metrics = createPromMetrics();
    const service = createService(db, {
      keys: [{ name: 'env:0', role: 'admin', collections: ['*'], secret: 'admin' }], insecure: false, limits: DEFAULT_LIMITS,
      rateLimit: { requestsPerSecond: 0, burst: 0 }, audit: { append: () => undefined },
      clock: { nowMs: () => Date.now(), monotonicMs: () => performance.now() }, metrics, log: silentLogger,
    });
    app = buildRestApp({ service }, { limits: DEFAULT_LIMITS, metrics, log: silentLogger });
    await app.ready();
  });

  afterAll(async () => {
    await app?.close();
    await db?.close();
    rmSync(root, { recursive: true, force: true });
  });

  it('is served without a key, even before the storage is open, as the same document', async () => {
    const r = await app.inject({ method: 'GET', url: OPENAPI_PATH });
    expect(r.statusCode).toBe(200);
    expect(r.headers['content-type']).toMatch(/^application\/json/);
    expect(r.json()).toEqual(doc);
    const early = buildRestApp({ service: null }, { limits: DEFAULT_LIMITS, metrics: createPromMetrics(), log: silentLogger });
    expect((await early.inject({ method: 'GET', url: OPENAPI_PATH })).json()).toEqual(doc);
    await early.close();
  });

  it('every open route is served without a key; every other route wants one', async () => {
    for (const r of OPEN_ROUTES) expect((await app.inject({ method: r.method, url: r.template })).statusCode, r.template).toBe(200);
    for (const r of REST_ROUTES) {
      const url = r.template.replace('{name}', 'docs').replace('{id}', 'a');
      expect((await app.inject({ method: r.method, url, payload: r.body ? {} : undefined })).statusCode, routeKey(r)).toBe(401);
    }
  });

  /** One request per route, in an order where each finds what it needs; answers are checked against the document. */
  const SAMPLES: Record<string, { url?: string; body?: unknown }> = {
    'POST /v1/collections': { body: { name: 'docs', dim: 4, filterable: [{ path: 'lang', field_type: 'keyword' }] } },
    'GET /v1/collections': {},
    'GET /v1/collections/{name}': {},
    'PUT /v1/collections/{name}/points': { body: { points: [{ id: 'a', vector: [1, 0, 0, 0], payload: { lang: 'en' } }, { id: 'b', vector: [0, 1, 0, 0] }] } },
    'POST /v1/collections/{name}/points:bulk': { body: { points: [{ id: 'c', vector_b64: Buffer.from(new Float32Array([0, 0, 1, 0]).buffer).toString('base64') }] } },
    'GET /v1/collections/{name}/points/{id}': { url: '/v1/collections/docs/points/a?with_vector=true' },
    'POST /v1/collections/{name}/points:fetch': { body: { limit: 2 } },
    'POST /v1/collections/{name}/query': { body: { vector: [1, 0, 0, 0], k: 2, filter: { eq: { field: 'lang', value: 'en' } } } },
    'POST /v1/collections/{name}/query/hybrid': { body: { vector: [1, 0, 0, 0], sparse_indices: [1], sparse_values: [1], k: 2 } },
    'POST /v1/collections/{name}/query/rankings': { body: { vector: [1, 0, 0, 0], sparse_indices: [1], sparse_values: [1], depth: 2 } },
    'POST /v1/collections/{name}/points:text': { url: '/v1/collections/t/points:text', body: { points: [{ id: 't1', text: 'a vector database' }] } },
    'POST /v1/collections/{name}/query/text': { url: '/v1/collections/t/query/text', body: { text: 'vector', k: 1 } },
    'POST /v1/collections/{name}/query/text-stats': { url: '/v1/collections/t/query/text-stats', body: { text: 'vector database' } },
    'PUT /v1/collections/{name}/documents': { url: '/v1/collections/m/documents', body: { documents: [{ id: 'd1', vectors: [[1, 0, 0, 0], [0, 1, 0, 0]] }] } },
    'POST /v1/collections/{name}/query/multi': { url: '/v1/collections/m/query/multi', body: { vectors: [[1, 0, 0, 0]], k: 1 } },
    'DELETE /v1/collections/{name}/documents/{id}': { url: '/v1/collections/m/documents/d1' },
    'POST /v1/collections/{name}/points:count': { body: {} },
    'POST /v1/collections/{name}/points:payload': { body: { points: [{ id: 'a', payload: { lang: 'de' } }] } },
    'POST /v1/collections/{name}/points:delete': { body: { ids: ['c'] } },
    'DELETE /v1/collections/{name}/points/{id}': { url: '/v1/collections/docs/points/b' },
    'POST /v1/cluster/move/apply': { body: { collection: 'mv', params: { name: 'mv', dim: 4, metric: 'l2' }, records: [], deletes: [] } },
    'POST /v1/cluster/move/batch': { body: { move: 'm1', self: 0, targets: [0, 1], limit: 10 } },
    // Its token is the batch's answer's (filled in below).
    'POST /v1/cluster/move/commit': { body: { move: 'm1', token: '' } },
    'GET /v1/stats': {},
    'POST /v1/snapshots': { body: { name: 'snap-1' } },
    'DELETE /v1/collections/{name}': {},
  };

  it('every route answers what the document says it answers', async () => {
    for (const name of ['t', 'm']) {
      const r = await app.inject({ method: 'POST', url: '/v1/collections', headers: admin, payload: { name, dim: 4, multivector: name === 'm' } });
      expect(r.statusCode).toBe(201);
    }
    const ajv = new Ajv2020({ strict: false, allErrors: true });
    const byKey = new Map(REST_ROUTES.map((r) => [routeKey(r), r]));
    for (const r of REST_ROUTES) expect(SAMPLES[routeKey(r)], `add a sample request for ${routeKey(r)}`).toBeDefined();
    let token = '';
    for (const [key, sample] of Object.entries(SAMPLES)) {
      const route = byKey.get(key);
      if (route === undefined) continue; // a route of the contract this build does not have yet
      const url = sample.url ?? route.template.replace('{name}', 'docs').replace('{id}', 'a');
      const body = key === 'POST /v1/cluster/move/commit' ? { move: 'm1', token } : sample.body;
      const res = await app.inject({ method: route.method, url, headers: admin, ...(body !== undefined ? { payload: body as Json } : {}) });
      if (key === 'POST /v1/cluster/move/batch') token = (res.json() as { token?: string }).token ?? '';
      const status = route.status ?? 200;
      expect(res.statusCode, `${key}: ${res.body}`).toBe(status);
      const validate = ajv.compile(doc.paths[route.template][route.method.toLowerCase()].responses[String(status)].content['application/json'].schema);
      expect(validate(res.json()), `${key} answered ${res.body}: ${ajv.errorsText(validate.errors)}`).toBe(true);
    }
  });
});
