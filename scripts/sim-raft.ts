/**
 * npm run sim:raft -- --seeds 10000          runs seeds 1..10000 (or --from S)
 * npm run sim:raft -- --seed N [--trace]     replays one seed, printing every event with --trace
 * Exits 1 on the first failing seed and prints how to replay it.
 */
import { RaftSimFailure, runRaftSim, type RaftSimStats } from '../core/testing/raft-sim.js';

function arg(name: string): string | undefined {
  const k = process.argv.indexOf(`--${name}`);
  return k >= 0 ? process.argv[k + 1] : undefined;
}

const one = arg('seed');
const trace = process.argv.includes('--trace');
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
    stats = runRaftSim(seed, trace ? { trace: (line) => console.log(line) } : {});
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
