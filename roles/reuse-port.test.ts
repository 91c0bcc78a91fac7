import { readFileSync } from 'node:fs';
import { get } from 'node:http';
import { Worker } from 'node:worker_threads';
import { afterEach, describe, expect, it } from 'vitest';
import { probeReusePort } from './reuse-port.js';

/**
 * The seam of issue 20's several event loops: worker threads that each listen on one port with
 * `reusePort`. Runs in npm test on Node 20 (no reusePort: a second listener is refused) and in
 * npm run test:node24 on Node 24 (scripts/node24.sh): there two worker threads must share the port and
 * both answer. The probe must agree with what Node documents, so that on Node 24 the sharing test runs.
 */

/** reusePort is in Node 22.12 and later 22.x, and from 23.1; SO_REUSEPORT that spreads load: Linux. */
function documented(version: string, platform: string): boolean {
  const [major, minor] = version.split('.').map(Number);
  return platform === 'linux' && (major > 23 || (major === 23 && minor >= 1) || (major === 22 && minor >= 12));
}

function nonlocalBind(): boolean {
  try {
    return readFileSync('/proc/sys/net/ipv4/ip_nonlocal_bind', 'utf8').trim() !== '0';
  } catch {
    return false;
  }
}

const support = await probeReusePort();

describe('probeReusePort', () => {
  it(`says what Node ${process.versions.node} on ${process.platform} is documented to do`, () => {
    expect(support.ok).toBe(documented(process.versions.node, process.platform));
    if (!support.ok) expect(support.reason).toMatch(new RegExp(`${process.version}.*EADDRINUSE`));
  });

  it('answers the same when asked again at once (the ports it bound are closed)', async () => {
    expect(await probeReusePort()).toEqual(support);
  });

  // 192.0.2.1 (TEST-NET-1) is no address of this machine: EADDRNOTAVAIL on every runtime, unless the
  // machine allows binding addresses it does not have (net.ipv4.ip_nonlocal_bind): then it answers as
  // for loopback.
  it('says no with the reason, never rejects, when even the first listener cannot bind', async () => {
    const got = await probeReusePort('192.0.2.1');
    if (nonlocalBind()) {
      expect(got).toEqual(support);
    } else {
      expect(got.ok).toBe(false);
      if (!got.ok) expect(got.reason).toMatch(/a first listener with reusePort failed \(EADDRNOTAVAIL\)/);
    }
  });
});

/** A worker thread with an HTTP server on `port` (0: any) with reusePort; it answers its name. */
const LOOP = `
const { parentPort, workerData } = require('node:worker_threads');
const http = require('node:http');
const server = http.createServer((req, res) => res.end(workerData.name));
server.once('error', (e) => parentPort.postMessage({ error: e.code || String(e) }));
server.listen({ host: '127.0.0.1', port: workerData.port, reusePort: true }, () => {
  parentPort.postMessage({ port: server.address().port });
});
`;

type Started = { worker: Worker; port?: number; error?: string };

const workers: Worker[] = [];
afterEach(async () => {
  await Promise.all(workers.splice(0).map((w) => w.terminate()));
});

function startLoop(name: string, port: number): Promise<Started> {
  const worker = new Worker(LOOP, { eval: true, workerData: { name, port } });
  workers.push(worker);
  return new Promise((resolve, reject) => {
    worker.once('error', reject);
    worker.once('message', (m: { port?: number; error?: string }) => resolve({ worker, ...m }));
  });
}

/** `n` requests, each on a connection of its own (the kernel picks a listener per connection), 8 at a time. */
async function askMany(port: number, n: number): Promise<Map<string, number>> {
  const answers = new Map<string, number>();
  let next = 0;
  const one = (): Promise<string> => new Promise((resolve, reject) => {
    get({ host: '127.0.0.1', port, path: '/', agent: false }, (res) => {
      let body = '';
      res.setEncoding('utf8');
      res.on('data', (c: string) => (body += c));
      res.on('end', () => resolve(body));
    }).on('error', reject);
  });
  const lane = async (): Promise<void> => {
    while (next < n) {
      next++;
      const who = await one();
      answers.set(who, (answers.get(who) ?? 0) + 1);
    }
  };
  await Promise.all(Array.from({ length: 8 }, lane));
  return answers;
}

const REQUESTS = 400;

describe('worker threads listening on one port', () => {
  // One test, what this runtime does: npm test runs it on Node 20, npm run test:node24 on Node 24.
  it(support.ok
    ? 'with reusePort: both listen, and the kernel gives each of them connections'
    : 'without reusePort (Node 20): the second is refused with EADDRINUSE, the first answers all', async () => {
    const a = await startLoop('a', 0);
    expect(a.error).toBeUndefined();
    const b = await startLoop('b', a.port!);
    if (!support.ok) {
      expect(b.error).toBe('EADDRINUSE');
      const answers = await askMany(a.port!, 50);
      expect(Object.fromEntries(answers)).toEqual({ a: 50 });
      return;
    }
    expect(b).toMatchObject({ port: a.port });
    const answers = await askMany(a.port!, REQUESTS);
    expect((answers.get('a') ?? 0) + (answers.get('b') ?? 0)).toBe(REQUESTS);
    // 400 connections from distinct source ports, hashed over two listeners: one alone is 2^-399.
    expect(answers.get('a')).toBeGreaterThan(0);
    expect(answers.get('b')).toBeGreaterThan(0);
  });
});
