import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { convertStoreA, convertStoreB, convertStoreC, idToString, ImportFatal, parseVectorValue, quoteTableName } from './convert.js';
import { formatDuration, progressLine } from './progress.js';
import { parseFilterable, plaintextWarnings, planImport, UsageError } from './command.js';

const finite = fc.double({ noNaN: true, noDefaultInfinity: true, min: -1e30, max: 1e30 });

describe('vectors as sources give them', () => {
  it('a text literal [..] or {..} and a JSON list parse to the same numbers', () => {
    fc.assert(fc.property(fc.array(finite, { minLength: 1, maxLength: 40 }), (xs) => {
      const literal = `[${xs.map((x) => String(x)).join(',')}]`;
      // String(-0) is '0': the text form has no negative zero.
      expect(parseVectorValue(literal)).toEqual(xs.map((x) => (Object.is(x, -0) ? 0 : x)));
      expect(parseVectorValue(`{${xs.join(', ')}}`)).toEqual(parseVectorValue(literal));
      expect(parseVectorValue(xs)).toEqual(xs);
      expect(parseVectorValue(Float32Array.from(xs))).toEqual(Array.from(Float32Array.from(xs)));
    }));
  });

  it('says why a vector is not one', () => {
    expect(parseVectorValue('[1,x,3]')).toEqual({ error: "vector text has a non-number element 'x'" });
    expect(parseVectorValue('[]')).toEqual({ error: 'vector is empty' });
    expect(parseVectorValue('1,2,3')).toHaveProperty('error');
    expect(parseVectorValue([1, '2'])).toEqual({ error: 'vector[1] is not a finite number' });
    expect(parseVectorValue(undefined)).toEqual({ error: 'vector is missing' });
  });
});

describe('ids become strings', () => {
  it('integers, bigints and UUIDs keep their text', () => {
    fc.assert(fc.property(fc.oneof(fc.integer(), fc.uuid()), (id) => {
      expect(idToString(id)).toBe(String(id));
    }));
    expect(idToString(2n ** 70n)).toBe('1180591620717411303424');
    expect(idToString(1.5)).toHaveProperty('error');
    expect(idToString(null)).toEqual({ error: 'id is missing' });
  });
});

describe('store_a records', () => {
  const opts = { vectorField: 'vector' };
  it('keeps the payload as is', () => {
    const payload = { a: { b: [1, 'x', null] }, t: 'x' };
    expect(convertStoreA({ id: 7, vector: [1, 2], payload }, opts)).toEqual({ id: '7', vector: [1, 2], payload });
    expect(convertStoreA({ id: 7, vector: [1, 2] }, opts)).toEqual({ id: '7', vector: [1, 2], payload: {} });
  });

  it('takes the sole named vector, or the one named, and names the choices when it cannot pick', () => {
    expect(convertStoreA({ id: 1, vector: { image: [1, 2] } }, opts)).toMatchObject({ vector: [1, 2] });
    const two = { id: 1, vector: { image: [1, 2], text: [3, 4, 5] } };
    expect(convertStoreA(two, { ...opts, vectorName: 'text' })).toMatchObject({ vector: [3, 4, 5] });
    expect(() => convertStoreA(two, opts)).toThrow(new ImportFatal('points have several named vectors (image, text): choose one with --vector-name'));
    expect(convertStoreA(two, { ...opts, vectorName: 'audio' })).toEqual({ error: "no named vector 'audio' (it has: image, text)" });
    expect(convertStoreA({ id: 1, vector: { s: { indices: [1], values: [1] } } }, opts)).toHaveProperty('error');
  });
});

describe('store_c rows', () => {
  it('every other column becomes a payload field; dates and bigints become JSON', () => {
    const row = { pk: 9n, emb: '[1, 2.5, -3]', title: 'x', seen: new Date('2024-01-02T03:04:05Z'), tags: ['a'], n: null };
    expect(convertStoreC(row, { idField: 'pk', vectorField: 'emb' })).toEqual({
      id: '9', vector: [1, 2.5, -3], payload: { title: 'x', seen: '2024-01-02T03:04:05.000Z', tags: ['a'], n: null },
    });
    expect(convertStoreC({ id: 1, embedding: 'nope' }, { idField: 'id', vectorField: 'embedding' })).toEqual({
      error: 'embedding: vector text is not a literal like [1,2,3]',
    });
  });
});

describe('store_b columns', () => {
  it('metadata is the payload and the document goes under "document"; bad entries are rows with reasons', () => {
    const rows = [...convertStoreB({
      ids: ['a', 'b', 'c'], embeddings: [[1, 2], 'bad', [3, 4]], metadatas: [{ k: 1 }, null, null], documents: ['hello', null, 'doc c'],
    })];
    expect(rows).toEqual([
      { ref: 'entry 0 (id a)', point: { id: 'a', vector: [1, 2], payload: { k: 1, document: 'hello' } } },
      { ref: 'entry 1 (id b)', error: 'embedding: vector text is not a literal like [1,2,3]' },
      { ref: 'entry 2 (id c)', point: { id: 'c', vector: [3, 4], payload: { document: 'doc c' } } },
    ]);
  });

  it('lists that are not parallel stop the import', () => {
    expect(() => [...convertStoreB({ ids: ['a'], embeddings: [[1], [2]] })]).toThrow(/"embeddings" has 2 entries but "ids" has 1/);
  });
});

describe('table names', () => {
  it('each dot-separated part is quoted as an identifier', () => {
    expect(quoteTableName('items')).toBe('"items"');
    expect(quoteTableName('my schema.Items')).toBe('"my schema"."Items"');
    expect(quoteTableName('a"; DROP TABLE x; --.t')).toBe('"a""; DROP TABLE x; --"."t"');
    expect(() => quoteTableName('a..b')).toThrow(ImportFatal);
  });
});

describe('flags', () => {
  const base = { source: 'store_a', collection: 'c', input: 'f.jsonl', insecure: true };
  it('--filterable is path:type', () => {
    expect(parseFilterable(['a.b:keyword', 'n:numeric'])).toEqual([{ path: 'a.b', field_type: 'keyword' }, { path: 'n', field_type: 'numeric' }]);
    expect(() => parseFilterable(['a:text'])).toThrow(UsageError);
  });

  it('needs a source, a collection, exactly one input, and a key or --insecure', () => {
    expect(() => planImport({ ...base, source: 'store_x' }, {})).toThrow(/not one of store_a, store_b, store_c/);
    expect(() => planImport({ ...base, collection: undefined } as never, {})).toThrow(/--collection is required/);
    expect(() => planImport({ ...base, 'store-a-url': 'http://h' }, {})).toThrow(/exactly one of/);
    expect(() => planImport({ ...base, insecure: false }, {})).toThrow(/master key/);
    expect(planImport({ ...base, insecure: false }, { SVC_ENCRYPTION_KEY: 'ab'.repeat(32) }).encryptionKey).toBe('ab'.repeat(32));
    expect(() => planImport({ source: 'store_a', collection: 'c', 'postgres-url': 'postgres://h/db', insecure: true }, {})).toThrow(/store-a-url/);
  });

  it('defaults: cosine, ./data, vector field by source', () => {
    const p = planImport(base, {});
    expect(p).toMatchObject({ metric: 'cosine', dataDir: './data', filterable: [] });
    expect(p.dim).toBeUndefined();
  });

  it('warns when a credential would travel over plaintext, and only then', () => {
    expect(plaintextWarnings({ storeAUrl: 'http://10.0.0.5:6333', apiKey: 'k' }, {})).toHaveLength(1);
    expect(plaintextWarnings({ storeAUrl: 'http://127.0.0.1:6333', apiKey: 'k' }, {})).toHaveLength(1);
    expect(plaintextWarnings({ storeAUrl: 'https://10.0.0.5:6333', apiKey: 'k' }, {})).toHaveLength(0);
    expect(plaintextWarnings({ storeBUrl: 'http://10.0.0.5:8000' }, {})).toHaveLength(0);
    expect(plaintextWarnings({ postgresUrl: 'postgres://u:secret@db:5432/x' }, {})[0]).toMatch(/password travels unencrypted to db:5432/);
    expect(plaintextWarnings({ postgresUrl: 'postgres://u:secret@db/x?sslmode=verify-full' }, {})).toHaveLength(0);
    expect(plaintextWarnings({ postgresUrl: 'postgres://u@db/x' }, { PGPASSWORD: 'p' })).toHaveLength(1);
    expect(plaintextWarnings({ postgresUrl: 'postgres://u@db/x' }, {})).toHaveLength(0);
    expect(plaintextWarnings({ storeAUrl: 'http://h', apiKey: 'sekret' }, {})[0]).not.toContain('sekret');
  });
});

describe('progress line', () => {
  it('shows rate, percent and ETA when the size is known, and fits the width', () => {
    const line = progressLine(500, 400, 2000, 0.25, 100);
    expect(line).toContain('25.0%');
    expect(line).toContain('200 points/s');
    expect(line).toContain('ETA 6s');
    expect(progressLine(10, 10, 1000, null)).not.toContain('ETA');
    fc.assert(fc.property(fc.nat(1e7), fc.nat(1e7), fc.integer({ min: 1, max: 1e7 }), fc.double({ min: 0, max: 1, noNaN: true }), fc.integer({ min: 20, max: 300 }),
      (r, i, ms, f, w) => progressLine(r, i, ms, f, w).length < w));
    expect(formatDuration(3725)).toBe('1h02m');
  });
});
