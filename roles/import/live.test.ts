import { join } from 'node:path';
import { QdrantClient } from '@qdrant/js-client-rest';
import { ChromaClient } from 'chromadb';
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import { Prng } from '../../core/base/prng.js';
import { startChroma, type ChromaServer } from './testing/chroma-server.js';
import { byId, closeTo, freePort, KEY, normalized, readBack, removeDir, runImportCli, tempDir } from './testing/helpers.js';
import { startStoreAStandIn, type StoreAStandIn } from './testing/store-a-standin.js';

const root = tempDir();
afterAll(() => removeDir(root));
const prng = new Prng(20240605);
const vec = (dim: number): number[] => Array.from({ length: dim }, () => Number(prng.gaussian().toFixed(5)));

describe('live store_a through its scroll API (a stand-in its official client accepts)', () => {
  let standIn: StoreAStandIn;
  const SOURCE_KEY = 'source-secret-key';
  const points = Array.from({ length: 600 }, (_, i) => ({
    id: i % 3 === 0 ? `00000000-0000-4000-8000-${String(i).padStart(12, '0')}` : i,
    vector: vec(6),
    payload: { n: i, group: i % 2 === 0 ? 'even' : 'odd' },
  }));

  beforeAll(async () => {
    standIn = await startStoreAStandIn({ apiKey: SOURCE_KEY });
    const warn = vi.spyOn(console, 'warn').mockImplementation(() => undefined);
    const client = new QdrantClient({ url: standIn.url, apiKey: SOURCE_KEY });
    await client.createCollection('items', { vectors: { size: 6, distance: 'Cosine' } });
    for (let i = 0; i < points.length; i += 200) await client.upsert('items', { wait: true, points: points.slice(i, i + 200) });
    // A second collection with named vectors, and one bad point (wrong dimension).
    await client.createCollection('named', { vectors: { img: { size: 3, distance: 'Dot' }, txt: { size: 2, distance: 'Dot' } } });
    await client.upsert('named', {
      wait: true,
      points: [
        { id: 1, vector: { img: [1, 2, 3], txt: [1, 0] }, payload: { a: 1 } },
        { id: 2, vector: { img: [4, 5, 6], txt: [0, 1] }, payload: { a: 2 } },
        { id: 3, vector: { img: [7, 8], txt: [1, 1] }, payload: { a: 3 } },
      ],
    });
    expect((await client.getCollection('items')).points_count).toBe(600);
    await new Promise((r) => setTimeout(r, 50));
    // The official client checked the stand-in's version at construction and found it compatible.
    // (Its only other warning is about a key over http, which is what this test does on loopback.)
    const versionWarnings = warn.mock.calls.map((c) => String(c[0])).filter((m) => /version/i.test(m));
    expect(versionWarnings).toEqual([]);
    warn.mockRestore();
  });
  afterAll(() => standIn.close());

  it('pages through every point with the key in the api-key header; ids become strings, payloads kept', async () => {
    const data = join(root, 'a-live');
    const r = await runImportCli({ source: 'store_a', 'store-a-url': standIn.url, 'api-key': SOURCE_KEY, collection: 'items', 'data-dir': data, 'encryption-key': KEY, filterable: ['group:keyword'] });
    expect(r.code).toBe(0);
    expect(r.stdout).toContain('600 read, 600 imported, 0 skipped');
    expect(r.stderr).toContain('warning: the source key travels unencrypted over plaintext http://127.0.0.1');
    expect(r.stderr).not.toContain(SOURCE_KEY);
    expect(standIn.scrolls.length).toBeGreaterThan(2);
    expect(standIn.scrolls[0]).toEqual({ limit: 256, offset: null, with_payload: true, with_vector: true });
    expect(standIn.scrolls.slice(1).every((s) => s.offset !== null && s.limit === 256)).toBe(true);
    expect(standIn.keysSeen.slice(-3)).toEqual([SOURCE_KEY, SOURCE_KEY, SOURCE_KEY]);
    const m = byId((await readBack(data, 'items')).points);
    expect(m.size).toBe(600);
    for (const p of [points[0], points[1], points[599]]) {
      const got = m.get(String(p.id))!;
      expect(got.payload).toEqual(p.payload);
      expect(closeTo(got.vector, normalized(p.vector))).toBe(true);
    }
  });

  it('a refused key stops the import with a clear reason', async () => {
    const r = await runImportCli({ source: 'store_a', 'store-a-url': standIn.url, 'api-key': 'wrong', collection: 'items', 'data-dir': join(root, 'a-refused'), insecure: true });
    expect(r.code).toBe(1);
    expect(r.stderr).toContain('the source refused the key (HTTP 401); check --api-key');
  });

  it('named vectors: choices named without --vector-name; with it, bad points reported and the rest imported', async () => {
    const data = join(root, 'a-named');
    const none = await runImportCli({ source: 'store_a', 'store-a-url': standIn.url, 'api-key': SOURCE_KEY, collection: 'named', 'data-dir': data, insecure: true });
    expect(none.stderr).toContain('several named vectors (img, txt): choose one with --vector-name');
    const r = await runImportCli({ source: 'store_a', 'store-a-url': standIn.url, 'api-key': SOURCE_KEY, collection: 'named', 'data-dir': data, insecure: true, 'vector-name': 'img', metric: 'dot' });
    expect(r.code).toBe(1);
    expect(r.stderr).toContain('skipped point 3 (id 3): vector has 2 dimensions, the collection has 3');
    const m = byId((await readBack(data, 'named', { insecure: true })).points);
    expect(m.get('2')).toEqual({ id: '2', vector: [4, 5, 6], payload: { a: 2 } });
    expect(m.size).toBe(2);
  });

  it('an unreachable source says so', async () => {
    const port = await freePort();
    const r = await runImportCli({ source: 'store_a', 'store-a-url': `http://127.0.0.1:${port}`, collection: 'items', 'data-dir': join(root, 'a-down'), insecure: true });
    expect(r.code).toBe(1);
    expect(r.stderr).toMatch(/store_a collection info: cannot reach http:\/\/127\.0\.0\.1:\d+ \(ECONNREFUSED\)/);
  });
});

describe('live store_b: a real server from its npm bindings, filled by its official client', () => {
  let chroma: ChromaServer;
  const N = 700;
  const ids = Array.from({ length: N }, (_, i) => `doc-${i}`);
  const embeddings = ids.map(() => vec(5));
  const metadatas = ids.map((_, i) => ({ topic: ['a', 'b', 'c'][i % 3], n: i }));
  const documents = ids.map((_, i) => `the text of document ${i}`);

  beforeAll(async () => {
    chroma = await startChroma(join(root, 'chroma-data'));
    const client = new ChromaClient({ host: '127.0.0.1', port: chroma.port, ssl: false });
    const col = await client.createCollection({ name: 'articles', embeddingFunction: null as never });
    for (let i = 0; i < N; i += 300) {
      await col.add({ ids: ids.slice(i, i + 300), embeddings: embeddings.slice(i, i + 300), metadatas: metadatas.slice(i, i + 300), documents: documents.slice(i, i + 300) });
    }
    expect(await col.count()).toBe(N);
    const other = await client.createCollection({ name: 'notes', embeddingFunction: null as never });
    await other.add({ ids: ['x1', 'x2'], embeddings: [[1, 0, 0, 0, 0], [0, 1, 0, 0, 0]] });
  }, 120_000);
  afterAll(async () => { await chroma?.stop(); });

  it('finds the collection by name, pages through it, metadata is the payload, documents under "document"', async () => {
    const data = join(root, 'b-live');
    const r = await runImportCli({ source: 'store_b', 'store-b-url': chroma.url, collection: 'articles', 'data-dir': data, 'encryption-key': KEY, filterable: ['topic:keyword', 'n:numeric'] });
    expect(r.stderr).toBe('');
    expect(r.code).toBe(0);
    expect(r.stdout).toContain(`${N} read, ${N} imported, 0 skipped`);
    const { points, info } = await readBack(data, 'articles');
    expect(info).toMatchObject({ dim: 5, metric: 'cosine', count: N });
    const m = byId(points);
    for (const i of [0, 299, 300, 699]) {
      const p = m.get(ids[i])!;
      expect(p.payload).toEqual({ ...metadatas[i], document: documents[i] });
      expect(closeTo(p.vector, normalized(embeddings[i]), 1e-4)).toBe(true);
    }
  });

  it('re-import appends without dropping or duplicating; another source collection lands in its own target', async () => {
    const data = join(root, 'b-live');
    const r = await runImportCli({ source: 'store_b', 'store-b-url': chroma.url, collection: 'notes', 'data-dir': data, 'encryption-key': KEY });
    expect(r.code).toBe(0);
    const again = await runImportCli({ source: 'store_b', 'store-b-url': chroma.url, collection: 'articles', 'data-dir': data, 'encryption-key': KEY });
    expect(again.code).toBe(0);
    expect(again.stdout).toContain(`collection 'articles' appended: ${N} points`);
    expect((await readBack(data, 'notes')).points.map((p) => p.id)).toEqual(['x1', 'x2']);
  });

  it('an unknown tenant or collection is reported by the source', async () => {
    const r = await runImportCli({ source: 'store_b', 'store-b-url': chroma.url, collection: 'missing', 'data-dir': join(root, 'b-missing'), insecure: true });
    expect(r.code).toBe(1);
    expect(r.stderr).toMatch(/store_b collection lookup: HTTP 404/);
  });
});
