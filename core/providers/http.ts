/**
 * JSON over HTTP for the provider adapters: one POST with a per-attempt timeout, bounded retries with
 * exponential backoff on 429, 5xx, timeouts and connection errors (honouring `retry-after` up to the
 * backoff cap), and errors that never carry the key. Every failure is SvcError('provider_error').
 */
import { setTimeout as delay } from 'node:timers/promises';
import { SvcError } from '../base/errors.js';
import { systemClock } from '../base/clock.js';
import type { ProviderOptions } from './types.js';

const SNIPPET_CHARS = 200;

export interface PostTarget {
  /** For messages: "embedding provider hosted_a". */
  label: string;
  url: string;
  apiKey?: string;
  /** Header carrying the key; default `authorization: Bearer <key>`. */
  headers?: Record<string, string>;
}

/** Replace every occurrence of the secrets in `text`, and any bearer token, with a marker. */
export function redact(text: string, secrets: (string | undefined)[]): string {
  let out = text;
  for (const s of secrets) if (s !== undefined && s.length > 0) out = out.split(s).join('[redacted]');
  return out.replace(/(bearer\s+)[^\s"',;]+/gi, '$1[redacted]');
}

export function providerError(target: PostTarget, message: string): SvcError {
  return new SvcError('provider_error', redact(`${target.label}: ${message}`, [target.apiKey]));
}

/** POST `body` as JSON and return the parsed JSON response, retrying as the options say. */
export async function postJson(target: PostTarget, body: unknown, opts: ProviderOptions): Promise<unknown> {
  const baseMs = opts.backoffBaseMs ?? 200;
  const maxMs = opts.backoffMaxMs ?? 10_000;
  const maxBytes = opts.maxResponseBytes ?? 64 * 1024 * 1024;
  const sleep = opts.sleep ?? ((ms: number) => delay(ms));
  const clock = opts.clock ?? systemClock;
  const headers: Record<string, string> = { 'content-type': 'application/json', accept: 'application/json', ...target.headers };
  if (target.apiKey) headers.authorization = `Bearer ${target.apiKey}`;
  const payload = JSON.stringify(body);
  const attempts = Math.max(0, Math.floor(opts.retries)) + 1;
  let last = '';
  for (let attempt = 0; attempt < attempts; attempt++) {
    let waitMs = Math.min(maxMs, baseMs * 2 ** attempt);
    try {
      // undici is imported at the first call: a server without hosted providers never loads it.
      const { request } = await import('undici');
      const res = await request(target.url, {
        method: 'POST',
        headers,
        body: payload,
        signal: AbortSignal.timeout(opts.timeoutMs),
      });
      const text = await readCapped(res.body, maxBytes);
      if (res.statusCode >= 200 && res.statusCode < 300) {
        try {
          return JSON.parse(text) as unknown;
        } catch {
          throw providerError(target, `malformed JSON in the response (${snippet(text)})`);
        }
      }
      last = `HTTP ${res.statusCode} (${snippet(text)})`;
      if (res.statusCode !== 429 && res.statusCode < 500) break; // the request itself is wrong: no retry
      const after = retryAfterMs(res.headers['retry-after'], clock.nowMs());
      if (after !== undefined) waitMs = Math.min(maxMs, after);
    } catch (e) {
      if (e instanceof SvcError) throw e;
      last = describeNetworkError(e, opts.timeoutMs);
    }
    if (attempt + 1 < attempts) await sleep(waitMs);
  }
  throw providerError(target, `request failed after ${attempts} attempt${attempts === 1 ? '' : 's'}: ${last}`);
}

async function readCapped(body: AsyncIterable<Buffer | Uint8Array> & { destroy?: () => void }, maxBytes: number): Promise<string> {
  const chunks: Buffer[] = [];
  let n = 0;
  for await (const chunk of body) {
    n += chunk.length;
    if (n > maxBytes) {
      body.destroy?.();
      throw new SvcError('provider_error', `provider response larger than ${maxBytes} bytes`);
    }
    chunks.push(Buffer.from(chunk));
  }
  return Buffer.concat(chunks).toString('utf8');
}

function snippet(text: string): string {
  const t = text.replace(/\s+/g, ' ').trim();
  if (t.length === 0) return 'empty body';
  return t.length > SNIPPET_CHARS ? `${t.slice(0, SNIPPET_CHARS)}...` : t;
}

/** `retry-after` as delay-seconds or an HTTP date, in milliseconds; undefined when absent or unreadable. */
export function retryAfterMs(value: string | string[] | undefined, nowMs: number): number | undefined {
  const v = Array.isArray(value) ? value[0] : value;
  if (v === undefined || v.trim() === '') return undefined;
  if (/^\s*\d+(\.\d+)?\s*$/.test(v)) return Math.round(Number(v) * 1000);
  const at = Date.parse(v);
  return Number.isNaN(at) ? undefined : Math.max(0, at - nowMs);
}

function describeNetworkError(e: unknown, timeoutMs: number): string {
  const err = e as { name?: string; code?: string; message?: string };
  if (err?.name === 'TimeoutError' || err?.name === 'AbortError' || err?.code === 'UND_ERR_ABORTED') {
    return `timed out after ${timeoutMs} ms`;
  }
  const code = err?.code ? `${err.code}: ` : '';
  return `${code}${err?.message ?? String(e)}`;
}
