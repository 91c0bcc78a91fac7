import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { parseVectorInput, randomVector } from './app.js';
import { parsePrometheus, RateTracker, type Problem } from './client.js';
import { initialState, render, type CockpitState } from './view.js';

const collection = fc.record({
  name: fc.stringMatching(/^[a-z][a-z0-9._-]{0,40}$/),
  dim: fc.integer({ min: 1, max: 4096 }),
  metric: fc.constantFrom('cosine', 'dot', 'l2'),
  index: fc.constantFrom('hnsw', 'flat'),
  count: fc.nat(10_000_000),
  index_state: fc.constantFrom('current', 'stale'),
});
const problem: fc.Arbitrary<Problem | null> = fc.option(fc.record({
  kind: fc.constantFrom('unreachable', 'unauthenticated', 'forbidden', 'error'),
  detail: fc.string({ maxLength: 200 }),
}) as fc.Arbitrary<Problem>);
const state: fc.Arbitrary<CockpitState> = fc.record({
  collections: fc.option(fc.array(collection, { maxLength: 60 })),
  selected: fc.nat(80),
  problem,
  mode: fc.constantFrom('browse' as const, 'query' as const),
  field: fc.constantFrom('collection' as const, 'vector' as const),
  inputVector: fc.string({ maxLength: 300 }),
  hits: fc.option(fc.array(fc.record({
    id: fc.string({ minLength: 1, maxLength: 80 }), rank: fc.nat(100), score: fc.double({ noNaN: true }),
    payload: fc.option(fc.dictionary(fc.string({ maxLength: 10 }), fc.string({ maxLength: 50 })), { nil: undefined }),
  }), { maxLength: 20 })),
}).map((p) => ({ ...initialState('http://127.0.0.1:6333', 'SVC_API_KEY'), ...p, everConnected: p.collections !== null }));

describe('the cockpit screen', () => {
  it('never draws a line wider than the terminal nor more lines than it has, at any size', () => {
    fc.assert(fc.property(state, fc.integer({ min: 1, max: 300 }), fc.integer({ min: 1, max: 100 }), (s, cols, rows) => {
      const lines = render(s, cols, rows);
      expect(lines.length).toBeLessThanOrEqual(rows);
      for (const l of lines) expect(l.length).toBeLessThanOrEqual(cols);
    }), { numRuns: 300 });
  });

  it('fits the narrowest screen it draws while the server is unreachable (a counterexample fast-check found)', () => {
    const s: CockpitState = { ...initialState('http://127.0.0.1:6333', 'SVC_API_KEY'), problem: { kind: 'unreachable', detail: '' } };
    for (const l of render(s, 24, 8)) expect(l.length).toBeLessThanOrEqual(24);
  });

  it('always shows the connection state first, even when narrow', () => {
    fc.assert(fc.property(state, fc.integer({ min: 24, max: 300 }), fc.integer({ min: 8, max: 100 }), (s, cols, rows) => {
      const first = render(s, cols, rows)[0];
      const word = s.problem !== null
        ? `[${{ unreachable: 'UNREACHABLE', unauthenticated: 'KEY REFUSED', forbidden: 'FORBIDDEN', error: 'ERROR' }[s.problem.kind]}]`
        : s.everConnected ? '[connected]' : '[connecting...]';
      expect(first).toContain(word);
    }));
  });

  it('the selected collection stays visible however long the list', () => {
    const s: CockpitState = {
      ...initialState('u', 'none'),
      everConnected: true,
      collections: Array.from({ length: 100 }, (_, i) => ({ name: `c${i}`, dim: 3, metric: 'l2', index: 'hnsw', count: i, index_state: 'current' })),
      selected: 77,
    };
    expect(render(s, 80, 15).some((l) => l.startsWith('> c77 '))).toBe(true);
  });

  it('says plainly why there is no data', () => {
    const s = initialState('http://h:1', 'none');
    expect(render({ ...s, problem: { kind: 'unauthenticated', detail: 'x' } }, 100, 20)[1]).toContain('KEY REFUSED (401): no key given; set SVC_API_KEY or pass --api-key');
    expect(render({ ...s, keySource: '--api-key', problem: { kind: 'forbidden', detail: 'permission_denied: nope' } }, 120, 20)[1])
      .toContain('KEY NOT ALLOWED (403) for the key from --api-key: permission_denied: nope');
    expect(render({ ...s, problem: { kind: 'unreachable', detail: 'ECONNREFUSED' } }, 100, 20)[1]).toContain('SERVER UNREACHABLE at http://h:1 (ECONNREFUSED)');
    expect(render(s, 20, 5)).toEqual(['svc: connecting...', 'too small: 20x5', 'need 24x8']);
    expect(render(s, 10, 2)).toEqual(['svc: co...', 'too sma...']);
  });
});

describe('metrics', () => {
  it('sums counters over labels and turns two scrapes into rates', () => {
    const text = [
      '# HELP svc_http_requests_total x', '# TYPE svc_http_requests_total counter',
      'svc_http_requests_total{method="GET",route="/v1/collections"} 10',
      'svc_http_requests_total{method="POST",route="/v1/collections/:name/query"} 5',
      'svc_http_request_errors_total{method="GET",route="/x"} 2', 'svc_points 42',
    ].join('\n');
    const m = parsePrometheus(text);
    expect(m.get('svc_http_requests_total')).toBe(15);
    expect(m.get('svc_points')).toBe(42);
    const t = new RateTracker();
    expect(t.update(m, 1000).requestsPerSec).toBeNull();
    const m2 = new Map([['svc_http_requests_total', 35], ['svc_http_request_errors_total', 6]]);
    expect(t.update(m2, 3000)).toEqual({ requestsPerSec: 10, errorsPerSec: 2, requestsTotal: 35, errorsTotal: 6 });
    // A server restart resets counters: no negative rate.
    expect(t.update(new Map([['svc_http_requests_total', 1]]), 4000).requestsPerSec).toBeNull();
  });
});

describe('the vector box', () => {
  it('empty means a random vector of the collection dim; otherwise a JSON list of numbers', () => {
    const r = parseVectorInput('', 7);
    expect('vector' in r && r.vector.length).toBe(7);
    expect(parseVectorInput(' [1, 2.5] ', 2)).toEqual({ vector: [1, 2.5], what: 'given vector, dim 2' });
    expect(parseVectorInput('[1,"a"]', 2)).toEqual({ error: 'vector must be a JSON list of numbers' });
    expect(parseVectorInput('1,2', 2)).toEqual({ error: 'vector must be JSON, e.g. [0.1, 0.2, 0.3]' });
    expect(parseVectorInput('', undefined)).toHaveProperty('error');
    fc.assert(fc.property(fc.integer({ min: 1, max: 64 }), (d) => randomVector(d).every(Number.isFinite) && randomVector(d).length === d));
  });
});
