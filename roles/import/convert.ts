/**
 * Pure conversions from each source's record shape to an svc point (spec, "Import rules"). Nothing here
 * does I/O; a record that cannot become a point yields a reason, which the importer reports.
 */

export type SourceKind = 'store_a' | 'store_b' | 'store_c';
export const SOURCE_KINDS: readonly SourceKind[] = ['store_a', 'store_b', 'store_c'];

export interface ImportPoint {
  id: string;
  vector: number[];
  payload: Record<string, unknown>;
}

/** One record read from a source: a point, or the reason it cannot be one. `ref` names it for the report. */
export type SourceRow = { ref: string; point: ImportPoint } | { ref: string; error: string };

/** A failure that stops the whole import (bad flags for this data, unreachable source). */
export class ImportFatal extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'ImportFatal';
  }
}

/** Ids become strings: integers (also bigint, or int8 columns that arrive as text) and UUIDs alike. */
export function idToString(id: unknown): string | { error: string } {
  if (typeof id === 'string') return id.length > 0 ? id : { error: 'id is an empty string' };
  if (typeof id === 'number') return Number.isSafeInteger(id) ? String(id) : { error: `id ${id} is not an integer` };
  if (typeof id === 'bigint') return id.toString();
  if (id === undefined || id === null) return { error: 'id is missing' };
  return { error: `id must be a string or an integer, got ${typeof id === 'object' ? 'an object' : typeof id}` };
}

/**
 * A vector as it arrives from a source: a JSON list, a float array (PostgreSQL real[]), or the text
 * literal of pgvector and of exports (`[1,2,3]`), also PostgreSQL's array literal (`{1,2,3}`).
 */
export function parseVectorValue(v: unknown): number[] | { error: string } {
  if (typeof v === 'string') {
    const s = v.trim();
    const inner = /^\[(.*)\]$/s.exec(s) ?? /^\{(.*)\}$/s.exec(s);
    if (inner === null) return { error: 'vector text is not a literal like [1,2,3]' };
    if (inner[1].trim() === '') return { error: 'vector is empty' };
    const parts = inner[1].split(',');
    const out: number[] = [];
    for (const p of parts) {
      const t = p.trim();
      const x = Number(t);
      if (t === '' || !Number.isFinite(x)) return { error: `vector text has a non-number element '${t.slice(0, 40)}'` };
      out.push(x);
    }
    return out;
  }
  if (Array.isArray(v) || ArrayBuffer.isView(v)) {
    const arr = Array.from(v as ArrayLike<unknown>);
    if (arr.length === 0) return { error: 'vector is empty' };
    const out: number[] = [];
    for (let i = 0; i < arr.length; i++) {
      const x = arr[i];
      if (typeof x !== 'number' || !Number.isFinite(x)) return { error: `vector[${i}] is not a finite number` };
      out.push(x);
    }
    return out;
  }
  if (v === undefined || v === null) return { error: 'vector is missing' };
  return { error: 'vector must be a list of numbers' };
}

function isPlainObject(v: unknown): v is Record<string, unknown> {
  return typeof v === 'object' && v !== null && !Array.isArray(v) && !ArrayBuffer.isView(v);
}

export interface StoreAOptions {
  vectorField: string;
  vectorName?: string;
}

/**
 * store_a: `{id, vector, payload}`. `vector` may be an object of named vectors: `vectorName` picks one,
 * the sole one is taken by default, and several without a choice stop the import naming the choices.
 */
export function convertStoreA(rec: unknown, opts: StoreAOptions): ImportPoint | { error: string } {
  if (!isPlainObject(rec)) return { error: 'record is not a JSON object' };
  const id = idToString(rec.id);
  if (typeof id !== 'string') return id;
  let raw = rec[opts.vectorField];
  if (isPlainObject(raw)) {
    const names = Object.keys(raw);
    if (opts.vectorName !== undefined) {
      if (!(opts.vectorName in raw)) return { error: `no named vector '${opts.vectorName}' (it has: ${names.join(', ') || 'none'})` };
      raw = raw[opts.vectorName];
    } else if (names.length === 1) {
      raw = raw[names[0]];
    } else {
      throw new ImportFatal(`points have several named vectors (${names.join(', ')}): choose one with --vector-name`);
    }
    if (isPlainObject(raw)) return { error: 'the named vector is sparse or multi-vector; only dense vectors import' };
  } else if (opts.vectorName !== undefined && raw !== undefined && raw !== null) {
    return { error: `--vector-name '${opts.vectorName}' given but the vector is not named` };
  }
  const vector = parseVectorValue(raw);
  if (!Array.isArray(vector)) return vector;
  const payload = rec.payload;
  if (payload !== undefined && payload !== null && !isPlainObject(payload)) return { error: 'payload is not a JSON object' };
  return { id, vector, payload: payload ?? {} };
}

export interface StoreCOptions {
  idField: string;
  vectorField: string;
}

/** store_c: a table row; every column but the id and the vector becomes a payload field. */
export function convertStoreC(row: unknown, opts: StoreCOptions): ImportPoint | { error: string } {
  if (!isPlainObject(row)) return { error: 'row is not a JSON object' };
  const id = idToString(row[opts.idField]);
  if (typeof id !== 'string') return { error: `${opts.idField}: ${id.error}` };
  const vector = parseVectorValue(row[opts.vectorField]);
  if (!Array.isArray(vector)) return { error: `${opts.vectorField}: ${vector.error}` };
  const payload: Record<string, unknown> = {};
  for (const [k, v] of Object.entries(row)) {
    if (k === opts.idField || k === opts.vectorField) continue;
    payload[k] = jsonValue(v);
  }
  return { id, vector, payload };
}

/** Column values from a database become JSON: dates as ISO strings, bigints as strings, bytes as base64. */
function jsonValue(v: unknown): unknown {
  if (v instanceof Date) return Number.isNaN(v.getTime()) ? null : v.toISOString();
  if (typeof v === 'bigint') return v.toString();
  if (Buffer.isBuffer(v)) return v.toString('base64');
  if (ArrayBuffer.isView(v)) return Array.from(v as unknown as ArrayLike<number>);
  if (Array.isArray(v)) return v.map(jsonValue);
  return v;
}

export interface StoreBColumns {
  ids: unknown;
  embeddings: unknown;
  metadatas?: unknown;
  documents?: unknown;
}

/**
 * store_b: parallel lists. Metadata is the payload and the document text goes under `document`.
 * Yields one row per id; `base` numbers the rows across pages for the report.
 */
export function* convertStoreB(cols: StoreBColumns, base = 0): Generator<SourceRow> {
  if (!Array.isArray(cols.ids)) throw new ImportFatal('store_b data has no "ids" list');
  const n = cols.ids.length;
  const list = (v: unknown, name: string): unknown[] | null => {
    if (v === undefined || v === null) return null;
    if (!Array.isArray(v)) throw new ImportFatal(`store_b "${name}" must be a list parallel to "ids"`);
    if (v.length !== n) throw new ImportFatal(`store_b "${name}" has ${v.length} entries but "ids" has ${n}`);
    return v;
  };
  const embeddings = list(cols.embeddings, 'embeddings');
  if (embeddings === null) throw new ImportFatal('store_b data has no "embeddings" list');
  const metadatas = list(cols.metadatas, 'metadatas');
  const documents = list(cols.documents, 'documents');
  for (let i = 0; i < n; i++) {
    const id = idToString(cols.ids[i]);
    const ref = typeof id === 'string' ? `entry ${base + i} (id ${id})` : `entry ${base + i}`;
    if (typeof id !== 'string') {
      yield { ref, error: id.error };
      continue;
    }
    const vector = parseVectorValue(embeddings[i]);
    if (!Array.isArray(vector)) {
      yield { ref, error: `embedding: ${vector.error}` };
      continue;
    }
    const meta = metadatas?.[i];
    if (meta !== undefined && meta !== null && !isPlainObject(meta)) {
      yield { ref, error: 'metadata is not a JSON object' };
      continue;
    }
    const payload: Record<string, unknown> = { ...(meta ?? {}) };
    const doc = documents?.[i];
    if (doc !== undefined && doc !== null) payload.document = doc;
    yield { ref, point: { id, vector, payload } };
  }
}

/** `a.b` -> `"a"."b"`: each dot-separated part quoted as an identifier (spec, import rules). */
export function quoteTableName(table: string): string {
  const parts = table.split('.');
  if (parts.length > 3 || parts.some((p) => p.length === 0)) {
    throw new ImportFatal(`--table '${table}' must be table, schema.table or database.schema.table`);
  }
  return parts.map((p) => `"${p.replaceAll('"', '""')}"`).join('.');
}
