// What one router-to-shard call costs in CPU, by how the deadline is kept (roles/router/http-shard.ts):
// an AbortSignal.timeout per call (as before 2026-11-26) against undici's own headers and body timeouts
// (now), and undici's raw dispatch for reference. Client and a stand-in shard (a node:http server
// answering a 10-hit JSON body) share this one process, so each figure is both sides' CPU per call;
// the differences are the client's. Rounds alternate, to share out a busy machine's noise.
// Run: npx tsx bench/router-call.ts [--calls 6000] [--rounds 3]
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { Agent } from 'undici';

const arg = (name: string, fallback: number): number => {
  const i = process.argv.indexOf(`--${name}`);
  return i < 0 ? fallback : Number(process.argv[i + 1]);
};
const calls = arg('calls', 6000);
const rounds = arg('rounds', 3);
const CONCURRENCY = 8;

const answer = JSON.stringify({ hits: Array.from({ length: 10 }, (_, i) => ({ id: `p${i}`, rank: i, score: 1.2345 * i })) });
const server = createServer((req, res) => {
  req.resume();
  req.on('end', () => {
    res.writeHead(200, { 'content-type': 'application/json', 'content-length': Buffer.byteLength(answer) });
    res.end(answer);
  });
});
await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
const origin = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
const agent = new Agent({ connections: 128, pipelining: 1, keepAliveTimeout: 4_000 });
const body = JSON.stringify({ vector: Array.from({ length: 128 }, (_, i) => i * 0.01), k: 10 });
const headers = { accept: 'application/json', authorization: 'Bearer k', 'content-type': 'application/json' };

async function read(b: AsyncIterable<Buffer>): Promise<unknown> {
  const chunks: Buffer[] = [];
  for await (const c of b) chunks.push(c);
  return JSON.parse(Buffer.concat(chunks).toString('utf8'));
}

const ways: Record<string, () => Promise<unknown>> = {
  abort_signal_timeout: async () => read((await agent.request({ origin, path: '/q', method: 'POST', headers, body, signal: AbortSignal.timeout(10_000) })).body),
  undici_timeouts: async () => read((await agent.request({ origin, path: '/q', method: 'POST', headers, body, headersTimeout: 10_000, bodyTimeout: 10_000 })).body),
  raw_dispatch: () => new Promise((resolve, reject) => {
    const chunks: Buffer[] = [];
    agent.dispatch({ origin, path: '/q', method: 'POST', headers, body, headersTimeout: 10_000, bodyTimeout: 10_000 }, {
      onConnect() {}, onHeaders() { return true; }, onData(c: Buffer) { chunks.push(c); return true; },
      onComplete() { resolve(JSON.parse(Buffer.concat(chunks).toString('utf8'))); }, onError(e: Error) { reject(e); },
    } as never);
  }),
};

const us: Record<string, number[]> = Object.fromEntries(Object.keys(ways).map((k) => [k, []]));
for (let r = 0; r < rounds; r++) {
  for (const [name, one] of Object.entries(ways)) {
    let started = 0;
    const t0 = process.cpuUsage();
    await Promise.all(Array.from({ length: CONCURRENCY }, async () => {
      while (started++ < calls) await one();
    }));
    const used = process.cpuUsage(t0);
    us[name].push(Math.round((used.user + used.system) / calls));
  }
}
const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)];
console.log(JSON.stringify({ bench: 'router-call', calls, rounds, concurrency: CONCURRENCY, cpu_us_per_call: us, median: Object.fromEntries(Object.entries(us).map(([k, v]) => [k, median(v)])) }));
await agent.close();
server.close();
