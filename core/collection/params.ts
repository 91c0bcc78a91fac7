import { BODIES, bodyKeys, IndexParamsBody, QUANTIZATIONS } from '../base/bodies.js';
import { invalidArgument } from '../base/errors.js';
import { checkLimit, type Limits } from '../base/limits.js';
import { DEFAULT_METRIC, INDEX_KINDS, METRICS, type CollectionInfo, type HnswParams, type IndexKind, type Metric, type Quantization } from '../base/model.js';
import { checkName } from '../base/names.js';
import { checkFilterableFields } from '../query/filter.js';

/** A collection's fixed shape: validated once at create, stored in the manifest, never changed. */
export type CollectionSpec = Omit<CollectionInfo, 'count' | 'index_state'>;

export const DEFAULT_HNSW: HnswParams = Object.freeze({ m: 16, ef_construction: 200, ef_search: 64 });

/** The spec's index families this build does not have: refused by name (with what is available), never silently replaced. */
const PLANNED_INDEXES: ReadonlySet<string> = new Set(['ivf', 'vamana', 'disk_vamana', 'colbert']);
const HNSW_M_MAX = 128;
const HNSW_EF_CONSTRUCTION_MAX = 4096;

/** A create body's fields (core/base/bodies.ts), but `exist_ok`, which splitExistOk takes out first. */
const KNOWN_KEYS: ReadonlySet<string> = new Set(bodyKeys(BODIES.createCollection).filter((k) => k !== 'exist_ok'));
const INDEX_PARAM_KEYS = bodyKeys(IndexParamsBody);

function intIn(v: unknown, what: string, min: number, max: number): number {
  if (typeof v !== 'number' || !Number.isInteger(v) || v < min || v > max) {
    throw invalidArgument(`${what} must be an integer from ${min} to ${max}`);
  }
  return v;
}

/** Validates a create-collection body into a spec; every refusal is an invalid_argument naming the field. */
export function parseCollectionParams(body: unknown, limits: Limits): CollectionSpec {
  if (typeof body !== 'object' || body === null || Array.isArray(body)) {
    throw invalidArgument('collection parameters must be a JSON object');
  }
  const p = body as Record<string, unknown>;
  for (const key of Object.keys(p)) {
    if (!KNOWN_KEYS.has(key)) throw invalidArgument(`unknown collection parameter '${key}'`);
  }
  const name = checkName(p.name);
  if (typeof p.dim !== 'number' || !Number.isInteger(p.dim) || p.dim < 1) {
    throw invalidArgument('dim must be a positive integer');
  }
  checkLimit(limits, 'maxVectorDim', p.dim, 'dim');
  const metric = p.metric ?? DEFAULT_METRIC;
  if (typeof metric !== 'string' || !METRICS.includes(metric as Metric)) {
    throw invalidArgument(`metric must be one of ${METRICS.join(', ')}`);
  }
  const multivector = p.multivector ?? false;
  if (typeof multivector !== 'boolean') throw invalidArgument('multivector must be a boolean');
  const index = p.index ?? 'hnsw';
  if (typeof index === 'string' && PLANNED_INDEXES.has(index)) {
    throw invalidArgument(`index '${index}' is not available in this version of svc (available: ${INDEX_KINDS.join(', ')})`);
  }
  if (typeof index !== 'string' || !INDEX_KINDS.includes(index as IndexKind)) {
    throw invalidArgument(`index must be one of ${INDEX_KINDS.join(', ')}`);
  }
  const ip = p.index_params ?? {};
  if (typeof ip !== 'object' || ip === null || Array.isArray(ip)) throw invalidArgument('index_params must be an object');
  const ipr = ip as Record<string, unknown>;
  for (const key of Object.keys(ipr)) {
    if (!INDEX_PARAM_KEYS.includes(key)) {
      throw invalidArgument(`unknown index parameter '${key}' (known: ${INDEX_PARAM_KEYS.join(', ')})`);
    }
  }
  const index_params: HnswParams = {
    m: ipr.m === undefined ? DEFAULT_HNSW.m : intIn(ipr.m, 'index_params.m', 2, HNSW_M_MAX),
    ef_construction: ipr.ef_construction === undefined
      ? DEFAULT_HNSW.ef_construction
      : intIn(ipr.ef_construction, 'index_params.ef_construction', 4, HNSW_EF_CONSTRUCTION_MAX),
    ef_search: ipr.ef_search === undefined
      ? DEFAULT_HNSW.ef_search
      : intIn(ipr.ef_search, 'index_params.ef_search', 1, limits.maxEfSearch),
  };
  const quantization = p.quantization ?? 'none';
  if (typeof quantization !== 'string' || !QUANTIZATIONS.includes(quantization as Quantization)) {
    throw invalidArgument(`quantization '${String(quantization)}' is not available in this version of svc (available: ${QUANTIZATIONS.join(', ')})`);
  }
  if (quantization === 'scalar' && index !== 'hnsw') {
    throw invalidArgument(`quantization 'scalar' needs index 'hnsw' (a flat index scans the full-precision vectors)`);
  }
  let pq_subspaces: number | null = null;
  if (p.pq_subspaces !== undefined && p.pq_subspaces !== null) {
    pq_subspaces = intIn(p.pq_subspaces, 'pq_subspaces', 1, p.dim);
  }
  const ve = p.vector_encryption ?? null;
  if (ve !== null) {
    throw invalidArgument(`vector_encryption '${String(ve)}' is not available in this version of svc`);
  }
  const filterable = checkFilterableFields(p.filterable ?? []);
  return {
    name, dim: p.dim, metric: metric as Metric, index: index as IndexKind, index_params, quantization: quantization as Quantization,
    pq_subspaces, filterable, multivector, vector_encryption: null,
  };
}

/**
 * A collection's spec back from its info, as a shard answers it: checked as a create's parameters, but
 * under no per-request limits, since the shard accepted it under its own (a reader's limits may be
 * lower, or lowered since: SVC_MAX_EF_SEARCH below a collection's ef_search must not make it unreadable).
 */
export function specOfInfo(info: CollectionInfo, limits: Limits): CollectionSpec {
  const { count: _c, index_state: _s, ...params } = info;
  return parseCollectionParams(params, { ...limits, maxEfSearch: Number.MAX_SAFE_INTEGER, maxVectorDim: Number.MAX_SAFE_INTEGER });
}

export function infoOf(spec: CollectionSpec, count: number, stale: boolean): CollectionInfo {
  return {
    name: spec.name,
    dim: spec.dim,
    metric: spec.metric,
    index: spec.index,
    index_params: { ...spec.index_params },
    quantization: spec.quantization,
    pq_subspaces: spec.pq_subspaces,
    filterable: spec.filterable.map((f) => ({ ...f })),
    multivector: spec.multivector,
    vector_encryption: spec.vector_encryption,
    count,
    index_state: stale ? 'stale' : 'current',
  };
}

/**
 * Whether two specs describe the same collection (create with `exist_ok`): every field of the shape
 * equal, the filterable fields as a set.
 */
export function sameShape(a: CollectionSpec, b: CollectionSpec): boolean {
  const fields = (s: CollectionSpec): string[] => s.filterable.map((f) => `${f.field_type}:${f.path}`).sort();
  return a.name === b.name && a.dim === b.dim && a.metric === b.metric && a.index === b.index
    && a.index_params.m === b.index_params.m && a.index_params.ef_construction === b.index_params.ef_construction
    && a.index_params.ef_search === b.index_params.ef_search && a.quantization === b.quantization
    && (a.pq_subspaces ?? null) === (b.pq_subspaces ?? null) && a.multivector === b.multivector
    && (a.vector_encryption ?? null) === (b.vector_encryption ?? null)
    && JSON.stringify(fields(a)) === JSON.stringify(fields(b));
}

/** `exist_ok` taken out of a create body (the collection's spec never holds it). */
export function splitExistOk(params: unknown): { existOk: boolean; rest: unknown } {
  if (typeof params !== 'object' || params === null || Array.isArray(params) || !Object.hasOwn(params, 'exist_ok')) {
    return { existOk: false, rest: params };
  }
  const { exist_ok: v, ...rest } = params as Record<string, unknown>;
  if (v !== undefined && v !== null && typeof v !== 'boolean') throw invalidArgument('exist_ok must be true or false');
  return { existOk: v === true, rest };
}
