/**
 * `npm test` proves the benchmark suite runs: a tiny in-process run (2,000 seeded random vectors, svc and
 * hnswlib-node only) through the same runner `npm run bench` uses, then the shape of what it wrote.
 */
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { qpsAtRecall } from './lib/stats.js';
import { runBench } from './run.js';

const out = mkdtempSync(join(tmpdir(), 'svc-bench-test-'));
afterAll(() => rmSync(out, { recursive: true, force: true }));

describe('bench suite smoke', () => {
  it('runs the ann and filtered suites and writes JSON, markdown and an SVG plot', async () => {
    const lines: string[] = [];
    const { results, files } = await runBench({
      mode: 'tiny', suites: ['ann', 'filtered'], peers: ['svc', 'hnswlib-node'], datasets: ['random'], outDir: out,
      log: (l) => lines.push(l),
    });
    const latest = JSON.parse(readFileSync(files.latest, 'utf8'));
    expect(latest).toEqual(JSON.parse(readFileSync(files.json, 'utf8')));
    expect(latest.mode).toBe('tiny');
    expect(latest.ann).toHaveLength(1);
    const ann = latest.ann[0];
    expect(ann.peers.map((p: { name: string }) => p.name)).toEqual(['svc', 'hnswlib-node']);
    for (const p of ann.peers) {
      expect(p.error).toBeUndefined();
      expect(p.build_s).toBeGreaterThan(0);
      expect(p.sweep.map((s: { ef: number }) => s.ef)).toEqual([16, 64]);
      for (const s of p.sweep) {
        expect(s.qps).toBeGreaterThan(0);
        expect(s.recall).toBeGreaterThanOrEqual(0);
        expect(s.recall).toBeLessThanOrEqual(1);
      }
      // At ef 64 on 2,000 points of 32-d, any working HNSW finds nearly all true neighbours.
      expect(p.sweep[1].recall).toBeGreaterThan(0.9);
      // Its own account of the index: at least the 128 bytes of each 32-d vector, plus links.
      expect(p.index_bytes_per_vector).toBeGreaterThan(128);
      expect(p.index_bytes_per_vector).toBeLessThan(2000);
    }
    expect(Object.keys(ann.ratio_at_095)).toEqual(['hnswlib-node']);

    const f = latest.filtered[0];
    expect(f.peers.map((p: { name: string }) => p.name)).toEqual(['svc', 'hnswlib-node']);
    for (const p of f.peers) {
      expect(p.rows.map((r: { selectivity: number }) => r.selectivity)).toEqual([0.001, 0.01, 0.1, 0.5]);
      for (const r of p.rows) {
        expect(r.violations).toBe(0);
        expect(r.mean_hits).toBeLessThanOrEqual(10);
      }
    }
    expect(results.duration_s).toBeGreaterThan(0);

    const md = readFileSync(files.markdown, 'utf8');
    expect(md).toContain('| svc |');
    expect(md).toContain('| hnswlib-node |');
    expect(md).toContain('Filtered search');
    const svg = readFileSync(files.svg, 'utf8');
    expect(svg.startsWith('<svg')).toBe(true);
    expect(svg).toContain('hnswlib-node');
    expect(lines.some((l) => l.includes('built in'))).toBe(true);
  });
});

describe('qpsAtRecall', () => {
  it('interpolates between the sweep points around the target', () => {
    expect(qpsAtRecall([{ ef: 16, recall: 0.9, qps: 1000 }, { ef: 32, recall: 1, qps: 500 }], 0.95)).toBeCloseTo(750);
  });
  it('is null when the sweep never reaches the target', () => {
    expect(qpsAtRecall([{ ef: 16, recall: 0.5, qps: 1000 }], 0.95)).toBeNull();
  });
  it('takes the cheapest setting when every point is above the target', () => {
    expect(qpsAtRecall([{ ef: 16, recall: 0.97, qps: 900 }, { ef: 64, recall: 0.99, qps: 400 }], 0.95)).toBe(900);
  });
  it('ignores dominated points (lower recall and lower QPS)', () => {
    const pts = [{ ef: 8, recall: 0.9, qps: 1000 }, { ef: 10, recall: 0.85, qps: 200 }, { ef: 32, recall: 1, qps: 500 }];
    expect(qpsAtRecall(pts, 0.95)).toBeCloseTo(750);
  });
});
