import { status } from '@grpc/grpc-js';
import type { ErrorCode, SvcError } from '../../core/base/errors.js';
import type { GrpcStatus } from './transport.js';

/**
 * CONTRACT.md section 2: the gRPC status of each error code. The one table for gRPC;
 * `Record<ErrorCode, status>` breaks the build when a code is added without a mapping.
 */
export const GRPC_STATUS: Readonly<Record<ErrorCode, status>> = Object.freeze({
  invalid_argument: status.INVALID_ARGUMENT,
  limit_exceeded: status.INVALID_ARGUMENT,
  unauthenticated: status.UNAUTHENTICATED,
  permission_denied: status.PERMISSION_DENIED,
  read_only_replica: status.PERMISSION_DENIED,
  not_found: status.NOT_FOUND,
  already_exists: status.ALREADY_EXISTS,
  rate_limited: status.RESOURCE_EXHAUSTED,
  provider_error: status.UNAVAILABLE,
  not_ready: status.UNAVAILABLE,
  unavailable: status.UNAVAILABLE,
  shard_not_drained: status.FAILED_PRECONDITION,
  moved: status.FAILED_PRECONDITION,
  internal: status.INTERNAL,
});

/** Trailing metadata key carrying the contract's error code, since several codes share a gRPC status. */
export const ERROR_CODE_KEY = 'svc-error-code';
export const REQUEST_ID_KEY = 'x-request-id';

/**
 * The status a client sees for an SvcError: the mapped code, the error's message (secret-free by
 * construction; `internal` says only that it was a bug, with the request id to find it in the log),
 * and trailing metadata with the contract's code, the request id and, when rate limited, `retry-after`.
 */
export function toServiceError(err: SvcError, requestId: string): GrpcStatus {
  const metadata: Record<string, string> = { [ERROR_CODE_KEY]: err.code, [REQUEST_ID_KEY]: requestId };
  const retryAfter = err.detail.retryAfterSeconds;
  if (typeof retryAfter === 'number') metadata['retry-after'] = String(Math.ceil(retryAfter));
  const details = err.code === 'internal' ? `internal error (request id ${requestId})` : err.message;
  return { code: GRPC_STATUS[err.code], details, metadata };
}
