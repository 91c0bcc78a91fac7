import { SvcError, type ErrorCode } from '../../core/base/errors.js';
import { LIMIT_VARIABLES, type Limits } from '../../core/base/limits.js';
import { HTTP_STATUS } from '../../core/service/http-status.js';
import type { ServiceLogger } from '../../core/service/log.js';
import { validationMessage } from './validate.js';

/** The reply for any failure: the contract's status, headers and `{"error":{"code","message"}}` body. */
export interface ErrorReply {
  status: number;
  headers: Record<string, string>;
  body: { error: { code: ErrorCode; message: string; moved?: unknown } };
}

export function errorReply(code: ErrorCode, message: string, detail: Readonly<Record<string, unknown>> = {}): ErrorReply {
  const headers: Record<string, string> = {};
  if (code === 'unauthenticated') headers['www-authenticate'] = 'Bearer';
  if (code === 'rate_limited') headers['retry-after'] = String(detail.retryAfterSeconds ?? 1);
  // `moved` (a shard to a router, mid-rebalance): which ids left, and the move's target set.
  const extra = code === 'moved' && detail.moved !== undefined ? { moved: detail.moved } : {};
  return { status: HTTP_STATUS[code], headers, body: { error: { code, message, ...extra } } };
}

/**
 * Maps whatever a route threw: SvcError by its code; fastify's own errors (schema, JSON, body size,
 * media type) to the contract's 400s; anything else is `internal` (the caller logs it with the id).
 */
export function toErrorReply(err: unknown, limits: Limits, requestId: string): { reply: ErrorReply; internal: boolean } {
  if (err instanceof SvcError) {
    const message = err.code === 'internal' ? `internal error (request id ${requestId})` : err.message;
    return { reply: errorReply(err.code, message, err.detail), internal: err.code === 'internal' };
  }
  const e = err as { code?: string; statusCode?: number; validation?: unknown; validationContext?: string; message?: string } | null;
  if (e?.validation !== undefined) {
    const first = Array.isArray(e.validation) ? e.validation[0] as Parameters<typeof validationMessage>[1] | undefined : undefined;
    const message = first ? validationMessage(e.validationContext ?? 'body', first) : e.message ?? 'invalid request';
    return { reply: errorReply('invalid_argument', message), internal: false };
  }
  if (e?.code === 'FST_ERR_CTP_BODY_TOO_LARGE') {
    return {
      reply: errorReply('limit_exceeded', `request body is larger than ${LIMIT_VARIABLES.maxRequestBodyBytes}=${limits.maxRequestBodyBytes} bytes`),
      internal: false,
    };
  }
  if (e?.code === 'FST_ERR_CTP_INVALID_MEDIA_TYPE') return { reply: errorReply('invalid_argument', 'content-type must be application/json'), internal: false };
  if (err instanceof SyntaxError || e?.code === 'FST_ERR_CTP_INVALID_JSON_BODY') return { reply: errorReply('invalid_argument', 'malformed JSON body'), internal: false };
  if (typeof e?.statusCode === 'number' && e.statusCode >= 400 && e.statusCode < 500) {
    return { reply: errorReply('invalid_argument', e.message ?? 'invalid request'), internal: false };
  }
  return { reply: errorReply('internal', `internal error (request id ${requestId})`), internal: true };
}

/** An internal error's log line: the request id the client saw, the route template, the error and its cause. */
export function logInternalError(log: ServiceLogger, requestId: string, route: string | undefined, err: unknown): void {
  const e = err as Error & { detail?: Record<string, unknown> };
  log.error({ request_id: requestId, route, err: e?.message, cause: e?.detail?.cause, stack: e?.stack }, 'internal error');
}
