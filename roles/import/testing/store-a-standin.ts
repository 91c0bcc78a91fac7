/**
 * A local stand-in for store_a's REST API: just enough (version root, create/get collection, upsert,
 * scroll) for its official client to fill it and for the importer to scroll it. Ids are ordered as the
 * store orders them: unsigned integers first, then UUIDs; scroll pages by `offset` = the next id.
 */
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';

type Id = number | string;
interface StoredPoint { id: Id; vector: unknown; payload: Record<string, unknown> | null }

export interface StoreAStandIn {
  url: string;
  /** Every scroll request body the stand-in answered, for assertions on paging. */
  scrolls: Record<string, unknown>[];
  /** Every api-key header value it saw. */
  keysSeen: (string | undefined)[];
  close(): Promise<void>;
}

function compareIds(a: Id, b: Id): number {
  if (typeof a === 'number' && typeof b === 'number') return a - b;
  if (typeof a === 'number') return -1;
  if (typeof b === 'number') return 1;
  return a < b ? -1 : a > b ? 1 : 0;
}

async function body(req: IncomingMessage): Promise<any> {
  const chunks: Buffer[] = [];
  for await (const c of req) chunks.push(c as Buffer);
  const text = Buffer.concat(chunks).toString('utf8');
  return text === '' ? {} : JSON.parse(text);
}

function send(res: ServerResponse, status: number, obj: unknown): void {
  res.writeHead(status, { 'content-type': 'application/json' });
  res.end(JSON.stringify(obj));
}

export async function startStoreAStandIn(opts: { apiKey?: string } = {}): Promise<StoreAStandIn> {
  const collections = new Map<string, { config: unknown; points: Map<string, StoredPoint> }>();
  const scrolls: Record<string, unknown>[] = [];
  const keysSeen: (string | undefined)[] = [];
  const ok = (res: ServerResponse, result: unknown): void => send(res, 200, { result, status: 'ok', time: 0.0001 });

  const server: Server = createServer((req, res) => {
    void (async () => {
      const url = new URL(req.url ?? '/', 'http://x');
      const key = req.headers['api-key'] as string | undefined;
      keysSeen.push(key);
      if (url.pathname === '/' && req.method === 'GET') return send(res, 200, { title: 'store_a stand-in', version: '1.18.0' });
      if (opts.apiKey !== undefined && key !== opts.apiKey) return send(res, 401, { status: { error: 'Must provide an API key or an Authorization bearer token' } });
      const m = /^\/collections\/([^/]+)(\/points(\/scroll)?)?$/.exec(url.pathname);
      if (m === null) return send(res, 404, { status: { error: `no route ${req.method} ${url.pathname}` } });
      const name = decodeURIComponent(m[1]);
      const b = await body(req);
      if (m[2] === undefined) {
        if (req.method === 'PUT') {
          collections.set(name, { config: b.vectors, points: new Map() });
          return ok(res, true);
        }
        const c = collections.get(name);
        if (c === undefined) return send(res, 404, { status: { error: `Not found: Collection \`${name}\` doesn't exist!` } });
        return ok(res, { status: 'green', points_count: c.points.size, config: { params: { vectors: c.config } } });
      }
      const c = collections.get(name);
      if (c === undefined) return send(res, 404, { status: { error: `Not found: Collection \`${name}\` doesn't exist!` } });
      if (m[3] === undefined && req.method === 'PUT') {
        const pts: StoredPoint[] = Array.isArray(b.points) ? b.points
          : b.batch.ids.map((id: Id, i: number) => ({ id, vector: b.batch.vectors[i], payload: b.batch.payloads?.[i] ?? null }));
        for (const p of pts) c.points.set(String(p.id), { id: p.id, vector: p.vector, payload: p.payload ?? null });
        return ok(res, { operation_id: 1, status: 'completed' });
      }
      if (m[3] !== undefined && req.method === 'POST') {
        scrolls.push(b);
        const sorted = [...c.points.values()].sort((x, y) => compareIds(x.id, y.id));
        const limit = typeof b.limit === 'number' ? b.limit : 10;
        const start = b.offset === undefined || b.offset === null ? 0 : sorted.findIndex((p) => compareIds(p.id, b.offset) >= 0);
        const page = start < 0 ? [] : sorted.slice(start, start + limit);
        const next = start >= 0 && start + limit < sorted.length ? sorted[start + limit].id : null;
        return ok(res, {
          points: page.map((p) => ({
            id: p.id,
            payload: b.with_payload ? p.payload : null,
            vector: b.with_vector ? p.vector : null,
          })),
          next_page_offset: next,
        });
      }
      return send(res, 405, { status: { error: 'method not allowed' } });
    })().catch((e) => send(res, 500, { status: { error: String(e) } }));
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  const port = (server.address() as { port: number }).port;
  return {
    url: `http://127.0.0.1:${port}`,
    scrolls,
    keysSeen,
    close: () => new Promise((r) => server.close(() => r())),
  };
}
