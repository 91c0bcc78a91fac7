import { spawn } from 'node:child_process';
import { existsSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';
import { Prng } from '../base/prng.js';
import { XChaChaSealer } from '../crypto/sealer.js';
import { NodeFileSystem } from './fs.js';
import { RaftLog } from './raft-log.js';

const KEY_HEX = 'cd'.repeat(32);
// The built writer starts in a fraction of the time tsx needs; `npm test` builds first.
const built = fileURLToPath(new URL('../../dist/roles/testing/raft-log-writer.js', import.meta.url));
const source = fileURLToPath(new URL('../../roles/testing/raft-log-writer.ts', import.meta.url));
const writerArgs = existsSync(built) ? [built] : ['--import', 'tsx', source];

interface Ack {
  first: number;
  last: number;
  term: number;
  commit: number;
}

/** Runs the writer until it is ready, SIGKILLs it after `delayMs`, and returns what it acknowledged. */
function runAndKill(dir: string, delayMs: number): Promise<Ack[]> {
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, [...writerArgs, dir, KEY_HEX], { stdio: ['ignore', 'pipe', 'pipe'] });
    const acks: Ack[] = [];
    let buf = '';
    let err = '';
    child.stdout.on('data', (d: Buffer) => {
      buf += d.toString();
      let nl: number;
      while ((nl = buf.indexOf('\n')) >= 0) {
        const [word, ...nums] = buf.slice(0, nl).split(' ');
        buf = buf.slice(nl + 1);
        if (word === 'ready') setTimeout(() => child.kill('SIGKILL'), delayMs);
        if (word === 'ack') {
          const [first, last, term, commit] = nums.map(Number);
          acks.push({ first, last, term, commit });
        }
      }
    });
    child.stderr.on('data', (d: Buffer) => (err += d.toString()));
    child.on('exit', (_code, signal) => {
      if (signal !== 'SIGKILL') reject(new Error(`writer exited without being killed: ${err}`));
      else resolve(acks);
    });
  });
}

describe('RaftLog under kill -9 of a real process', () => {
  it('keeps every acknowledged entry and hard state across SIGKILLs at random times', async () => {
    const root = mkdtempSync(join(tmpdir(), 'svc-rlog-kill-'));
    const dir = join(root, 'raft');
    const prng = new Prng(Number(process.env.SVC_RAFT_KILL_SEED ?? 77));
    const trials = Number(process.env.SVC_RAFT_KILL_TRIALS ?? 8);
    /** index -> term of the log as acknowledged so far. */
    const model = new Map<number, number>();
    let modelLast = 0;
    let acked: Ack | null = null;
    let total = 0;
    try {
      for (let t = 0; t < trials; t++) {
        const acks = await runAndKill(dir, 30 + prng.int(400));
        for (const a of acks) {
          for (let i = a.first; i <= modelLast; i++) model.delete(i);
          for (let i = a.first; i <= a.last; i++) model.set(i, a.term);
          modelLast = a.last;
          acked = a;
        }
        total += acks.length;
        const log = await RaftLog.open(new NodeFileSystem(), dir, { sealer: new XChaChaSealer(Buffer.from(KEY_HEX, 'hex')), log: () => {} });
        if (acked !== null) {
          // A batch in flight at the kill may be there too; it starts no lower than two below the last
          // acknowledged index (the writer's conflicts, which may also shorten the log), so everything
          // before that is exactly as acknowledged.
          expect(log.lastIndex(), `trial ${t}`).toBeGreaterThanOrEqual(modelLast - 2);
          expect(log.hardState().term).toBeGreaterThanOrEqual(acked.term);
          expect(log.hardState().commit).toBeGreaterThanOrEqual(acked.commit);
          const stable = modelLast - 2;
          for (let i = log.firstIndex(); i < stable; i++) {
            expect(log.term(i), `trial ${t} entry ${i}`).toBe(model.get(i));
            expect(Buffer.from(log.entries(i, i + 1, 1)[0].data).toString().startsWith(`${i}:${model.get(i)}:`)).toBe(true);
          }
          // Whatever was recovered is what the writer resumes from, so the model follows the disk.
          for (const [i] of model) if (i > log.lastIndex()) model.delete(i);
          for (let i = Math.max(log.firstIndex(), stable); i <= log.lastIndex(); i++) model.set(i, log.term(i)!);
          modelLast = log.lastIndex();
        }
        await log.close();
      }
      expect(total).toBeGreaterThan(20);
    } finally {
      rmSync(root, { recursive: true, force: true });
    }
  }, 120_000);
});
