/**
 * What the Docker tests share (issue 18): the engine check that fails with its reason (never a skip), the
 * image under test, the labels and names every container, network and volume carries so that a cleanup
 * (ours, or .ci/run's trap) finds them, and small clients. Imports no project code: the image is the
 * product under test.
 */
import { spawnSync } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { request } from 'node:https';

/** The image `npm run docker:build` made (npm run test:docker builds it first). */
export const IMAGE = process.env.SVC_IMAGE || 'svc:local';
/** Every container the tests start carries this label; .ci/run's cleanup removes what carries it. */
export const LABEL = 'svc.e2e';
/** Prefix of every network name and compose project name the tests make (the cleanup's other handle). */
export const PREFIX = 'svce2e';

export interface Cmd { status: number | null; stdout: string; stderr: string }

/** A command, bounded in time; its output kept for the failure message. */
export function sh(cmd: string, args: string[], opts: { env?: Record<string, string | undefined>; cwd?: string; timeoutMs?: number } = {}): Cmd {
  const r = spawnSync(cmd, args, { encoding: 'utf8', timeout: opts.timeoutMs ?? 120_000, cwd: opts.cwd, env: { ...process.env, ...opts.env } });
  if (r.error) return { status: null, stdout: r.stdout ?? '', stderr: `${r.stderr ?? ''}${String(r.error)}` };
  return { status: r.status, stdout: r.stdout, stderr: r.stderr };
}

export function must(what: string, r: Cmd): string {
  if (r.status !== 0) throw new Error(`${what} failed (exit ${r.status}): ${r.stderr.trim() || r.stdout.trim()}`);
  return r.stdout;
}

/**
 * Throws, with the engine's own words, when no Docker engine answers or the image is missing: these tests
 * are the only proof that the image, the cluster on containers and the compose file work, so they fail
 * rather than skip.
 */
export function requireEngine(): void {
  const info = sh('docker', ['info', '--format', '{{.ServerVersion}}'], { timeoutMs: 30_000 });
  if (info.status !== 0) {
    throw new Error(`no Docker engine answers (docker info: ${info.stderr.trim() || `exit ${info.status}`}). `
      + 'Start one (scripts/docker-engine.sh installs Debian\'s docker.io and starts dockerd), then npm run test:docker');
  }
  const image = sh('docker', ['image', 'inspect', IMAGE, '--format', '{{.Id}}']);
  if (image.status !== 0) throw new Error(`the image ${IMAGE} is not built: npm run docker:build (npm run test:docker builds it first)`);
}

/** A fresh random secret for one test run's keys. */
export const secret = (bytes = 24): string => randomBytes(bytes).toString('hex');

export interface Reply { status: number; json: any }

/** JSON over HTTP(S) with a key; `ca` trusts a private CA (node:https: global fetch takes no CA). */
export async function call(base: string, key: string, method: string, path: string, body?: unknown, ca?: string): Promise<Reply> {
  const headers: Record<string, string> = { authorization: `Bearer ${key}` };
  const payload = body === undefined ? undefined : JSON.stringify(body);
  if (payload !== undefined) headers['content-type'] = 'application/json';
  if (ca === undefined) {
    const r = await fetch(`${base}${path}`, { method, headers, body: payload, signal: AbortSignal.timeout(30_000) });
    const text = await r.text();
    return { status: r.status, json: parse(text) };
  }
  return new Promise((resolve, reject) => {
    const req = request(`${base}${path}`, { method, headers, ca, timeout: 30_000 }, (res) => {
      let text = '';
      res.setEncoding('utf8');
      res.on('data', (d: string) => { text += d; });
      res.on('end', () => resolve({ status: res.statusCode ?? 0, json: parse(text) }));
    });
    req.on('timeout', () => req.destroy(new Error(`${method} ${path}: no answer in 30 s`)));
    req.on('error', reject);
    req.end(payload);
  });
}

function parse(text: string): any {
  try {
    return JSON.parse(text);
  } catch {
    return text;
  }
}

/** Polls until `check` holds, or throws after `ms` with the last reason. */
export async function eventually(what: string, check: () => Promise<true | string>, ms = 60_000): Promise<void> {
  const until = Date.now() + ms;
  let last = '';
  for (;;) {
    const r = await check().catch((e: unknown) => String(e));
    if (r === true) return;
    last = r;
    if (Date.now() > until) throw new Error(`${what}: still not true after ${ms} ms: ${last}`);
    await new Promise((res) => setTimeout(res, 250));
  }
}

/** `n` points of dimension 4 with a payload, ids p0..p{n-1}, the same on every run. */
export function points(n: number): { id: string; vector: number[]; payload: { i: number } }[] {
  return Array.from({ length: n }, (_, i) => ({ id: `p${i}`, vector: [1 + (i % 7), 1 + (i % 5), 1 + (i % 3), 1 + (i % 11)], payload: { i } }));
}

/**
 * Whether `hits` are a true top k by cosine over `pts` (the exact oracle): each hit's score is its
 * point's, and the last is as good as the k-th best of all. Scores, not ids, are compared: equal
 * directions tie, and float32 on the server breaks such ties its own way.
 */
export function checkTopK(hits: { id: string; score: number }[], pts: { id: string; vector: number[] }[], q: number[], k: number): true | string {
  const cos = (v: number[]) => v.reduce((s, x, i) => s + x * q[i], 0) / (Math.hypot(...v) * Math.hypot(...q));
  const byId = new Map(pts.map((p) => [p.id, cos(p.vector)]));
  const best = [...byId.values()].sort((a, b) => b - a);
  if (hits.length !== Math.min(k, pts.length)) return `${hits.length} hits, want ${Math.min(k, pts.length)}`;
  for (const h of hits) {
    const want = byId.get(h.id);
    if (want === undefined || Math.abs(want - h.score) > 1e-5) return `hit ${h.id} scores ${h.score}, its point ${want}`;
  }
  const last = hits[hits.length - 1].score;
  return last >= best[hits.length - 1] - 1e-5 ? true : `the last hit scores ${last}, the ${hits.length}th best is ${best[hits.length - 1]}`;
}

/** Until a router's /readyz answers 200. */
export async function routerReady(base: string): Promise<void> {
  await eventually('the router is ready', async () => {
    const r = await fetch(`${base}/readyz`);
    return r.status === 200 ? true : `readyz ${r.status}`;
  });
}

/**
 * Stops and removes what a test started, newest first, volumes and network included (unpaused first: a
 * paused container cannot stop); throws once at the end naming what could not be removed.
 */
export async function removeAll(started: { getId(): string; getName(): string; stop(o: object): Promise<unknown> }[], network: { stop(): Promise<unknown> } | undefined): Promise<void> {
  const failures: string[] = [];
  for (const c of [...started].reverse()) {
    sh('docker', ['unpause', c.getId()]);
    await c.stop({ remove: true, removeVolumes: true, timeout: 10_000 }).catch((e: unknown) => failures.push(`${c.getName()}: ${String(e)}`));
  }
  await network?.stop().catch((e: unknown) => failures.push(`network: ${String(e)}`));
  if (failures.length > 0) throw new Error(`cleanup failed: ${failures.join('; ')}`);
}

