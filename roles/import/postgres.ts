/**
 * store_c live: a PostgreSQL table read through a server-side cursor inside one read-only transaction,
 * so the import sees one consistent snapshot and never holds more than a page in memory (no OFFSET scans).
 */
import pg from 'pg';
import { convertStoreC, ImportFatal, quoteTableName, type SourceRow, type StoreCOptions } from './convert.js';
import type { Source } from './sources.js';

export const PG_PAGE_ROWS = 500;

export interface PostgresOptions extends StoreCOptions {
  url: string;
  table: string;
}

function pgFailure(what: string, e: unknown): ImportFatal {
  const err = e as { code?: string; message?: string };
  // pg messages carry no password; the URL is never echoed.
  return new ImportFatal(`${what}: ${err.message ?? String(e)}${err.code ? ` (${err.code})` : ''}`);
}

export function postgresSource(o: PostgresOptions): Source {
  const table = quoteTableName(o.table);
  const client = new pg.Client({ connectionString: o.url, application_name: 'svc admin import' });
  let total: number | null = null;
  let done = 0;
  let connected = false;
  return {
    describe: `PostgreSQL table ${table}`,
    fraction: () => (total ? Math.min(1, done / total) : null),
    async *rows(): AsyncGenerator<SourceRow> {
      try {
        await client.connect();
        connected = true;
      } catch (e) {
        throw pgFailure('cannot connect to PostgreSQL', e);
      }
      try {
        await client.query('BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY');
        const c = await client.query<{ n: string }>(`SELECT count(*)::text AS n FROM ${table}`);
        total = Number(c.rows[0].n);
        await client.query(`DECLARE svc_import NO SCROLL CURSOR FOR SELECT * FROM ${table}`);
      } catch (e) {
        throw pgFailure(`cannot read table ${table}`, e);
      }
      for (;;) {
        let page: pg.QueryResult<Record<string, unknown>>;
        try {
          page = await client.query(`FETCH FORWARD ${PG_PAGE_ROWS} FROM svc_import`);
        } catch (e) {
          throw pgFailure(`reading ${table} failed`, e);
        }
        for (const row of page.rows) {
          done++;
          const r = convertStoreC(row, o);
          const ref = `row ${done} (id ${String(row[o.idField])})`;
          yield 'error' in r ? { ref, error: r.error } : { ref, point: r };
        }
        if (page.rows.length < PG_PAGE_ROWS) break;
      }
      await client.query('COMMIT').catch(() => undefined);
    },
    async close() {
      if (connected) await client.end().catch(() => undefined);
    },
  };
}
