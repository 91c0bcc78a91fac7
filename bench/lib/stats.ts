/** Timing, percentiles, memory and the matched-recall interpolation the report's ratios use. */

export function percentile(sorted: ArrayLike<number>, p: number): number {
  if (sorted.length === 0) return NaN;
  return sorted[Math.min(sorted.length - 1, Math.floor((p / 100) * sorted.length))];
}

export const round = (x: number, digits = 3): number => (Number.isFinite(x) ? +x.toFixed(digits) : x);

export function gc(): void {
  (globalThis as { gc?: () => void }).gc?.();
}

/** Resident memory after a full GC (when node runs with --expose-gc), in bytes. */
export function rssAfterGc(): number {
  gc();
  gc();
  return process.memoryUsage().rss;
}

/** Peak RSS of this process so far, in bytes (the kernel's high-water mark). */
export function peakRss(): number {
  return process.resourceUsage().maxRSS * 1024;
}

export interface SweepPoint {
  ef: number;
  recall: number;
  qps: number;
}

/**
 * QPS at a target recall, interpolated linearly between the two sweep points around it (by recall,
 * after sorting); null when the sweep never reaches the target. At a point exactly at or above the
 * target with none below, the first such point's QPS (conservative: it is the cheapest setting that
 * reached it).
 */
export function qpsAtRecall(points: readonly SweepPoint[], target: number): number | null {
  const byRecall = [...points].sort((a, b) => a.recall - b.recall || b.qps - a.qps);
  // Pareto frontier: for each recall, the best QPS among points with at least that recall.
  const frontier: SweepPoint[] = [];
  for (let i = byRecall.length - 1; i >= 0; i--) {
    const p = byRecall[i];
    if (frontier.length === 0 || p.qps > frontier[frontier.length - 1].qps) frontier.push(p);
  }
  frontier.reverse(); // ascending recall, descending qps
  const above = frontier.find((p) => p.recall >= target);
  if (above === undefined) return null;
  const idx = frontier.indexOf(above);
  if (idx === 0 || above.recall === target) return above.qps;
  const below = frontier[idx - 1];
  const t = (target - below.recall) / (above.recall - below.recall);
  return below.qps + t * (above.qps - below.qps);
}

/** Runs `one` from `clients` concurrent loops for `seconds`; throughput and latency percentiles. */
export async function closedLoop(
  clients: number,
  seconds: number,
  one: (client: number, i: number) => Promise<unknown>,
): Promise<{ clients: number; qps: number; p50_ms: number; p99_ms: number; requests: number; errors: number }> {
  const lat: number[] = [];
  let errors = 0;
  const t0 = performance.now();
  const end = t0 + seconds * 1000;
  await Promise.all(Array.from({ length: clients }, async (_, c) => {
    for (let i = 0; performance.now() < end; i++) {
      const s = performance.now();
      try { await one(c, i); lat.push(performance.now() - s); } catch { errors++; }
    }
  }));
  const elapsed = (performance.now() - t0) / 1000;
  lat.sort((a, b) => a - b);
  return {
    clients, qps: Math.round(lat.length / elapsed), p50_ms: round(percentile(lat, 50)), p99_ms: round(percentile(lat, 99)),
    requests: lat.length, errors,
  };
}
