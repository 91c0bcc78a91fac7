/**
 * A child process for crash tests: writes batches through the embedded API and prints `ack <batch>`
 * only after each upsert resolved (was made durable). The parent kills it with SIGKILL at a random time
 * and checks that every acknowledged batch is there, whole.
 * argv: dataDir keyHex startBatch
 */
import { openDatabase } from '../../core/index.js';

const [dataDir, keyHex, startArg] = process.argv.slice(2);
const start = Number(startArg);
const db = await openDatabase({ dataDir, encryptionKey: keyHex });
if ((await db.listCollections()).collections.length === 0) {
  await db.createCollection({ name: 'crash', dim: 8, metric: 'l2', filterable: [{ path: 'batch', field_type: 'numeric' }] });
}
process.stdout.write('ready\n');
for (let b = start; ; b++) {
  const points = Array.from({ length: 25 }, (_, i) => ({
    id: `b${b}-${i}`,
    vector: Array.from({ length: 8 }, (_, j) => Math.sin(b * 31 + i * 7 + j)),
    payload: { batch: b, i },
  }));
  // Several writers at once so the group commit is exercised under the kill.
  await Promise.all([
    db.upsert('crash', { points: points.slice(0, 12) }),
    db.upsert('crash', { points: points.slice(12) }),
  ]);
  process.stdout.write(`ack ${b}\n`);
}
