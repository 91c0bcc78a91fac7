// Time to ready after a restart, with and without the graph file (core/collection/graph-persist.ts):
// one collection of --n seeded random --dim vectors (l2, default HNSW parameters, encrypted directory,
// worker builds), closed, then opened --rounds times each way; "ready" is the open plus whenIndexed (what
// /readyz waits for). With the file the open reads the graph back; without it (persistGraphs false) it
// rebuilds, as before. Also: the open alone (recovery), the file's size, and that the graph-file rounds
// answer a set of queries alike.
// Run: npm run bench:graph-reopen [-- --n 50000] [--dim 128] [--rounds 3] [--seed 7]
import { mkdtempSync, readdirSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Prng } from '../core/base/prng.js';
import { Database } from '../core/collection/database.js';

const arg = (name: string, dflt: number): number => {
  const i = process.argv.indexOf(`--${name}`);
  return i >= 0 ? Number(process.argv[i + 1]) : dflt;
};
const n = arg('n', 50_000);
const dim = arg('dim', 128);
const rounds = arg('rounds', 3);
const seed = arg('seed', 7);
const KEY = new Uint8Array(32).fill(0xb2);

const root = mkdtempSync(join(tmpdir(), 'svc-bench-graph-'));
const dataDir = join(root, 'data');
const prng = new Prng(seed);
const vec = () => Array.from({ length: dim }, () => prng.gaussian());

async function readyMs(persistGraphs: boolean): Promise<{ ms: number; openMs: number; loads: number; rebuilds: number; hits: string[][] }> {
  const t0 = performance.now();
  const db = await Database.open({ dataDir, masterKey: KEY, persistGraphs });
  // The open itself is recovery (segments and WAL tail into memory); the graph comes after it.
  const openMs = performance.now() - t0;
  await db.whenIndexed();
  const ms = performance.now() - t0;
  const s = db.indexStates()[0];
  const hits: string[][] = [];
  for (const q of queries) hits.push((await db.search('c', { vector: q, k: 10, ef_search: 128, with_payload: false })).hits.map((h) => h.id));
  await db.close();
  return { ms, openMs, loads: s.graphLoads, rebuilds: s.rebuilds, hits };
}

const queries = Array.from({ length: 20 }, vec);
try {
  const db = await Database.open({ dataDir, masterKey: KEY });
  await db.createCollection({ name: 'c', dim, metric: 'l2' });
  for (let i = 0; i < n; i += 1000) {
    await db.upsert('c', { points: Array.from({ length: Math.min(1000, n - i) }, (_, j) => ({ id: `p${i + j}`, vector: vec() })) });
  }
  await db.whenIndexed();
  const tc = performance.now();
  await db.close();
  const closeMs = performance.now() - tc;
  const uid = readdirSync(join(dataDir, 'collections'))[0];
  const graphBytes = statSync(join(dataDir, 'collections', uid, 'graph')).size;
  console.log(`loaded ${n} x ${dim}; close (writes the graph if not yet written) ${Math.round(closeMs)} ms; graph file ${(graphBytes / 1e6).toFixed(2)} MB`);
  const rows: { arm: string; round: number; open_ms: number; ready_ms: number; loads: number; rebuilds: number }[] = [];
  let same = true;
  let first: string[][] | null = null;
  for (let r = 1; r <= rounds; r++) {
    for (const [arm, persist] of [['graph file', true], ['rebuild', false]] as const) {
      const got = await readyMs(persist);
      rows.push({ arm, round: r, open_ms: Math.round(got.openMs), ready_ms: Math.round(got.ms), loads: got.loads, rebuilds: got.rebuilds });
      console.log(`${arm} ${r}: open (recovery) ${Math.round(got.openMs)} ms, ready in ${Math.round(got.ms)} ms (loads ${got.loads}, rebuilds ${got.rebuilds})`);
      if (arm === 'graph file') {
        if (first === null) first = got.hits;
        else same &&= JSON.stringify(first) === JSON.stringify(got.hits);
      }
    }
  }
  const median = (arm: string) => {
    const v = rows.filter((x) => x.arm === arm).map((x) => x.ready_ms).sort((a, b) => a - b);
    return v[Math.floor(v.length / 2)];
  };
  console.log(`median ready: graph file ${median('graph file')} ms, rebuild ${median('rebuild')} ms; graph-file answers the same every round: ${same}`);
  const out = { bench: 'graph-reopen', n, dim, rounds, seed, graph_bytes: graphBytes, close_ms: Math.round(closeMs), rows };
  writeFileSync(join(import.meta.dirname, 'results', `graph-reopen-${n}x${dim}.json`), `${JSON.stringify(out, null, 2)}\n`);
} finally {
  rmSync(root, { recursive: true, force: true });
}
