// Process start: how long `svc serve` takes from spawn to /readyz 200 on an empty data directory (REST
// and gRPC listening, storage open), and `svc --version` from spawn to exit: what every restart, every
// rolling update and every CLI call pays before any data is read. Runs the built CLI (dist/, what the
// `svc` bin is), so run `npm run build` first. Builds to compare: --main a/dist/roles/cli/main.js,b/...
// (alternated run by run, so drift on a shared machine falls on both).
// Run: npm run bench:startup [-- --runs 15] [--main PATH[,PATH...]]
import { spawn, spawnSync } from 'node:child_process';
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { freePort } from '../roles/testing/free-port.js';
import { ROOT_DIR } from './lib/on-demand.js';
import { percentile, round } from './lib/stats.js';

const arg = (name: string): string | undefined => {
  const i = process.argv.indexOf(`--${name}`);
  return i < 0 ? undefined : process.argv[i + 1];
};
const RUNS = Number(arg('runs') ?? 15);
const MAINS = (arg('main') ?? join(ROOT_DIR, 'dist', 'roles', 'cli', 'main.js')).split(',').map((p) => resolve(p));
const KEY = 'b2'.repeat(32);

async function serveMs(main: string, dir: string): Promise<number> {
  const rest = await freePort();
  const grpc = await freePort();
  const t0 = performance.now();
  const child = spawn(process.execPath, [main, 'serve'], {
    env: { PATH: process.env.PATH, SVC_API_KEYS: 'k', SVC_ENCRYPTION_KEY: KEY, SVC_DATA_DIR: dir, SVC_REST_ADDR: `127.0.0.1:${rest}`, SVC_GRPC_ADDR: `127.0.0.1:${grpc}`, RUST_LOG: 'warn' },
    stdio: ['ignore', 'ignore', 'pipe'],
  });
  let err = '';
  child.stderr!.on('data', (d: Buffer) => { err += d.toString(); });
  const exited = new Promise<void>((r) => child.on('exit', () => r()));
  try {
    for (;;) {
      if (child.exitCode !== null) throw new Error(`svc serve exited: ${err}`);
      const ok = await fetch(`http://127.0.0.1:${rest}/readyz`).then((r) => r.status === 200, () => false);
      if (ok) return performance.now() - t0;
      if (performance.now() - t0 > 60_000) throw new Error(`not ready in 60 s: ${err}`);
      await new Promise((r) => setTimeout(r, 5));
    }
  } finally {
    child.kill('SIGKILL');
    await exited;
  }
}

function versionMs(main: string): number {
  const t0 = performance.now();
  const r = spawnSync(process.execPath, [main, '--version'], { encoding: 'utf8' });
  if (r.status !== 0) throw new Error(`svc --version: ${r.stderr}`);
  return performance.now() - t0;
}

const root = mkdtempSync(join(tmpdir(), 'svc-bench-startup-'));
const samples = MAINS.map(() => ({ serve: [] as number[], version: [] as number[] }));
try {
  for (let run = 0; run < RUNS; run++) {
    for (let i = 0; i < MAINS.length; i++) {
      const dir = join(root, `d${run}-${i}`);
      mkdirSync(dir);
      samples[i].serve.push(await serveMs(MAINS[i], dir));
      samples[i].version.push(versionMs(MAINS[i]));
    }
  }
} finally {
  rmSync(root, { recursive: true, force: true });
}
const stats = (xs: number[]) => {
  const s = [...xs].sort((a, b) => a - b);
  return { p50_ms: round(percentile(s, 50), 0), p90_ms: round(percentile(s, 90), 0), min_ms: round(s[0], 0) };
};
const out = {
  bench: 'startup', runs: RUNS, node: process.version, date: new Date().toISOString(),
  builds: MAINS.map((m, i) => ({ main: m, serve_ready: stats(samples[i].serve), version: stats(samples[i].version) })),
};
console.log(JSON.stringify(out, null, 2));
const file = arg('out');
if (file !== undefined) writeFileSync(file, `${JSON.stringify(out, null, 2)}\n`);
