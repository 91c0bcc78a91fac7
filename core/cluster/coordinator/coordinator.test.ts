import { describe, expect, it } from 'vitest';
import type { Clock } from '../../base/clock.js';
import { SvcError } from '../../base/errors.js';
import { FaultyFileSystem } from '../../testing/faulty-fs.js';
import type { ShardClient } from '../routing/shard-client.js';
import type { AutoscaleOptions } from './autoscale.js';
import { Coordinator, type CoordinatorOptions } from './coordinator.js';
import { FileStore, MemoryStore, type CoordinatorStore } from './store.js';

/** Time moves only when the test says so. */
class SimClock implements Clock {
  constructor(public ms = 1_700_000_000_000) {}
  nowMs(): number { return this.ms; }
  monotonicMs(): number { return this.ms; }
  advance(seconds: number): void { this.ms += seconds * 1000; }
}

/** Shards as a table of point counts; a URL missing from it does not answer. */
class FakeShards implements ShardClient {
  readonly points = new Map<string, number>();
  readonly readyUrls = new Set<string>();
  calls = 0;
  async pointCount(url: string): Promise<number> {
    this.calls++;
    const n = this.points.get(url);
    if (n === undefined) throw new SvcError('unavailable', `${url} did not answer`);
    return n;
  }
  async ready(url: string): Promise<void> {
    if (!this.readyUrls.has(url)) throw new SvcError('unavailable', `${url} is not ready`);
  }
}

const autoscale = (o: Partial<AutoscaleOptions> = {}): AutoscaleOptions => ({
  enabled: true, highWaterPoints: 1000, maxShards: null, cooldownMs: 300_000, standbyUrls: ['http://sb1:6333', 'http://sb2:6333'], ...o,
});

function setup(o: Partial<CoordinatorOptions> = {}) {
  const clock = new SimClock();
  const client = new FakeShards();
  const opts: CoordinatorOptions = { store: new MemoryStore(), client, clock, seedUrls: ['http://s0:6333', 'http://s1:6333'], autoscale: autoscale(), ...o };
  return { clock, client, opts };
}

describe('Coordinator', () => {
  it('seeds from SVC_CLUSTER_SHARDS once; a saved state wins over the variable afterwards', async () => {
    const fs = new FaultyFileSystem(7);
    const { opts } = setup({ store: await FileStore.open(fs, '/state/c.json') });
    const c = await Coordinator.open(opts);
    expect(c.startedFrom).toBe('seed');
    expect(c.map()).toEqual({
      version: 1, standby: ['http://sb1:6333', 'http://sb2:6333'],
      shards: [
        { id: 0, url: 'http://s0:6333', replicas: [], state: 'active', points: null },
        { id: 1, url: 'http://s1:6333', replicas: [], state: 'active', points: null },
      ],
    });
    await c.register({ url: 'http://s9:6333' });
    await c.close();
    const again = await Coordinator.open({ ...opts, store: await FileStore.open(fs, '/state/c.json'), seedUrls: ['http://other:1'] });
    expect(again.startedFrom).toBe('saved');
    expect(again.map().shards.map((s) => s.url)).toEqual(['http://s0:6333', 'http://s1:6333', 'http://s9:6333']);
    expect(again.map().version).toBe(2);
    await again.close();
  });

  it('membership: register, drain, remove, with the contract\'s answers and errors; the map is unchanged by a refusal', async () => {
    const { opts, client } = setup();
    const c = await Coordinator.open(opts);
    expect(await c.register({ url: 'http://s2:6333/', replicas: ['http://s2r:6333'] })).toEqual({ id: 2, version: 2 });
    const before = c.map();
    await expect(c.register({ url: 'http://S2:6333' })).rejects.toMatchObject({ code: 'already_exists' });
    await expect(c.register({ url: 'not a url' })).rejects.toMatchObject({ code: 'invalid_argument' });
    await expect(c.drain('8')).rejects.toMatchObject({ code: 'not_found' });
    await expect(c.remove('0')).rejects.toMatchObject({ code: 'shard_not_drained' });
    expect(c.map()).toEqual(before);

    expect(await c.drain('0')).toEqual({ id: 0, state: 'draining', version: 3 });
    expect(await c.drain('0')).toEqual({ id: 0, state: 'draining', version: 3 });
    await expect(c.drain('1')).rejects.toMatchObject({ code: 'invalid_argument', message: expect.stringContaining('last active shard') });

    // Removal counts the shard now: unreachable is unavailable, points left is shard_not_drained.
    await expect(c.remove('0')).rejects.toMatchObject({ code: 'unavailable', message: expect.stringContaining('shard 0 (http://s0:6333)') });
    client.points.set('http://s0:6333', 4);
    await expect(c.remove('0')).rejects.toMatchObject({ code: 'shard_not_drained', message: expect.stringContaining('4 point(s)') });
    client.points.set('http://s0:6333', 0);
    expect(await c.remove('0')).toEqual({ removed: true, version: 4 });
    expect(c.map().shards.map((s) => s.id)).toEqual([1, 2]);
    expect(await c.register({ url: 'http://s0:6333' })).toEqual({ id: 3, version: 5 });
  });

  it('issues ids in call order when registrations race', async () => {
    const { opts } = setup();
    const c = await Coordinator.open(opts);
    const ids = await Promise.all(Array.from({ length: 20 }, (_, i) => c.register({ url: `http://n${i}:1` })));
    expect(ids.map((r) => r.id)).toEqual(Array.from({ length: 20 }, (_, i) => i + 2));
    expect(ids.map((r) => r.version)).toEqual(Array.from({ length: 20 }, (_, i) => i + 2));
  });

  it('a change it could not save is not made, and says unavailable', async () => {
    const { opts } = setup();
    let fail = false;
    const inner = new MemoryStore();
    const store: CoordinatorStore = {
      load: () => inner.load(),
      save: async (s) => { if (fail) throw new Error('ENOSPC: no space left on device'); await inner.save(s); },
      close: () => inner.close(),
    };
    const c = await Coordinator.open({ ...opts, store });
    fail = true;
    await expect(c.register({ url: 'http://x:1' })).rejects.toMatchObject({ code: 'unavailable', message: expect.stringContaining('ENOSPC') });
    expect(c.map().version).toBe(1);
    fail = false;
    expect((await c.register({ url: 'http://x:1' })).id).toBe(2);
  });

  it('samples every shard: an unreachable one is unknown (null in the map), never 0', async () => {
    const { opts, client } = setup();
    const c = await Coordinator.open(opts);
    client.points.set('http://s0:6333', 12);
    const samples = await c.sample();
    expect(samples).toEqual([{ id: 0, points: 12 }, { id: 1, points: 'unknown', error: expect.stringContaining('did not answer') }]);
    expect(c.map().shards.map((s) => s.points)).toEqual([12, null]);
  });

  it('autoscale on a simulated clock: one standby per scale-out, the cooldown kept, across a restart too', async () => {
    const fs = new FaultyFileSystem(11);
    const { opts, client, clock } = setup({ store: await FileStore.open(fs, '/s.json') });
    const c = await Coordinator.open(opts);
    client.points.set('http://s0:6333', 500);
    client.points.set('http://s1:6333', 1500);
    // The first standby is not up yet: nothing is taken, it is tried again.
    const notReady = await c.autoscale();
    expect(notReady.decision).toMatchObject({ kind: 'hold', why: 'standby_unreachable' });
    expect(c.map().standby).toEqual(['http://sb1:6333', 'http://sb2:6333']);
    client.readyUrls.add('http://sb1:6333').add('http://sb2:6333');

    const out = await c.autoscale();
    expect(out).toMatchObject({ decision: { kind: 'scale_out', standby: 'http://sb1:6333', trigger: { id: 1, points: 1500 } }, id: 2, version: 2 });
    expect(c.map().shards[2]).toEqual({ id: 2, url: 'http://sb1:6333', replicas: [], state: 'joining', points: null });
    expect(c.map().standby).toEqual(['http://sb2:6333']);
    client.points.set('http://sb1:6333', 0);

    for (let i = 0; i < 10; i++) {
      clock.advance(29);
      const step = await c.autoscale();
      expect(step.decision).toMatchObject({ kind: 'hold', why: 'cooldown' });
    }
    await c.close();
    // A restart keeps the last scale-out's time: still within the cooldown.
    const d = await Coordinator.open({ ...opts, store: await FileStore.open(fs, '/s.json') });
    expect((await d.autoscale()).decision).toMatchObject({ kind: 'hold', why: 'cooldown' });
    clock.advance(10);
    expect(await d.autoscale()).toMatchObject({ decision: { kind: 'scale_out', standby: 'http://sb2:6333' }, id: 3 });
    clock.advance(3600);
    expect((await d.autoscale()).decision).toMatchObject({ kind: 'hold', why: 'no_standby' });
    expect(d.stats()).toMatchObject({ version: 3, shards: { active: 2, joining: 2, draining: 0 }, standbyLeft: 0, scaleOuts: 1 });
    await d.close();
  });

  it('never scales in on its own, whatever the samples say', async () => {
    const { opts, client, clock } = setup();
    const c = await Coordinator.open(opts);
    client.points.set('http://s0:6333', 0);
    client.points.set('http://s1:6333', 0);
    for (let i = 0; i < 5; i++) {
      clock.advance(60);
      expect((await c.autoscale()).decision).toMatchObject({ kind: 'hold', why: 'below_high_water' });
    }
    expect(c.map().shards.map((s) => s.state)).toEqual(['active', 'active']);
  });
});

/** A store whose saves take as long as the test lets them (a register in flight). */
class SlowStore extends MemoryStore {
  gate: Promise<void> | null = null;
  override async save(s: Parameters<MemoryStore['save']>[0]): Promise<void> {
    await this.gate;
    return super.save(s);
  }
}

describe('Coordinator.beginMove: routers first', () => {
  it('starts a new move only past the settle time, its own forget time, and once every router heard from routes by the map', async () => {
    const { opts, clock } = setup({ readerForgetMs: 30_000 });
    const c = await Coordinator.open(opts);
    c.map({ id: 'r1', version: -1 });
    const { version } = await c.register({ url: 'http://s2:6333' });
    expect(await c.beginMove(10_000)).toMatchObject({ waiting: { why: 'settle', forMs: 10_000 } });
    clock.advance(10);
    // Up 10 s: a router alive but not heard from yet may still read within the forget time.
    expect(await c.beginMove(10_000)).toMatchObject({ waiting: { why: 'started', forMs: 20_000 } });
    clock.advance(20);
    c.map({ id: 'r1', version: version - 1 });
    c.map({ id: 'r2', version });
    expect(await c.beginMove(10_000)).toMatchObject({ waiting: { why: 'routers', forMs: null, version, routers: [{ id: 'r1', version: version - 1 }] } });
    c.map({ id: 'r1', version });
    const begun = await c.beginMove(10_000);
    expect(begun).toMatchObject({ started: true, move: { joining: [2] } });
    // A saved move resumes without a wait, after a restart too.
    c.map({ id: 'r1', version: -1 });
    expect(await c.beginMove(10_000)).toMatchObject({ started: false });
    const again = await Coordinator.open({ ...opts, store: opts.store });
    expect(await again.beginMove(10_000)).toMatchObject({ started: false });
  });

  it('a router not heard from for the forget time is not waited for; nothing needed is null', async () => {
    const { opts, clock } = setup({ readerForgetMs: 30_000 });
    const c = await Coordinator.open(opts);
    expect(await c.beginMove(10_000)).toBeNull();
    c.map({ id: 'gone', version: -1 });
    clock.advance(31);
    expect(c.routers()).toBe(0);
    await c.register({ url: 'http://s2:6333' });
    clock.advance(10);
    expect(await c.beginMove(10_000)).toMatchObject({ started: true });
  });

  it('a change of the map that lands while a move is asked for is waited for as any other (the check and the start are one step)', async () => {
    const store = new SlowStore();
    const { opts, clock } = setup({ store, readerForgetMs: 30_000 });
    const c = await Coordinator.open(opts);
    clock.advance(60);
    c.map({ id: 'r1', version: c.map().version });
    let release!: () => void;
    store.gate = new Promise((r) => { release = r; });
    const registering = c.register({ url: 'http://s2:6333' });
    const asked = c.beginMove(0); // queued behind the register: sees its joining shard
    release();
    store.gate = null;
    const { version } = await registering;
    expect(await asked).toMatchObject({ waiting: { why: 'routers', version, routers: [{ id: 'r1' }] } });
  });
});
