import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { SvcError } from '../base/errors.js';
import { LIMIT_VARIABLES, type Limits } from '../base/limits.js';
import { openDatabase } from '../embedded.js';
import type { Database } from './database.js';

/**
 * The embedded API enforces the same per-request limits as the server (the table of e2e/limits.test.ts,
 * less the request body, which has no bytes in process): at each limit accepted, one over refused with
 * `limit_exceeded` naming the knob in the caller's terms (the `limits` option of openDatabase, not the
 * SVC_MAX_* variable an operator of `svc serve` sets), and the stored data unchanged after the refusal.
 */
const LIMITS: Partial<Limits> = {
  maxK: 5, maxEfSearch: 20, maxFetchLimit: 5, maxVectorDim: 8, maxPayloadBytes: 64,
  maxBatchSize: 3, maxSparseTerms: 4, maxBulkBatchSize: 6,
};
const DIM = 8;
const ones = (n: number) => Array.from({ length: n }, (_, i) => (i === 0 ? 1 : 0));
const point = (id: string, payload?: Record<string, unknown>) => ({ id, vector: ones(DIM), ...(payload ? { payload } : {}) });
const points = (prefix: string, n: number) => Array.from({ length: n }, (_, i) => point(`${prefix}-${i}`));
const WORDS = ['apple', 'bridge', 'candle', 'desert', 'engine', 'forest'];

interface Row { limit: keyof Limits; what: string; run: (db: Database, atLimit: boolean) => Promise<unknown> }
const ROWS: Row[] = [
  { limit: 'maxK', what: 'k of search', run: (db, at) => db.search('c', { vector: ones(DIM), k: at ? 5 : 6 }) },
  { limit: 'maxK', what: 'k of multi-vector search', run: (db, at) => db.searchMultiVector('m', { vectors: [ones(DIM)], k: at ? 5 : 6 }) },
  { limit: 'maxK', what: 'k of hybrid search', run: (db, at) => db.hybridSearch('c', { vector: ones(DIM), k: at ? 5 : 6 }) },
  { limit: 'maxEfSearch', what: 'ef_search', run: (db, at) => db.search('c', { vector: ones(DIM), k: 1, ef_search: at ? 20 : 21 }) },
  { limit: 'maxFetchLimit', what: 'fetch limit', run: (db, at) => db.fetch('c', { limit: at ? 5 : 6 }) },
  { limit: 'maxVectorDim', what: 'dim at create', run: (db, at) => db.createCollection({ name: at ? 'wide-a' : 'wide-o', dim: at ? DIM : DIM + 1, metric: 'l2' }) },
  { limit: 'maxVectorDim', what: 'query vector length', run: (db, at) => db.search('c', { vector: ones(at ? DIM : DIM + 1), k: 1 }) },
  { limit: 'maxPayloadBytes', what: 'payload size', run: (db, at) => db.upsert('c', { points: [point(at ? 'pay-a' : 'pay-o', { t: 'x'.repeat(at ? 56 : 57) })] }) },
  { limit: 'maxBatchSize', what: 'upsert batch size', run: (db, at) => db.upsert('c', { points: points(at ? 'bat-a' : 'bat-o', at ? 3 : 4) }) },
  {
    limit: 'maxBatchSize', what: 'documents per upsert',
    run: (db, at) => db.upsertDocuments('m', { documents: Array.from({ length: at ? 3 : 4 }, (_, i) => ({ id: `${at ? 'doc-a' : 'doc-o'}-${i}`, vectors: [ones(DIM)] })) }),
  },
  {
    limit: 'maxBatchSize', what: 'texts per upsert',
    run: (db, at) => db.upsertText('t', { points: Array.from({ length: at ? 3 : 4 }, (_, i) => ({ id: `${at ? 'txt-a' : 'txt-o'}-${i}`, text: WORDS[i]! })) }),
  },
  { limit: 'maxBulkBatchSize', what: 'bulk batch size', run: (db, at) => db.bulkUpsert('c', { points: points(at ? 'blk-a' : 'blk-o', at ? 6 : 7) }) },
  {
    limit: 'maxSparseTerms', what: 'sparse terms of a hybrid query',
    run: (db, at) => db.hybridSearch('c', { sparse_indices: [1, 2, 3, 4, 5].slice(0, at ? 4 : 5), sparse_values: [1, 1, 1, 1, 1].slice(0, at ? 4 : 5), k: 3 }),
  },
  { limit: 'maxSparseTerms', what: 'terms of a text query', run: (db, at) => db.searchText('t', { text: WORDS.slice(0, at ? 4 : 5).join(' '), k: 3 }) },
  { limit: 'maxSparseTerms', what: 'terms of a hybrid query_text', run: (db, at) => db.hybridSearch('t', { query_text: WORDS.slice(0, at ? 4 : 5).join(' '), k: 3 }) },
];

let root: string;
let db: Database;

beforeAll(async () => {
  root = mkdtempSync(join(tmpdir(), 'svc-limits-'));
  db = await openDatabase({
    dataDir: join(root, 'data'), insecure: true, limits: LIMITS,
    providers: { embedding: { t: { provider: 'fake', model: 'hash', dim: DIM } } },
  });
  await db.createCollection({ name: 'c', dim: DIM, metric: 'cosine' });
  await db.createCollection({ name: 't', dim: DIM, metric: 'cosine' });
  await db.createCollection({ name: 'm', dim: DIM, metric: 'cosine', multivector: true });
  await db.upsert('c', { points: [point('seed-1', { t: 'a' }), point('seed-2')] });
});

afterAll(async () => {
  await db?.close();
  rmSync(root, { recursive: true, force: true });
});

/** Every collection with its count and every point's id, payload and vector. */
async function state(): Promise<unknown> {
  const out: Record<string, unknown> = {};
  for (const c of (await db.listCollections()).collections) {
    const pts: unknown[] = [];
    let cursor: string | null = null;
    do {
      const page: { points: unknown[]; next_cursor: string | null } = await db.fetch(c.name, { limit: 5, with_vector: true, ...(cursor !== null ? { cursor } : {}) });
      pts.push(...page.points);
      cursor = page.next_cursor;
    } while (cursor !== null);
    out[c.name] = { count: c.count, points: pts };
  }
  return out;
}

describe('per-request limits of the embedded API (openDatabase({limits}))', () => {
  for (const row of ROWS) {
    it(`${LIMIT_VARIABLES[row.limit]} (${row.what}): at the limit accepted, one over refused, nothing stored`, async () => {
      await row.run(db, true);
      const before = await state();
      const err = await row.run(db, false).then(() => null, (e: unknown) => e);
      expect(err, `accepted a request over ${LIMIT_VARIABLES[row.limit]}`).toBeInstanceOf(SvcError);
      expect((err as SvcError).code).toBe('limit_exceeded');
      expect((err as SvcError).message).toContain(`limits.${row.limit}=`);
      expect((err as SvcError).message).toContain('openDatabase');
      expect((err as SvcError).message).not.toContain('SVC_');
      expect(await state()).toEqual(before);
    });
  }

  it('the svc commands (limitsFrom: environment) name the SVC_MAX_* variable their operator sets', async () => {
    const dir = join(root, 'env');
    const envDb = await openDatabase({ dataDir: dir, insecure: true, limits: LIMITS, limitsFrom: 'environment' });
    try {
      await envDb.createCollection({ name: 'c', dim: DIM, metric: 'cosine' });
      const err = await envDb.upsert('c', { points: points('x', 4) }).then(() => null, (e: unknown) => e);
      expect((err as SvcError).message).toBe('batch size is 4, above SVC_MAX_BATCH_SIZE=3');
    } finally {
      await envDb.close();
    }
  });
});
