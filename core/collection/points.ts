import { BODIES, bodyKeys, BulkPointBody, DocumentBody, PayloadPatchBody, PointBody, TextPointBody } from '../base/bodies.js';
import { invalidArgument } from '../base/errors.js';
import { checkJsonKeys } from '../base/json-keys.js';
import { checkLimit, type Limits } from '../base/limits.js';
import type { Metric, Payload } from '../base/model.js';
import { checkPointId } from '../base/names.js';
import { normalize } from '../index/vector-store.js';
import type { DocRecord, PayloadMode, PayloadPatch, PointRecord } from '../storage/codec.js';
import { checkObject } from './queries.js';
import { docFromPayload } from '../text/sparse-index.js';

/** The fields of each batch item (core/base/bodies.ts). */
const POINT_KEYS = bodyKeys(PointBody);
const BULK_POINT_KEYS = bodyKeys(BulkPointBody);
const PAYLOAD_PATCH_KEYS = bodyKeys(PayloadPatchBody);
const DOCUMENT_KEYS = bodyKeys(DocumentBody);
const TEXT_POINT_KEYS = bodyKeys(TextPointBody);

const F32_MAX = 3.4028234663852886e38;
/**
 * Distances are computed in float32: a squared norm above this could overflow to Infinity in an L2
 * distance between two such vectors (up to 4x the larger squared norm), and Infinity has no JSON form.
 */
const SQUARED_NORM_MAX = 1e37;

/**
 * Turns a caller's vector into the stored float32 form: right length, finite, inside float32 range,
 * unit length for cosine (a zero vector has no direction, so cosine refuses it).
 */
export function parseVector(v: unknown, dim: number, metric: Metric, limits: Limits, what = 'vector'): Float32Array {
  if (!(Array.isArray(v) || v instanceof Float32Array)) throw invalidArgument(`${what} must be a list of numbers`);
  checkLimit(limits, 'maxVectorDim', v.length, `${what} length`);
  if (v.length !== dim) throw invalidArgument(`${what} has ${v.length} dimensions, the collection has ${dim}`);
  const out = new Float32Array(dim);
  for (let i = 0; i < dim; i++) {
    const x = v[i];
    if (typeof x !== 'number' || !Number.isFinite(x) || Math.abs(x) > F32_MAX) {
      throw invalidArgument(`${what}[${i}] must be a finite number within float32 range`);
    }
    out[i] = x;
  }
  let sq = 0;
  for (let i = 0; i < dim; i++) sq += out[i] * out[i];
  if (sq > SQUARED_NORM_MAX) throw invalidArgument(`${what} is too long: its squared length must be at most 1e37`);
  if (metric === 'cosine') {
    if (!(sq > 0)) throw invalidArgument(`${what} must not be all zeros for the cosine metric`);
    normalize(out);
  }
  return out;
}

/** Decodes `vector_b64`: base64 of little-endian float32 (CONTRACT.md, points:bulk). */
export function decodeVectorB64(b64: unknown, what: string): Float32Array {
  if (typeof b64 !== 'string' || !/^[A-Za-z0-9+/]*={0,2}$/.test(b64)) throw invalidArgument(`${what} must be base64`);
  const bytes = Buffer.from(b64, 'base64');
  if (bytes.length % 4 !== 0) throw invalidArgument(`${what} must hold a whole number of float32 values`);
  const out = new Float32Array(bytes.length / 4);
  new Uint8Array(out.buffer).set(bytes);
  return out;
}

export function parsePayload(p: unknown, limits: Limits, what = 'payload'): Payload | null {
  if (p === undefined || p === null) return null;
  if (typeof p !== 'object' || Array.isArray(p)) throw invalidArgument(`${what} must be a JSON object`);
  checkJsonKeys(p, what);
  let json: string;
  try {
    json = JSON.stringify(p);
  } catch {
    throw invalidArgument(`${what} must be serializable JSON`);
  }
  checkLimit(limits, 'maxPayloadBytes', Buffer.byteLength(json, 'utf8'), `${what} size in bytes`);
  // A round trip makes the stored object plain JSON (no prototypes, no undefined), exactly what reloads.
  const clean = JSON.parse(json) as Payload;
  docFromPayload(clean, limits.maxSparseTerms); // reserved keys are validated at ingest, before the WAL
  return clean;
}

/** A payload update's body, `{points: [{id, payload}], mode?}`, checked whole (a node's and a router's rules). */
export function parsePayloadUpdate(body: unknown, limits: Limits): { mode: PayloadMode; points: PayloadPatch[] } {
  const b = checkObject(body, 'payload body', bodyKeys(BODIES.setPayload));
  const mode = parsePayloadMode(b.mode);
  if (!Array.isArray(b.points)) throw invalidArgument('points must be a list of {id, payload}');
  checkLimit(limits, 'maxBatchSize', b.points.length, 'batch size');
  const points = b.points.map((p: unknown, i: number): PayloadPatch => {
    const o = checkObject(p, `points[${i}]`, PAYLOAD_PATCH_KEYS);
    const id = checkPointId(o.id);
    if (typeof o.payload !== 'object' || o.payload === null || Array.isArray(o.payload)) {
      throw invalidArgument(`points[${i}].payload must be a JSON object`);
    }
    return { id, payload: parsePayload(o.payload, limits, `points[${i}].payload`)! };
  });
  return { mode, points };
}

/** `mode` of a payload update: `merge` unless given. */
function parsePayloadMode(v: unknown): PayloadMode {
  if (v === undefined || v === null) return 'merge';
  if (v !== 'merge' && v !== 'replace') throw invalidArgument("mode must be 'merge' or 'replace'");
  return v;
}

/**
 * What each point's payload becomes, checked as an upsert's would be (size, reserved keys), in batch
 * order; `current` is a point's payload before the update (the batch's earlier patches applied over it).
 */
export function checkPayloadResults(points: readonly PayloadPatch[], mode: PayloadMode, current: (id: string) => Payload, limits: Limits): void {
  const after = new Map<string, Payload>();
  points.forEach((p, i) => {
    const next = mode === 'replace' ? p.payload : { ...(after.get(p.id) ?? current(p.id)), ...p.payload };
    parsePayload(next, limits, `points[${i}].payload once ${mode === 'merge' ? 'merged' : 'replaced'}`);
    after.set(p.id, next);
  });
}

export interface PointShape {
  dim: number;
  metric: Metric;
}

/** Validates a whole batch before anything reaches the WAL: a batch is stored entirely or not at all. */
export function parsePoints(
  points: unknown,
  shape: PointShape,
  limits: Limits,
  batchLimit: 'maxBatchSize' | 'maxBulkBatchSize',
): PointRecord[] {
  if (!Array.isArray(points)) throw invalidArgument('points must be a list');
  checkLimit(limits, batchLimit, points.length, 'batch size');
  const out: PointRecord[] = [];
  const seen = new Map<string, number>();
  for (let i = 0; i < points.length; i++) {
    const p = points[i] as Record<string, unknown> | null;
    if (typeof p !== 'object' || p === null || Array.isArray(p)) throw invalidArgument(`points[${i}] must be an object`);
    const known = batchLimit === 'maxBulkBatchSize' ? BULK_POINT_KEYS : POINT_KEYS;
    for (const key of Object.keys(p)) {
      if (!known.includes(key)) {
        throw invalidArgument(`points[${i}] has an unknown field '${key}'`);
      }
    }
    const id = checkPointId(p.id);
    let raw: unknown = p.vector;
    if (p.vector_b64 !== undefined) {
      if (p.vector !== undefined) throw invalidArgument(`points[${i}] gives both vector and vector_b64`);
      raw = decodeVectorB64(p.vector_b64, `points[${i}].vector_b64`);
    }
    const vector = parseVector(raw, shape.dim, shape.metric, limits, `points[${i}].vector`);
    const payload = parsePayload(p.payload, limits, `points[${i}].payload`);
    // The last occurrence of an id in a batch wins, as if the points were upserted one by one.
    const prev = seen.get(id);
    if (prev !== undefined) out[prev] = { id, vector, payload };
    else {
      seen.set(id, out.length);
      out.push({ id, vector, payload });
    }
  }
  return out;
}

export const MULTIVECTOR_TOKENS_MAX = 4096;

/** Token vectors of a document or a query: 1 to MULTIVECTOR_TOKENS_MAX vectors of the collection's dim. */
export function parseTokens(v: unknown, spec: PointShape, limits: Limits, what: string): Float32Array[] {
  if (!Array.isArray(v) || v.length === 0) throw invalidArgument(`${what} must be a non-empty list of vectors`);
  if (v.length > MULTIVECTOR_TOKENS_MAX) {
    throw invalidArgument(`${what} has ${v.length} vectors; at most ${MULTIVECTOR_TOKENS_MAX} are allowed`);
  }
  return v.map((t, j) => parseVector(t, spec.dim, spec.metric, limits, `${what}[${j}]`));
}

/** A documents body (multi-vector upsert), whole: a later document of the same id replaces an earlier one. */
export function parseDocuments(body: unknown, spec: PointShape, limits: Limits): DocRecord[] {
  const b = checkObject(body, 'documents body', bodyKeys(BODIES.upsertDocuments));
  if (!Array.isArray(b.documents)) throw invalidArgument('documents must be a list');
  checkLimit(limits, 'maxBatchSize', b.documents.length, 'batch size');
  const docs = new Map<string, DocRecord>();
  b.documents.forEach((d: unknown, i: number) => {
    const o = checkObject(d, `documents[${i}]`, DOCUMENT_KEYS);
    const id = checkPointId(o.id);
    const tokens = parseTokens(o.vectors, spec, limits, `documents[${i}].vectors`);
    const payload = parsePayload(o.payload, limits, `documents[${i}].payload`);
    const vectors = new Float32Array(tokens.length * spec.dim);
    tokens.forEach((t, j) => vectors.set(t, j * spec.dim));
    docs.set(id, { id, count: tokens.length, vectors, payload });
  });
  return [...docs.values()];
}

/** A text upsert body: each point's text goes into its payload (`__svc_text__`), which must still fit. */
export function parseTextPoints(body: unknown, limits: Limits): { id: string; text: string; payload: Payload }[] {
  const b = checkObject(body, 'text upsert body', bodyKeys(BODIES.upsertText));
  if (!Array.isArray(b.points)) throw invalidArgument('points must be a list');
  checkLimit(limits, 'maxBatchSize', b.points.length, 'batch size');
  return b.points.map((p: unknown, i: number) => {
    const o = checkObject(p, `points[${i}]`, TEXT_POINT_KEYS);
    const id = checkPointId(o.id);
    if (typeof o.text !== 'string' || o.text.length === 0) throw invalidArgument(`points[${i}].text must be a non-empty string`);
    const payload = { ...(parsePayload(o.payload, limits, `points[${i}].payload`) ?? {}), __svc_text__: o.text };
    parsePayload(payload, limits, `points[${i}].payload`);
    return { id, text: o.text, payload };
  });
}
