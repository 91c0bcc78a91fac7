/**
 * npm run sim:raft (or npm run sim) -- --seeds 10000          runs seeds 1..10000 (or --from S)
 * npm run sim:raft (or npm run sim) -- --seed N [--trace]     replays one seed, printing every event with --trace
 * add --files to keep every member's log in real files (the durable consensus log) in a temp dir
 * Exits 1 on the first failing seed and prints how to replay it.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { RaftSimFailure, runRaftSim, type RaftSimOptions, type RaftSimStats } from '../core/testing/raft-sim.js';

function arg(name: string): string | undefined {
  const k = process.argv.indexOf(`--${name}`);
  return k >= 0 ? process.argv[k + 1] : undefined;
}

const one = arg('seed');
const trace = process.argv.includes('--trace');
const files = process.argv.includes('--files');
const from = Number(arg('from') ?? one ?? 1);
const count = one !== undefined ? 1 : Number(arg('seeds') ?? 1000);
if (!Number.isInteger(from) || !Number.isInteger(count) || count < 1) {
  console.error('usage: sim-raft [--seeds N] [--from S] | --seed N [--trace]');
  process.exit(2);
}

const totals: Record<string, number> = {};
const started = performance.now();
for (let seed = from; seed < from + count; seed++) {
  let stats: RaftSimStats;
  try {
    const options: RaftSimOptions = trace ? { trace: (line) => console.log(line) } : {};
    const dir = files ? mkdtempSync(join(tmpdir(), `svc-raft-sim-${seed}-`)) : undefined;
    try {
      stats = runRaftSim(seed, { ...options, filesDir: dir });
    } finally {
      if (dir !== undefined) rmSync(dir, { recursive: true, force: true });
    }
  } catch (e) {
    console.error(e instanceof RaftSimFailure ? e.message : e);
    if (e instanceof RaftSimFailure && e.reason instanceof Error && !(e.reason.name === 'InvariantViolation')) console.error(e.reason.stack);
    process.exit(1);
  }
  for (const [k, v] of Object.entries(stats)) if (k !== 'seed') totals[k] = (totals[k] ?? 0) + v;
  if (one !== undefined) console.log(JSON.stringify(stats));
  else if ((seed - from + 1) % 500 === 0) console.log(`${seed - from + 1} seeds ok (${((performance.now() - started) / 1000).toFixed(1)} s)`);
}
const seconds = (performance.now() - started) / 1000;
console.log(`${count} seed(s) from ${from}: all safe and converged in ${seconds.toFixed(1)} s`);
console.log(`totals ${JSON.stringify(totals)}`);
