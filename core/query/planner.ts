/**
 * The filtered-search planner: exact scan of the matching slots, or HNSW traversal with the filter
 * applied inside it (non-matching nodes are walked through but never returned), with a widened beam.
 * A pure function of counts; the cost model is documented in docs/filters.md.
 *
 *   exact cost = matches                                        (one distance per matching slot)
 *   hnsw cost  = hopCost * ef' * log2(n) / s * penalty(s)       (s = matches / n, the selectivity)
 *   ef'        = max(k, min(efMax, ceil(max(ef, k) / s^e)))     (e = efWidenExponent, default 0: no widening)
 *   penalty(s) = (degradeBelow / s)^2 when s < degradeBelow, else 1
 *
 * Below `hnswSelectivityMin` (or with at most k matches) the exact scan is always chosen: the graph
 * restricted to so few nodes falls apart and recall drops, while the scan is cheap there anyway.
 * Every term of the HNSW cost grows as s falls and the exact cost shrinks, so the choice is monotone:
 * a more selective filter never moves a query from exact to HNSW.
 */
import { assert } from '../base/assert.js';

export interface PlanInput {
  /** Estimated (or exact) number of live slots matching the filter. */
  matches: number;
  /** Live slots in the collection. */
  live: number;
  k: number;
  /** The beam width the query asked for (ef_search or the collection's default). */
  ef: number;
}

export interface PlannerOptions {
  /** Cap on the widened beam (SVC_MAX_EF_SEARCH). */
  efMax: number;
  /** Scales ef' * log2(n) / s into exact-scan distance units (0.25 to 0.3 measured on MNIST, docs/filters.md). */
  hopCost: number;
  /** Below this selectivity filtered HNSW loses recall: its cost is penalised quadratically. */
  degradeBelow: number;
  /** Below this selectivity the exact scan is chosen whatever the costs say. */
  hnswSelectivityMin: number;
  /**
   * ef' = max(ef, k) / s^efWidenExponent (0 disables widening). Default 0: on MNIST 60k the traversal
   * already collects ef *accepted* nodes, so plain ef 64 kept recall >= 0.9985 from 5% to 50% while
   * widening (0.5) cost 1.3 to 4 times the time for at most +0.001 recall (docs/filters.md).
   */
  efWidenExponent: number;
}

export const DEFAULT_PLANNER_OPTIONS: PlannerOptions = Object.freeze({
  efMax: 4096,
  hopCost: 0.3,
  degradeBelow: 0.05,
  hnswSelectivityMin: 0.01,
  efWidenExponent: 0,
});

export type Plan =
  | { kind: 'exact'; selectivity: number; exactCost: number; hnswCost: number }
  | { kind: 'hnsw'; ef: number; selectivity: number; exactCost: number; hnswCost: number };

/** The beam for filtered HNSW: at least k, wider as the filter gets more selective, at most efMax (unless k is larger). */
export function widenedEf(selectivity: number, k: number, ef: number, efMax: number, exponent = 0.5): number {
  const base = Math.max(ef, k);
  const s = Math.min(1, Math.max(selectivity, 1e-12));
  return Math.max(k, Math.min(efMax, Math.ceil(base / s ** exponent)));
}

export function planFilteredSearch(input: PlanInput, options: Partial<PlannerOptions> = {}): Plan {
  const o = { ...DEFAULT_PLANNER_OPTIONS, ...options };
  const { live, k, ef } = input;
  assert(Number.isFinite(live) && live >= 0 && k >= 1 && ef >= 1, 'planner needs live >= 0, k >= 1, ef >= 1');
  const matches = Math.min(live, Math.max(0, input.matches));
  const exactCost = matches;
  if (matches === 0 || live === 0) return { kind: 'exact', selectivity: 0, exactCost, hnswCost: Infinity };
  const s = matches / live;
  const efWide = widenedEf(s, k, ef, o.efMax, o.efWidenExponent);
  const penalty = s < o.degradeBelow ? (o.degradeBelow / s) ** 2 : 1;
  const hnswCost = (o.hopCost * efWide * Math.log2(Math.max(2, live)) * penalty) / s;
  if (matches <= k || s < o.hnswSelectivityMin || exactCost <= hnswCost) {
    return { kind: 'exact', selectivity: s, exactCost, hnswCost };
  }
  return { kind: 'hnsw', ef: efWide, selectivity: s, exactCost, hnswCost };
}
