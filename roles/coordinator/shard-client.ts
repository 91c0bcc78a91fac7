import { SvcError } from '../../core/base/errors.js';
import type { BatchAnswer, MoveClient } from '../../core/cluster/coordinator/mover.js';
import type { ShardClient } from '../../core/cluster/routing/shard-client.js';

/**
 * ShardClient over a shard's REST API (core/cluster/routing/shard-client.ts), presenting
 * SVC_CLUSTER_SHARD_KEY. The point count is `/v1/stats` `total_points`: it needs the read role, and a key
 * scoped to `*` (stats are scope-filtered, so a narrower key would count only part of the shard).
 * Every failure is `unavailable` naming the shard; the caller's signal bounds the time.
 */
export class HttpShardClient implements ShardClient, MoveClient {
  constructor(private readonly key: string | null, private readonly moveTimeoutMs = 60_000) {}

  // The rebalance steps (docs/cluster.md, Rebalancing): an admin key scoped to * on every shard.
  batch(url: string, body: Parameters<MoveClient['batch']>[1]): Promise<BatchAnswer> {
    return this.post(url, '/v1/cluster/move/batch', body) as Promise<BatchAnswer>;
  }

  commit(url: string, body: Parameters<MoveClient['commit']>[1]): Promise<{ moved: number }> {
    return this.post(url, '/v1/cluster/move/commit', body) as Promise<{ moved: number }>;
  }

  apply(url: string, body: Parameters<MoveClient['apply']>[1]): Promise<{ applied: number; deleted: number }> {
    return this.post(url, '/v1/cluster/move/apply', body) as Promise<{ applied: number; deleted: number }>;
  }

  /** A move step: the answer, `not_found` as the shard said it (a batch lease that ended), else `unavailable`. */
  private async post(url: string, path: string, body: unknown): Promise<unknown> {
    const signal = AbortSignal.timeout(this.moveTimeoutMs);
    let r: Response;
    try {
      r = await fetch(`${url}${path}`, {
        method: 'POST',
        headers: { 'content-type': 'application/json', ...(this.key === null ? {} : { authorization: `Bearer ${this.key}` }) },
        body: JSON.stringify(body), signal, redirect: 'error',
      });
    } catch (e) {
      throw new SvcError('unavailable', `shard ${url} did not answer POST ${path}: ${signal.aborted ? 'no answer in time' : causeOf(e)}`);
    }
    const text = await r.text().catch((e: unknown) => {
      throw new SvcError('unavailable', `shard ${url} answered POST ${path} with an unreadable body: ${causeOf(e)}`);
    });
    let answer: unknown = null;
    try {
      answer = JSON.parse(text);
    } catch {
      // reported below
    }
    if (r.status >= 200 && r.status < 300 && answer !== null) return answer;
    const err = (answer as { error?: { code?: unknown; message?: unknown } } | null)?.error;
    const message = typeof err?.message === 'string' ? err.message.slice(0, 500) : text.slice(0, 200);
    if (err?.code === 'not_found') throw new SvcError('not_found', `shard ${url}: ${message}`);
    const hint = r.status === 401 || r.status === 403 ? ' (SVC_CLUSTER_SHARD_KEY must be an admin key scoped to * on every shard to rebalance)' : '';
    throw new SvcError('unavailable', `shard ${url} answered POST ${path} with ${r.status}${hint}: ${message}`);
  }

  async pointCount(url: string, signal?: AbortSignal): Promise<number> {
    const body = await this.get(url, '/v1/stats', signal);
    const total = (body as { total_points?: unknown } | null)?.total_points;
    if (!Number.isSafeInteger(total) || (total as number) < 0) {
      throw new SvcError('unavailable', `shard ${url} answered /v1/stats without a total_points count`);
    }
    return total as number;
  }

  async ready(url: string, signal?: AbortSignal): Promise<void> {
    await this.get(url, '/readyz', signal);
  }

  private async get(url: string, path: string, signal?: AbortSignal): Promise<unknown> {
    let r: Response;
    try {
      r = await fetch(`${url}${path}`, {
        headers: this.key === null ? {} : { authorization: `Bearer ${this.key}` },
        ...(signal ? { signal } : {}),
        redirect: 'error',
      });
    } catch (e) {
      const why = signal?.aborted ? 'no answer in time' : causeOf(e);
      throw new SvcError('unavailable', `shard ${url} did not answer GET ${path}: ${why}`);
    }
    const text = await readBounded(r, signal).catch((e: unknown) => {
      throw new SvcError('unavailable', `shard ${url} answered GET ${path} with an unreadable body: ${causeOf(e)}`);
    });
    let body: unknown = null;
    try {
      body = JSON.parse(text);
    } catch {
      // reported below when it matters
    }
    if (r.status !== 200) {
      const err = (body as { error?: { code?: unknown } } | null)?.error;
      const code = typeof err?.code === 'string' ? ` ${err.code.slice(0, 40)}` : '';
      const hint = r.status === 401 || r.status === 403 ? ' (check SVC_CLUSTER_SHARD_KEY: a read key scoped to * on every shard)' : '';
      throw new SvcError('unavailable', `shard ${url} answered GET ${path} with ${r.status}${code}${hint}`);
    }
    if (body === null) throw new SvcError('unavailable', `shard ${url} answered GET ${path} with a body that is not JSON`);
    return body;
  }
}

/** Most bytes of a shard's answer read: stats list every collection, but not megabytes of them. */
const ANSWER_BYTES_MAX = 8 << 20;

async function readBounded(r: Response, signal?: AbortSignal): Promise<string> {
  if (r.body === null) return '';
  const reader = r.body.getReader();
  const chunks: Uint8Array[] = [];
  let n = 0;
  for (;;) {
    if (signal?.aborted) {
      await reader.cancel().catch(() => undefined);
      throw new Error('no answer in time');
    }
    const { done, value } = await reader.read();
    if (done) break;
    n += value.byteLength;
    if (n > ANSWER_BYTES_MAX) {
      await reader.cancel().catch(() => undefined);
      throw new Error(`more than ${ANSWER_BYTES_MAX} bytes`);
    }
    chunks.push(value);
  }
  return Buffer.concat(chunks).toString('utf8');
}

function causeOf(e: unknown): string {
  const err = e as { message?: string; cause?: { code?: string; message?: string } };
  return (err?.cause?.code ?? err?.cause?.message ?? err?.message ?? String(e)).slice(0, 200);
}
