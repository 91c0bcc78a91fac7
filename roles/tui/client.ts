/**
 * The cockpit's view of a server: REST calls with the bearer key, every failure classified so the
 * screen can say what is wrong (unreachable, key refused, key too weak, other).
 */

export interface CollectionRow {
  name: string;
  dim: number;
  metric: string;
  index: string;
  count: number;
  index_state: string;
}

export interface HitRow {
  id: string;
  rank: number;
  score: number;
  payload?: Record<string, unknown>;
}

export type Problem =
  | { kind: 'unreachable'; detail: string }
  | { kind: 'unauthenticated'; detail: string }
  | { kind: 'forbidden'; detail: string }
  | { kind: 'error'; detail: string };

export class CallFailed extends Error {
  constructor(readonly problem: Problem) {
    super(problem.detail);
  }
}

const TIMEOUT_MS = 5000;

export class CockpitClient {
  constructor(readonly baseUrl: string, private readonly apiKey: string | undefined) {}

  private async call(method: string, path: string, body?: unknown): Promise<{ status: number; text: string }> {
    const headers: Record<string, string> = {};
    if (this.apiKey !== undefined) headers.authorization = `Bearer ${this.apiKey}`;
    if (body !== undefined) headers['content-type'] = 'application/json';
    let res: Response;
    try {
      res = await fetch(`${this.baseUrl.replace(/\/+$/, '')}${path}`, {
        method, headers, body: body === undefined ? undefined : JSON.stringify(body), signal: AbortSignal.timeout(TIMEOUT_MS),
      });
    } catch (e) {
      const cause = (e as { cause?: { code?: string; message?: string } }).cause;
      const why = (e as Error).name === 'TimeoutError' ? `no answer within ${TIMEOUT_MS / 1000} s` : cause?.code ?? cause?.message ?? (e as Error).message;
      throw new CallFailed({ kind: 'unreachable', detail: why });
    }
    const text = await res.text();
    if (res.status === 401) throw new CallFailed({ kind: 'unauthenticated', detail: errorMessage(text) ?? 'HTTP 401' });
    if (res.status === 403) throw new CallFailed({ kind: 'forbidden', detail: errorMessage(text) ?? 'HTTP 403' });
    if (res.status >= 400) throw new CallFailed({ kind: 'error', detail: `HTTP ${res.status}: ${errorMessage(text) ?? text.slice(0, 200)}` });
    return { status: res.status, text };
  }

  async collections(): Promise<CollectionRow[]> {
    const r = await this.call('GET', '/v1/collections');
    return (JSON.parse(r.text) as { collections: CollectionRow[] }).collections;
  }

  /** /metrics needs no key: its counters are summed over labels. */
  async metrics(): Promise<Map<string, number>> {
    const r = await this.call('GET', '/metrics');
    return parsePrometheus(r.text);
  }

  async search(collection: string, vector: number[], k: number): Promise<HitRow[]> {
    const r = await this.call('POST', `/v1/collections/${encodeURIComponent(collection)}/query`, { vector, k, with_payload: true });
    return (JSON.parse(r.text) as { hits: HitRow[] }).hits;
  }
}

function errorMessage(text: string): string | null {
  try {
    const e = (JSON.parse(text) as { error?: { code?: string; message?: string } }).error;
    return e?.message === undefined ? null : `${e.code ?? 'error'}: ${e.message}`;
  } catch {
    return null;
  }
}

/** Prometheus text exposition: the sum of every sample of each metric name (labels folded). */
export function parsePrometheus(text: string): Map<string, number> {
  const out = new Map<string, number>();
  for (const line of text.split('\n')) {
    if (line === '' || line.startsWith('#')) continue;
    const m = /^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{.*\})?\s+(\S+)/.exec(line);
    if (m === null) continue;
    const v = Number(m[3]);
    if (!Number.isFinite(v)) continue;
    out.set(m[1], (out.get(m[1]) ?? 0) + v);
  }
  return out;
}

/** Request and error rates from two scrapes of the counters. */
export interface Rates {
  requestsPerSec: number | null;
  errorsPerSec: number | null;
  requestsTotal: number;
  errorsTotal: number;
}

export class RateTracker {
  private prev: { at: number; requests: number; errors: number } | null = null;

  update(m: Map<string, number>, atMs: number): Rates {
    const requests = m.get('svc_http_requests_total') ?? 0;
    const errors = m.get('svc_http_request_errors_total') ?? 0;
    const p = this.prev;
    this.prev = { at: atMs, requests, errors };
    if (p === null || atMs <= p.at || requests < p.requests) return { requestsPerSec: null, errorsPerSec: null, requestsTotal: requests, errorsTotal: errors };
    const secs = (atMs - p.at) / 1000;
    return { requestsPerSec: (requests - p.requests) / secs, errorsPerSec: Math.max(0, errors - p.errors) / secs, requestsTotal: requests, errorsTotal: errors };
  }
}
