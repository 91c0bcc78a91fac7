/**
 * The one error type of svc. Every failure a caller can see carries one of these codes
 * (CONTRACT.md section 2); each transport maps the code once, in a table the compiler checks.
 */
export const ERROR_CODES = [
  'invalid_argument',
  'limit_exceeded',
  'unauthenticated',
  'permission_denied',
  'read_only_replica',
  'not_found',
  'already_exists',
  'rate_limited',
  'provider_error',
  'not_ready',
  'unavailable',
  'shard_not_drained',
  'moved',
  'internal',
] as const;

export type ErrorCode = (typeof ERROR_CODES)[number];

export class SvcError extends Error {
  readonly code: ErrorCode;
  /** Extra, secret-free detail for transports (for example `retryAfterSeconds`). */
  readonly detail: Readonly<Record<string, unknown>>;

  constructor(code: ErrorCode, message: string, detail: Record<string, unknown> = {}) {
    super(message);
    this.name = 'SvcError';
    this.code = code;
    this.detail = detail;
  }
}

export const invalidArgument = (message: string): SvcError => new SvcError('invalid_argument', message);
export const notFound = (message: string): SvcError => new SvcError('not_found', message);

/**
 * A limit of the spec was exceeded; the message names the SVC_MAX_* variable so the operator knows the knob.
 * The detail keeps the parts, so the embedded API can name its `limits` option instead (core/embedded.ts).
 */
export const limitExceeded = (variable: string, max: number, got: number, what: string): SvcError =>
  new SvcError('limit_exceeded', `${what} is ${got}, above ${variable}=${max}`, { variable, max, got, what });

export function isSvcError(e: unknown): e is SvcError {
  return e instanceof SvcError;
}

/** Turn anything thrown into an SvcError; unknown errors become `internal` (a bug), never a 400. */
export function toSvcError(e: unknown): SvcError {
  if (e instanceof SvcError) return e;
  return new SvcError('internal', 'internal error', { cause: e instanceof Error ? e.message : String(e) });
}
