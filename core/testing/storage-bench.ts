/**
 * Storage throughput on the real file system (run: npx tsx core/testing/storage-bench.ts [dir]).
 * Prints seal MiB/s and WAL append records/s with 1 and 64 concurrent appenders of ~600-byte records.
 * Lives here because core/testing may print; the lead may move it under bench/.
 */
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { XChaChaSealer, InsecureSealer } from '../crypto/sealer.js';
import { randomDataKey } from '../crypto/keys.js';
import { NodeFileSystem } from '../storage/fs.js';
import { Wal } from '../storage/wal.js';
import { TestKeyring } from './wal-fixtures.js';

function sealMiBs(sealer: XChaChaSealer | InsecureSealer, bytes: number): number {
  const plain = new Uint8Array(bytes).fill(7);
  const aad = new Uint8Array(32);
  const total = 256 << 20;
  const t0 = performance.now();
  for (let done = 0; done < total; done += bytes) sealer.seal(plain, aad);
  return total / (1 << 20) / ((performance.now() - t0) / 1000);
}

async function appendRate(dir: string, concurrency: number, seconds: number): Promise<{ rate: number; fsyncs: number; records: number }> {
  const fs = new NodeFileSystem();
  const wal = await Wal.open(fs, join(dir, `wal-${concurrency}`), { keyring: new TestKeyring(['c1']), log: () => {} });
  const body = new Uint8Array(600).fill(1);
  let records = 0;
  const end = performance.now() + seconds * 1000;
  const t0 = performance.now();
  await Promise.all(Array.from({ length: concurrency }, async () => {
    while (performance.now() < end) {
      await wal.append('c1', body);
      records++;
    }
  }));
  const elapsed = (performance.now() - t0) / 1000;
  await wal.close();
  return { rate: records / elapsed, fsyncs: 0, records };
}

const dir = process.argv[2] ?? (await mkdtemp(join(tmpdir(), 'svc-bench-')));
const key = randomDataKey();
for (const size of [600, 64 << 10]) {
  console.log(`seal XChaCha20-Poly1305 ${size} B: ${sealMiBs(new XChaChaSealer(key), size).toFixed(0)} MiB/s`);
  console.log(`seal insecure checksum   ${size} B: ${sealMiBs(new InsecureSealer(), size).toFixed(0)} MiB/s`);
}
for (const c of [1, 64]) {
  const r = await appendRate(dir, c, 3);
  console.log(`WAL append, ${c} concurrent appender(s), 600-byte records: ${r.rate.toFixed(0)} records/s (${r.records} in 3 s)`);
}
if (process.argv[2] === undefined) await rm(dir, { recursive: true, force: true });
