/**
 * Every per-request limit of the spec, on every transport (REST, gRPC, MCP), from outside: for each limit
 * one request just at it (accepted) and one just over (400 limit_exceeded / INVALID_ARGUMENT, the message
 * naming the SVC_MAX_* variable), with small limits set through SVC_MAX_* so the bodies stay small. After
 * each refusal the stored data (collections, counts, every point's id and payload) is what it was.
 * Imports no project code.
 */
import { spawn, type ChildProcessWithoutNullStreams } from 'node:child_process';
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { status } from '@grpc/grpc-js';
import { loadSync } from '@grpc/proto-loader';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { SvcGrpc, fromStruct, toStruct } from './grpc-client.js';
import { MAIN, MASTER, ROOT, api, cleanEnv, serve, tempDir, type Server } from './harness.js';

const ADMIN = 'limits-admin-key';
const BODY_MAX = 500;
const LIMITS = {
  SVC_MAX_K: 5, SVC_MAX_EF_SEARCH: 20, SVC_MAX_FETCH_LIMIT: 5, SVC_MAX_VECTOR_DIM: 8, SVC_MAX_PAYLOAD_BYTES: 64,
  SVC_MAX_BATCH_SIZE: 3, SVC_MAX_REQUEST_BODY_BYTES: BODY_MAX, SVC_MAX_SPARSE_TERMS: 4, SVC_MAX_BULK_BATCH_SIZE: 6,
} as const;
type Variable = keyof typeof LIMITS;
const DIM = LIMITS.SVC_MAX_VECTOR_DIM;

const env = (extra: Record<string, string>) => ({
  SVC_API_KEYS: ADMIN, SVC_ENCRYPTION_KEY: MASTER, ...Object.fromEntries(Object.entries(LIMITS).map(([k, v]) => [k, String(v)])), ...extra,
});

type Op = 'create' | 'search' | 'fetch' | 'upsert' | 'bulk' | 'hybrid' | 'text' | 'multi' | 'list' | 'payload' | 'deletes';
type Args = Record<string, any>;
interface Outcome { ok: boolean; code?: string; message?: string; body?: any }

interface Plane {
  name: string;
  ops: ReadonlySet<Op>;
  call(op: Op, args: Args): Promise<Outcome>;
  /** Bytes of the request as this transport sends it (REST body, gRPC message, JSON-RPC line). */
  size(op: Op, args: Args): number;
  /** Where to read the stored data back from (gRPC: over REST, since a page of padded points can be over the gRPC response cap). */
  reader?: () => Plane;
}

const ones = (n: number) => Array.from({ length: n }, (_, i) => (i === 0 ? 1 : 0));
const point = (id: string, payload?: Args) => ({ id, vector: ones(DIM), ...(payload ? { payload } : {}) });
const points = (prefix: string, n: number) => Array.from({ length: n }, (_, i) => point(`${prefix}-${i}`));
const WORDS = ['apple', 'bridge', 'candle', 'desert', 'engine', 'forest'];

/** The table: for each limit, the operation and its arguments just at the limit and just over it. */
interface Row { variable: Variable; what: string; op: Op; at: (tag: string) => Args; over: (tag: string) => Args; only?: string[] }
const ROWS: Row[] = [
  { variable: 'SVC_MAX_K', what: 'k of search', op: 'search', at: () => ({ collection: 'c', vector: ones(DIM), k: 5 }), over: () => ({ collection: 'c', vector: ones(DIM), k: 6 }) },
  { variable: 'SVC_MAX_K', what: 'k of multi-vector search', op: 'multi', at: () => ({ collection: 'm', vectors: [ones(DIM)], k: 5 }), over: () => ({ collection: 'm', vectors: [ones(DIM)], k: 6 }) },
  { variable: 'SVC_MAX_EF_SEARCH', what: 'ef_search', op: 'search', at: () => ({ collection: 'c', vector: ones(DIM), k: 1, ef_search: 20 }), over: () => ({ collection: 'c', vector: ones(DIM), k: 1, ef_search: 21 }) },
  { variable: 'SVC_MAX_FETCH_LIMIT', what: 'fetch limit', op: 'fetch', at: () => ({ collection: 'c', limit: 5 }), over: () => ({ collection: 'c', limit: 6 }) },
  { variable: 'SVC_MAX_VECTOR_DIM', what: 'dim at create', op: 'create', at: (t) => ({ name: `wide-${t}-a`, dim: DIM, metric: 'l2' }), over: (t) => ({ name: `wide-${t}-o`, dim: DIM + 1, metric: 'l2' }) },
  { variable: 'SVC_MAX_VECTOR_DIM', what: 'query vector length', op: 'search', at: () => ({ collection: 'c', vector: ones(DIM), k: 1 }), over: () => ({ collection: 'c', vector: ones(DIM + 1), k: 1 }) },
  // {"t":"..."} is 8 bytes plus the string.
  { variable: 'SVC_MAX_PAYLOAD_BYTES', what: 'payload size', op: 'upsert', at: (t) => ({ collection: 'c', points: [point(`pay-${t}-a`, { t: 'x'.repeat(56) })] }), over: (t) => ({ collection: 'c', points: [point(`pay-${t}-o`, { t: 'x'.repeat(57) })] }) },
  { variable: 'SVC_MAX_BATCH_SIZE', what: 'upsert batch size', op: 'upsert', at: (t) => ({ collection: 'c', points: points(`bat-${t}-a`, 3) }), over: (t) => ({ collection: 'c', points: points(`bat-${t}-o`, 4) }) },
  { variable: 'SVC_MAX_SPARSE_TERMS', what: 'sparse terms of a hybrid query', op: 'hybrid', at: () => ({ collection: 'c', sparse_indices: [1, 2, 3, 4], sparse_values: [1, 1, 1, 1], k: 3 }), over: () => ({ collection: 'c', sparse_indices: [1, 2, 3, 4, 5], sparse_values: [1, 1, 1, 1, 1], k: 3 }) },
  { variable: 'SVC_MAX_SPARSE_TERMS', what: 'terms of a tokenized text query', op: 'text', at: () => ({ collection: 't', text: WORDS.slice(0, 4).join(' '), k: 3 }), over: () => ({ collection: 't', text: WORDS.slice(0, 5).join(' '), k: 3 }) },
  // Payload updates and deletes by id (issue 21): the batch limit, and the payload limit on what a merge makes.
  { variable: 'SVC_MAX_BATCH_SIZE', what: 'payload update batch size', op: 'payload',
    at: (t) => ({ collection: 'c', points: ['seed-1', 'seed-2', 'seed-1'].map((id) => ({ id, payload: { t } })) }),
    over: (t) => ({ collection: 'c', points: ['seed-1', 'seed-2', 'seed-1', 'seed-2'].map((id) => ({ id, payload: { o: t } })) }) },
  { variable: 'SVC_MAX_PAYLOAD_BYTES', what: 'payload size once merged', op: 'payload',
    at: () => ({ collection: 'c', mode: 'replace', points: [{ id: 'seed-2', payload: { t: 'x'.repeat(56) } }] }),
    over: () => ({ collection: 'c', points: [{ id: 'seed-2', payload: { u: 1 } }] }) },
  { variable: 'SVC_MAX_BATCH_SIZE', what: 'ids of a delete', op: 'deletes',
    at: (t) => ({ collection: 'c', ids: [1, 2, 3].map((i) => `gone-${t}-${i}`) }),
    over: () => ({ collection: 'c', ids: ['seed-1', 'seed-2', 'x', 'y'] }) },
  { variable: 'SVC_MAX_BULK_BATCH_SIZE', what: 'bulk batch size', op: 'bulk', at: (t) => ({ collection: 'c', points: points(`blk-${t}-a`, 6) }), over: (t) => ({ collection: 'c', points: points(`blk-${t}-o`, 7) }) },
];

/** An upsert of three points padded (ids, then payloads) by `n` characters: for the request body size. */
function padded(tag: string, n: number, payloadFirst: boolean): Args {
  const pads = [0, 0, 0, 0, 0, 0]; // three ids, three payload strings
  const order = payloadFirst ? [3, 4, 5, 0, 1, 2] : [0, 1, 2, 3, 4, 5];
  const caps = [200, 200, 200, 50, 50, 50];
  let left = n;
  for (const i of order) {
    pads[i] = Math.min(caps[i]!, left);
    left -= pads[i]!;
  }
  if (left > 0) return {};
  return {
    collection: 'big',
    points: [0, 1, 2].map((i) => point(`${tag}${i}-${'p'.repeat(pads[i]!)}`, { t: 'q'.repeat(pads[i + 3]!) })),
  };
}

/** Arguments of exactly `bytes` on this plane, or the smallest above `bytes` when `above`. */
function sizedUpsert(plane: Plane, tag: string, bytes: number, above: boolean): { args: Args; size: number } {
  let best: { args: Args; size: number } | null = null;
  for (let n = 0; n <= 750; n++) {
    for (const payloadFirst of [false, true]) {
      const args = padded(tag, n, payloadFirst);
      if (args.points === undefined) continue;
      const size = plane.size('upsert', args);
      if (!above && size === bytes) return { args, size };
      if (above && size > bytes && (best === null || size < best.size)) best = { args, size };
    }
  }
  if (best === null) throw new Error(`${plane.name}: no padded upsert of ${above ? 'more than ' : ''}${bytes} bytes`);
  return best;
}

// ---------------------------------------------------------------- REST

function restPlane(server: Server): Plane {
  const call = api(server.base, ADMIN);
  const route = (op: Op, a: Args): [string, string, unknown] => {
    const { collection, ...body } = a;
    const c = `/v1/collections/${collection as string}`;
    switch (op) {
      case 'create': return ['POST', '/v1/collections', a];
      case 'list': return ['GET', '/v1/collections', undefined];
      case 'search': return ['POST', `${c}/query`, body];
      case 'multi': return ['POST', `${c}/query/multi`, body];
      case 'fetch': return ['POST', `${c}/points:fetch`, body];
      case 'upsert': return ['PUT', `${c}/points`, body];
      case 'bulk': return ['POST', `${c}/points:bulk`, body];
      case 'hybrid': return ['POST', `${c}/query/hybrid`, body];
      case 'text': return ['POST', `${c}/query/text`, body];
      case 'payload': return ['POST', `${c}/points:payload`, body];
      case 'deletes': return ['POST', `${c}/points:delete`, body];
    }
  };
  return {
    name: 'REST',
    ops: new Set<Op>(['create', 'list', 'search', 'multi', 'fetch', 'upsert', 'bulk', 'hybrid', 'text', 'payload', 'deletes']),
    async call(op, args) {
      const r = await call(...route(op, args));
      if (r.status < 300) return { ok: true, body: r.json };
      if (r.json?.error?.code === 'limit_exceeded') expect(r.status).toBe(400);
      return { ok: false, code: r.json?.error?.code ?? `http ${r.status}`, message: r.json?.error?.message };
    },
    size(op, args) {
      return Buffer.byteLength(JSON.stringify(route(op, args)[2]));
    },
  };
}

// ---------------------------------------------------------------- gRPC

const definition = loadSync(join(ROOT, 'proto', 'svc.proto'), { keepCase: true, longs: Number, enums: String, defaults: false, oneofs: true });
const methods = definition['svc.v1.Svc'] as Record<string, { requestSerialize: (o: object) => Buffer }>;

function grpcRequest(op: Op, a: Args): [string, object] {
  const withStructs = (ps: Args[]) => ps.map((p) => ({ ...p, ...(p.payload ? { payload: toStruct(p.payload) } : {}) }));
  switch (op) {
    case 'create': return ['CreateCollection', a];
    case 'list': return ['ListCollections', {}];
    case 'search': return ['Search', a];
    case 'multi': return ['SearchMultiVector', { ...a, vectors: (a.vectors as number[][]).map((values) => ({ values })) }];
    case 'fetch': return ['Fetch', a];
    case 'upsert': return ['Upsert', { ...a, points: withStructs(a.points) }];
    case 'bulk': return ['BulkUpsert', { ...a, points: withStructs(a.points) }];
    case 'hybrid': return ['HybridSearch', { collection: a.collection, k: a.k, sparse: { indices: a.sparse_indices, values: a.sparse_values } }];
    case 'text': return ['SearchText', a];
    case 'payload': return ['SetPayload', { ...a, points: (a.points as Args[]).map((p) => ({ id: p.id, payload: toStruct(p.payload) })) }];
    case 'deletes': return ['DeletePoints', a];
  }
}

function grpcPlane(g: SvcGrpc): Plane {
  return {
    name: 'gRPC',
    reader: () => rest,
    ops: new Set<Op>(['create', 'list', 'search', 'multi', 'fetch', 'upsert', 'bulk', 'hybrid', 'text', 'payload', 'deletes']),
    async call(op, args) {
      const [rpc, req] = grpcRequest(op, args);
      const r = await g.call(rpc, req, ADMIN);
      if (r.err === undefined) {
        const body = r.res;
        if (op === 'fetch') body.points = (body.points ?? []).map((p: Args) => ({ ...p, payload: fromStruct(p.payload) }));
        return { ok: true, body };
      }
      if (r.code === 'limit_exceeded') expect(r.err.code).toBe(status.INVALID_ARGUMENT);
      return { ok: false, code: r.code ?? `grpc ${r.err.code}`, message: r.err.details };
    },
    size(op, args) {
      const [rpc, req] = grpcRequest(op, args);
      return methods[rpc]!.requestSerialize(req).length;
    },
  };
}

// ---------------------------------------------------------------- MCP (JSON-RPC lines written by hand, to control their size)

const MCP_TOOL: Record<Op, string> = {
  create: 'create_collection', list: 'list_collections', search: 'search', multi: 'search_multi_vector', fetch: 'fetch',
  upsert: 'upsert', bulk: '', hybrid: 'hybrid_search', text: 'search_text', payload: 'set_payload', deletes: 'delete_points',
};

class RawMcp {
  private child!: ChildProcessWithoutNullStreams;
  private pending = new Map<number, (m: any) => void>();
  private nextId = 10_000;
  stderr = '';
  /** Lines from the server that answer no request of ours. */
  readonly unanswered: unknown[] = [];

  async start(args: string[], environment: Record<string, string>): Promise<void> {
    this.child = spawn(process.execPath, [MAIN, 'mcp', ...args], { env: cleanEnv(environment), cwd: ROOT });
    let buf = '';
    this.child.stdout.on('data', (d: Buffer) => {
      buf += d.toString();
      for (let nl = buf.indexOf('\n'); nl !== -1; nl = buf.indexOf('\n')) {
        const m = JSON.parse(buf.slice(0, nl));
        buf = buf.slice(nl + 1);
        const waiter = this.pending.get(m.id);
        if (waiter === undefined) this.unanswered.push(m);
        this.pending.delete(m.id);
        waiter?.(m);
      }
    });
    this.child.stderr.on('data', (d: Buffer) => { this.stderr += d.toString(); });
    const init = await this.request('initialize', { protocolVersion: '2025-06-18', capabilities: {}, clientInfo: { name: 'limits-e2e', version: '1' } });
    expect(init.result?.serverInfo?.name, this.stderr).toBe('svc');
    this.child.stdin.write(`${JSON.stringify({ jsonrpc: '2.0', method: 'notifications/initialized' })}\n`);
  }

  line(method: string, params: object, id = this.nextId): string {
    return JSON.stringify({ jsonrpc: '2.0', id, method, params });
  }

  request(method: string, params: object): Promise<any> {
    const id = this.nextId++;
    const text = this.line(method, params, id);
    return new Promise((resolve, reject) => {
      const timer = setTimeout(() => reject(new Error(`no answer to ${method} ${id}: ${this.stderr}`)), 20_000);
      this.pending.set(id, (m) => { clearTimeout(timer); resolve(m); });
      this.child.stdin.write(`${text}\n`);
    });
  }

  writeLine(text: string): void {
    this.child.stdin.write(`${text}\n`);
  }

  get alive(): boolean {
    return this.child.exitCode === null;
  }

  async stop(): Promise<void> {
    this.child.stdin.end();
    if (this.child.exitCode === null) await new Promise((r) => this.child.on('exit', r));
  }
}

function mcpPlane(m: RawMcp): Plane {
  return {
    name: 'MCP',
    ops: new Set<Op>(['create', 'list', 'search', 'multi', 'fetch', 'upsert', 'hybrid', 'text', 'payload', 'deletes']),
    async call(op, args) {
      const r = await m.request('tools/call', { name: MCP_TOOL[op], arguments: args });
      if (r.error !== undefined) return { ok: false, code: r.error.data?.code ?? `jsonrpc ${r.error.code}`, message: r.error.message };
      const sc = r.result.structuredContent;
      if (r.result.isError === true) return { ok: false, code: sc?.error?.code, message: sc?.error?.message };
      return { ok: true, body: sc };
    },
    size(op, args) {
      return Buffer.byteLength(m.line('tools/call', { name: MCP_TOOL[op], arguments: args }));
    },
  };
}

// ---------------------------------------------------------------- the table, run on each plane

/** What a user can read back: every collection with its count, and every point's id and payload. */
async function state(writer: Plane): Promise<unknown> {
  const plane = writer.reader?.() ?? writer;
  const listed = await plane.call('list', {});
  expect(listed.ok).toBe(true);
  const out: Record<string, unknown> = {};
  for (const c of listed.body.collections as Args[]) {
    const pts: unknown[] = [];
    let cursor: string | undefined;
    for (let page = 0; page < 1000; page++) {
      const r = await plane.call('fetch', { collection: c.name, limit: LIMITS.SVC_MAX_FETCH_LIMIT, ...(cursor ? { cursor } : {}) });
      expect(r.ok, JSON.stringify(r)).toBe(true);
      for (const p of r.body.points as Args[]) pts.push([p.id, p.payload ?? {}]);
      cursor = r.body.next_cursor ?? undefined;
      if (!cursor) break;
    }
    out[c.name as string] = { count: Number(c.count), points: pts.sort() };
  }
  return out;
}

async function setUp(plane: Plane): Promise<void> {
  // 'big' takes the padded points of the body-size rows, which a gRPC page of 'c' could not carry.
  for (const [name, multivector] of [['c', false], ['t', false], ['m', true], ['big', false]] as const) {
    const r = await plane.call('create', { name, dim: DIM, metric: 'cosine', ...(multivector ? { multivector: true } : {}) });
    expect(r.ok, JSON.stringify(r)).toBe(true);
  }
  expect((await plane.call('upsert', { collection: 'c', points: [point('seed-1', { t: 'a' }), point('seed-2')] })).ok).toBe(true);
}

async function expectRefused(plane: Plane, op: Op, args: Args, variable: Variable): Promise<void> {
  const before = await state(plane);
  const r = await plane.call(op, args);
  expect(r.ok, `${plane.name} accepted a request over ${variable}`).toBe(false);
  expect(r.code, `${plane.name} ${variable}: ${r.message}`).toBe('limit_exceeded');
  expect(r.message).toContain(variable);
  expect(await state(plane), `${plane.name}: stored data changed after a refused request over ${variable}`).toEqual(before);
}

/** `without`: operations the plane has no call for (MCP has no bulk tool; its upsert is capped by SVC_MAX_BATCH_SIZE). */
function table(name: string, plane: () => Plane, without: Op[] = []): void {
  describe(`limits over ${name}`, () => {
    for (const row of ROWS.filter((r) => !without.includes(r.op))) {
      it(`${row.variable} (${row.what}): at the limit accepted, one over refused`, async () => {
        const p = plane();
        const at = await p.call(row.op, row.at(name));
        expect(at, `${p.name} refused a request at ${row.variable}`).toMatchObject({ ok: true });
        await expectRefused(p, row.op, row.over(name), row.variable);
      });
    }

    it(`SVC_MAX_REQUEST_BODY_BYTES (request size): ${BODY_MAX} bytes accepted, one more refused`, async () => {
      const p = plane();
      const at = sizedUpsert(p, `${name}-at`, BODY_MAX, false);
      expect(at.size).toBe(BODY_MAX);
      expect(await p.call('upsert', at.args), `${p.name} refused a ${BODY_MAX}-byte request`).toMatchObject({ ok: true });
      const over = sizedUpsert(p, `${name}-ov`, BODY_MAX, true);
      expect(over.size).toBeLessThanOrEqual(BODY_MAX + 2); // protobuf length prefixes can skip a byte
      await expectRefused(p, 'upsert', over.args, 'SVC_MAX_REQUEST_BODY_BYTES');
    });
  });
}

let server: Server;
let grpc: SvcGrpc;
let mcp: RawMcp;
let rest: Plane;
let grpcP: Plane;
let mcpP: Plane;

beforeAll(async () => {
  const dir = tempDir('svc-limits-e2e-');
  const toml = ['[embedding.t]', 'provider = "fake"', 'model = "hash"', `dim = ${DIM}`, ''].join('\n');
  writeFileSync(join(dir, 'svc.toml'), toml);
  [server, mcp] = await Promise.all([
    serve(env({ SVC_DATA_DIR: join(dir, 'server-data'), SVC_CONFIG: join(dir, 'svc.toml') }), { cwd: dir }),
    (async () => {
      const m = new RawMcp();
      await m.start(['--data-dir', join(dir, 'mcp-data'), '--config', join(dir, 'svc.toml')], env({ SVC_API_KEY: ADMIN }));
      return m;
    })(),
  ]);
  grpc = new SvcGrpc(`127.0.0.1:${server.grpcPort}`);
  rest = restPlane(server);
  grpcP = grpcPlane(grpc);
  mcpP = mcpPlane(mcp);
  // REST and gRPC share one server (and its collections); every write of the table carries its plane's tag.
  await setUp(rest);
  await setUp(mcpP);
}, 60_000);

afterAll(async () => {
  grpc?.close();
  await Promise.all([server?.stop(), mcp?.stop()]);
});

table('REST', () => rest);
table('gRPC', () => grpcP);
table('MCP', () => mcpP, ['bulk']);

describe('svc mcp after oversized messages', () => {
  it('keeps running and answering, including after an oversized notification (which gets no reply)', async () => {
    mcp.writeLine(JSON.stringify({ jsonrpc: '2.0', method: 'notifications/x', params: { pad: 'p'.repeat(BODY_MAX * 20) } }));
    const listed = await mcpP.call('list', {});
    expect(listed.ok).toBe(true);
    expect(mcp.alive).toBe(true);
    expect(mcp.unanswered).toEqual([]);
  });
});
