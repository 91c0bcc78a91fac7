/**
 * Live HTTP sources: store_a's REST scroll API and store_b's v2 HTTP API. Pages are bounded, so memory
 * stays bounded whatever the size of the source.
 */
import { convertStoreA, convertStoreB, ImportFatal, type SourceRow, type StoreAOptions } from './convert.js';
import type { Source } from './sources.js';

export const PAGE_SIZE = 256;
const REQUEST_TIMEOUT_MS = 60_000;

async function call(url: string, init: { method: string; headers: Record<string, string>; body?: unknown }, what: string): Promise<unknown> {
  let res: Response;
  try {
    res = await fetch(url, {
      method: init.method,
      headers: { accept: 'application/json', ...(init.body === undefined ? {} : { 'content-type': 'application/json' }), ...init.headers },
      body: init.body === undefined ? undefined : JSON.stringify(init.body),
      signal: AbortSignal.timeout(REQUEST_TIMEOUT_MS),
    });
  } catch (e) {
    const cause = (e as { cause?: { code?: string; message?: string } }).cause;
    throw new ImportFatal(`${what}: cannot reach ${new URL(url).origin} (${cause?.code ?? cause?.message ?? (e as Error).message})`);
  }
  const text = await res.text();
  if (res.status === 401 || res.status === 403) {
    throw new ImportFatal(`${what}: the source refused the key (HTTP ${res.status}); check --api-key`);
  }
  if (!res.ok) throw new ImportFatal(`${what}: HTTP ${res.status} ${text.slice(0, 300)}`);
  try {
    return JSON.parse(text);
  } catch {
    throw new ImportFatal(`${what}: the answer is not JSON`);
  }
}

function trimBase(url: string): string {
  return url.replace(/\/+$/, '');
}

export interface StoreALiveOptions extends StoreAOptions {
  url: string;
  collection: string;
  apiKey?: string;
}

/** store_a: POST /collections/{name}/points/scroll, following `next_page_offset` until it is null. */
export function storeALive(o: StoreALiveOptions): Source {
  const base = `${trimBase(o.url)}/collections/${encodeURIComponent(o.collection)}`;
  const headers: Record<string, string> = o.apiKey === undefined ? {} : { 'api-key': o.apiKey };
  let total: number | null = null;
  let done = 0;
  return {
    describe: `${trimBase(o.url)} collection ${o.collection}`,
    fraction: () => (total ? Math.min(1, done / total) : null),
    async *rows(): AsyncGenerator<SourceRow> {
      const info = await call(base, { method: 'GET', headers }, 'store_a collection info') as { result?: { points_count?: number } };
      total = typeof info.result?.points_count === 'number' ? info.result.points_count : null;
      let offset: unknown = null;
      for (;;) {
        const body = { limit: PAGE_SIZE, offset, with_payload: true, with_vector: true };
        const page = await call(`${base}/points/scroll`, { method: 'POST', headers, body }, 'store_a scroll') as {
          result?: { points?: unknown[]; next_page_offset?: unknown };
        };
        const points = page.result?.points;
        if (!Array.isArray(points)) throw new ImportFatal('store_a scroll: the answer has no result.points list');
        for (const p of points) {
          done++;
          const r = convertStoreA(p, o);
          const rawId = (p as { id?: unknown } | null)?.id;
          const ref = `point ${done} (id ${String(rawId)})`;
          yield 'error' in r ? { ref, error: r.error } : { ref, point: r };
        }
        const next = page.result?.next_page_offset;
        if (next === null || next === undefined || points.length === 0) return;
        offset = next;
      }
    },
    async close() {},
  };
}

export interface StoreBLiveOptions {
  url: string;
  tenant: string;
  database: string;
  collection: string;
  apiKey?: string;
}

/** store_b: find the collection by name, then page POST .../collections/{id}/get with limit/offset. */
export function storeBLive(o: StoreBLiveOptions): Source {
  const dbBase = `${trimBase(o.url)}/api/v2/tenants/${encodeURIComponent(o.tenant)}/databases/${encodeURIComponent(o.database)}`;
  // The store accepts its token as a bearer or in x-chroma-token, depending on its configuration.
  const headers: Record<string, string> = o.apiKey === undefined ? {} : { authorization: `Bearer ${o.apiKey}`, 'x-chroma-token': o.apiKey };
  let total: number | null = null;
  let done = 0;
  return {
    describe: `${trimBase(o.url)} ${o.tenant}/${o.database} collection ${o.collection}`,
    fraction: () => (total ? Math.min(1, done / total) : null),
    async *rows(): AsyncGenerator<SourceRow> {
      const col = await call(`${dbBase}/collections/${encodeURIComponent(o.collection)}`, { method: 'GET', headers }, 'store_b collection lookup') as { id?: unknown };
      if (typeof col.id !== 'string') throw new ImportFatal(`store_b: collection '${o.collection}' has no id in the answer`);
      const colBase = `${dbBase}/collections/${encodeURIComponent(col.id)}`;
      const count = await call(`${colBase}/count`, { method: 'GET', headers }, 'store_b count');
      total = typeof count === 'number' ? count : null;
      for (let offset = 0; ; offset += PAGE_SIZE) {
        const body = { limit: PAGE_SIZE, offset, include: ['embeddings', 'metadatas', 'documents'] };
        const page = await call(`${colBase}/get`, { method: 'POST', headers, body }, 'store_b get') as Record<string, unknown>;
        const ids = page.ids;
        if (!Array.isArray(ids)) throw new ImportFatal('store_b get: the answer has no ids list');
        for (const row of convertStoreB({ ids, embeddings: page.embeddings, metadatas: page.metadatas, documents: page.documents }, offset)) {
          done++;
          yield row;
        }
        if (ids.length < PAGE_SIZE) return;
      }
    },
    async close() {},
  };
}
