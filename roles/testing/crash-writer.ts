/**
 * A child process for crash tests: writes batches through the embedded API and prints `ack <batch>`
 * only after each of its writes resolved (was made durable): two upserts, then in `crash_ops` an upsert,
 * a payload update of those points and a delete by filter of half of them. The parent kills it with SIGKILL at a random time
 * and checks that every acknowledged batch is there, whole.
 * argv: dataDir keyHex startBatch
 */
import { openDatabase } from '../../core/embedded.js';

const [dataDir, keyHex, startArg] = process.argv.slice(2);
const start = Number(startArg);
const db = await openDatabase({ dataDir, encryptionKey: keyHex });
await db.createCollection({ name: 'crash', dim: 8, metric: 'l2', filterable: [{ path: 'batch', field_type: 'numeric' }], exist_ok: true });
await db.createCollection({
  name: 'crash_ops', dim: 2, metric: 'l2', exist_ok: true,
  filterable: [{ path: 'batch', field_type: 'numeric' }, { path: 'i', field_type: 'numeric' }],
});
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
  // Payload updates and deletes by filter (issue 21): ten points, all marked, the upper five deleted.
  const ops = Array.from({ length: 10 }, (_, i) => ({ id: `o${b}-${i}`, vector: [b, i], payload: { batch: b, i } }));
  await db.upsert('crash_ops', { points: ops });
  await db.setPayload('crash_ops', { points: ops.map((p) => ({ id: p.id, payload: { touched: true } })) });
  await db.deletePoints('crash_ops', { filter: { and: [{ eq: { field: 'batch', value: b } }, { gte: { field: 'i', value: 5 } }] } });
  process.stdout.write(`ack ${b}\n`);
}
