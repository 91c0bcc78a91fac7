/**
 * `svc admin import` as a user runs it: the real program on export files of all three formats (with
 * bad rows), then a real `svc serve` on the same data directory to read everything back over REST.
 */
import { rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { api, cleanEnv, MASTER, run, serve, tempDir, type Server } from './harness.js';

const dir = tempDir('svc-e2e-import-');
const data = join(dir, 'data');
const env = cleanEnv({ SVC_ENCRYPTION_KEY: MASTER });

function file(name: string, text: string): string {
  const p = join(dir, name);
  writeFileSync(p, text);
  return p;
}

async function svcImport(args: string[]): Promise<{ code: number | null; stdout: string; stderr: string }> {
  const p = run(['admin', 'import', '--data-dir', data, ...args], env);
  const code = await p.exited;
  return { code, stdout: p.stdout(), stderr: p.stderr() };
}

const storeA = file('a.jsonl', [
  JSON.stringify({ id: 1, vector: [1, 0, 0], payload: { kind: 'a', n: 1 } }),
  JSON.stringify({ id: '6f1c2b9e-1d2a-4c1e-9b1a-000000000002', vector: [0, 1, 0], payload: { kind: 'a', n: 2 } }),
  '{broken',
  JSON.stringify({ id: 3, vector: [0, 1], payload: { kind: 'a' } }),
].join('\n'));
const storeB = file('b.json', JSON.stringify({
  ids: ['b1', 'b2', 'b3'],
  embeddings: [[1, 1, 0], [0, 1, 1], null],
  metadatas: [{ kind: 'b' }, { kind: 'b', n: 5 }, { kind: 'b' }],
  documents: ['first document', 'second document', 'third'],
}));
const storeC = file('c.jsonl', [
  JSON.stringify({ id: 100, embedding: '[1,2,3]', kind: 'c', price: 1.5 }),
  JSON.stringify({ id: 101, embedding: '[3,2,1]', kind: 'c', price: 2.5 }),
  JSON.stringify({ id: 102, embedding: '[a,b,c]', kind: 'c' }),
].join('\n'));

let server: Server | null = null;
afterAll(async () => {
  await server?.stop();
  rmSync(dir, { recursive: true, force: true });
});

describe('svc admin import from export files', () => {
  beforeAll(async () => {
    const a = await svcImport(['--source', 'store_a', '--input', storeA, '--collection', 'mixed', '--filterable', 'kind:keyword']);
    expect(a.stderr).toContain('skipped line 3: not valid JSON');
    expect(a.stderr).toContain('skipped line 4 (id 3): vector has 2 dimensions, the collection has 3');
    expect(a.stdout).toContain("import into 'mixed': 4 read, 2 imported, 2 skipped");
    expect(a.code).toBe(1);
    const b = await svcImport(['--source', 'store_b', '--input', storeB, '--collection', 'mixed', '--filterable', 'kind:keyword']);
    expect(b.stderr).toContain('skipped entry 2 (id b3): embedding: vector is missing');
    expect(b.stdout).toContain("collection 'mixed' appended: 4 points");
    const c = await svcImport(['--source', 'store_c', '--input', storeC, '--collection', 'mixed']);
    expect(c.stderr).toContain("skipped line 3: embedding: vector text has a non-number element 'a'");
    expect(c.stdout).toContain("3 read, 2 imported, 1 skipped");
    expect(c.stdout).toContain("collection 'mixed' appended: 6 points");
    server = await serve({ SVC_API_KEYS: 'k', SVC_ENCRYPTION_KEY: MASTER, SVC_DATA_DIR: data }, { cwd: dir });
  });

  it('reads back every imported point over REST: ids as strings, payloads, vectors', async () => {
    const call = api(server!.base, 'k');
    const r = await call('POST', '/v1/collections/mixed/points:fetch', { limit: 100, with_vector: true });
    expect(r.status).toBe(200);
    const byId = new Map<string, any>(r.json.points.map((p: any) => [p.id, p]));
    expect([...byId.keys()].sort()).toEqual(['1', '100', '101', '6f1c2b9e-1d2a-4c1e-9b1a-000000000002', 'b1', 'b2']);
    expect(byId.get('1').payload).toEqual({ kind: 'a', n: 1 });
    expect(byId.get('b2').payload).toEqual({ kind: 'b', n: 5, document: 'second document' });
    expect(byId.get('100').payload).toEqual({ kind: 'c', price: 1.5 });
    const s = 1 / Math.sqrt(14);
    byId.get('100').vector.forEach((x: number, i: number) => expect(x).toBeCloseTo([1, 2, 3][i] * s, 5));
    const info = await call('GET', '/v1/collections/mixed');
    expect(info.json).toMatchObject({ dim: 3, metric: 'cosine', count: 6, filterable: [{ path: 'kind', field_type: 'keyword' }] });
    const q = await call('POST', '/v1/collections/mixed/query', { vector: [1, 1, 0], k: 2, filter: { eq: { field: 'kind', value: 'b' } }, consistency: 'strong' });
    expect(q.json.hits[0].id).toBe('b1');
  });
});

describe('svc admin import on the command line', () => {
  it('--help lists every flag with its default', async () => {
    const p = run(['admin', 'import', '--help'], env);
    await p.exited;
    for (const flag of ['--source', '--input', '--store-a-url', '--store-b-url', '--postgres-url', '--store-b-tenant', '--store-b-database',
      '--table', '--api-key', '--collection', '--data-dir', '--metric', '--dim', '--filterable', '--id-field', '--vector-field',
      '--vector-name', '--encryption-key', '--insecure']) {
      expect(p.stdout()).toContain(flag);
    }
    expect(p.stdout()).toContain('default_tenant');
    expect(p.stdout()).toContain('(default cosine)');
  });

  it('an unknown flag or a missing key is a usage error with a hint', async () => {
    const bad = run(['admin', 'import', '--sorce', 'store_a'], env);
    expect(await bad.exited).toBe(2);
    expect(bad.stderr()).toContain('Hint: run svc admin import --help');
    const nokey = run(['admin', 'import', '--source', 'store_a', '--input', storeA, '--collection', 'x', '--data-dir', join(dir, 'other')], cleanEnv({}));
    expect(await nokey.exited).toBe(2);
    expect(nokey.stderr()).toContain('--encryption-key or SVC_ENCRYPTION_KEY');
  });

  it('warns on stderr when a key would travel over plaintext http', async () => {
    const p = run(['admin', 'import', '--source', 'store_a', '--store-a-url', 'http://127.0.0.1:9', '--api-key', 'secret-xyz',
      '--collection', 'x', '--data-dir', join(dir, 'other'), '--insecure'], env);
    expect(await p.exited).toBe(1);
    expect(p.stderr()).toContain('warning: the source key travels unencrypted over plaintext http://127.0.0.1:9');
    expect(p.stderr()).not.toContain('secret-xyz');
  });
});
