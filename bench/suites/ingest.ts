/**
 * Ingest points/s of seeded random 128-d vectors with durability (every acknowledged batch is fsynced in
 * the WAL) and encryption on: through the embedded API (upsert batches of 1,000, one writer and four
 * concurrent writers; bulkUpsert with vector_b64) and through REST (PUT points, points:bulk). Time to a
 * queryable graph ("strong" read) is reported apart from the acknowledged ingest.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { openDatabase } from '../../core/embedded.js';
import { randomVectors, row } from '../lib/data.js';
import { startSvc } from '../lib/server-proc.js';
import { round } from '../lib/stats.js';
import { b64, BENCH_MASTER_KEY } from '../peers/svc.js';
import type { Mode } from '../run.js';
import type { PointInput } from '../../core/base/model.js';

const DIM = 128;
const BATCH = 1000;

interface IngestRow { path: string; method: string; writers: number; points: number; seconds: number; points_per_s: number; index_ready_s?: number }

function pointsOf(m: Float32Array, i0: number, i1: number, asB64: boolean, tag: string) {
  return Array.from({ length: i1 - i0 }, (_, j) => {
    const v = row(m, DIM, i0 + j);
    return asB64 ? { id: `${tag}${i0 + j}`, vector_b64: b64(v), payload: { i: i0 + j } } : { id: `${tag}${i0 + j}`, vector: Array.from(v), payload: { i: i0 + j } };
  });
}

async function timed(n: number, writers: number, send: (i0: number, i1: number) => Promise<unknown>, batch = BATCH): Promise<number> {
  let next = 0;
  const t0 = performance.now();
  await Promise.all(Array.from({ length: writers }, async () => {
    while (next < n) {
      const i0 = next;
      next = Math.min(n, next + batch);
      await send(i0, next);
    }
  }));
  return (performance.now() - t0) / 1000;
}

export async function runIngest(mode: Mode, log: (l: string) => void): Promise<Record<string, unknown>> {
  const n = mode === 'full' ? 200_000 : mode === 'quick' ? 20_000 : 2_000;
  const m = randomVectors(n, DIM, 99);
  const rows: IngestRow[] = [];
  const add = (r: IngestRow) => { rows.push(r); log(`  ingest ${r.path} ${r.method} x${r.writers}: ${r.points_per_s} points/s${r.index_ready_s !== undefined ? `, graph ready after ${r.index_ready_s} s more` : ''}`); };

  const dir = mkdtempSync(join(tmpdir(), 'svc-bench-ingest-'));
  const db = await openDatabase({ dataDir: join(dir, 'data'), encryptionKey: BENCH_MASTER_KEY });
  try {
    for (const [name, writers, bulk] of [['upsert', 1, false], ['upsert', 4, false], ['bulkUpsert (vector_b64, 10k a call)', 1, true]] as const) {
      const col = `c${rows.length}`;
      await db.createCollection({ name: col, dim: DIM, metric: 'l2' });
      const s = await timed(n, writers, (i0, i1) => (bulk ? db.bulkUpsert(col, { points: pointsOf(m, i0, i1, true, 'p') }) : db.upsert(col, { points: pointsOf(m, i0, i1, false, 'p') as PointInput[] })), bulk ? 10_000 : BATCH);
      const t1 = performance.now();
      await db.search(col, { vector: Array.from(row(m, DIM, 0)), k: 1, consistency: 'strong' });
      add({ path: 'embedded', method: name, writers, points: n, seconds: round(s), points_per_s: Math.round(n / s), index_ready_s: round((performance.now() - t1) / 1000) });
      await db.deleteCollection(col);
    }
  } finally {
    await db.close();
    rmSync(dir, { recursive: true, force: true });
  }

  const srv = await startSvc();
  try {
    for (const [name, writers, bulk] of [['PUT points', 1, false], ['PUT points', 4, false], ['POST points:bulk (vector_b64, 10k a call)', 1, true]] as const) {
      const col = `r${rows.length}`;
      await srv.call('POST', '/v1/collections', { name: col, dim: DIM, metric: 'l2' });
      const s = await timed(n, writers, (i0, i1) => (bulk
        ? srv.call('POST', `/v1/collections/${col}/points:bulk`, { points: pointsOf(m, i0, i1, true, 'p') })
        : srv.call('PUT', `/v1/collections/${col}/points`, { points: pointsOf(m, i0, i1, false, 'p') })), bulk ? 10_000 : BATCH);
      add({ path: 'REST', method: name, writers, points: n, seconds: round(s), points_per_s: Math.round(n / s) });
      await srv.call('DELETE', `/v1/collections/${col}`);
    }
  } finally {
    await srv.stop();
  }
  return { dim: DIM, points: n, durability: 'WAL fsync before every acknowledgement (group commit), XChaCha20-Poly1305 sealing', rows };
}
