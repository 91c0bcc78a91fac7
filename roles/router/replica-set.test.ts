import { describe, expect, it } from 'vitest';
import { SvcError } from '../../core/base/errors.js';
import { silentLogger } from '../../core/service/log.js';
import type { HttpShard } from './http-shard.js';
import { judge, ReplicaSet, startReplicaProbe, type FallbackReason, type Replica } from './replica-set.js';

/**
 * A shard's read replicas as the router uses them (replica-set.ts): reads spread over the usable
 * replicas, fewest in flight first and equals in turn; a replica that cannot answer is skipped and the
 * read goes to the next, then to the primary, within one deadline; not_found asks the primary; strong
 * reads, writes and stats go to the primary only. Fake clients record who was asked and with which deadline.
 */
type Behaviour = 'ok' | 'unavailable' | 'not_found' | 'invalid' | 'hang';

class FakeClient {
  calls: { op: string; deadline: number | null }[] = [];
  behaviour: Behaviour = 'ok';
  release: (() => void)[] = [];
  constructor(readonly name: string, private readonly deadline: number | null = null, private readonly root: FakeClient | null = null) {}
  until(d: number): FakeClient {
    return new FakeClient(this.name, d, this.root ?? this);
  }
  private async answer(op: string): Promise<{ from: string }> {
    const me = this.root ?? this;
    me.calls.push({ op, deadline: this.deadline });
    if (me.behaviour === 'hang') await new Promise<void>((r) => me.release.push(r));
    if (me.behaviour === 'unavailable') throw new SvcError('unavailable', `${this.name} could not answer: connection refused`);
    if (me.behaviour === 'not_found') throw new SvcError('not_found', 'point \'x\' not found');
    if (me.behaviour === 'invalid') throw new SvcError('invalid_argument', 'k must be positive');
    return { from: this.name };
  }
  search(_n: string, _q: unknown) { return this.answer('search'); }
  rankings(_n: string, _q: unknown) { return this.answer('rankings'); }
  get(_n: string, _id: string) { return this.answer('get'); }
  count(_n: string, _q: unknown) { return this.answer('count'); }
  upsert(_n: string, _b: unknown) { return this.answer('upsert'); }
  stats() { return this.answer('stats'); }
}

function setup(n = 2, timeoutMs = 1_000) {
  const primary = new FakeClient('primary');
  const fakes = Array.from({ length: n }, (_, i) => new FakeClient(`replica ${i}`));
  const replicas: Replica[] = fakes.map((f, index) => ({
    shard: 3, index, url: `http://r${index}:1`, client: f as unknown as HttpShard, outstanding: 0, usable: true, why: '', downUntil: 0,
  }));
  const fallbacks: FallbackReason[] = [];
  const set = new ReplicaSet({ id: 3, primary: primary as unknown as HttpShard, replicas, timeoutMs, onFallback: (_s, r) => fallbacks.push(r) });
  const from = async (p: Promise<unknown>) => ((await p) as { from: string }).from;
  return { primary, fakes, replicas, set, fallbacks, from };
}

describe('a shard with read replicas', () => {
  it('spreads reads over its replicas in turn, and sends writes, stats and strong reads to the primary', async () => {
    const { primary, set, from } = setup();
    const got: string[] = [];
    for (let i = 0; i < 4; i++) got.push(await from(set.search('c', { vector: [1], k: 1 })));
    expect(got).toEqual(['replica 0', 'replica 1', 'replica 0', 'replica 1']);
    expect(await from(set.upsert('c', { points: [] } as never))).toBe('primary');
    expect(await from(set.stats())).toBe('primary');
    expect(await from(set.search('c', { vector: [1], k: 1, consistency: 'strong' }))).toBe('primary');
    expect(await from(set.rankings('c', { vector: [1], depth: 5, consistency: 'strong' } as never))).toBe('primary');
    expect(await from(set.count('c', { consistency: 'strong' } as never))).toBe('primary');
    expect(await from(set.search('c', { vector: [1], k: 1, consistency: 'eventual' }))).toMatch(/^replica/);
    expect(primary.calls.map((c) => c.op)).toEqual(['upsert', 'stats', 'search', 'rankings', 'count']);
  });

  it('sends a read to the replica with the fewest reads in flight', async () => {
    const { fakes, set, from } = setup();
    fakes[0].behaviour = 'hang';
    const slow = set.count('c', {});
    // replica 0 holds one read now: the next three go to replica 1 whatever the turn says.
    for (let i = 0; i < 3; i++) expect(await from(set.count('c', {}))).toBe('replica 1');
    fakes[0].behaviour = 'ok';
    fakes[0].release.forEach((r) => r());
    expect(await from(slow)).toBe('replica 0');
  });

  it('falls over from a replica that cannot answer to the next, then to the primary, and skips it meanwhile', async () => {
    const { fakes, replicas, primary, set, fallbacks, from } = setup();
    fakes[0].behaviour = 'unavailable';
    expect(await from(set.get('c', 'p1'))).toBe('replica 1');
    expect(replicas[0].downUntil).toBeGreaterThan(performance.now());
    expect(await from(set.get('c', 'p1'))).toBe('replica 1');
    expect(fakes[0].calls).toHaveLength(1); // skipped while down
    fakes[1].behaviour = 'unavailable';
    replicas[0].downUntil = 0;
    expect(await from(set.get('c', 'p1'))).toBe('primary');
    expect(fallbacks).toEqual(['unavailable']);
    expect(primary.calls).toHaveLength(1);
  });

  it('asks the primary when a replica does not know the point, and passes the request\'s own errors through', async () => {
    const { fakes, primary, set, fallbacks, from } = setup(1);
    fakes[0].behaviour = 'not_found';
    expect(await from(set.get('c', 'new'))).toBe('primary');
    expect(fallbacks).toEqual(['not_found']);
    fakes[0].behaviour = 'invalid';
    await expect(set.search('c', { vector: [1], k: 0 })).rejects.toMatchObject({ code: 'invalid_argument' });
    expect(primary.calls).toHaveLength(1);
  });

  it('keeps one deadline: the replicas get half of it, the primary the whole', async () => {
    const { fakes, primary, set } = setup(1, 1_000);
    fakes[0].behaviour = 'unavailable';
    const t0 = performance.now();
    await set.count('c', {});
    const r = fakes[0].calls[0].deadline!;
    const p = primary.calls[0].deadline!;
    expect(r - t0).toBeGreaterThanOrEqual(500);
    expect(r - t0).toBeLessThan(600);
    expect(p - r).toBeCloseTo(500, 6); // both from the read's one start
  });

  it('reads the primary while no replica is usable', async () => {
    const { replicas, set, fallbacks, from } = setup();
    for (const r of replicas) r.usable = false;
    expect(await from(set.search('c', { vector: [1], k: 1 }))).toBe('primary');
    expect(fallbacks).toEqual([]); // nothing was tried and failed
  });
});

describe('probing replicas', () => {
  it('uses a replica only when ready, a follower and within the lag allowed', () => {
    expect(judge({ ready: true, follower: true, lagSeconds: 0.2 }, 5_000)).toEqual({ usable: true, why: '' });
    expect(judge({ ready: false, follower: false, lagSeconds: null }, 5_000).why).toContain('not ready');
    expect(judge({ ready: true, follower: false, lagSeconds: 0 }, 5_000).why).toContain('not a read replica');
    expect(judge({ ready: true, follower: true, lagSeconds: 7 }, 5_000).why).toContain('7 s behind');
  });

  it('marks each replica at each round, and a ready one is tried again at once', async () => {
    const { replicas } = setup();
    for (const r of replicas) r.usable = false;
    replicas[1].downUntil = performance.now() + 60_000;
    const states = new Map([['http://r0:1', { ready: true, follower: true, lagSeconds: 30 }], ['http://r1:1', { ready: true, follower: true, lagSeconds: 0 }]]);
    const probe = startReplicaProbe({
      replicas: () => replicas, dispatcher: null as never, timeoutMs: 100, intervalMs: 60_000, maxLagMs: 5_000, log: silentLogger,
      probe: async (url) => states.get(url)!,
    });
    try {
      await probe.round();
      expect(replicas.map((r) => r.usable)).toEqual([false, true]);
      expect(replicas[0].why).toContain('30 s behind');
      expect(replicas[1].downUntil).toBe(0);
    } finally {
      await probe.stop();
    }
  });
});
