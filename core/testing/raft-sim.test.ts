import { describe, expect, it } from 'vitest';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { RaftSim, runRaftSim } from './raft-sim.js';

/**
 * The Raft simulation over a few hundred seeds (SVC_RAFT_SIM_SEEDS; `npm run sim:raft -- --seeds 10000`
 * for more). Each seed checks election safety, log matching, leader completeness, state machine safety,
 * linearizable reads and the durability of acknowledged writes after every event, then heals the
 * group and requires it to converge. A failure names the seed to replay.
 */
const SEEDS = Number(process.env.SVC_RAFT_SIM_SEEDS ?? 300);
const FIRST = Number(process.env.SVC_RAFT_SIM_SEED ?? 1);
/** Seeds run again with every member's log in real files (SVC_RAFT_SIM_FILE_SEEDS). */
const FILE_SEEDS = Number(process.env.SVC_RAFT_SIM_FILE_SEEDS ?? 30);

describe('raft simulation', () => {
  it(`${SEEDS} seeds from ${FIRST}: safe under faults, converged after the heal`, () => {
    const totals = { acked: 0, leaders: 0, crashes: 0, snapshotsInstalled: 0, readsAnswered: 0, lost: 0, duplicated: 0, partitions: 0, garbledTails: 0 };
    for (let seed = FIRST; seed < FIRST + SEEDS; seed++) {
      const stats = runRaftSim(seed);
      for (const k of Object.keys(totals) as (keyof typeof totals)[]) totals[k] += stats[k];
    }
    // The faults happened and the protocol did its work, or the checks above proved nothing.
    if (SEEDS >= 100) {
      for (const [k, v] of Object.entries(totals)) expect(v, k).toBeGreaterThan(0);
    }
  });

  it('liveness: a healed group must converge; a member still cut off fails the run, one catching up slowly does not', () => {
    // Seed 801830: one entry per message, one message in flight, 113 entries of an old term to copy to
    // every follower after the heal. It converges about 4,040 units after it, making progress throughout.
    expect(runRaftSim(801830).units).toBeGreaterThan(8000);
    expect(() => new RaftSim(801830, { cutAfterHeal: 'n4' }).run()).toThrow(/liveness: the healed group made no progress in 4000 units/);
  });

  it('is deterministic: one seed gives one history', () => {
    const trace = (seed: number): string[] => {
      const lines: string[] = [];
      new RaftSim(seed, { trace: (l) => lines.push(l) }).run();
      return lines;
    };
    const a = trace(7);
    expect(a.length).toBeGreaterThan(100);
    expect(trace(7)).toEqual(a);
    expect(trace(8)).not.toEqual(a);
  });

  it('runs over the durable consensus log on real files: torn writes cut at random bytes, restarts recover from disk', () => {
    const totals = { acked: 0, crashes: 0, tornPersists: 0, snapshotsInstalled: 0, compactions: 0 };
    for (let seed = FIRST; seed < FIRST + FILE_SEEDS; seed++) {
      const dir = mkdtempSync(join(tmpdir(), `svc-raft-sim-${seed}-`));
      try {
        const stats = runRaftSim(seed, { filesDir: dir });
        for (const k of Object.keys(totals) as (keyof typeof totals)[]) totals[k] += stats[k];
      } finally {
        rmSync(dir, { recursive: true, force: true });
      }
    }
    if (FILE_SEEDS >= 20) for (const [k, v] of Object.entries(totals)) expect(v, k).toBeGreaterThan(0);
  });
});
