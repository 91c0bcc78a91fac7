import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ENGINE_LANES, LANES_PER_MEMORY } from '../../core/index/vector-store.js';
import { startServer, type RunningServer } from '../cli/serve.js';
import { loadConfig } from '../config.js';
import { createLogs } from '../log.js';
import { probeReusePort } from '../reuse-port.js';
import { loopRequests } from '../testing/loop-requests.js';

/**
 * A request loop that dies never closes its views (issue 20): the scratch lanes they held in a
 * collection's vector store and scalar codes go back when the engine thread sees the thread end
 * (loops.ts, core/index/lanes.ts). Without that, every death kept one lane of each for good, and once a
 * store's loop lanes were all kept, every loop handed that collection's searches to the engine thread.
 * Node 24 (`npm run test:node24`): a runtime that shares a port.
 */
const support = await probeReusePort();
const KEY = 'lanes-admin-key';
const LOOPS = 2;
const LOOP_LANES = LANES_PER_MEMORY - ENGINE_LANES;
const LOCAL = 'svc_loop_searches_total{answered="loop",reason=""}';
const DIM = 8;
/** Above SCALAR_TRAIN_MIN: the graph traverses scalar codes, so a view holds a lane of the codes too. */
const POINTS = 1500;

const { fresh } = loopRequests(KEY);

async function metricValue(base: string, series: string): Promise<number> {
  const text = await (await fetch(`${base}/metrics`, { headers: { connection: 'close' } })).text();
  const line = text.split('\n').find((l) => l.startsWith(`${series} `));
  return line === undefined ? 0 : Number(line.slice(series.length + 1));
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

describe.runIf(support.ok)(`the scratch lanes of request loops that die, on Node ${process.versions.node}`, () => {
  let dir: string;
  let server: RunningServer;
  let base: string;

  beforeAll(async () => {
    dir = mkdtempSync(join(tmpdir(), 'svc-lanes-'));
    server = await startServer(loadConfig({
      SVC_DATA_DIR: join(dir, 'data'), SVC_REST_ADDR: '127.0.0.1:0', SVC_GRPC_ADDR: '127.0.0.1:0', SVC_ENCRYPTION_KEY: 'd4'.repeat(32),
      SVC_API_KEYS: KEY, RUST_LOG: 'error', SVC_HTTP_LOOPS: String(LOOPS),
      SVC_RATE_LIMIT_REQUESTS_PER_SECOND: '0.01', SVC_RATE_LIMIT_BURST: '1000000',
    }, { defaultFile: null, cwd: dir }), createLogs('error'));
    base = `http://127.0.0.1:${server.restPort}`;
    expect((await fresh(base, 'POST', '/v1/collections', { name: 'c', dim: DIM, metric: 'l2', quantization: 'scalar' })).status).toBe(201);
    const points = Array.from({ length: POINTS }, (_, i) => ({ id: `p${i}`, vector: Array.from({ length: DIM }, (_, d) => ((i * 31 + d * 17) % 97) / 97) }));
    for (let i = 0; i < POINTS; i += 500) expect((await fresh(base, 'PUT', '/v1/collections/c/points', { points: points.slice(i, i + 500) })).status).toBe(200);
    // The graph (and its codes) built: a loop's view then holds a lane of the store and one of the codes.
    for (let until = Date.now() + 60_000; Date.now() < until;) {
      if (((await fresh(base, 'GET', '/v1/collections/c')).body as { index_state: string }).index_state === 'current') break;
      await sleep(100);
    }
  }, 120_000);

  afterAll(async () => {
    await server?.close();
    rmSync(dir, { recursive: true, force: true });
  });

  /** Searches on new connections until every loop answered: whether each search was a loop's own answer. */
  async function allAnsweredByLoops(): Promise<boolean> {
    const before = await metricValue(base, LOCAL);
    const loops = new Set<string>();
    let answered = 0;
    for (let i = 0; (i < 8 || loops.size < LOOPS) && i < 200; i++) {
      const a = await fresh(base, 'POST', '/v1/collections/c/query', { vector: Array.from({ length: DIM }, (_, d) => (i + d) % 5 / 5), k: 5 });
      // A replacement between listening and ready answers 503: not a search.
      if (a.status !== 200) continue;
      expect((a.body as { hits: unknown[] }).hits).toHaveLength(5);
      loops.add(a.loop!);
      answered++;
    }
    return loops.size === LOOPS && (await metricValue(base, LOCAL)) - before === answered;
  }

  /** Every loop answers searches itself, once its view came (it is asked for on its first search). */
  async function loopsAnswerThemselves(): Promise<boolean> {
    for (let tries = 0; tries < 15; tries++) {
      if (await allAnsweredByLoops()) return true;
      await sleep(200);
    }
    return false;
  }

  it('go back: after more deaths than a store has loop lanes, every loop still answers searches itself', async () => {
    expect(await loopsAnswerThemselves()).toBe(true);
    // Each death while its loop holds a view (of the store and of the codes): without giving them back,
    // the replacement of death LOOP_LANES would find every loop lane kept by the dead.
    for (let death = 1; death <= LOOP_LANES + 2; death++) {
      await server.loops!.terminate(death % LOOPS);
      await expect.poll(() => server.loops!.replaced).toBe(death);
      await expect.poll(() => metricValue(base, 'svc_http_loops'), { timeout: 30_000 }).toBe(LOOPS);
      expect(await loopsAnswerThemselves(), `after death ${death}, every loop answers searches itself`).toBe(true);
    }
  }, 300_000);
});
