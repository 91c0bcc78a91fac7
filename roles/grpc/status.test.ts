import { status } from '@grpc/grpc-js';
import { describe, expect, it } from 'vitest';
import { ERROR_CODES, SvcError } from '../../core/base/errors.js';
import { GRPC_STATUS, toServiceError } from './status.js';

// CONTRACT.md section 2, written out independently of the implementation's table.
const CONTRACT: Record<string, keyof typeof status> = {
  invalid_argument: 'INVALID_ARGUMENT',
  limit_exceeded: 'INVALID_ARGUMENT',
  unauthenticated: 'UNAUTHENTICATED',
  permission_denied: 'PERMISSION_DENIED',
  read_only_replica: 'PERMISSION_DENIED',
  not_found: 'NOT_FOUND',
  already_exists: 'ALREADY_EXISTS',
  rate_limited: 'RESOURCE_EXHAUSTED',
  provider_error: 'UNAVAILABLE',
  not_ready: 'UNAVAILABLE',
  unavailable: 'UNAVAILABLE', // section 11
  shard_not_drained: 'FAILED_PRECONDITION', // section 11
  moved: 'FAILED_PRECONDITION', // section 11, internal: a router never passes it on
  internal: 'INTERNAL',
};

describe('gRPC status table', () => {
  it.each(ERROR_CODES)('maps %s as CONTRACT.md section 2 says', (code) => {
    expect(CONTRACT[code]).toBeDefined();
    expect(GRPC_STATUS[code]).toBe(status[CONTRACT[code]]);
  });

  it('puts the contract code, the message and the request id on the status', () => {
    const e = toServiceError(new SvcError('limit_exceeded', 'k is 20000, above SVC_MAX_K=10000'), 'req-1');
    expect(e.code).toBe(status.INVALID_ARGUMENT);
    expect(e.details).toBe('k is 20000, above SVC_MAX_K=10000');
    expect(e.metadata['svc-error-code']).toBe('limit_exceeded');
    expect(e.metadata['x-request-id']).toBe('req-1');
  });

  it('tells a rate-limited client when to retry', () => {
    const e = toServiceError(new SvcError('rate_limited', 'rate limit of this key exceeded', { retryAfterSeconds: 1.2 }), 'r');
    expect(e.code).toBe(status.RESOURCE_EXHAUSTED);
    expect(e.metadata['retry-after']).toBe('2');
  });

  it('never shows the cause of an internal error, only the request id', () => {
    const e = toServiceError(new SvcError('internal', 'internal error', { cause: 'TypeError at /secret/path.ts' }), 'req-9');
    expect(e.code).toBe(status.INTERNAL);
    expect(e.details).toBe('internal error (request id req-9)');
    expect(JSON.stringify(e.metadata)).not.toContain('secret');
  });
});
