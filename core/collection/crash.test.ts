import { spawn } from 'node:child_process';
import { existsSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';
import { Prng } from '../base/prng.js';
import { Database } from './database.js';
import { buildIndexInline } from './rebuild.js';

const KEY_HEX = 'ab'.repeat(32);
// The built writer starts in a fraction of the time tsx needs; `npm test` builds first.
const built = fileURLToPath(new URL('../../dist/roles/testing/crash-writer.js', import.meta.url));
const source = fileURLToPath(new URL('../../roles/testing/crash-writer.ts', import.meta.url));
const writerArgs = existsSync(built) ? [built] : ['--import', 'tsx', source];

/** Runs the writer until it has acknowledged a batch, then SIGKILLs it after a random delay. */
function runAndKill(dataDir: string, start: number, delayMs: number): Promise<number[]> {
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, [...writerArgs, dataDir, KEY_HEX, String(start)], { stdio: ['ignore', 'pipe', 'pipe'] });
    const acked: number[] = [];
    let buf = '';
    let err = '';
    let timer: NodeJS.Timeout | undefined;
    child.stdout.on('data', (d: Buffer) => {
      buf += d.toString();
      let nl: number;
      while ((nl = buf.indexOf('\n')) >= 0) {
        const line = buf.slice(0, nl);
        buf = buf.slice(nl + 1);
        if (!line.startsWith('ack ')) continue;
        acked.push(Number(line.slice(4)));
        // The delay counts from the first ack, not from 'ready': the first batch of a cold process can
        // take longer than the whole delay on a loaded machine, and such a trial adds no acknowledged batch.
        if (timer === undefined) timer = setTimeout(() => child.kill('SIGKILL'), delayMs);
      }
    });
    child.stderr.on('data', (d: Buffer) => (err += d.toString()));
    child.on('exit', (_code, signal) => {
      if (signal !== 'SIGKILL') reject(new Error(`writer exited without being killed: ${err}`));
      else resolve(acked);
    });
  });
}

describe('crash recovery with real processes', () => {
  it('SIGKILL at random times during acknowledged writes never loses one, and every open works', async () => {
    const root = mkdtempSync(join(tmpdir(), 'svc-crash-'));
    const dataDir = join(root, 'data');
    const prng = new Prng(Number(process.env.SVC_CRASH_SEED ?? 1234));
    const trials = Number(process.env.SVC_CRASH_TRIALS ?? 20);
    const acked = new Set<number>();
    let next = 0;
    try {
      for (let t = 0; t < trials; t++) {
        const got = await runAndKill(dataDir, next, 20 + prng.int(300));
        for (const b of got) acked.add(b);
        next += 10_000; // a fresh batch range per trial: a batch in flight at the kill may or may not be there
        const db = await Database.open({ dataDir, masterKey: Buffer.from(KEY_HEX, 'hex'), buildIndex: buildIndexInline });
        for (const b of acked) {
          for (let i = 0; i < 25; i++) {
            const p = await db.get('crash', `b${b}-${i}`);
            expect(p.payload).toEqual({ batch: b, i });
          }
          // The payload update and the delete by filter of an acknowledged batch are there too.
          const ops = (await db.fetch('crash_ops', { filter: { eq: { field: 'batch', value: b } } })).points;
          expect(ops).toEqual(Array.from({ length: 5 }, (_, i) => ({ id: `o${b}-${i}`, payload: { batch: b, i, touched: true } })));
        }
        await db.close();
      }
      expect(acked.size).toBeGreaterThan(trials);
    } finally {
      rmSync(root, { recursive: true, force: true });
    }
  }, Number(process.env.SVC_CRASH_TRIALS ?? 20) * 15_000);
});
