/**
 * BM25 quality on the Cranfield collection: our tokenizer + SparseIndex against the reference figures
 * of /work/shared/data/cranfield/README.md (a plain Anserini-style BM25: title + abstract, Lucene's
 * English stop words, Porter stemming, gain 5 - code, 225 queries).
 *
 *   npx tsx bench/bm25.ts [--data <cranfield dir>]
 *
 * Metrics, as trec_eval computes them: nDCG@10 with linear gain 5 - code over the judged documents
 * (ideal DCG from all judged documents of the query); MAP over the top 1000 with every judged document
 * (codes 1 to 4) relevant; R@100 the share of the judged documents found in the top 100.
 * Writes bench/results/bm25.json.
 */
import { mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { SparseIndex, type Bm25Params } from '../core/text/sparse-index.js';
import { queryTermIds, textVector } from '../core/text/tokenizer.js';

const REFERENCE: { params: Bm25Params; ndcg10: number; map: number }[] = [
  { params: { k1: 0.9, b: 0.4 }, ndcg10: 0.341, map: 0.288 },
  { params: { k1: 1.2, b: 0.75 }, ndcg10: 0.355, map: 0.305 },
];
const TOLERANCE = 0.02;
const DEPTH = 1000;

const here = dirname(fileURLToPath(import.meta.url));
const argData = process.argv.indexOf('--data');
const dataDir = argData > 0 ? process.argv[argData + 1] : join(here, '..', '..', 'shared', 'data', 'cranfield');

/** Records of a SMART-format file: `.I <id>` then fields `.X` each followed by its lines. */
function parseSmart(text: string): { id: string; fields: Record<string, string> }[] {
  const out: { id: string; fields: Record<string, string> }[] = [];
  let cur: { id: string; fields: Record<string, string> } | undefined;
  let field = '';
  for (const line of text.split(/\r?\n/)) {
    const m = /^\.([A-Z])(?:\s+(.*))?$/.exec(line);
    if (m && m[1] === 'I') {
      cur = { id: (m[2] ?? '').trim(), fields: {} };
      out.push(cur);
      field = '';
    } else if (m && cur) {
      field = m[1];
      cur.fields[field] = '';
    } else if (cur && field) {
      cur.fields[field] += line + '\n';
    }
  }
  return out;
}

const docs = parseSmart(readFileSync(join(dataDir, 'cran.all.1400'), 'latin1'));
const queries = parseSmart(readFileSync(join(dataDir, 'cran.qry'), 'latin1'));
const qrels = new Map<number, Map<number, number>>(); // query position -> doc id -> gain
for (const line of readFileSync(join(dataDir, 'cranqrel'), 'latin1').split(/\r?\n/)) {
  const [q, d, code] = line.trim().split(/\s+/).map(Number);
  if (!Number.isFinite(code) || code === -1) continue;
  if (!qrels.has(q)) qrels.set(q, new Map());
  (qrels.get(q) as Map<number, number>).set(d, 5 - code);
}

const t0 = performance.now();
const index = new SparseIndex();
const slotToDoc: number[] = [];
for (const d of docs) {
  const v = textVector(`${d.fields.T ?? ''}\n${d.fields.W ?? ''}`);
  slotToDoc.push(Number(d.id));
  index.set(slotToDoc.length - 1, v.terms, v.weights);
}
const indexMs = performance.now() - t0;

function evaluate(params: Bm25Params): { ndcg10: number; map: number; recall100: number; queries: number; queryMs: number } {
  let ndcg = 0;
  let ap = 0;
  let recall = 0;
  let judged = 0;
  const t = performance.now();
  queries.forEach((q, i) => {
    const rel = qrels.get(i + 1);
    if (rel === undefined || rel.size === 0) return;
    judged++;
    const r = index.bm25(queryTermIds(q.fields.W ?? ''), DEPTH, undefined, params);
    const ranked = Array.from(r.slots, (s) => slotToDoc[s]);
    let dcg = 0;
    for (let j = 0; j < Math.min(10, ranked.length); j++) dcg += (rel.get(ranked[j]) ?? 0) / Math.log2(j + 2);
    const ideal = [...rel.values()].sort((a, b) => b - a);
    let idcg = 0;
    for (let j = 0; j < Math.min(10, ideal.length); j++) idcg += ideal[j] / Math.log2(j + 2);
    ndcg += idcg > 0 ? dcg / idcg : 0;
    let hits = 0;
    let sumPrec = 0;
    ranked.forEach((d, j) => {
      if (rel.has(d)) {
        hits++;
        sumPrec += hits / (j + 1);
      }
    });
    ap += sumPrec / rel.size;
    recall += ranked.slice(0, 100).filter((d) => rel.has(d)).length / rel.size;
  });
  return { ndcg10: ndcg / judged, map: ap / judged, recall100: recall / judged, queries: judged, queryMs: performance.now() - t };
}

const runs = REFERENCE.map((ref) => {
  const m = evaluate(ref.params);
  const ok = Math.abs(m.ndcg10 - ref.ndcg10) <= TOLERANCE && Math.abs(m.map - ref.map) <= TOLERANCE;
  return { params: ref.params, ours: m, reference: { ndcg10: ref.ndcg10, map: ref.map }, withinTolerance: ok };
});

const f = (x: number): string => x.toFixed(4);
console.log(`Cranfield: ${docs.length} documents, ${queries.length} queries, indexed in ${indexMs.toFixed(0)} ms`);
console.log(`stats: N=${index.stats().n} avgdl=${index.stats().avgdl.toFixed(2)}`);
for (const r of runs) {
  console.log(
    `k1=${r.params.k1} b=${r.params.b}: nDCG@10 ${f(r.ours.ndcg10)} (ref ${r.reference.ndcg10}), MAP ${f(r.ours.map)} ` +
      `(ref ${r.reference.map}), R@100 ${f(r.ours.recall100)}, ${r.ours.queries} queries in ${r.ours.queryMs.toFixed(0)} ms ` +
      `-> ${r.withinTolerance ? 'within' : 'OUTSIDE'} ${TOLERANCE}`,
  );
}
const outDir = join(here, 'results');
mkdirSync(outDir, { recursive: true });
writeFileSync(
  join(outDir, 'bm25.json'),
  JSON.stringify({ collection: 'cranfield', documents: docs.length, tolerance: TOLERANCE, indexMs, runs }, null, 2) + '\n',
);
if (!runs.every((r) => r.withinTolerance)) process.exitCode = 1;
