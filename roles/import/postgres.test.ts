import { join } from 'node:path';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { byId, closeTo, KEY, normalized, readBack, removeDir, runImportCli, tempDir } from './testing/helpers.js';
import { startPostgres, type PgServer } from './testing/postgres-server.js';

const root = tempDir();
let server: PgServer;
const N = 1200; // more than two cursor pages

beforeAll(async () => {
  server = await startPostgres();
  const c = new pg.Client({ connectionString: server.url() });
  await c.connect();
  try {
    // A mixed-case schema and table: only a per-part quoted identifier finds them.
    await c.query('CREATE SCHEMA "Shop"');
    await c.query(`CREATE TABLE "Shop"."Items" (id bigint PRIMARY KEY, embedding text, title text, price numeric, on_sale boolean,
      created timestamptz, tags text[])`);
    await c.query(`INSERT INTO "Shop"."Items"
      SELECT i, '[' || (i % 10 + 1) || ',' || (i % 7) || ',' || (i % 3) || ']', 'item ' || i, i * 1.5, i % 2 = 0,
             timestamptz '2024-01-01 00:00:00+00' + i * interval '1 hour', ARRAY['t' || (i % 4)]
      FROM generate_series(1, ${N}) AS i`);
    await c.query(`INSERT INTO "Shop"."Items" (id, embedding, title) VALUES
      (${N + 1}, 'garbage', 'bad literal'), (${N + 2}, '[1,2]', 'wrong dim'), (${N + 3}, NULL, 'no vector')`);
    await c.query('CREATE TABLE reals (pk integer, vec real[], label text)');
    await c.query("INSERT INTO reals VALUES (1, '{1.5,2,3}', 'one'), (2, '{0,0,4}', 'two'), (3, '{9,8,7}', NULL)");
  } finally {
    await c.end();
  }
}, 120_000);
afterAll(async () => {
  await server?.stop();
  removeDir(root);
});

describe('live store_c from a real PostgreSQL 15', () => {
  const data = join(root, 'pg-data');

  it('reads a schema-qualified table through a cursor; text literal vectors parse; other columns are payload', async () => {
    const r = await runImportCli({
      source: 'store_c', 'postgres-url': server.url(), table: 'Shop.Items', collection: 'items', 'data-dir': data,
      'encryption-key': KEY, 'vector-field': 'embedding', metric: 'l2', filterable: ['title:keyword'],
    });
    expect(r.stdout).toContain(`${N + 3} read, ${N} imported, 3 skipped`);
    expect(r.code).toBe(1);
    expect(r.stderr).toContain(`warning: the PostgreSQL password travels unencrypted to 127.0.0.1:${server.port}`);
    expect(r.stderr).not.toContain(server.password);
    expect(r.stderr).toMatch(new RegExp(`skipped row \\d+ \\(id ${N + 1}\\): embedding: vector text is not a literal like \\[1,2,3\\]`));
    expect(r.stderr).toMatch(new RegExp(`skipped row \\d+ \\(id ${N + 2}\\): vector has 2 dimensions, the collection has 3`));
    expect(r.stderr).toMatch(new RegExp(`skipped row \\d+ \\(id ${N + 3}\\): embedding: vector is missing`));
    const m = byId((await readBack(data, 'items')).points);
    expect(m.size).toBe(N);
    expect(m.get('17')).toEqual({
      id: '17',
      vector: [8, 3, 2],
      payload: { title: 'item 17', price: '25.5', on_sale: false, created: '2024-01-01T17:00:00.000Z', tags: ['t1'] },
    });
  });

  it('re-import appends (same ids replaced, nothing dropped, nothing duplicated)', async () => {
    const r = await runImportCli({
      source: 'store_c', 'postgres-url': server.url(), table: 'Shop.Items', collection: 'items', 'data-dir': data,
      'encryption-key': KEY, 'vector-field': 'embedding',
    });
    expect(r.stdout).toContain(`collection 'items' appended: ${N} points`);
    expect(r.stderr).toContain("appending to existing collection 'items'");
    expect((await readBack(data, 'items')).points).toHaveLength(N);
  });

  it('a real[] column imports as the vector; --table defaults to --collection; --id-field picks the id', async () => {
    const d = join(root, 'pg-reals');
    const r = await runImportCli({
      source: 'store_c', 'postgres-url': server.url(), collection: 'reals', 'data-dir': d, insecure: true,
      'id-field': 'pk', 'vector-field': 'vec',
    });
    expect(r.code).toBe(0);
    const m = byId((await readBack(d, 'reals', { insecure: true })).points);
    expect(m.get('1')!.payload).toEqual({ label: 'one' });
    expect(m.get('3')!.payload).toEqual({ label: null });
    expect(closeTo(m.get('1')!.vector, normalized([1.5, 2, 3]))).toBe(true);
  });

  it('a wrong password and a missing table are clear failures that name no secret', async () => {
    const bad = server.url().replace(server.password, 'not-the-password');
    const r = await runImportCli({ source: 'store_c', 'postgres-url': bad, collection: 'reals', 'data-dir': join(root, 'pg-x'), insecure: true });
    expect(r.code).toBe(1);
    expect(r.stderr).toContain('cannot connect to PostgreSQL: password authentication failed for user "postgres"');
    expect(r.stderr).not.toContain('not-the-password');
    const r2 = await runImportCli({ source: 'store_c', 'postgres-url': server.url(), table: 'Shop.items', collection: 'x', 'data-dir': join(root, 'pg-x'), insecure: true });
    expect(r2.stderr).toContain('cannot read table "Shop"."items": relation "Shop.items" does not exist');
  });
});
