import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { byId, closeTo, KEY, normalized, readBack, removeDir, runImportCli, tempDir } from './testing/helpers.js';

const root = tempDir();
afterAll(() => removeDir(root));
let n = 0;
function file(name: string, text: string): string {
  const p = join(root, `${n++}-${name}`);
  writeFileSync(p, text);
  return p;
}
const jsonl = (rows: unknown[]): string => `${rows.map((r) => (typeof r === 'string' ? r : JSON.stringify(r))).join('\n')}\n`;

describe('store_a export (JSON Lines)', () => {
  const data = join(root, 'a-data');
  const input = file('a.jsonl', jsonl([
    { id: 1, vector: [1, 2, 3], payload: { title: 'one', year: 2001, nested: { tags: ['x', 'y'] } } },
    { id: '550e8400-e29b-41d4-a716-446655440000', vector: [0.5, -1, 2], payload: { title: 'uuid', year: 1999 } },
    '{"id": 3, "vector": [1, 2',
    { id: 4, vector: [1, 2], payload: {} },
    { id: 5, vector: [0, 0, 0], payload: {} },
    { id: 6, vector: [1, 1, 1], payload: 'not an object' },
    '',
    { id: 7, vector: [3, 2, 1] },
  ]));

  it('imports the good rows, reports each bad one with its line and reason, and summarises', async () => {
    const r = await runImportCli({ source: 'store_a', input, collection: 'qa', 'data-dir': data, 'encryption-key': KEY, filterable: ['year:numeric', 'title:keyword'] });
    expect(r.code).toBe(1);
    expect(r.stdout).toContain("import into 'qa': 7 read, 3 imported, 4 skipped");
    expect(r.stdout).toContain("collection 'qa' created: 3 points, dim 3, cosine");
    expect(r.stderr).toMatch(/skipped line 3: not valid JSON/);
    expect(r.stderr).toContain('skipped line 4 (id 4): vector has 2 dimensions, the collection has 3');
    expect(r.stderr).toContain('skipped line 5 (id 5): vector must not be all zeros for the cosine metric');
    expect(r.stderr).toContain('skipped line 6: payload is not a JSON object');

    const { points, info } = await readBack(data, 'qa');
    expect(info.filterable).toEqual([{ path: 'year', field_type: 'numeric' }, { path: 'title', field_type: 'keyword' }]);
    const m = byId(points);
    expect([...m.keys()].sort()).toEqual(['1', '550e8400-e29b-41d4-a716-446655440000', '7']);
    expect(m.get('1')!.payload).toEqual({ title: 'one', year: 2001, nested: { tags: ['x', 'y'] } });
    expect(m.get('7')!.payload).toEqual({});
    expect(closeTo(m.get('1')!.vector, normalized([1, 2, 3]))).toBe(true);
    expect(closeTo(m.get('550e8400-e29b-41d4-a716-446655440000')!.vector, normalized([0.5, -1, 2]))).toBe(true);
  });

  it('re-import appends: new ids join, existing ones are replaced, nothing is dropped', async () => {
    const more = file('a2.jsonl', jsonl([
      { id: 1, vector: [3, 2, 1], payload: { title: 'one again', year: 2002 } },
      { id: 8, vector: [1, 0, 0], payload: { title: 'eight' } },
    ]));
    const r = await runImportCli({ source: 'store_a', input: more, collection: 'qa', 'data-dir': data, 'encryption-key': KEY, filterable: ['year:numeric'] });
    expect(r.code).toBe(0);
    expect(r.stderr).toContain("appending to existing collection 'qa' (dim 3, cosine, 3 points)");
    expect(r.stdout).toContain("collection 'qa' appended: 4 points");
    const m = byId((await readBack(data, 'qa')).points);
    expect([...m.keys()].sort()).toEqual(['1', '550e8400-e29b-41d4-a716-446655440000', '7', '8']);
    expect(m.get('1')!.payload).toEqual({ title: 'one again', year: 2002 });
  });

  it('refuses a filterable field the existing collection lacks, and a wrong --dim, writing nothing', async () => {
    const more = file('a3.jsonl', jsonl([{ id: 99, vector: [1, 2, 3] }]));
    const r = await runImportCli({ source: 'store_a', input: more, collection: 'qa', 'data-dir': data, 'encryption-key': KEY, filterable: ['genre:keyword'] });
    expect(r.code).toBe(1);
    expect(r.stderr).toContain("exists without filterable genre:keyword");
    const r2 = await runImportCli({ source: 'store_a', input: more, collection: 'qa', 'data-dir': data, 'encryption-key': KEY, dim: '4' });
    expect(r2.stderr).toContain("exists with dim 3, not --dim 4");
    expect(byId((await readBack(data, 'qa')).points).has('99')).toBe(false);
  });

  it('named vectors: the sole one by default, --vector-name to pick, an error naming the choices otherwise', async () => {
    const d = join(root, 'named');
    const sole = file('sole.jsonl', jsonl([{ id: 1, vector: { image: [1, 2] } }, { id: 2, vector: { image: [2, 1] } }]));
    expect((await runImportCli({ source: 'store_a', input: sole, collection: 'sole', 'data-dir': d, insecure: true, metric: 'l2' })).code).toBe(0);
    const sp = byId((await readBack(d, 'sole', { insecure: true })).points);
    expect(sp.get('2')!.vector).toEqual([2, 1]);

    const two = file('two.jsonl', jsonl([{ id: 1, vector: { image: [1, 2], text: [1, 2, 3] } }]));
    const bad = await runImportCli({ source: 'store_a', input: two, collection: 'two', 'data-dir': d, insecure: true });
    expect(bad.code).toBe(1);
    expect(bad.stderr).toContain('points have several named vectors (image, text): choose one with --vector-name');
    const good = await runImportCli({ source: 'store_a', input: two, collection: 'two', 'data-dir': d, insecure: true, 'vector-name': 'text', metric: 'dot' });
    expect(good.code).toBe(0);
    const { points, info } = await readBack(d, 'two', { insecure: true });
    expect(info).toMatchObject({ dim: 3, metric: 'dot' });
    expect(points[0].vector).toEqual([1, 2, 3]);
  });

  it('streams a file larger than one batch in batches and shows progress on a terminal only', async () => {
    const d = join(root, 'big');
    const rows = Array.from({ length: 2500 }, (_, i) => ({ id: i, vector: [i % 7, 1, (i * 13) % 5], payload: { i } }));
    const big = file('big.jsonl', jsonl(rows));
    const tty = await runImportCli({ source: 'store_a', input: big, collection: 'big', 'data-dir': d, insecure: true, metric: 'l2' }, {}, true);
    expect(tty.code).toBe(0);
    expect(tty.stderr).toMatch(/100\.0%.*2500 imported.*points\/s.*ETA 0s/);
    const { points } = await readBack(d, 'big', { insecure: true });
    expect(points).toHaveLength(2500);
    expect(byId(points).get('2499')).toMatchObject({ payload: { i: 2499 }, vector: [2499 % 7, 1, (2499 * 13) % 5] });
    const plain = await runImportCli({ source: 'store_a', input: big, collection: 'big', 'data-dir': d, insecure: true }, {}, false);
    expect(plain.stderr).not.toContain('points/s');
    expect(plain.stdout).toContain('2500 read, 2500 imported, 0 skipped');
  });
});

describe('store_c export (JSON Lines of rows)', () => {
  it('every non-id, non-vector column is payload; text literal vectors parse; --id-field and --vector-field', async () => {
    const d = join(root, 'c');
    const input = file('c.jsonl', jsonl([
      { pk: 10, emb: '[1,2,3,4]', name: 'ten', price: 9.5, tags: ['a'] },
      { pk: 11, emb: [4, 3, 2, 1], name: 'eleven', price: null },
      { pk: 12, emb: '[1,2,x,4]', name: 'bad' },
      { emb: '[1,1,1,1]', name: 'no id' },
    ]));
    const r = await runImportCli({ source: 'store_c', input, collection: 'rows', 'data-dir': d, insecure: true, 'id-field': 'pk', 'vector-field': 'emb', metric: 'l2', filterable: ['price:numeric'] });
    expect(r.code).toBe(1);
    expect(r.stderr).toContain("skipped line 3: emb: vector text has a non-number element 'x'");
    expect(r.stderr).toContain('skipped line 4: pk: id is missing');
    const m = byId((await readBack(d, 'rows', { insecure: true })).points);
    expect(m.get('10')).toEqual({ id: '10', vector: [1, 2, 3, 4], payload: { name: 'ten', price: 9.5, tags: ['a'] } });
    expect(m.get('11')).toEqual({ id: '11', vector: [4, 3, 2, 1], payload: { name: 'eleven', price: null } });
    expect(m.size).toBe(2);
  });
});

describe('store_b export (one JSON object)', () => {
  it('metadata becomes the payload and each document is stored under "document"', async () => {
    const d = join(root, 'b');
    const input = file('b.json', JSON.stringify({
      ids: ['doc1', 'doc2', 'doc3', 'doc4'],
      embeddings: [[0.1, 0.2], [0.3, 0.4], [1], [0.5, 0.6]],
      metadatas: [{ source: 'web', rank: 1 }, null, { source: 'x' }, { source: 'pdf' }],
      documents: ['first text', 'second text', 'third', null],
    }));
    const r = await runImportCli({ source: 'store_b', input, collection: 'docs', 'data-dir': d, 'encryption-key': KEY, filterable: ['source:keyword'] });
    expect(r.code).toBe(1);
    expect(r.stderr).toContain('skipped entry 2 (id doc3): vector has 1 dimensions, the collection has 2');
    expect(r.stdout).toContain('4 read, 3 imported, 1 skipped');
    const m = byId((await readBack(d, 'docs')).points);
    expect(m.get('doc1')!.payload).toEqual({ source: 'web', rank: 1, document: 'first text' });
    expect(m.get('doc2')!.payload).toEqual({ document: 'second text' });
    expect(m.get('doc4')!.payload).toEqual({ source: 'pdf' });
    expect(closeTo(m.get('doc2')!.vector, normalized([0.3, 0.4]))).toBe(true);
  });

  it('a file that is not one object stops with a reason and creates nothing', async () => {
    const d = join(root, 'b2');
    const r = await runImportCli({ source: 'store_b', input: file('bad.json', '[1,2]'), collection: 'docs', 'data-dir': d, insecure: true });
    expect(r.code).toBe(1);
    expect(r.stderr).toContain('must hold one JSON object');
  });
});

describe('usage errors', () => {
  it('exit 2 with a hint, before touching the data directory', async () => {
    const r = await runImportCli({ source: 'store_a', collection: 'x', 'data-dir': join(root, 'never'), insecure: true });
    expect(r.code).toBe(2);
    expect(r.stderr).toContain('give exactly one of --input, --store-a-url, --store-b-url, --postgres-url');
    expect(r.stderr).toContain('Hint: run svc admin import --help');
    const missing = await runImportCli({ source: 'store_a', input: join(root, 'nope.jsonl'), collection: 'x', 'data-dir': join(root, 'never'), insecure: true });
    expect(missing.code).toBe(1);
    expect(missing.stderr).toContain('cannot read --input');
  });
});
