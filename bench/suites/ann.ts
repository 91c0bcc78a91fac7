/**
 * Recall@10 against QPS over an ef sweep, one thread, one query at a time; build time; memory.
 * Every peer is built first, then each ef is swept in alternating passes over the peers (best pass kept),
 * so load from other processes on a shared machine falls on all engines alike.
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
  ratio_at_095: Record<string, { svc: number | null; 'svc-core': number | null }>;
}

export interface AnnOptions {
  efs: number[];
  passes: number;
  log: (line: string) => void;
}

async function timeQueries(p: Peer, d: Dataset): Promise<{ qps: number; recall: number; lat: number[] }> {
  const lat = new Array<number>(d.nq);
  let recall = 0;
  const t0 = performance.now();
  for (let q = 0; q < d.nq; q++) {
    const s = performance.now();
    let r = p.search(row(d.queries, d.dim, q), d.k);
    if (r instanceof Promise) r = await r;
    lat[q] = performance.now() - s;
    recall += recallAt(d, q, r);
  }
  const ms = performance.now() - t0;
  return { qps: (d.nq * 1000) / ms, recall: recall / d.nq, lat };
}

export async function runAnn(d: Dataset, factories: [string, PeerFactory][], o: AnnOptions): Promise<AnnResult> {
  const built: { peer: Peer; res: AnnPeerResult }[] = [];
  const failed: AnnPeerResult[] = [];
  for (const [name, make] of factories) {
    const res: AnnPeerResult = { name, note: '', build_s: 0, rss_delta_bytes: 0, bytes_per_vector: 0, sweep: [], qps_at_recall_095: null };
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
      o.log(`  ${d.name}: ${res.name} built in ${res.build_s} s (${res.bytes_per_vector} B/vector RSS)`);
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
    const best = new Map<Peer, { qps: number; recall: number; lat: number[] }>();
    for (let pass = 0; pass < o.passes; pass++) {
      for (const { peer, res } of built) {
        if (res.error || (bruteForce(peer) && ef !== o.efs[0])) continue;
        try {
          await peer.setEf(ef);
          for (let w = 0; w < Math.min(20, d.nq); w++) await peer.search(row(d.queries, d.dim, w), d.k); // warm-up
          const r = await timeQueries(peer, d);
          const prev = best.get(peer);
          if (prev === undefined || r.qps > prev.qps) best.set(peer, r);
        } catch (e) {
          res.error = `ef ${ef}: ${(e as Error).message}`;
          o.log(`  ${d.name}: ${res.name} failed at ef ${ef}: ${res.error}`);
        }
      }
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
    if (p.name === 'svc' || p.name === 'svc-core') continue;
    const theirs = p.qps_at_recall_095;
    const r = (ours: number | null) => (ours !== null && theirs ? round(ours / theirs, 2) : null);
    ratio_at_095[p.name] = { svc: r(at('svc')), 'svc-core': r(at('svc-core')) };
  }
  return { dataset: d.name, metric: d.metric, dim: d.dim, n: d.n, queries: d.nq, k: d.k, passes: o.passes, peers, ratio_at_095 };
}
