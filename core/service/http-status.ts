import type { ErrorCode } from '../base/errors.js';

/**
 * CONTRACT.md section 2: the HTTP status of each error code. The one table: REST answers with it and the
 * audit log records it, so both always agree. `Record<ErrorCode, number>` breaks the build on a new code.
 */
export const HTTP_STATUS: Readonly<Record<ErrorCode, number>> = Object.freeze({
  invalid_argument: 400,
  limit_exceeded: 400,
  unauthenticated: 401,
  permission_denied: 403,
  read_only_replica: 403,
  not_found: 404,
  already_exists: 409,
  rate_limited: 429,
  provider_error: 502,
  not_ready: 503,
  unavailable: 503,
  shard_not_drained: 409,
  moved: 409,
  internal: 500,
});
