import { limitExceeded } from './errors.js';

/** Every per-request cap of the spec, in one place. Units are in the names. */
export interface Limits {
  readonly maxK: number;
  readonly maxEfSearch: number;
  readonly maxFetchLimit: number;
  readonly maxVectorDim: number;
  readonly maxPayloadBytes: number;
  readonly maxBatchSize: number;
  readonly maxRequestBodyBytes: number;
  readonly maxSparseTerms: number;
  readonly maxBulkBatchSize: number;
}

/** The spec's defaults, with the environment variable that overrides each. */
export const LIMIT_VARIABLES: Readonly<Record<keyof Limits, string>> = {
  maxK: 'SVC_MAX_K',
  maxEfSearch: 'SVC_MAX_EF_SEARCH',
  maxFetchLimit: 'SVC_MAX_FETCH_LIMIT',
  maxVectorDim: 'SVC_MAX_VECTOR_DIM',
  maxPayloadBytes: 'SVC_MAX_PAYLOAD_BYTES',
  maxBatchSize: 'SVC_MAX_BATCH_SIZE',
  maxRequestBodyBytes: 'SVC_MAX_REQUEST_BODY_BYTES',
  maxSparseTerms: 'SVC_MAX_SPARSE_TERMS',
  maxBulkBatchSize: 'SVC_MAX_BULK_BATCH_SIZE',
};

export const DEFAULT_LIMITS: Limits = Object.freeze({
  maxK: 10_000,
  maxEfSearch: 4096,
  maxFetchLimit: 10_000,
  maxVectorDim: 8192,
  maxPayloadBytes: 65_536,
  maxBatchSize: 1000,
  maxRequestBodyBytes: 33_554_432,
  maxSparseTerms: 4096,
  maxBulkBatchSize: 50_000,
});

export function resolveLimits(overrides: Partial<Limits> = {}): Limits {
  return Object.freeze({ ...DEFAULT_LIMITS, ...overrides });
}

/** Throws `limit_exceeded` naming the variable when `value` is above the limit. */
export function checkLimit(limits: Limits, which: keyof Limits, value: number, what: string): void {
  const max = limits[which];
  if (value > max) throw limitExceeded(LIMIT_VARIABLES[which], max, value, what);
}
