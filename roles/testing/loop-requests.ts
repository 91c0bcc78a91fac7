/**
 * Requests to a server with several request loops, for tests: each on a new connection, so that the
 * kernel picks its loop anew (`x-svc-loop` says which answered).
 */
export interface LoopAnswer { status: number; loop: string | null; body: any }

export function loopRequests(key: string) {
  /** One request on a new connection. */
  async function fresh(base: string, method: string, path: string, body?: unknown): Promise<LoopAnswer> {
    const res = await fetch(`${base}${path}`, {
      method, headers: { authorization: `Bearer ${key}`, connection: 'close', ...(body !== undefined ? { 'content-type': 'application/json' } : {}) },
      ...(body !== undefined ? { body: JSON.stringify(body) } : {}),
    });
    const text = await res.text();
    return { status: res.status, loop: res.headers.get('x-svc-loop'), body: text === '' ? null : JSON.parse(text) as unknown };
  }

  /** Asks until every loop has answered (for up to 30 s: a replacement loop takes a while to start); each loop's answer. */
  async function onEveryLoop(base: string, loops: number, method: string, path: string, body?: unknown): Promise<Map<string, LoopAnswer>> {
    const seen = new Map<string, LoopAnswer>();
    for (const until = Date.now() + 30_000; Date.now() < until && seen.size < loops;) {
      const a = await fresh(base, method, path, body);
      if (a.loop !== null && !seen.has(a.loop)) seen.set(a.loop, a);
    }
    const want = Array.from({ length: loops }, (_, i) => String(i)).join(',');
    const got = [...seen.keys()].sort().join(',');
    if (got !== want) throw new Error(`loops ${want} should each have answered within 30 s; these did: ${got}`);
    return seen;
  }

  return { fresh, onEveryLoop };
}
