/**
 * The benchmark suite (issue 6): svc against hnswlib-node, usearch, LanceDB, Orama and pgvector on real
 * data, in one run. `npm run bench -- [--quick] [--suites ann,filtered,ingest,server,responsiveness,scaling]
 * [--peers svc,svc-sq8,svc-core,hnswlib-node,usearch,lancedb,orama,pgvector] [--datasets mnist,glove,random]
 * [--out dir]`. Writes bench/results/run-<time>.json, latest.json, latest.md and recall-qps.svg.
 * Full mode takes a long while (GloVe 341k builds per engine); --quick a few minutes.
 */
import { cpus, loadavg } from 'node:os';
import { join } from 'node:path';
import { glove, mnist, random, type Dataset } from './lib/data.js';
import { BENCH_DIR } from './lib/on-demand.js';
import { peakRss, round } from './lib/stats.js';
import { hnswlib } from './peers/hnswlib.js';
import { lancedb } from './peers/lancedb.js';
import { orama } from './peers/orama.js';
import { pgvector } from './peers/pgvector.js';
import { svcCore, svcEmbedded } from './peers/svc.js';
import type { PeerFactory } from './peers/types.js';
import { summarise, writeReport, type RunResults, type WrittenFiles } from './report.js';
import { runAnn } from './suites/ann.js';
import { runFiltered } from './suites/filtered.js';

export const SUITES = ['ann', 'filtered', 'ingest', 'server', 'responsiveness', 'scaling'] as const;
export type Suite = (typeof SUITES)[number];
export type Mode = 'tiny' | 'quick' | 'full';

export const PEERS: Record<string, PeerFactory> = {
  svc: (m) => svcEmbedded(m),
  'svc-sq8': (m) => svcEmbedded(m, 'scalar'),
  'svc-core': svcCore,
  'hnswlib-node': hnswlib,
  usearch: async (m) => (await import('./peers/usearch.js')).usearch(m),
  lancedb,
  orama,
  pgvector,
};

export interface BenchOptions {
  mode: Mode;
  suites: Suite[];
  peers: string[];
  datasets: string[];
  outDir: string;
  log: (line: string) => void;
}

interface Sizes { mnist: number; glove: number; queries: number; small: number; smallQueries: number; efs: number[]; passes: number; filteredN: number; filteredQ: number }

const SIZES: Record<Mode, Sizes> = {
  tiny: { mnist: 0, glove: 0, queries: 50, small: 2000, smallQueries: 50, efs: [16, 64], passes: 1, filteredN: 2000, filteredQ: 30 },
  quick: { mnist: 5_000, glove: 10_000, queries: 200, small: 2000, smallQueries: 200, efs: [10, 16, 32, 64, 128, 256], passes: 3, filteredN: 5_000, filteredQ: 50 },
  full: { mnist: 60_000, glove: 400_000, queries: 1000, small: 10_000, smallQueries: 200, efs: [10, 16, 24, 32, 48, 64, 96, 128, 256], passes: 3, filteredN: 60_000, filteredQ: 200 },
};

function pick(names: string[], wanted: string[]): [string, PeerFactory][] {
  return names.filter((n) => wanted.includes(n)).map((n) => [n, PEERS[n]]);
}

export async function runBench(o: BenchOptions): Promise<{ results: RunResults; files: WrittenFiles }> {
  const t0 = performance.now();
  const z = SIZES[o.mode];
  const results: RunResults = {
    bench: 'svc', version: 1, started_at: new Date().toISOString(), mode: o.mode,
    machine: {
      node: process.version, cpus: cpus().length, cpu_model: cpus()[0]?.model ?? '?', load_avg_at_start: loadavg(),
      shared_note: 'The machine may be shared with other work: compare engines within one run, not across runs.',
    },
    ann: [], filtered: [], skipped: {}, duration_s: 0,
  };
  const K = 10;
  const ann = ['svc', 'svc-sq8', 'svc-core', 'hnswlib-node', 'usearch', 'lancedb', 'pgvector'];
  const has = (s: Suite) => o.suites.includes(s);

  if (has('ann')) {
    const sets: [string, () => Dataset, string[]][] = [];
    if (o.mode === 'tiny') {
      sets.push(['random', () => random(z.small, z.smallQueries, 32, K), ann]);
    } else {
      sets.push(['mnist', () => mnist(z.mnist, z.queries, K), ann]);
      sets.push(['glove', () => glove(z.glove, z.queries, K), ann]);
      // Brute-force-only engines get a subset of GloVe (cosine is all Orama does), beside the others.
      sets.push(['glove', () => glove(z.small, z.smallQueries, K), [...ann, 'orama']]);
    }
    for (const [key, make, names] of sets) {
      if (!o.datasets.includes(key)) continue;
      o.log(`ann: loading ${key}`);
      let d: Dataset;
      try { d = make(); } catch (e) { results.skipped[`ann ${key}`] = (e as Error).message; continue; }
      o.log(`ann: ${d.name}, ${d.nq} queries`);
      results.ann.push(await runAnn(d, pick(names, o.peers), { efs: z.efs, passes: z.passes, log: o.log }));
    }
  }
  if (has('filtered')) {
    const d = o.mode === 'tiny' ? random(z.filteredN, z.filteredQ, 32, K) : mnist(z.filteredN, z.filteredQ, K);
    const names = ['svc', 'svc-core', 'hnswlib-node', 'lancedb', 'pgvector'];
    results.filtered.push(await runFiltered(d, pick(names, o.peers), 64, o.log));
  }
  if (has('ingest')) results.ingest = await (await import('./suites/ingest.js')).runIngest(o.mode, o.log);
  if (has('server')) results.server = await (await import('./suites/server.js')).runServer(o.mode, o.peers, o.log);
  if (has('responsiveness')) results.responsiveness = await (await import('./suites/responsive.js')).runResponsive(o.mode, o.log);
  if (has('scaling')) {
    const { runScaling, writeScaling } = await import('./suites/scaling.js');
    const r = await runScaling(o.mode, o.log);
    await writeScaling(r, o.outDir);
    results.scaling = r as unknown as Record<string, unknown>;
  }
  results.summary = summarise(results);
  results.peak_rss_bytes = peakRss();
  results.machine.load_avg_at_end = loadavg();
  results.duration_s = round((performance.now() - t0) / 1000, 1);
  const files = await writeReport(results, o.outDir);
  return { results, files };
}

function parseArgs(argv: string[]): BenchOptions {
  const val = (name: string): string | undefined => {
    const i = argv.indexOf(`--${name}`);
    return i >= 0 ? argv[i + 1] : undefined;
  };
  const list = (name: string, all: readonly string[]) => (val(name)?.split(',').map((s) => s.trim()).filter(Boolean) ?? [...all]);
  const mode: Mode = argv.includes('--tiny') ? 'tiny' : argv.includes('--quick') ? 'quick' : 'full';
  const suites = list('suites', SUITES) as Suite[];
  for (const s of suites) if (!SUITES.includes(s)) throw new Error(`unknown suite '${s}' (known: ${SUITES.join(', ')})`);
  const peers = list('peers', Object.keys(PEERS));
  for (const p of peers) if (!(p in PEERS)) throw new Error(`unknown peer '${p}' (known: ${Object.keys(PEERS).join(', ')})`);
  return {
    mode, suites, peers, datasets: list('datasets', ['mnist', 'glove', 'random']),
    outDir: val('out') ?? join(BENCH_DIR, 'results'), log: (l) => process.stdout.write(`${l}\n`),
  };
}

if (process.argv[1] && import.meta.filename === process.argv[1]) {
  const opts = parseArgs(process.argv.slice(2));
  runBench(opts).then(({ files }) => {
    process.stdout.write(`\nwritten: ${files.json}\n         ${files.markdown}\n         ${files.svg}\n`);
    process.exit(0);
  }, (e) => {
    process.stderr.write(`${(e as Error).stack}\n`);
    process.exit(1);
  });
}
