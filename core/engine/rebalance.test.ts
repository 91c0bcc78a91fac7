import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { resolveLimits } from '../base/limits.js';
import { Prng } from '../base/prng.js';
import { moveSource, type BatchAnswer, type MoveClient } from '../cluster/coordinator/mover.js';
import { owner } from '../cluster/routing/hrw.js';
import { Database } from '../collection/database.js';
import { buildIndexInline } from '../collection/rebuild.js';
import { Engine } from './engine.js';
import type { ShardRef } from './shard.js';

/**
 * The whole rebalance protocol in one process (docs/cluster.md, Rebalancing): three databases as shards,
 * the coordinator's mover driving batches from two sources to a joining third, then from a draining
 * one to the two others, and an engine (a router) writing and reading through it all the while. Every acknowledged write is read back as written at
 * every step, and at the end each shard holds exactly the points it owns. Seeded.
 */

const dirs: string[] = [];
afterEach(() => { for (const d of dirs.splice(0)) rmSync(d, { recursive: true, force: true }); });

async function open(): Promise<Database> {
  const d = mkdtempSync(join(tmpdir(), 'svc-rebalance-'));
  dirs.push(d);
  return Database.open({ dataDir: d, masterKey: null, buildIndex: buildIndexInline });
}

/** The mover's calls, straight to the databases (`url` is the shard id). */
function client(dbs: Database[]): MoveClient {
  const db = (url: string) => dbs[Number(url)];
  return {
    batch: async (url, body) => (await db(url).moveBatch(body)) as BatchAnswer,
    commit: async (url, body) => (await db(url).moveCommit(body)) as { moved: number },
    apply: async (url, body) => (await db(url).moveApply(body)) as { applied: number; deleted: number },
  };
}

describe('a rebalance move under a router\'s writes and reads', () => {
  it('a join then a drain: moves what each asks, follows moved answers, loses and repeats nothing', async () => {
    const rng = new Prng(16);
    const dbs = await Promise.all([open(), open(), open()]);
    // Counts the `moved` answers the shards give (the router must have followed some).
    let movedSeen = 0;
    const spied = dbs.map((db) => new Proxy(db, {
      get(target, key) {
        const v = Reflect.get(target, key, target) as unknown;
        if (typeof v !== 'function') return v;
        return (...args: unknown[]) => {
          const r = (v as (...a: unknown[]) => unknown).apply(target, args);
          return r instanceof Promise ? r.catch((e: unknown) => {
            if ((e as { code?: string }).code === 'moved') movedSeen++;
            throw e;
          }) : r;
        };
      },
    }));
    const ref = (id: number, state: ShardRef['state']): ShardRef => ({ id, name: `shard ${id}`, shard: spied[id], state });
    let routed = [ref(0, 'active'), ref(1, 'active')];
    let present = [...routed, ref(2, 'joining')];
    let moving = true;
    let now = 0;
    const engine = new Engine({
      shards: () => routed, present: () => present, moving: () => moving, limits: resolveLimits({}), monotonicMs: () => now++,
    });
    await engine.createCollection({ name: 'c', dim: 2, metric: 'l2', index: 'flat' });
    const model = new Map<string, number[] | null>();
    const points = Array.from({ length: 600 }, (_, i) => ({ id: `p${i}`, vector: [i, rng.int(10)] }));
    await engine.upsert('c', { points });
    for (const p of points) model.set(p.id, p.vector);

    const check = async (id: string): Promise<void> => {
      const want = model.get(id);
      if (want === null || want === undefined) await expect(engine.get('c', id)).rejects.toMatchObject({ code: 'not_found' });
      else expect((await engine.get('c', id, { with_vector: true })).vector).toEqual(want);
    };
    const move = { id: 'm0', targets: [0, 1, 2], sources: [0, 1], joining: [2], draining: [] };
    let done = false;
    const movers = Promise.all([0, 1].map((id) => moveSource({
      client: client(dbs), move, source: { id, url: String(id) }, urlOf: (t) => String(t), limit: 20,
    }))).finally(() => { done = true; });
    let writes = 0;
    while (!done || writes < 50) {
      const id = `p${rng.int(700)}`;
      if (rng.int(5) === 0) {
        await engine.deletePoints('c', { ids: [id] });
        model.set(id, null);
      } else {
        const vector = [rng.int(100), rng.int(100)];
        await engine.upsert('c', { points: [{ id, vector }] });
        model.set(id, vector);
      }
      writes++;
      for (let i = 0; i < 3; i++) await check(`p${rng.int(700)}`);
      if (writes > 5000) throw new Error('the move did not end');
    }
    await movers;

    // The move ended: the new shard turns active.
    routed = [ref(0, 'active'), ref(1, 'active'), ref(2, 'active')];
    present = routed;
    moving = false;
    const live = [...model].filter(([, v]) => v !== null);
    const all = (await engine.fetch('c', { limit: 10_000, with_vector: true })).points;
    expect(all.map((p) => p.id).sort()).toEqual(live.map(([id]) => id).sort());
    for (const p of all) expect(p.vector).toEqual(model.get(p.id));
    for (let s = 0; s < 3; s++) {
      const here = (await dbs[s].fetch('c', { limit: 10_000 })).points.map((p) => p.id);
      for (const id of here) expect(owner(id, [0, 1, 2]), `${id} on shard ${s}`).toBe(s);
    }
    const onNew = (await dbs[2].count('c')).count;
    expect(onNew / live.length).toBeGreaterThan(0.2);
    expect(onNew / live.length).toBeLessThan(0.45);

    expect(movedSeen).toBeGreaterThan(0);

    // Then shard 0 drains, under the same load: its points go to their next owners among 1 and 2.
    routed = [ref(0, 'draining'), ref(1, 'active'), ref(2, 'active')];
    present = routed;
    moving = true;
    const drain = { id: 'm1', targets: [1, 2], sources: [0, 1, 2], joining: [], draining: [0] };
    done = false;
    const drainers = Promise.all([0, 1, 2].map((id) => moveSource({
      client: client(dbs), move: drain, source: { id, url: String(id) }, urlOf: (t) => String(t), limit: 20,
    }))).finally(() => { done = true; });
    for (let n = 0; !done || n < 50; n++) {
      const id = `p${rng.int(700)}`;
      const vector = [rng.int(100), rng.int(100)];
      await engine.upsert('c', { points: [{ id, vector }] });
      model.set(id, vector);
      for (let i = 0; i < 3; i++) await check(`p${rng.int(700)}`);
      if (n > 5000) throw new Error('the drain did not end');
    }
    await drainers;
    routed = [ref(1, 'active'), ref(2, 'active')];
    present = routed;
    moving = false;
    expect((await dbs[0].count('c')).count).toBe(0);
    const liveAfter = [...model].filter(([, v]) => v !== null);
    const after = (await engine.fetch('c', { limit: 10_000, with_vector: true })).points;
    expect(after.map((p) => p.id).sort()).toEqual(liveAfter.map(([id]) => id).sort());
    for (const p of after) expect(p.vector).toEqual(model.get(p.id));
    for (const s2 of [1, 2]) {
      for (const p of (await dbs[s2].fetch('c', { limit: 10_000 })).points) expect(owner(p.id, [1, 2])).toBe(s2);
    }
    // Back to the join's end for the late router below.
    routed = [ref(1, 'active'), ref(2, 'active')];

    // A router still on the map from before the move: its writes and reads follow the sources' answers.
    // (Here: one still routing by shards 0 and 1, before both moves; shard 0 redirects everything now.)
    const late = new Engine({ shards: () => [ref(0, 'active'), ref(1, 'active')], present: () => [ref(0, 'active'), ...routed], limits: resolveLimits({}), monotonicMs: () => now++ });
    const theirs = liveAfter.map(([id]) => id).find((id) => owner(id, [0, 1]) === 0 && owner(id, [1, 2]) === 2)!;
    await late.upsert('c', { points: [{ id: theirs, vector: [7, 7] }] });
    expect((await dbs[2].get('c', theirs, { with_vector: true })).vector).toEqual([7, 7]);
    expect((await late.get('c', theirs, { with_vector: true })).vector).toEqual([7, 7]);
    expect(await late.delete('c', theirs)).toEqual({ deleted: true });
    await expect(dbs[2].get('c', theirs)).rejects.toMatchObject({ code: 'not_found' });
    for (const d of dbs) await d.close();
  }, 60_000);
});
