import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import * as pkg from './embedded.js';
import { openDatabase, type Database } from './embedded.js';

/** CONTRACT.md section 7: the embedded database's methods, the MCP tools in camelCase (roles/mcp/tools.ts). */
const CONTRACT_METHODS = [
  'listCollections', 'collectionInfo', 'databaseStats', 'createCollection', 'deleteCollection', 'snapshot', 'upsert', 'search',
  'fetch', 'get', 'delete', 'hybridSearch', 'upsertText', 'searchText', 'upsertDocument', 'searchMultiVector', 'deleteDocument',
  'close', 'count', 'setPayload', 'deletePoints',
] as const;

let dir: string | null = null;
let db: Database | null = null;
afterEach(async () => {
  await db?.close();
  db = null;
  if (dir !== null) rmSync(dir, { recursive: true, force: true });
  dir = null;
});

describe('the embedded API', () => {
  it('has every method CONTRACT.md section 7 names, databaseStats and upsertDocument answering as stats and upsertDocuments', async () => {
    dir = mkdtempSync(join(tmpdir(), 'svc-embedded-'));
    db = await openDatabase({ dataDir: dir, insecure: true });
    for (const m of CONTRACT_METHODS) expect(typeof (db as unknown as Record<string, unknown>)[m], m).toBe('function');
    await db.createCollection({ name: 'docs', dim: 2, metric: 'cosine', multivector: true });
    expect(await db.upsertDocument('docs', { documents: [{ id: 'd1', vectors: [[1, 0], [0, 1]], payload: { t: 'a' } }] })).toEqual({ upserted: 1 });
    const hits = await db.searchMultiVector('docs', { vectors: [[1, 0]], k: 1 });
    expect(hits.hits.map((h) => h.id)).toEqual(['d1']);
    expect(await db.databaseStats()).toEqual(await db.stats());
    expect((await db.databaseStats()).collections).toBe(1);
  });

  it('exports openDatabase, not the storage opener the server roles use (it has no embedding and internal methods)', () => {
    expect(typeof pkg.openDatabase).toBe('function');
    expect('openStorage' in pkg).toBe(false);
  });
});
