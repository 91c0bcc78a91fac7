import { mkdtempSync, rmSync, symlinkSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { startServer, type RunningServer } from '../cli/serve.js';
import { loadConfig } from '../config.js';
import { createLogs } from '../log.js';
import { probeReusePort } from '../reuse-port.js';
import { loopRequests, type LoopAnswer } from '../testing/loop-requests.js';

/**
 * A read replica with two request loops (issue 20, on a runtime that shares a port: `npm run
 * test:node24`): each loop answers a plain search itself, over the database the replica serves, with
 * the engine's answer; across a re-bootstrap (the replica pointed at another leader, whose history is
 * not its own, streams a full snapshot into a side directory and swaps it in) every answer is the old
 * state or the new one, never an error, and once the engine answers from the new database no loop
 * answers from the old one again; the loops then answer from the new one themselves.
 */
const support = await probeReusePort();
const KEY = 'replica-loops-key';
const logs = createLogs('error');
const DIM = 8;
const vec = (i: number): number[] => Array.from({ length: DIM }, (_, d) => Math.sin(i * 0.37 + d));

function config(dataDir: string, master: string, extra: Record<string, string> = {}) {
  return loadConfig({
    SVC_DATA_DIR: dataDir, SVC_REST_ADDR: '127.0.0.1:0', SVC_GRPC_ADDR: '127.0.0.1:0', SVC_ENCRYPTION_KEY: master,
    SVC_API_KEYS: KEY, RUST_LOG: 'error', ...extra,
  }, { defaultFile: null, cwd: dataDir });
}

const { fresh, onEveryLoop } = loopRequests(KEY);
type Answer = LoopAnswer;

async function metricValue(base: string, series: string): Promise<number> {
  const text = await (await fetch(`${base}/metrics`, { headers: { connection: 'close' } })).text();
  const line = text.split('\n').find((l) => l.startsWith(`${series} `));
  return line === undefined ? 0 : Number(line.slice(series.length + 1));
}

async function until(what: string, check: () => Promise<boolean>, ms = 60_000): Promise<void> {
  const end = Date.now() + ms;
  while (!(await check())) {
    if (Date.now() > end) throw new Error(`${what}: not within ${ms} ms`);
    await new Promise((r) => setTimeout(r, 50));
  }
}

const LOOP_ANSWERS = 'svc_loop_searches_total{answered="loop",reason=""}';

describe.runIf(support.ok)(`a read replica with two request loops on Node ${process.versions.node}`, () => {
  const root = mkdtempSync(join(tmpdir(), 'svc-loops-replica-'));
  const servers: RunningServer[] = [];
  afterAll(async () => {
    await Promise.all(servers.map((s) => s.close().catch(() => undefined)));
    rmSync(root, { recursive: true, force: true });
  });
  const start = async (c: ReturnType<typeof config>): Promise<RunningServer> => {
    const s = await startServer(c, logs);
    servers.push(s);
    return s;
  };
  const baseOf = (s: RunningServer) => `http://127.0.0.1:${s.restPort}`;

  const LOOPS = 2;
  // Fifty hits from all over b's points (loaded in chunks): a state part loaded answers other ones.
  const q = { vector: vec(3), k: 50, ef_search: 400 };
  /** What a one-loop replica answers `q` with from leader a's whole state, and from b's. */
  const whole: { old: unknown; new: unknown } = { old: null, new: null };
  /** The state a search answered from: leader a's whole (old), leader b's whole (new), or anything else. */
  const stateOf = (x: Answer): string => {
    if (x.status !== 200) return `${x.status} ${x.body?.error?.code}`;
    return JSON.stringify(x.body) === JSON.stringify(whole.old) ? 'old' : JSON.stringify(x.body) === JSON.stringify(whole.new) ? 'new' : `part ${JSON.stringify(x.body)}`;
  };
  let leaders: Promise<{ a: RunningServer; b: RunningServer }> | null = null;
  /** Leader a: few points (ids a*); leader b: a different history with many more (ids b*). */
  const twoLeaders = () => leaders ??= (async () => {
    const a = await start(config(join(root, 'a'), 'a1'.repeat(32)));
    const b = await start(config(join(root, 'b'), 'b1'.repeat(32)));
    for (const [s, n, prefix] of [[a, 60, 'a'], [b, 30_000, 'b']] as const) {
      expect((await fresh(baseOf(s), 'POST', '/v1/collections', { name: 'c', dim: DIM, metric: 'l2' })).status).toBe(201);
      for (let i = 0; i < n; i += 1000) {
        const points = Array.from({ length: Math.min(1000, n - i) }, (_, j) => ({ id: `${prefix}${i + j}`, vector: vec(i + j), payload: { from: prefix } }));
        expect((await fresh(baseOf(s), 'POST', '/v1/collections/c/points:bulk', { points })).status).toBe(200);
      }
      whole[prefix === 'a' ? 'old' : 'new'] = (await fresh(baseOf(s), 'POST', '/v1/collections/c/query', { ...q, consistency: 'strong' })).body;
    }
    expect((whole.old as { hits: { id: string }[] }).hits[0].id).toBe('a3');
    expect((whole.new as { hits: { id: string }[] }).hits[0].id).toBe('b3');
    return { a, b };
  })();

  /**
   * A replica of a in `replicaDir` with two loops, whose loops answer a's state as its engine does,
   * themselves; closed, it is started again following b (a re-bootstrap): that server, ready.
   */
  async function replicaMovedToB(replicaDir: string, beforeRestart: () => void = () => undefined): Promise<{ r: RunningServer; base: string; reference: () => Promise<Answer> }> {
    const { a, b } = await twoLeaders();
    const master = 'e5'.repeat(32);
    const following = (leader: RunningServer) => config(replicaDir, master, {
      SVC_HTTP_LOOPS: String(LOOPS), SVC_LEADER_URL: `http://127.0.0.1:${leader.grpcPort}`, SVC_LEADER_API_KEY: KEY,
    });
    let r = await start(following(a));
    expect(r.loops?.count).toBe(LOOPS);
    let base = baseOf(r);
    // A strong read always goes to the engine: the reference for each loop's own answer.
    const reference = () => fresh(base, 'POST', '/v1/collections/c/query', { ...q, consistency: 'strong' });
    await until('the replica holds leader a\'s points', async () => (await fresh(base, 'POST', '/v1/collections/c/points:count', {})).body?.count === 60);
    expect((await reference()).body).toEqual(whole.old);
    const before = await metricValue(base, LOOP_ANSWERS);
    for (let i = 0; i < 3; i++) for (const x of (await onEveryLoop(base, LOOPS, 'POST', '/v1/collections/c/query', q)).values()) expect(x.body).toEqual(whole.old);
    expect(await metricValue(base, LOOP_ANSWERS)).toBeGreaterThan(before);
    await r.close();
    beforeRestart();
    // Pointed at b, whose log ends before the replica's position: b sends a full snapshot.
    r = await start(following(b));
    base = baseOf(r);
    await until('the replica is ready', async () => (await fresh(base, 'GET', '/readyz')).status === 200);
    return { r, base, reference };
  }

  /** After a re-bootstrap: every loop answers b's state itself, as the engine does. */
  async function loopsAnswerNew(base: string, reference: () => Promise<Answer>): Promise<void> {
    const now = (await reference()).body;
    expect(now).toEqual(whole.new);
    const after = await metricValue(base, LOOP_ANSWERS);
    // A loop asks again for a name it had no view of after at most a second.
    await new Promise((res) => setTimeout(res, 1100));
    for (let i = 0; i < 3; i++) for (const x of (await onEveryLoop(base, LOOPS, 'POST', '/v1/collections/c/query', q)).values()) expect(x.body).toEqual(now);
    expect(await metricValue(base, LOOP_ANSWERS)).toBeGreaterThan(after);
    const metrics = await (await fetch(`${base}/metrics`, { headers: { connection: 'close' } })).text();
    expect(metrics).toMatch(/^svc_replication_bootstraps_total 1$/m);
  }

  it('answers plain searches in its loops as its engine does, and never from the old database once a re-bootstrap swapped the new one in', async () => {
    // The re-bootstrap goes into a side directory while the old state serves, and is swapped in at its end.
    const { base, reference } = await replicaMovedToB(join(root, 'replica'));

    // Pointed at b, whose log ends before the replica's position: b sends a full snapshot, which goes into
    // a side directory while the old state serves, and is swapped in at its end.
    const seen = new Map<string, number>();
    let swapped = false;
    // The loops answered from the old database themselves before the swap (so the check below is not vacuous).
    const loopsAtStart = await metricValue(base, LOOP_ANSWERS);
    let loopsAtSwap = loopsAtStart;
    for (const end = Date.now() + 120_000; ;) {
      expect(Date.now() < end, 'the re-bootstrap did not end').toBe(true);
      const x = await fresh(base, 'POST', '/v1/collections/c/query', q);
      // Never an error: a single-loop replica answers every read during a re-bootstrap (e2e/replication-rebootstrap).
      expect(x.status, JSON.stringify(x.body)).toBe(200);
      const state = stateOf(x);
      expect(['old', 'new']).toContain(state);
      // Once the engine answered from the new database, no loop answers from the old one.
      if (swapped) expect(state, 'a loop answered from the database the re-bootstrap swapped out').toBe('new');
      seen.set(state, (seen.get(state) ?? 0) + 1);
      if (!swapped && state === 'old') loopsAtSwap = await metricValue(base, LOOP_ANSWERS);
      if (!swapped && stateOf(await reference()) === 'new') swapped = true;
      if (swapped && (seen.get('new') ?? 0) >= 20) break;
    }
    expect(seen.get('old') ?? 0, 'the old state served at first').toBeGreaterThan(0);
    expect(loopsAtSwap, 'the loops answered from the old database themselves before the swap').toBeGreaterThan(loopsAtStart);
    // The loops answer from the new database themselves, as the engine does, on every loop.
    await loopsAnswerNew(base, reference);
  }, 180_000);

  it('hands every search to the engine while a re-bootstrap runs in place (not_ready there), and answers the new state after it', async () => {
    const replicaDir = join(root, 'in-place');
    // No side directory can be made beside the data directory (a dangling link holds its name): the
    // snapshot is applied in place, and reads answer 503 not_ready until it ends.
    const { base, reference } = await replicaMovedToB(replicaDir, () => symlinkSync(join(root, 'nowhere'), `${replicaDir}.bootstrap`));
    const seen: string[] = [];
    for (const end = Date.now() + 120_000; ;) {
      expect(Date.now() < end, 'the re-bootstrap did not end').toBe(true);
      const x = stateOf(await fresh(base, 'POST', '/v1/collections/c/query', q));
      if (seen.at(-1) !== x) seen.push(x);
      if (x === 'new' && stateOf(await reference()) === 'new') break;
    }
    // What a one-loop replica answers: its old state until the snapshot begins, then not_ready, then the
    // new state; never a state part applied, never the old state again once the snapshot began.
    expect(seen.filter((x) => x !== '503 not_ready')).toEqual(seen[0] === 'old' ? ['old', 'new'] : ['new']);
    expect(seen.at(-1)).toBe('new');
    // It did run in place (a side directory would have served the old state throughout).
    expect(seen).toContain('503 not_ready');
    await loopsAnswerNew(base, reference);
  }, 180_000);
});
