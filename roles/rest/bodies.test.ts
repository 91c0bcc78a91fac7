import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { BODIES, bodyKeys, jsonSchemaOf, type BodyName } from '../../core/base/bodies.js';
import { DEFAULT_LIMITS } from '../../core/base/limits.js';
import { openDatabase, type Database } from '../../core/embedded.js';
import { silentLogger } from '../../core/service/log.js';
import { createService } from '../../core/service/service.js';
import { TOOL_SCHEMAS, type ToolName } from '../mcp/schemas.js';
import { createPromMetrics } from './metrics.js';
import { REST_ROUTES } from './routes.js';
import { buildRestApp } from './server.js';
import { moveApplyBody, moveBatchBody, moveCommitBody } from './schemas-move.js';

/**
 * Issue 21, one schema per body: every REST route validates with the JSON schema of its body in
 * core/base/bodies.ts, every MCP tool takes that body's fields, and the places where the copies used to
 * disagree now behave alike on REST (over a real engine, inject) and the embedded API.
 */
let root: string;
let db: Database;
let app: ReturnType<typeof buildRestApp>;
const admin = { authorization: 'Bearer admin' };

beforeAll(async () => {
  root = mkdtempSync(join(tmpdir(), 'svc-bodies-'));
  db = await openDatabase({ dataDir: join(root, 'data'), insecure: true, limitsFrom: 'environment' });
  const metrics = createPromMetrics();
  const service = createService(db, {
    keys: [{ name: 'env:0', role: 'admin', collections: ['*'], secret: 'admin' }], insecure: false, limits: DEFAULT_LIMITS,
    rateLimit: { requestsPerSecond: 0, burst: 0 }, audit: { append: () => undefined },
    clock: { nowMs: () => 0, monotonicMs: () => 0 }, metrics, log: silentLogger,
  });
  app = buildRestApp({ service }, { limits: DEFAULT_LIMITS, metrics, log: silentLogger });
  await app.ready();
  await db.createCollection({ name: 'docs', dim: 2, filterable: [{ path: 'n', field_type: 'numeric' }] });
  await db.upsert('docs', { points: [{ id: 'a', vector: [1, 0], payload: { n: 1 } }, { id: 'b', vector: [0, 1], payload: { n: 2 } }] });
  await db.createCollection({ name: 'multi', dim: 2, multivector: true });
  await db.upsertDocuments('multi', { documents: [{ id: 'm', vectors: [[1, 0], [0, 1]] }] });
});

afterAll(async () => {
  await app?.close();
  await db?.close();
  rmSync(root, { recursive: true, force: true });
});

const post = (url: string, payload: object) => app.inject({ method: 'POST', url, headers: admin, payload });

const INTERNAL_BODIES: Readonly<Record<string, object>> = { moveBatch: moveBatchBody, moveCommit: moveCommitBody, moveApply: moveApplyBody };

/** The MCP tools that take a body as it is, plus `collection`. */
const TOOL_BODIES: Readonly<Partial<Record<ToolName, BodyName>>> = {
  create_collection: 'createCollection', snapshot: 'snapshot', search: 'search', fetch: 'fetch', count: 'count',
  set_payload: 'setPayload', delete_points: 'deletePoints', search_multi_vector: 'searchMultiVector',
  hybrid_search: 'hybridSearch', upsert_text: 'upsertText', search_text: 'searchText',
};

describe('every transport derives from the one schema of each body', () => {
  it('each REST route with a body validates with the JSON schema of its operation\'s body', () => {
    for (const r of REST_ROUTES) {
      if (r.body === undefined) continue;
      // The rebalance's internal routes: a coordinator's calls, not the contract's (roles/rest/schemas-move.ts).
      if (INTERNAL_BODIES[r.op] !== undefined) {
        expect(r.body, `${r.method} ${r.template}`).toBe(INTERNAL_BODIES[r.op]);
        continue;
      }
      expect(Object.keys(BODIES), `${r.method} ${r.template} has a body but no schema in core/base/bodies.ts`).toContain(r.op);
      expect(r.body, `${r.method} ${r.template}`).toBe(jsonSchemaOf(BODIES[r.op as BodyName]));
    }
  });

  it('each MCP tool that mirrors a body takes exactly its fields, plus collection', () => {
    for (const [tool, body] of Object.entries(TOOL_BODIES) as [ToolName, BodyName][]) {
      const keys = Object.keys(TOOL_SCHEMAS[tool].shape).filter((k) => k !== 'collection').sort();
      expect(keys, tool).toEqual([...bodyKeys(BODIES[body])].sort());
    }
    // The spec's single point or document beside the batch.
    expect(Object.keys(TOOL_SCHEMAS.upsert.shape).sort()).toEqual(['collection', 'id', 'payload', 'points', 'vector']);
    expect(Object.keys(TOOL_SCHEMAS.upsert_document.shape).sort()).toEqual(['collection', 'documents', 'id', 'payload', 'vectors']);
  });
});

describe('where the copies disagreed, every transport now agrees', () => {
  it('a multi-vector query takes ef_search and with_vector (REST refused them)', async () => {
    const body = { vectors: [[1, 0]], k: 1, ef_search: 32, with_vector: true };
    const rest = await post('/v1/collections/multi/query/multi', body);
    expect(rest.statusCode).toBe(200);
    expect(rest.json().hits).toEqual([{ id: 'm', rank: 0, score: expect.any(Number), payload: {}, vectors: [[1, 0], [0, 1]] }]);
    expect((await db.searchMultiVector('multi', body)).hits).toEqual(rest.json().hits);
    expect(TOOL_SCHEMAS.search_multi_vector.safeParse({ collection: 'multi', ...body }).success).toBe(true);
  });

  it('fetch takes consistency (the engine and MCP refused it), and answers the same either way', async () => {
    const rest = await post('/v1/collections/docs/points:fetch', { consistency: 'strong', filter: { gte: { field: 'n', value: 2 } } });
    expect(rest.statusCode).toBe(200);
    expect(rest.json()).toEqual({ points: [{ id: 'b', payload: { n: 2 } }], next_cursor: null });
    expect(await db.fetch('docs', { consistency: 'eventual', filter: { gte: { field: 'n', value: 2 } } })).toEqual(rest.json());
    expect(TOOL_SCHEMAS.fetch.safeParse({ collection: 'docs', consistency: 'strong' }).success).toBe(true);
  });

  it('only the index kinds and quantizers this build has are in the schema; the engine names an unbuilt kind', async () => {
    for (const payload of [{ name: 'x', dim: 2, index: 'ivf' }, { name: 'x', dim: 2, quantization: 'product' }]) {
      const r = await post('/v1/collections', payload);
      expect(r.statusCode).toBe(400);
      expect(r.json().error.code).toBe('invalid_argument');
    }
    expect(TOOL_SCHEMAS.create_collection.safeParse({ name: 'x', dim: 2, index: 'vamana' }).success).toBe(false);
    await expect(db.createCollection({ name: 'x', dim: 2, index: 'ivf' } as never))
      .rejects.toThrow("index 'ivf' is not available in this version of svc (available: hnsw, flat)");
    await expect(db.createCollection({ name: 'x', dim: 2, quantization: 'binary' } as never))
      .rejects.toThrow("quantization 'binary' is not available in this version of svc (available: none, scalar)");
  });
});
