import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { loadConfig } from '../config.js';
import { createLogs } from '../log.js';
import { createPromMetrics } from '../rest/metrics.js';
import { startLoops, type Loops } from './loops.js';

/**
 * A request loop's setup awaits module loads (a router's modules, the OpenTelemetry SDK with
 * SVC_OTLP_ENDPOINT), during which the main thread's first calls (`listen`) already arrive. On a runtime
 * that loads modules asynchronously (Node 20 and 22 here) a loop that registered its handlers only
 * after those awaits answered `no handler for listen`, and a router with several loops, or a node with
 * several loops exporting spans, did not start. One loop is enough to show it and runs on every Node.
 */
const dirs: string[] = [];
const running: Loops[] = [];
afterEach(async () => {
  for (const l of running.splice(0)) await l.close();
  for (const d of dirs.splice(0)) rmSync(d, { recursive: true, force: true });
});

function config(extra: Record<string, string>) {
  const dir = mkdtempSync(join(tmpdir(), 'svc-loop-setup-'));
  dirs.push(dir);
  return loadConfig({
    SVC_DATA_DIR: join(dir, 'data'), SVC_REST_ADDR: '127.0.0.1:0', SVC_GRPC_ADDR: '127.0.0.1:0', SVC_ENCRYPTION_KEY: 'c3'.repeat(32),
    SVC_API_KEYS: 'loop-setup-key', RUST_LOG: 'error', ...extra,
  }, { defaultFile: null, cwd: dir });
}

const logs = createLogs('error');

describe('a request loop whose setup loads modules', () => {
  it.each([
    ['a router\'s loop', 'router', { SVC_CLUSTER_SHARDS: 'http://127.0.0.1:1' }],
    ['a node\'s loop exporting spans over OTLP', 'node', { SVC_OTLP_ENDPOINT: 'http://127.0.0.1:1' }],
  ] as const)('%s listens: its first calls wait for the setup instead of finding no handler', async (_what, role, extra) => {
    const loops = await startLoops({
      role, config: config(extra), count: 1, logs, metrics: createPromMetrics(), engine: () => null, busy: () => null, raftView: null, audit: null,
    });
    running.push(loops);
    expect(loops.restPort).toBeGreaterThan(0);
    const r = await fetch(`http://127.0.0.1:${loops.restPort}/healthz`);
    expect(r.status).toBe(200);
  });

  it('a setup that fails fails the start with its error', async () => {
    // A router's loop reads its provider tables in its setup: a key variable that is not set refuses.
    const dir = mkdtempSync(join(tmpdir(), 'svc-loop-setup-'));
    dirs.push(dir);
    writeFileSync(join(dir, 'svc.toml'), ['[embedding.t]', 'provider = "openai_compatible"', 'model = "m"', 'dim = 8', 'endpoint = "http://127.0.0.1:1/v1"', 'api_key_env = "LOOP_SETUP_TEST_NO_SUCH_KEY"', ''].join('\n'));
    // In the environment the config is read from (which checks it), not in the process's: the loop's.
    const cfg = config({ SVC_CLUSTER_SHARDS: 'http://127.0.0.1:1', SVC_CONFIG: join(dir, 'svc.toml'), LOOP_SETUP_TEST_NO_SUCH_KEY: 'k' });
    const failed = await startLoops({
      role: 'router', config: cfg, count: 1, logs, metrics: createPromMetrics(), engine: () => null, busy: () => null, raftView: null, audit: null,
    }).then(() => null, (e: unknown) => e as { code?: string; detail?: unknown });
    // The thread's own error crosses as an internal one (its message may not leave the loop; the loop
    // logs it): not the missing handler of a call that came too soon.
    expect(failed?.code).toBe('internal');
    expect(JSON.stringify(failed?.detail)).not.toContain('no handler');
  });
});
