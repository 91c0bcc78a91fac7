/**
 * Writes a run's results: JSON (one file per run + latest.json), a markdown table (latest.md) and a
 * recall-QPS plot as SVG (vega-lite compiled to vega, rendered headless to SVG: no browser, no canvas).
 */
import { mkdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import * as vega from 'vega';
import * as vl from 'vega-lite';
import type { AnnResult } from './suites/ann.js';
import type { FilteredResult } from './suites/filtered.js';

export interface RunResults {
  bench: 'svc';
  version: 1;
  started_at: string;
  mode: 'quick' | 'full' | 'tiny';
  machine: { node: string; cpus: number; cpu_model: string; load_avg_at_start: number[]; load_avg_at_end?: number[]; shared_note: string };
  /** The process's peak RSS over the whole run (every in-process engine shares it). */
  peak_rss_bytes?: number;
  ann: AnnResult[];
  filtered: FilteredResult[];
  ingest?: Record<string, unknown>;
  server?: Record<string, unknown>;
  responsiveness?: Record<string, unknown>;
  /** Embedded QPS and CPU per query against search workers, build time against build workers (scaling.json). */
  scaling?: Record<string, unknown>;
  skipped: Record<string, string>;
  /** The issue's targets, each as the measured figure (no pass/fail here: thresholds belong in the report). */
  summary?: Record<string, number | string | null>;
  duration_s: number;
}

/** The figures issue 6 sets targets for, pulled out of a run. */
export function summarise(r: RunResults): Record<string, number | string | null> {
  const s: Record<string, number | string | null> = {};
  for (const a of r.ann) {
    const svc = a.peers.find((p) => p.name === 'svc');
    const core = a.peers.find((p) => p.name === 'svc-core');
    const lib = a.peers.find((p) => p.name === 'hnswlib-node');
    s[`${a.dataset}: svc QPS at recall 0.95 / hnswlib-node`] = a.ratio_at_095['hnswlib-node']?.svc ?? null;
    if (a.peers.some((p) => p.name === 'svc-sq8')) {
      s[`${a.dataset}: svc-sq8 (scalar quantization) QPS at recall 0.95 / hnswlib-node`] = a.ratio_at_095['hnswlib-node']?.['svc-sq8'] ?? null;
    }
    s[`${a.dataset}: svc-core QPS at recall 0.95 / hnswlib-node`] = a.ratio_at_095['hnswlib-node']?.['svc-core'] ?? null;
    if (svc && lib && lib.build_s > 0) s[`${a.dataset}: svc build time / hnswlib-node`] = +(svc.build_s / lib.build_s).toFixed(2);
    if (core && lib && lib.build_s > 0) s[`${a.dataset}: svc-core build time / hnswlib-node`] = +(core.build_s / lib.build_s).toFixed(2);
  }
  const ratios = (r.server?.ratios_at_recall_095 ?? {}) as Record<string, number | null>;
  for (const k of ['svc_REST_vs_pgvector_x8', 'svc_gRPC_vs_pgvector_x8']) if (k in ratios) s[`server QPS at recall 0.95, 8 clients: ${k}`] = ratios[k];
  const native = (r.server?.ratios_native_clients_at_recall_095 ?? {}) as Record<string, number | null>;
  for (const k of ['svc_REST_vs_pgvector_native_clients_x8', 'svc_gRPC_vs_pgvector_native_clients_x8']) {
    if (k in native) s[`server QPS at recall 0.95, 8 clients (h2load / pgbench): ${k}`] = native[k];
  }
  const all = 'svc_REST_vs_pgvector_native_clients_all_queries_x8';
  if (all in native) s[`server QPS at recall 0.95, 8 clients, every query in turn (wrk / pgbench): ${all}`] = native[all];
  const sq8 = 'svc_sq8_REST_vs_pgvector_native_clients_all_queries_x8';
  if (native[sq8] !== undefined && native[sq8] !== null) s[`server QPS at recall 0.95, 8 clients, every query in turn, scalar quantization (wrk / pgbench): ${sq8}`] = native[sq8];
  const paired = r.server?.paired_all_queries_x8 as {
    median_ratio: number; min_ratio: number; max_ratio: number; rounds: unknown[];
    median_ratio_sq8?: number | null; min_ratio_sq8?: number | null; max_ratio_sq8?: number | null;
  } | undefined;
  if (paired) {
    const head = `server QPS at recall 0.95, 8 clients, every query in turn, ${paired.rounds.length} paired rounds (wrk / pgbench): median (min to max)`;
    s[head] = `${paired.median_ratio} (${paired.min_ratio} to ${paired.max_ratio})`;
    if (paired.median_ratio_sq8 != null) {
      s[`${head}, svc-sq8 (scalar quantization)`] = `${paired.median_ratio_sq8} (${paired.min_ratio_sq8} to ${paired.max_ratio_sq8})`;
    }
  }
  const floor = 'node_http_floor_vs_pgvector_native_clients_x8';
  if (floor in native) s[`for scale, 8 clients (h2load / pgbench): bare node:http, no search: ${floor}`] = native[floor];
  type Cost = { server_us: number | null; main_thread_us: number | null } | null;
  const cpu = (r.server?.cpu_us_per_request_native_x8 ?? {}) as Record<string, Cost>;
  for (const [k, label] of [
    ['svc_REST', 'svc REST'], ['svc_gRPC', 'svc gRPC'], ['pgvector', 'pgvector'], ['node_http_floor', 'bare node:http'],
    ['svc_REST_all_queries', 'svc REST, every query in turn'], ['svc_sq8_REST_all_queries', 'svc-sq8 REST, every query in turn'],
    ['pgvector_all_queries', 'pgvector, every query in turn'],
  ] as const) {
    const c = cpu[k];
    if (c) s[`server CPU per request, 8 clients, µs (${label}: whole server${c.main_thread_us === null ? '' : ' / event loop'})`] = c.main_thread_us === null ? c.server_us : `${c.server_us} / ${c.main_thread_us}`;
  }
  for (const f of r.filtered) {
    const svc = f.peers.find((p) => p.name === 'svc');
    if (svc && svc.rows.length) {
      s[`filtered ${f.dataset}: svc lowest recall over selectivities`] = Math.min(...svc.rows.map((x) => x.recall));
      s[`filtered ${f.dataset}: svc lowest full-k share`] = Math.min(...svc.rows.map((x) => x.full_k));
    }
  }
  const ingest = (r.ingest?.rows ?? []) as { path: string; method: string; writers: number; points_per_s: number }[];
  for (const x of ingest) s[`ingest ${x.path} ${x.method} x${x.writers} (points/s, 128-d, durable)`] = x.points_per_s;
  const during = (r.responsiveness?.during_rebuild as { healthz_then_tiny_search?: { p99_ms: number } } | undefined)?.healthz_then_tiny_search;
  if (during) s['light request pair p99 during rebuild (ms)'] = during.p99_ms;
  return s;
}

export interface WrittenFiles { json: string; latest: string; markdown: string; svg: string }

export async function writeReport(r: RunResults, dir: string): Promise<WrittenFiles> {
  mkdirSync(dir, { recursive: true });
  const stamp = r.started_at.replace(/[:.]/g, '-');
  const json = join(dir, `run-${stamp}.json`);
  const text = `${JSON.stringify(r, null, 2)}\n`;
  writeFileSync(json, text);
  const latest = join(dir, 'latest.json');
  writeFileSync(latest, text);
  const markdown = join(dir, 'latest.md');
  writeFileSync(markdown, toMarkdown(r));
  const svg = join(dir, 'recall-qps.svg');
  writeFileSync(svg, await recallQpsSvg(r.ann));
  return { json, latest, markdown, svg };
}

const fmt = (x: unknown): string => (x === null || x === undefined ? '–' : String(x));

export function toMarkdown(r: RunResults): string {
  const L: string[] = [];
  L.push(`# svc benchmark (${r.mode}), ${r.started_at}`, '');
  L.push(`Node ${r.machine.node}, ${r.machine.cpus} CPUs (${r.machine.cpu_model}), load average at start ${r.machine.load_avg_at_start.map((x) => x.toFixed(2)).join(' ')}. ${r.machine.shared_note}`, '');
  if (r.summary && Object.keys(r.summary).length) {
    L.push('## Summary (the figures issue 6 sets targets for)', '', '| figure | measured |', '|---|---|');
    for (const [k, v] of Object.entries(r.summary)) L.push(`| ${k} | ${fmt(v)} |`);
    L.push('');
  }
  for (const a of r.ann) {
    L.push(`## ${a.dataset}: recall@${a.k} vs QPS (${a.metric}, ${a.queries} queries, one thread, each 25-query chunk at its fastest of ${a.passes} passes)`, '');
    L.push('| engine | build s | index B/vector (own account) | B/vector (RSS) | QPS at recall 0.95 | svc ratio | sweep (ef: recall / QPS) |', '|---|---|---|---|---|---|---|');
    for (const p of a.peers) {
      const ratio = p.name.startsWith('svc') ? '' : fmt(a.ratio_at_095[p.name]?.svc);
      const sweep = p.error && p.sweep.length === 0 ? `not run: ${p.error}` : p.sweep.map((s) => `${s.ef}: ${s.recall} / ${s.qps}`).join('; ');
      const detail = p.build_detail ? ` (${Object.entries(p.build_detail).map(([k, v]) => `${k} ${v}`).join(', ')})` : '';
      L.push(`| ${p.name} | ${p.build_s}${detail} | ${p.index_bytes_per_vector ?? '-'} | ${p.bytes_per_vector} | ${fmt(p.qps_at_recall_095)} | ${ratio} | ${sweep} |`);
    }
    L.push('', ...a.peers.map((p) => `- ${p.name}: ${p.note || p.error}`), '');
  }
  for (const f of r.filtered) {
    L.push(`## Filtered search, ${f.dataset} (k ${f.k}, ef ${f.ef}, ${f.queries} queries)`, '');
    L.push('| engine | selectivity | matching | recall | mean hits | full k | violations | QPS |', '|---|---|---|---|---|---|---|---|');
    for (const p of f.peers) {
      if (p.error) L.push(`| ${p.name} | not run: ${p.error} | | | | | | |`);
      for (const x of p.rows) L.push(`| ${p.name} | ${x.selectivity * 100}% | ${x.matching} | ${x.recall} | ${x.mean_hits} | ${x.full_k} | ${x.violations} | ${x.qps} |`);
    }
    L.push('');
  }
  for (const key of ['ingest', 'server', 'responsiveness'] as const) {
    const v = r[key];
    if (!v) continue;
    L.push(`## ${key}`, '');
    for (const line of tableOf(v)) L.push(line);
    L.push('');
  }
  if (Object.keys(r.skipped).length) {
    L.push('## Not run', '', ...Object.entries(r.skipped).map(([k, v]) => `- ${k}: ${v}`), '');
  }
  L.push(`Run took ${r.duration_s} s; peak RSS of the bench process ${r.peak_rss_bytes ? (r.peak_rss_bytes / 2 ** 20).toFixed(0) : '?'} MiB; load average at end ${r.machine.load_avg_at_end?.map((x) => x.toFixed(2)).join(' ') ?? '?'}.`, '');
  return L.join('\n');
}

/** Rows of objects with the same keys become a table; anything else a bullet list of JSON. */
function tableOf(v: Record<string, unknown>): string[] {
  const out: string[] = [];
  for (const [k, val] of Object.entries(v)) {
    if (Array.isArray(val) && val.length > 0 && typeof val[0] === 'object') {
      const cols = [...new Set(val.flatMap((x) => Object.keys(x as object)))];
      out.push(`**${k}**`, '', `| ${cols.join(' | ')} |`, `|${cols.map(() => '---').join('|')}|`);
      for (const x of val as Record<string, unknown>[]) out.push(`| ${cols.map((c) => fmt(typeof x[c] === 'object' ? JSON.stringify(x[c]) : x[c])).join(' | ')} |`);
      out.push('');
    } else {
      out.push(`- ${k}: ${typeof val === 'object' ? JSON.stringify(val) : fmt(val)}`);
    }
  }
  return out;
}

export async function recallQpsSvg(ann: AnnResult[]): Promise<string> {
  const values = ann.flatMap((a) => a.peers.flatMap((p) => p.sweep.map((s) => ({ dataset: a.dataset, engine: p.name, ef: s.ef, recall: s.recall, qps: s.qps }))));
  const spec: vl.TopLevelSpec = {
    $schema: 'https://vega.github.io/schema/vega-lite/v6.json',
    title: 'recall@10 vs queries/s (one thread; up and right is better)',
    data: { values },
    facet: { field: 'dataset', type: 'nominal', title: null },
    columns: 2,
    resolve: { scale: { x: 'independent', y: 'independent' } },
    spec: {
      width: 380,
      height: 280,
      layer: [
        { mark: { type: 'line', point: true },
          encoding: {
            x: { field: 'recall', type: 'quantitative', scale: { zero: false }, title: 'recall@10' },
            y: { field: 'qps', type: 'quantitative', scale: { type: 'log' }, title: 'queries/s (log)' },
            color: { field: 'engine', type: 'nominal' },
            order: { field: 'ef', type: 'quantitative' },
            tooltip: [{ field: 'engine' }, { field: 'ef' }, { field: 'recall' }, { field: 'qps' }],
          } },
      ],
    },
  };
  const compiled = vl.compile(spec).spec;
  const view = new vega.View(vega.parse(compiled), { renderer: 'none' });
  try {
    return await view.toSVG();
  } finally {
    view.finalize();
  }
}
