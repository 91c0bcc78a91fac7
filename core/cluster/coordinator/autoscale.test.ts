import { describe, expect, it } from 'vitest';
import { decide, type AutoscaleOptions, type PointSample } from './autoscale.js';
import { drain, scaleOut, seedState } from './state.js';

const opts = (o: Partial<AutoscaleOptions> = {}): AutoscaleOptions => ({
  enabled: true, highWaterPoints: 100, maxShards: null, cooldownMs: 60_000, standbyUrls: ['http://sb1:1', 'http://sb2:1'], ...o,
});
const two = seedState(['http://s0:1', 'http://s1:1']);
const counts = (...n: (number | 'unknown')[]): PointSample[] => n.map((points, id) => (points === 'unknown' ? { id, points, error: 'timeout' } : { id, points }));

describe('autoscale decision (the spec\'s membership table)', () => {
  it('scales out by the first standby when a shard is above the high-water mark', () => {
    const d = decide(two, counts(50, 101), 0, opts());
    expect(d).toEqual({ kind: 'scale_out', standby: 'http://sb1:1', trigger: { id: 1, points: 101 }, reason: expect.stringContaining('shard 1 holds 101 points, above SVC_AUTOSCALE_HIGH_WATER_POINTS=100') });
  });

  it('holds at or below the mark, when disabled, and with a zero mark (off)', () => {
    expect(decide(two, counts(100, 100), 0, opts())).toMatchObject({ kind: 'hold', why: 'below_high_water' });
    expect(decide(two, counts(500), 0, opts({ enabled: false }))).toMatchObject({ kind: 'hold', why: 'disabled' });
    expect(decide(two, counts(500), 0, opts({ highWaterPoints: 0 }))).toMatchObject({ kind: 'hold', why: 'disabled', reason: expect.stringContaining('HIGH_WATER_POINTS=0') });
  });

  it('never counts an unknown shard, neither as full nor as empty', () => {
    expect(decide(two, counts('unknown', 'unknown'), 0, opts())).toMatchObject({ kind: 'hold', why: 'no_samples' });
    expect(decide(two, counts('unknown', 10), 0, opts())).toMatchObject({ kind: 'hold', why: 'below_high_water', reason: expect.stringContaining('1 shard(s) could not be counted') });
    expect(decide(two, counts('unknown', 101), 0, opts())).toMatchObject({ kind: 'scale_out', trigger: { id: 1 } });
  });

  it('ignores draining shards and samples of shards no longer in the map', () => {
    const three = seedState(['http://s0:1', 'http://s1:1', 'http://s2:1']);
    expect(decide(drain(three, 0), counts(500, 1, 1), 0, opts())).toMatchObject({ kind: 'hold', why: 'below_high_water' });
    expect(decide(two, [{ id: 9, points: 500 }, ...counts(1, 1)], 0, opts())).toMatchObject({ kind: 'hold', why: 'below_high_water' });
  });

  it('respects the shard cap, counting every shard in the map', () => {
    expect(decide(two, counts(500, 0), 0, opts({ maxShards: 2 }))).toMatchObject({ kind: 'hold', why: 'max_shards' });
    expect(decide(two, counts(500, 0), 0, opts({ maxShards: 3 }))).toMatchObject({ kind: 'scale_out' });
  });

  it('waits out the cooldown on a simulated clock, and a clock that went back never shortens it', () => {
    let now = 1_000_000;
    const { state } = scaleOut(two, 'http://sb1:1', now);
    const samples = counts(500, 0, 0);
    now += 59_999;
    expect(decide(state, samples, now, opts())).toMatchObject({ kind: 'hold', why: 'cooldown', reason: expect.stringContaining('(1 s left)') });
    now += 1;
    expect(decide(state, samples, now, opts())).toMatchObject({ kind: 'scale_out', standby: 'http://sb2:1' });
    expect(decide(state, samples, 1_000_000 - 5000, opts())).toMatchObject({ kind: 'hold', why: 'cooldown', reason: expect.stringContaining('(65 s left)') });
  });

  it('holds when no standby is left', () => {
    let s = scaleOut(two, 'http://sb1:1', 0).state;
    s = scaleOut(s, 'http://sb2:1', 0).state;
    expect(decide(s, counts(500, 0, 0, 0), 10_000_000, opts())).toMatchObject({ kind: 'hold', why: 'no_standby' });
    expect(decide(two, counts(500, 0), 0, opts({ standbyUrls: [] }))).toMatchObject({ kind: 'hold', why: 'no_standby' });
  });
});
