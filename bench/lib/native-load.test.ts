import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { describe, expect, it } from 'vitest';
import { parseH2load, parsePgbench, parseWrk, tool, wrk } from './native-load.js';

// Outputs as h2load 1.52 (nghttp2-client, Debian bookworm) and pgbench 15 print them.
const H2LOAD = `finished in 2.00s, 22488.00 req/s, 2.66MB/s
requests: 22488 total, 22488 started, 22488 done, 22480 succeeded, 3 failed, 5 errored, 0 timeout
status codes: 22470 2xx, 0 3xx, 10 4xx, 0 5xx
traffic: 2.66MB (2788512) total, 3.37MB (3535332) headers (space savings 0.00%), 79.37KB (81272) data
                     min         max         mean         sd        +/- sd
time for request:       20us      1.71ms        88us        42us    91.94%
time for connect:        0us         0us         0us         0us     0.00%
`;

const PGBENCH = `pgbench (15.20 (Debian 15.20-0+deb12u1))
transaction type: /tmp/svc-pgbench-x/q.sql
scaling factor: 1
query mode: prepared
number of clients: 8
number of threads: 1
maximum number of tries: 1
duration: 2 s
number of transactions actually processed: 16766
number of failed transactions: 2 (0.012%)
latency average = 0.954 ms
initial connection time = 12.345 ms
tps = 8383.123456 (without initial connection time)
`;

describe('native load generator output', () => {
  it('reads h2load: rate, mean latency in any unit, answered requests, and every failure', () => {
    expect(parseH2load(H2LOAD, 8)).toEqual({ clients: 8, qps: 22488, mean_ms: 0.088, requests: 22480, errors: 10 + 3 + 5 });
    expect(parseH2load(H2LOAD.replace('88us', '1.25ms'), 8).mean_ms).toBe(1.25);
    // More 2xx than "succeeded" (or fewer) at the warm-up boundary is no failure.
    const clean = H2LOAD.replace('3 failed, 5 errored', '0 failed, 0 errored').replace('22470 2xx, 0 3xx, 10 4xx', '22484 2xx, 0 3xx, 0 4xx');
    expect(parseH2load(clean, 8).errors).toBe(0);
    expect(parseH2load(clean.replace('22484 2xx, 0 3xx, 0 4xx, 0 5xx', '22470 2xx, 1 3xx, 2 4xx, 4 5xx'), 8).errors).toBe(7);
  });

  it('reads pgbench: tps without connection time, mean latency, transactions and failures', () => {
    expect(parsePgbench(PGBENCH, 8)).toEqual({ clients: 8, qps: 8383, mean_ms: 0.954, requests: 16766, errors: 2 });
  });

  it('reads the line our wrk script prints: rate over the run, latency, answered requests and every failure', () => {
    const line = 'WRKJSON {"requests":20000,"duration_us":2000000,"non2xx":7,"connect":1,"read":2,"write":0,"timeout":3,"mean_us":812.4,"p50_us":640,"p99_us":4310}';
    expect(parseWrk(`Running 2s test @ http://x\n${line}\n`, 8)).toEqual({
      clients: 8, qps: 10000, mean_ms: 0.812, requests: 20000 - 7, errors: 7 + 1 + 2 + 3, p50_ms: 0.64, p99_ms: 4.31,
    });
  });

  it('refuses output it does not understand rather than reporting zeros', () => {
    expect(() => parseH2load('connect error', 1)).toThrow(/h2load output/);
    expect(() => parsePgbench('FATAL: role does not exist', 1)).toThrow(/pgbench output/);
    expect(() => parseWrk('unable to connect to 127.0.0.1:1 Connection refused', 1)).toThrow(/wrk output/);
    expect(() => parseWrk('WRKJSON {"requests":5,"duration_us":0}', 1)).toThrow(/wrk output/);
  });
});

describe('wrk with every body in turn (.ci/run installs wrk)', () => {
  it('sends the bodies in order, cycling, with the headers given, and counts non-2xx answers as errors', async () => {
    expect(tool('wrk'), 'wrk is not installed (Debian: wrk)').not.toBeNull();
    const bodies = ['{"q":0}', '{"q":1}', '{"q":2,"fail":true}', '{"q":3}', '{"q":4}'];
    const seen: number[] = [];
    let failed = 0;
    let unauthorised = 0;
    const server = createServer((req, res) => {
      let body = '';
      req.on('data', (c: Buffer) => { body += c.toString(); });
      req.on('end', () => {
        if (req.method !== 'POST' || req.headers.authorization !== 'Bearer t' || req.headers['content-type'] !== 'application/json') unauthorised++;
        const j = JSON.parse(body) as { q: number; fail?: boolean };
        seen.push(j.q);
        if (j.fail) failed++;
        res.writeHead(j.fail ? 500 : 200).end('{}');
      });
    });
    await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
    try {
      const port = (server.address() as AddressInfo).port;
      const r = await wrk({ url: `http://127.0.0.1:${port}/q`, bodies, headers: { authorization: 'Bearer t', 'content-type': 'application/json' }, clients: 1, seconds: 1 });
      expect(unauthorised).toBe(0);
      expect(seen.length).toBeGreaterThan(50);
      // One connection: each request is the one after the last, round the list, except once, where the
      // measured run starts over after the warm-up.
      const breaks = seen.filter((q, i) => i > 0 && q !== (seen[i - 1] + 1) % bodies.length).length;
      expect(breaks).toBeLessThanOrEqual(1);
      expect(new Set(seen).size).toBe(bodies.length);
      expect(r.errors).toBeGreaterThan(0);
      // The measured run is the last part of what the server saw (a warm-up second came first).
      expect(r.requests + r.errors).toBeLessThanOrEqual(seen.length);
      expect(r.errors).toBeLessThanOrEqual(failed);
      expect(r.errors / (r.requests + r.errors)).toBeCloseTo(1 / bodies.length, 1);
    } finally {
      await new Promise<void>((r) => server.close(() => r()));
    }
  });

  it('refuses bodies it could not send one a line', async () => {
    await expect(wrk({ url: 'http://127.0.0.1:1/', bodies: ['{"a":\n1}'], headers: {}, clients: 1, seconds: 1 })).rejects.toThrow(/single lines/);
    await expect(wrk({ url: 'http://127.0.0.1:1/', bodies: [], headers: {}, clients: 1, seconds: 1 })).rejects.toThrow(/single lines/);
  });
});
