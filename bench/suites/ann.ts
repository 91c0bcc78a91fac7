/**
 * Recall@10 against QPS over an ef sweep, one thread, one query at a time; build time; memory.
 * Every peer is built first, then each ef is swept: the peers take turns over chunks of 25 queries for
 * several passes and each chunk keeps its fastest time, so load from other processes on a shared
 * machine falls on all engines alike and a burst of it spoils no figure.
 */
import type { Dataset } from '../lib/data.js';
import { recallAt, row } from '../lib/data.js';
import { percentile, qpsAtRecall, round, rssAfterGc, type SweepPoint } from '../lib/stats.js';
import type { Peer, PeerFactory } from '../peers/types.js';

export interface AnnPeerResult {
  name: string;
  note: string;
  build_s: number;
  build_detail?: Record<string, number>;
  rss_delta_bytes: number;
  bytes_per_vector: number;
  /** The engine's own account of its index (Peer.indexBytes) over the vectors; null when it gives none. */
  index_bytes_per_vector: number | null;
  sweep: (SweepPoint & { p50_ms: number; p99_ms: number })[];
  qps_at_recall_095: number | null;
  error?: string;
}

export interface AnnResult {
  dataset: string;
  metric: string;
  dim: number;
  n: number;
  queries: number;
  k: number;
  passes: number;
  peers: AnnPeerResult[];
  /** svc's QPS at recall 0.95 over each peer's (interpolated on the sweeps); null when either never reached it. */
  ratio_at_095: Record<string, { svc: number | null; 'svc-sq8': number | null; 'svc-core': number | null }>;
}

export interface AnnOptions {
  efs: number[];
  passes: number;
  log: (line: string) => void;
}

/** Queries a timing chunk holds: passes keep each chunk's fastest time, so a burst of load spoils no figure. */
const CHUNK = 25;

/**
 * One ef of the sweep: every peer answers every query once untimed (recall), then the queries are
 * timed in chunks, the peers taking turns chunk by chunk (in alternating order) for `passes` passes;
 * QPS is the number of queries over the sum of each chunk's fastest time, latencies are every timed
 * query's.
 */
async function sweepEf(peers: Peer[], d: Dataset, passes: number): Promise<Map<Peer, { qps: number; recall: number; lat: number[] }>> {
  const recall = new Map<Peer, number>();
  for (const p of peers) {
    let r = 0;
    for (let q = 0; q < d.nq; q++) r += recallAt(d, q, await p.search(row(d.queries, d.dim, q), d.k));
    recall.set(p, r / d.nq);
  }
  const chunks = Math.ceil(d.nq / CHUNK);
  const best = new Map(peers.map((p) => [p, new Array<number>(chunks).fill(Infinity)]));
  const lat = new Map(peers.map((p) => [p, [] as number[]]));
  for (let pass = 0; pass < passes; pass++) {
    for (let c = 0; c < chunks; c++) {
      for (const p of (pass + c) % 2 === 0 ? peers : [...peers].reverse()) {
        const l = lat.get(p)!;
        const t0 = performance.now();
        for (let q = c * CHUNK; q < Math.min(d.nq, (c + 1) * CHUNK); q++) {
          const s = performance.now();
          const r = p.search(row(d.queries, d.dim, q), d.k);
          if (r instanceof Promise) await r;
          l.push(performance.now() - s);
        }
        const b = best.get(p)!;
        b[c] = Math.min(b[c], performance.now() - t0);
      }
    }
  }
  return new Map(peers.map((p) => [p, {
    qps: (d.nq * 1000) / best.get(p)!.reduce((x, y) => x + y, 0), recall: recall.get(p)!, lat: lat.get(p)!,
  }]));
}

export async function runAnn(d: Dataset, factories: [string, PeerFactory][], o: AnnOptions): Promise<AnnResult> {
  const built: { peer: Peer; res: AnnPeerResult }[] = [];
  const failed: AnnPeerResult[] = [];
  for (const [name, make] of factories) {
    const res: AnnPeerResult = { name, note: '', build_s: 0, rss_delta_bytes: 0, bytes_per_vector: 0, index_bytes_per_vector: null, sweep: [], qps_at_recall_095: null };
    let peer: Peer | undefined;
    try {
      const before = rssAfterGc();
      peer = await make(d.metric as 'l2' | 'cosine');
      res.name = peer.name;
      const t0 = performance.now();
      await peer.build(d);
      res.build_s = round((performance.now() - t0) / 1000);
      res.note = peer.note;
      const detail = (peer as { detail?: Record<string, number> }).detail;
      if (detail) res.build_detail = Object.fromEntries(Object.entries(detail).map(([k, v]) => [k, round(v)]));
      res.rss_delta_bytes = Math.max(0, rssAfterGc() - before);
      res.bytes_per_vector = Math.round(res.rss_delta_bytes / d.n);
      if (peer.indexBytes) res.index_bytes_per_vector = Math.round((await peer.indexBytes()) / d.n);
      o.log(`  ${d.name}: ${res.name} built in ${res.build_s} s (${res.bytes_per_vector} B/vector RSS, ${res.index_bytes_per_vector ?? '-'} B/vector by its own account)`);
      built.push({ peer, res });
    } catch (e) {
      res.error = (e as Error).message;
      o.log(`  ${d.name}: ${name} could not run: ${res.error}`);
      failed.push(res);
      await peer?.close().catch(() => undefined);
    }
  }
  const bruteForce = (p: Peer) => p.name === 'orama';
  for (const ef of o.efs) {
    const active: Peer[] = [];
    for (const { peer, res } of built) {
      if (res.error || (bruteForce(peer) && ef !== o.efs[0])) continue;
      try {
        await peer.setEf(ef);
        for (let w = 0; w < Math.min(20, d.nq); w++) await peer.search(row(d.queries, d.dim, w), d.k); // warm-up
        active.push(peer);
      } catch (e) {
        res.error = `ef ${ef}: ${(e as Error).message}`;
        o.log(`  ${d.name}: ${res.name} failed at ef ${ef}: ${res.error}`);
      }
    }
    let best = new Map<Peer, { qps: number; recall: number; lat: number[] }>();
    try {
      best = await sweepEf(active, d, o.passes);
    } catch (e) {
      // Which peer failed is not known here: every peer of this ef is marked.
      for (const { peer, res } of built) if (active.includes(peer)) res.error = `ef ${ef}: ${(e as Error).message}`;
      o.log(`  ${d.name}: ef ${ef} failed: ${(e as Error).message}`);
    }
    for (const { peer, res } of built) {
      const r = best.get(peer);
      if (r === undefined) continue;
      r.lat.sort((a, b) => a - b);
      res.sweep.push({ ef: bruteForce(peer) ? 0 : ef, recall: round(r.recall, 4), qps: Math.round(r.qps), p50_ms: round(percentile(r.lat, 50)), p99_ms: round(percentile(r.lat, 99)) });
    }
    o.log(`  ${d.name} ef ${ef}: ${built.map(({ peer, res }) => {
      const s = res.sweep.at(-1);
      return best.has(peer) && s ? `${res.name} ${s.qps} QPS @ ${s.recall}` : '';
    }).filter(Boolean).join(' | ')}`);
  }
  for (const { peer, res } of built) {
    res.qps_at_recall_095 = round(qpsAtRecall(res.sweep, 0.95) ?? NaN, 0);
    if (Number.isNaN(res.qps_at_recall_095)) res.qps_at_recall_095 = null;
    await peer.close().catch(() => undefined);
  }
  const peers = [...built.map((b) => b.res), ...failed];
  const at = (name: string) => peers.find((p) => p.name === name)?.qps_at_recall_095 ?? null;
  const ratio_at_095: AnnResult['ratio_at_095'] = {};
  for (const p of peers) {
    if (p.name.startsWith('svc')) continue;
    const theirs = p.qps_at_recall_095;
    const r = (ours: number | null) => (ours !== null && theirs ? round(ours / theirs, 2) : null);
    ratio_at_095[p.name] = { svc: r(at('svc')), 'svc-sq8': r(at('svc-sq8')), 'svc-core': r(at('svc-core')) };
  }
  return { dataset: d.name, metric: d.metric, dim: d.dim, n: d.n, queries: d.nq, k: d.k, passes: o.passes, peers, ratio_at_095 };
}
