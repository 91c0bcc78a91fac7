/**
 * A child process for the consensus log's kill -9 test (core/storage/raft-log-kill.test.ts): persists
 * Ready-like batches (entries, sometimes over a conflicting tail, and the hard state) and prints
 * `ack <first> <last> <term> <commit>` only once each save resolved (was durable); now and then it
 * snapshots and compacts, so file rolls and deletions happen under the kill too.
 * argv: dir keyHex
 */
import { XChaChaSealer } from '../../core/crypto/sealer.js';
import { NodeFileSystem } from '../../core/storage/fs.js';
import { RaftLog } from '../../core/storage/raft-log.js';

const [dir, keyHex] = process.argv.slice(2);
const log = await RaftLog.open(new NodeFileSystem(), dir, {
  sealer: new XChaChaSealer(Buffer.from(keyHex, 'hex')),
  log: (m) => process.stderr.write(`${m}\n`),
  segmentBytesMax: 16 << 10,
});
process.stdout.write(`ready ${log.firstIndex()} ${log.lastIndex()}\n`);
const data = (index: number, term: number): Uint8Array => Buffer.from(`${index}:${term}:${'x'.repeat(index % 97)}`);
for (let round = 1; ; round++) {
  const hard = log.hardState();
  const last = log.lastIndex();
  // Every fifth batch overwrites the uncommitted tail in a new term, as a new leader would.
  const conflict = round % 5 === 0 && last > hard.commit;
  const term = hard.term + (conflict ? 1 : 0) || 1;
  const first = conflict ? Math.max(hard.commit + 1, last - 2) : last + 1;
  const entries = Array.from({ length: 1 + (round % 4) }, (_, k) => ({ index: first + k, term, data: data(first + k, term) }));
  const commit = Math.max(hard.commit, first - 2, 0);
  await log.save({ entries, hardState: { term, vote: 'n1', commit } });
  if (round % 23 === 0 && commit > log.snapshot().meta.index) {
    await log.createSnapshot(commit, Buffer.from(`snap@${commit}`));
    await log.compact(Math.max(log.firstIndex() - 1, commit - 5));
  }
  process.stdout.write(`ack ${first} ${entries.at(-1)!.index} ${term} ${commit}\n`);
}
