import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { DEFAULT_LIMITS } from '../../core/base/limits.js';
import { DEFAULT_METRIC } from '../../core/base/model.js';
import { openDatabase, type Database } from '../../core/embedded.js';
import { silentLogger } from '../../core/service/log.js';
import { createService } from '../../core/service/service.js';
import { createCollectionParams } from '../grpc/convert.js';
import { createPromMetrics } from './metrics.js';
import * as schemas from './schemas.js';
import { buildRestApp } from './server.js';
import { checkBody } from './validate.js';

/**
 * Issue 21: errors in the caller's terms, and one default per field on every transport. REST over a real
 * engine (inject), the embedded API beside it.
 */
let root: string;
let db: Database;
let app: ReturnType<typeof buildRestApp>;
const admin = { authorization: 'Bearer admin' };

beforeAll(async () => {
  root = mkdtempSync(join(tmpdir(), 'svc-caller-terms-'));
  db = await openDatabase({ dataDir: join(root, 'data'), insecure: true, limitsFrom: 'environment' });
  const metrics = createPromMetrics();
  const service = createService(db, {
    keys: [{ name: 'env:0', role: 'admin', collections: ['*'], secret: 'admin' }], insecure: false, limits: DEFAULT_LIMITS,
    rateLimit: { requestsPerSecond: 0, burst: 0 }, audit: { append: () => undefined },
    clock: { nowMs: () => 0, monotonicMs: () => 0 }, metrics, log: silentLogger,
  });
  app = buildRestApp({ service }, { limits: DEFAULT_LIMITS, metrics, log: silentLogger });
  await app.ready();
});

afterAll(async () => {
  await app?.close();
  await db?.close();
  rmSync(root, { recursive: true, force: true });
});

describe('a body with an unknown field names the field, as the embedded API does', () => {
  it('REST, top level and nested', async () => {
    const create = await app.inject({ method: 'POST', url: '/v1/collections', headers: admin, payload: { name: 'u', dim: 2, metrc: 'l2' } });
    expect(create.statusCode).toBe(400);
    expect(create.json().error).toEqual({ code: 'invalid_argument', message: "body has an unknown field 'metrc'" });
    await app.inject({ method: 'POST', url: '/v1/collections', headers: admin, payload: { name: 'u', dim: 2 } });
    const upsert = await app.inject({
      method: 'PUT', url: '/v1/collections/u/points', headers: admin, payload: { points: [{ id: 'a', vector: [1, 0], paylod: {} }] },
    });
    expect(upsert.json().error.message).toBe("body/points/0 has an unknown field 'paylod'");
    // A search route (the hot path on the wire, fastify under inject) and the same check outside fastify.
    const query = await app.inject({ method: 'POST', url: '/v1/collections/u/query', headers: admin, payload: { vector: [1, 0], top_k: 3 } });
    expect(query.json().error.message).toBe("body has an unknown field 'top_k'");
    expect(() => checkBody(schemas.queryBody, { vector: [1, 0], top_k: 3 })).toThrow("body has an unknown field 'top_k'");
  });

  it('the embedded API says the same of the same mistake', async () => {
    await expect(db.upsert('u', { points: [{ id: 'a', vector: [1, 0], paylod: {} } as never] })).rejects.toThrow("unknown field 'paylod'");
    await expect(db.createCollection({ name: 'v', dim: 2, metrc: 'l2' } as never)).rejects.toThrow("'metrc'");
  });

  it('a word outside a closed list names the words this version takes', async () => {
    const r = await app.inject({ method: 'POST', url: '/v1/collections', headers: admin, payload: { name: 'w', dim: 2, metric: 'hamming' } });
    expect(r.json().error.message).toBe('body/metric must be one of: cosine, dot, l2');
    // An index family planned but not built is refused with the ones that are.
    const ivf = await app.inject({ method: 'POST', url: '/v1/collections', headers: admin, payload: { name: 'w', dim: 2, index: 'ivf' } });
    expect([ivf.statusCode, ivf.json().error.message]).toEqual([400, 'body/index must be one of: hnsw, flat']);
  });
});

describe('metric defaults to cosine on every transport', () => {
  it('REST, embedded and gRPC agree', async () => {
    expect(DEFAULT_METRIC).toBe('cosine');
    const rest = await app.inject({ method: 'POST', url: '/v1/collections', headers: admin, payload: { name: 'r', dim: 3 } });
    expect(rest.statusCode).toBe(201);
    expect(rest.json().metric).toBe('cosine');
    expect((await db.createCollection({ name: 'e', dim: 3 })).metric).toBe('cosine');
    // proto3 sends an unset string as '': the converted body leaves metric out, so the engine's default applies.
    expect(createCollectionParams({ name: 'g', dim: 3, metric: '', filterable: [] } as never)).not.toHaveProperty('metric');
  });
});
