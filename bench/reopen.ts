// Restart cost: open time and data-directory bytes over repeated reopens, through the embedded API
// (encrypted, WAL fsync on). First reopens with no write between them, then reopens each after a round
// of updates, deletes and inserts (1% of the points each). Issue 19: both must stay flat.
// Run: npm run bench:reopen [-- --quick] [--n 60000] [--rounds 7] [--seed 7]
import { mkdtempSync, readdirSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Prng } from '../core/base/prng.js';
import { openDatabase } from '../core/embedded.js';

const quick = process.argv.includes('--quick');
const arg = (name: string, dflt: number): number => {
  const i = process.argv.indexOf(`--${name}`);
  return i >= 0 ? Number(process.argv[i + 1]) : dflt;
};
const n = arg('n', quick ? 10_000 : 60_000);
const rounds = arg('rounds', 7);
const seed = arg('seed', 7);
const DIM = 128;
const KEY = 'b2'.repeat(32);

function dirBytes(d: string): number {
  let total = 0;
  for (const name of readdirSync(d)) {
    const s = statSync(join(d, name));
    total += s.isDirectory() ? dirBytes(join(d, name)) : s.size;
  }
  return total;
}

const root = mkdtempSync(join(tmpdir(), 'svc-bench-reopen-'));
const dataDir = join(root, 'data');
const prng = new Prng(seed);
const vec = () => Array.from({ length: DIM }, () => prng.gaussian());
const rows: { phase: string; round: number; open_ms: number; dir_bytes: number; count: number }[] = [];

async function reopen(phase: string, round: number, write: boolean): Promise<void> {
  const t0 = performance.now();
  const db = await openDatabase({ dataDir, encryptionKey: KEY });
  const { count } = await db.collectionInfo('c');
  const openMs = performance.now() - t0;
  if (write) {
    const changes = Math.max(1, Math.floor(n / 100));
    const ids = Array.from({ length: changes }, () => `p${prng.int(n)}`);
    for (let i = 0; i < ids.length; i += 1000) {
      await db.upsert('c', { points: ids.slice(i, i + 1000).map((id) => ({ id, vector: vec() })) });
    }
    for (const id of ids.slice(0, 20)) await db.delete('c', id);
  }
  await db.close();
  rows.push({ phase, round, open_ms: Math.round(openMs), dir_bytes: dirBytes(dataDir), count });
  console.log(`${phase} ${round}: open ${Math.round(openMs)} ms, ${count} points, directory ${(dirBytes(dataDir) / 1e6).toFixed(2)} MB`);
}

try {
  const db = await openDatabase({ dataDir, encryptionKey: KEY });
  await db.createCollection({ name: 'c', dim: DIM, metric: 'cosine' });
  for (let i = 0; i < n; i += 1000) {
    await db.upsert('c', { points: Array.from({ length: Math.min(1000, n - i) }, (_, j) => ({ id: `p${i + j}`, vector: vec(), payload: { i: i + j } })) });
  }
  await db.close();
  console.log(`loaded ${n} x ${DIM}: directory ${(dirBytes(dataDir) / 1e6).toFixed(2)} MB`);
  for (let r = 1; r <= rounds; r++) await reopen('no writes', r, false);
  for (let r = 1; r <= rounds; r++) await reopen('1% changed', r, true);
  const out = { bench: 'reopen', n, dim: DIM, rounds, seed, rows };
  writeFileSync(join(import.meta.dirname, 'results', quick ? 'reopen-quick.json' : 'reopen.json'), `${JSON.stringify(out, null, 2)}\n`);
} finally {
  rmSync(root, { recursive: true, force: true });
}
