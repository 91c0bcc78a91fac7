/**
 * Secrets never reach logs, audit lines, error bodies, metrics or the data and snapshot directories.
 * `svc serve` runs with an admin key, a scoped key (key_sha256), a master key file, a provider key
 * (api_key_env), TLS, an audit log and RUST_LOG=debug; every route is exercised, failing ones included
 * (bad key, out of scope, a provider that fails and echoes the key it got, malformed bodies); then each
 * secret, in its plain, hex and base64 forms, is searched for everywhere a user or operator can look.
 * Imports no project code.
 */
import { createHash, randomBytes } from 'node:crypto';
import { chmodSync, readdirSync, readFileSync, statSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { credentials } from '@grpc/grpc-js';
import { Agent, fetch as undiciFetch } from 'undici';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { SvcGrpc } from './grpc-client.js';
import { JsonStandIn, makeCerts, serve, tempDir, type Server } from './harness.js';

const ADMIN = `adm-${randomBytes(12).toString('hex')}`;
const SCOPED = `team-${randomBytes(12).toString('hex')}`;
const WRONG = `wrong-${randomBytes(12).toString('hex')}`;
const MASTER_BYTES = randomBytes(32);
const MASTER_HEX = MASTER_BYTES.toString('hex');
const EMBED_SECRET = `sk-embed-${randomBytes(12).toString('hex')}`;
const DIM = 4;

/** A provider stand-in: embeddings by word hash; when `fail` it answers 503 echoing the key it was sent. */
class StandIn extends JsonStandIn {
  fail = false;
  seenAuth: string[] = [];
  constructor() {
    super((req, raw) => {
      this.seenAuth.push(req.headers.authorization ?? '');
      if (this.fail) return [503, { error: `overloaded; you sent ${req.headers.authorization}`, echo: raw }];
      const input = (JSON.parse(raw) as { input: string[] }).input;
      return [200, { data: input.map((t, index) => ({ index, embedding: [1, t.length % 7, 0.5, 0.25] })) }];
    });
  }
}

const dir = tempDir('svc-secrets-');
const dataDir = join(dir, 'data');
const snapDir = join(dir, 'snaps');
const auditPath = join(dir, 'audit.jsonl');
const provider = new StandIn();
let server: Server;
let grpc: SvcGrpc;
let agent: Agent;
/** Every response body and gRPC error the test saw. */
const seen: string[] = [];

async function rest(method: string, path: string, key: string | null, body?: unknown): Promise<{ status: number; json: any }> {
  const headers: Record<string, string> = {};
  if (key !== null) headers.authorization = `Bearer ${key}`;
  if (body !== undefined) headers['content-type'] = 'application/json';
  const r = await undiciFetch(`${server.base}${path}`, {
    method, headers, dispatcher: agent, body: body === undefined ? undefined : typeof body === 'string' ? body : JSON.stringify(body),
  });
  const text = await r.text();
  seen.push(`${r.status} ${[...r.headers].map(([k, v]) => `${k}: ${v}`).join('\n')}\n${text}`);
  let json: any = text;
  try { json = JSON.parse(text); } catch { /* not JSON */ }
  return { status: r.status, json };
}

async function rpc(name: string, req: object, key?: string): Promise<{ code?: string; res?: any }> {
  const r = await grpc.call(name, req, key);
  if (r.err) seen.push(`${r.err.code} ${r.err.details} ${JSON.stringify(r.err.metadata.getMap())}`);
  else seen.push(JSON.stringify(r.res));
  return { code: r.code, res: r.res };
}

beforeAll(async () => {
  makeCerts(dir);
  await provider.start();
  const keyFile = join(dir, 'master.key');
  writeFileSync(keyFile, `${MASTER_HEX}\n`);
  chmodSync(keyFile, 0o600);
  writeFileSync(join(dir, 'svc.toml'), [
    '[[api_keys]]', 'name = "team-a-writer"', 'role = "admin"', 'collections = ["team_a.*"]',
    `key_sha256 = "${createHash('sha256').update(SCOPED).digest('hex')}"`, '',
    '[embedding.docs]', 'provider = "hosted_a"', 'model = "embed-small"', `endpoint = "http://127.0.0.1:${provider.port}/v1"`,
    `dim = ${DIM}`, 'api_key_env = "EMBED_KEY"', '',
  ].join('\n'));
  agent = new Agent({ connect: { ca: readFileSync(join(dir, 'ca.pem')) } });
  server = await serve({
    SVC_API_KEYS: ADMIN, SVC_MASTER_KEY_FILE: keyFile, SVC_DATA_DIR: dataDir, SVC_SNAPSHOT_DIR: snapDir,
    SVC_CONFIG: join(dir, 'svc.toml'), SVC_AUDIT_LOG: auditPath, EMBED_KEY: EMBED_SECRET, RUST_LOG: 'debug',
    SVC_TLS_CERT: join(dir, 'server.pem'), SVC_TLS_KEY: join(dir, 'server.key'),
  }, { cwd: dir, scheme: 'https', ready: async (b) => (await undiciFetch(`${b}/readyz`, { dispatcher: agent })).status === 200 });
  grpc = new SvcGrpc(`localhost:${server.grpcPort}`, credentials.createSsl(readFileSync(join(dir, 'ca.pem'))));
}, 60_000);

afterAll(async () => {
  grpc?.close();
  await server?.stop();
  await provider.close();
  await agent?.close();
});

function filesUnder(root: string): string[] {
  const out: string[] = [];
  let entries: string[];
  try { entries = readdirSync(root); } catch { return out; }
  for (const e of entries) {
    const p = join(root, e);
    if (statSync(p).isDirectory()) out.push(...filesUnder(p));
    else out.push(p);
  }
  return out;
}

/** Each secret as the bytes it could be written as. */
function forms(): { name: string; bytes: Buffer }[] {
  const text = (name: string, s: string) => [
    { name, bytes: Buffer.from(s) },
    { name: `${name} (hex)`, bytes: Buffer.from(Buffer.from(s).toString('hex')) },
    { name: `${name} (base64)`, bytes: Buffer.from(Buffer.from(s).toString('base64').replace(/=+$/, '')) },
  ];
  const tlsKeyBody = readFileSync(join(dir, 'server.key'), 'utf8').split('\n').filter((l) => l.length > 0 && !l.startsWith('-----'));
  return [
    ...text('admin key', ADMIN), ...text('scoped key', SCOPED), ...text('unknown key', WRONG), ...text('provider key', EMBED_SECRET),
    { name: 'master key (hex)', bytes: Buffer.from(MASTER_HEX) },
    { name: 'master key (HEX)', bytes: Buffer.from(MASTER_HEX.toUpperCase()) },
    { name: 'master key (raw)', bytes: MASTER_BYTES },
    { name: 'master key (base64)', bytes: Buffer.from(MASTER_BYTES.toString('base64').replace(/=+$/, '')) },
    { name: 'TLS private key', bytes: Buffer.from(tlsKeyBody[1]!) },
  ];
}

function leaks(where: string, content: Buffer): string[] {
  return forms().filter((f) => content.includes(f.bytes)).map((f) => `${f.name} in ${where}`);
}

describe('secrets', () => {
  it('appear nowhere after every route has been exercised, failures included', async () => {
    // Collections and points, as admin and as the scoped key.
    expect((await rest('POST', '/v1/collections', ADMIN, { name: 'docs', dim: DIM, metric: 'cosine', filterable: [{ path: 'lang', field_type: 'keyword' }] })).status).toBe(201);
    expect((await rest('POST', '/v1/collections', SCOPED, { name: 'team_a.notes', dim: DIM, metric: 'l2' })).status).toBe(201);
    expect((await rest('POST', '/v1/collections', SCOPED, { name: 'team_b.notes', dim: DIM, metric: 'l2' })).status).toBe(403);
    expect((await rest('GET', '/v1/collections', WRONG)).status).toBe(401);
    expect((await rest('GET', '/v1/collections', null)).status).toBe(401);
    expect((await rest('GET', '/v1/collections', `${ADMIN}x`)).status).toBe(401);
    expect((await rest('GET', '/v1/collections', SCOPED)).status).toBe(200);
    const pts = [{ id: 'p1', vector: [1, 0, 0, 0], payload: { lang: 'en' } }, { id: 'p2', vector: [0, 1, 0, 0], payload: { lang: 'de' } }];
    expect((await rest('PUT', '/v1/collections/team_a.notes/points', SCOPED, { points: pts })).status).toBe(200);
    expect((await rest('PUT', '/v1/collections/docs/points', SCOPED, { points: pts })).status).toBe(403);
    expect((await rest('PUT', '/v1/collections/docs/points', ADMIN, { points: pts })).status).toBe(200);
    expect((await rest('POST', '/v1/collections/docs/points:bulk', ADMIN, { points: [{ id: 'b1', vector_b64: Buffer.from(new Float32Array([0, 0, 1, 0]).buffer).toString('base64') }] })).status).toBe(200);
    expect((await rest('GET', '/v1/collections/docs/points/p1?with_vector=true', ADMIN)).status).toBe(200);
    expect((await rest('POST', '/v1/collections/docs/points:fetch', ADMIN, { filter: { eq: { field: 'lang', value: 'en' } } })).status).toBe(200);
    expect((await rest('POST', '/v1/collections/docs/query', ADMIN, { vector: [1, 0, 0, 0], k: 2 })).status).toBe(200);
    expect((await rest('POST', '/v1/collections/docs/query/hybrid', ADMIN, { vector: [1, 0, 0, 0], sparse_indices: [1], sparse_values: [1], k: 2 })).status).toBe(200);
    // The provider: a success, then failures in which it echoes the key it was sent.
    expect((await rest('POST', '/v1/collections/docs/points:text', ADMIN, { points: [{ id: 't1', text: 'hello world' }] })).status).toBe(200);
    expect((await rest('POST', '/v1/collections/docs/query/text', ADMIN, { text: 'hello', k: 2 })).status).toBe(200);
    provider.fail = true;
    expect((await rest('POST', '/v1/collections/docs/points:text', ADMIN, { points: [{ id: 't2', text: 'bye' }] })).status).toBe(502);
    expect((await rest('POST', '/v1/collections/docs/query/text', ADMIN, { text: 'bye', k: 2 })).status).toBe(502);
    expect((await rpc('SearchText', { collection: 'docs', text: 'bye', k: 2 }, ADMIN)).code).toBe('provider_error');
    provider.fail = false;
    expect(provider.seenAuth).toContain(`Bearer ${EMBED_SECRET}`); // the key was really sent, so a leak was possible
    // Malformed and invalid bodies, unknown things.
    expect((await rest('POST', '/v1/collections/docs/query', ADMIN, '{"vector": [1,')).status).toBe(400);
    expect((await rest('POST', '/v1/collections/docs/query', ADMIN, { vector: [1, 0], k: 2 })).status).toBe(400);
    expect((await rest('POST', '/v1/collections/docs/query', ADMIN, { vector: [1, 0, 0, 0], k: 2, filter: { eq: { field: 'undeclared', value: 1 } } })).status).toBe(400);
    expect((await rest('POST', '/v1/collections', ADMIN, { name: '../etc', dim: 2, metric: 'l2' })).status).toBe(400);
    expect((await rest('GET', '/v1/collections/nope', ADMIN)).status).toBe(404);
    expect((await rest('POST', '/v1/collections', ADMIN, { name: 'docs', dim: DIM, metric: 'cosine' })).status).toBe(409);
    // Multi-vector documents, stats, snapshot, deletes.
    expect((await rest('POST', '/v1/collections', ADMIN, { name: 'multi', dim: DIM, metric: 'cosine', multivector: true })).status).toBe(201);
    expect((await rest('PUT', '/v1/collections/multi/documents', ADMIN, { documents: [{ id: 'd1', vectors: [[1, 0, 0, 0], [0, 1, 0, 0]] }] })).status).toBe(200);
    expect((await rest('POST', '/v1/collections/multi/query/multi', ADMIN, { vectors: [[1, 0, 0, 0]], k: 1 })).status).toBe(200);
    expect((await rest('DELETE', '/v1/collections/multi/documents/d1', ADMIN)).status).toBe(200);
    expect((await rest('GET', '/v1/stats', SCOPED)).status).toBe(200);
    expect((await rest('POST', '/v1/snapshots', ADMIN, { name: 'snap1' })).status).toBe(200);
    expect((await rest('POST', '/v1/snapshots', SCOPED, { name: 'snap2' })).status).toBe(403);
    expect((await rest('DELETE', '/v1/collections/docs/points/p2', ADMIN)).status).toBe(200);
    expect((await rest('DELETE', '/v1/collections/team_a.notes', SCOPED)).status).toBe(200);
    // gRPC: good, bad and out-of-scope keys.
    expect((await rpc('ListCollections', {}, ADMIN)).res).toBeDefined();
    expect((await rpc('ListCollections', {}, WRONG)).code).toBe('unauthenticated');
    expect((await rpc('Search', { collection: 'docs', vector: [1, 0, 0, 0], k: 1 }, SCOPED)).code).toBe('permission_denied');
    expect((await rpc('Search', { collection: 'docs', vector: [1, 0], k: 1 }, ADMIN)).code).toBe('invalid_argument');
    const denied = await grpc.replicate(SCOPED);
    expect(denied.err).toBeDefined();
    seen.push(`${denied.err?.code} ${denied.err?.details}`);
    expect((await rest('GET', '/healthz', null)).status).toBe(200);
    const metrics = await rest('GET', '/metrics', null);
    expect(metrics.status).toBe(200);
    expect(metrics.json).toContain('svc_auth_failures_total');

    await server.stop();
    const found = [
      ...leaks('stdout', Buffer.from(server.stdout())),
      ...leaks('stderr', Buffer.from(server.stderr())),
      ...leaks('the audit log', readFileSync(auditPath)),
      ...seen.flatMap((s, i) => leaks(`response ${i}: ${s.slice(0, 200)}`, Buffer.from(s))),
      ...[...filesUnder(dataDir), ...filesUnder(snapDir)].flatMap((f) => leaks(f, readFileSync(f))),
    ];
    expect(found).toEqual([]);
    // The test looked at real output: debug logs, audit lines, stored files.
    expect(server.stderr().length + server.stdout().length).toBeGreaterThan(1000);
    expect(readFileSync(auditPath, 'utf8')).toContain('team-a-writer');
    expect(filesUnder(snapDir).length).toBeGreaterThan(0);
  });
});
