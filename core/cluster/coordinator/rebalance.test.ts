import { describe, expect, it } from 'vitest';
import { SvcError } from '../../base/errors.js';
import { FaultyFileSystem } from '../../testing/faulty-fs.js';
import { owner } from '../routing/hrw.js';
import { groupByOwner, moveSource, type BatchAnswer, type MoveClient } from './mover.js';
import { finishMove, moveNeeded, startMove } from './rebalance.js';
import { drain, parseRegister, register, remove, seedState, type CoordinatorState } from './state.js';
import { decodeState, encodeState, FileStore } from './store.js';
import { decodeOp, encodeOp } from '../../storage/codec.js';

/** The rebalancer's decisions (docs/cluster.md, Rebalancing), pure: start, finish, and what a state file keeps of them. */

const seeded = (): CoordinatorState => seedState(['http://s0:6333', 'http://s1:6333']);

describe('rebalance decisions', () => {
  it('needs no move for a map of active shards', () => {
    expect(moveNeeded(seeded())).toBe(false);
    expect(startMove(seeded())).toBeNull();
  });

  it('a join: every active shard is a source, the target set adds the joining one, which turns active at the end', () => {
    const { state: joined } = register(seeded(), parseRegister({ url: 'http://s2:6333' }));
    expect(moveNeeded(joined)).toBe(true);
    const r = startMove(joined)!;
    expect(r.move).toEqual({ id: 'm0', targets: [0, 1, 2], sources: [0, 1], joining: [2], draining: [] });
    expect(r.state.version).toBe(joined.version);
    // One move at a time: a second join waits for the next.
    const { state: twice } = register(r.state, parseRegister({ url: 'http://s3:6333' }));
    expect(startMove(twice)).toBeNull();
    const done = finishMove(twice, 'm0');
    expect(done.shards.map((s) => s.state)).toEqual(['active', 'active', 'active', 'joining']);
    expect(done.version).toBe(twice.version + 1);
    expect(done.move).toBeNull();
    expect(startMove(done)!.move).toEqual({ id: 'm1', targets: [0, 1, 2, 3], sources: [0, 1, 2], joining: [3], draining: [] });
    // A finish of another move changes nothing.
    expect(finishMove(done, 'm0')).toBe(done);
  });

  it('a drain: the draining shard is a source but no target; it is `moved` at the end, and only then removable', () => {
    const { state: three } = register(seeded(), parseRegister({ url: 'http://s2:6333' }));
    const active = finishMove(startMove(three)!.state, 'm0');
    const draining = drain(active, 1);
    const r = startMove(draining)!;
    expect(r.move).toEqual({ id: 'm1', targets: [0, 2], sources: [0, 1, 2], joining: [], draining: [1] });
    expect(() => remove(r.state, 1, 0)).toThrow(expect.objectContaining({ code: 'shard_not_drained' }));
    const done = finishMove(r.state, 'm1');
    expect(done.shards.find((s) => s.id === 1)).toEqual({ id: 1, url: 'http://s1:6333', replicas: [], state: 'draining', moved: true });
    expect(moveNeeded(done)).toBe(false);
    expect(remove(done, 1, 0).shards.map((s) => s.id)).toEqual([0, 2]);
  });

  it('a shard drained while it was a target is not marked moved: the next move takes its points', () => {
    const { state: joined } = register(seeded(), parseRegister({ url: 'http://s2:6333' }));
    const r = startMove(joined)!;
    const mid = drain(r.state, 0);
    const done = finishMove(mid, 'm0');
    expect(done.shards.find((s) => s.id === 0)!.moved).toBeUndefined();
    expect(startMove(done)!.move.draining).toEqual([0]);
  });

  it('the state file keeps the running move, the move counter and moved shards; a file without them reads as none', async () => {
    const { state: joined } = register(seeded(), parseRegister({ url: 'http://s2:6333' }));
    const r = startMove(drain(joined, 1))!;
    expect(decodeState(encodeState(r.state), 'f')).toEqual(r.state);
    const done = finishMove(r.state, r.move.id);
    expect(decodeState(encodeState(done), 'f')).toEqual(done);
    expect(decodeState(encodeState(seeded()), 'f')).toEqual(seeded());
    const fs = new FaultyFileSystem(1);
    const store = await FileStore.open(fs, '/c/state.json');
    await store.save(r.state);
    expect(await store.load()).toEqual(r.state);
    await store.close();
  });

  it('a batch splits by owner in the target set, each point whole, deletes to their owners too', () => {
    const targets = [0, 1, 2];
    const points = Array.from({ length: 50 }, (_, i) => ({ id: `p${i}`, vector: new Float32Array([i, 1]), payload: { i } }));
    const rec = Buffer.from(encodeOp({ t: 'upsert', points })).toString('base64');
    const groups = groupByOwner([rec], ['gone1', 'gone2'], targets);
    let seen = 0;
    for (const [to, g] of groups) {
      for (const r of g.records) {
        const op = decodeOp(Buffer.from(r, 'base64'));
        if (op.t !== 'upsert') throw new Error('an upsert was expected');
        for (const p of op.points) {
          expect(owner(p.id, targets)).toBe(to);
          expect(Array.from(p.vector)).toEqual([Number(p.id.slice(1)), 1]);
          seen++;
        }
      }
      for (const d of g.deletes) expect(owner(d, targets)).toBe(to);
    }
    expect(seen).toBe(50);
  });

  it('a batch refused at its commit (its lease ended) and a source that forgot it since: the ids gone from the source go from their new owners', async () => {
    const targets = [0, 1];
    // Ids the joining shard 1 owns, so every one of them leaves shard 0.
    const ids = Array.from({ length: 400 }, (_, i) => `q${i}`).filter((id) => owner(id, targets) === 1).slice(0, 3).sort();
    const rec = (list: string[]) => Buffer.from(encodeOp({ t: 'upsert', points: list.map((id) => ({ id, vector: new Float32Array([1, 2]), payload: null })) })).toString('base64');
    const params = { name: 'c', dim: 2 };
    const batches: BatchAnswer[] = [
      { done: false, token: 't1', collection: 'c', params, cursor: ids[2], records: [rec(ids)], deletes: [], count: 3, bytes: 24 },
      // The source restarted meanwhile (its memory of t1 is gone) and ids[1] was deleted there.
      { done: false, token: 't2', collection: 'c', params, cursor: ids[2], records: [rec([ids[0], ids[2]])], deletes: [], count: 2, bytes: 16 },
      { done: true },
    ];
    const applied: { deletes: string[]; ids: string[] }[] = [];
    const client: MoveClient = {
      batch: async () => batches.shift()!,
      commit: async (_url, body) => {
        if (body.token === 't1') throw new SvcError('not_found', 'no batch holds this node with that token');
        return { moved: 2 };
      },
      apply: async (_url, body) => {
        applied.push({ deletes: body.deletes, ids: body.records.flatMap((r) => { const op = decodeOp(Buffer.from(r, 'base64')); return op.t === 'upsert' ? op.points.map((p) => p.id) : []; }) });
        return { applied: 0, deleted: 0 };
      },
    };
    await moveSource({ client, move: { id: 'm0', targets, sources: [0], joining: [1], draining: [] }, source: { id: 0, url: 's0' }, urlOf: String, limit: 10 });
    expect(applied).toEqual([{ deletes: [], ids }, { deletes: [ids[1]], ids: [ids[0], ids[2]] }]);
  });

  it('a step answered unavailable (a consensus group electing a leader) is asked again, the commit with its token, keeping what the mover knows; past retryMs it fails', async () => {
    const targets = [0, 1];
    const ids = Array.from({ length: 400 }, (_, i) => `q${i}`).filter((id) => owner(id, targets) === 1).slice(0, 2).sort();
    const rec = Buffer.from(encodeOp({ t: 'upsert', points: ids.map((id) => ({ id, vector: new Float32Array([1, 2]), payload: null })) })).toString('base64');
    const params = { name: 'c', dim: 2 };
    const calls: string[] = [];
    let batchFails = 2;
    let applyFails = 1;
    let commitFails = 2;
    let done = false;
    const down = () => new SvcError('unavailable', 'no consensus leader');
    const client: MoveClient = {
      batch: async () => {
        calls.push('batch');
        if (batchFails-- > 0) throw down();
        return done ? { done: true } : { done: false, token: 'tok', collection: 'c', params, cursor: ids[1], records: [rec], deletes: [], count: 2, bytes: 16 };
      },
      apply: async () => {
        calls.push('apply');
        if (applyFails-- > 0) throw down();
        return { applied: 2, deleted: 0 };
      },
      commit: async (_url, body) => {
        calls.push(`commit ${body.token}`);
        if (commitFails-- > 0) throw down();
        done = true;
        return { moved: 2 };
      },
    };
    const move = { id: 'm0', targets, sources: [0], joining: [1], draining: [] };
    await moveSource({ client, move, source: { id: 0, url: 's0' }, urlOf: String, limit: 10 });
    expect(calls).toEqual(['batch', 'batch', 'batch', 'apply', 'apply', 'commit tok', 'commit tok', 'commit tok', 'batch']);
    // A shard that stays unavailable stops the move after retryMs (the loop tries it again later).
    const never: MoveClient = { ...client, batch: async () => { throw down(); } };
    const t0 = performance.now();
    await expect(moveSource({ client: never, move, source: { id: 0, url: 's0' }, urlOf: String, retryMs: 300 })).rejects.toMatchObject({ code: 'unavailable' });
    expect(performance.now() - t0).toBeLessThan(3000);
    // Other errors are not asked again.
    let asked = 0;
    const refused: MoveClient = { ...client, batch: async () => { asked++; throw new SvcError('invalid_argument', 'bad'); } };
    await expect(moveSource({ client: refused, move, source: { id: 0, url: 's0' }, urlOf: String })).rejects.toMatchObject({ code: 'invalid_argument' });
    expect(asked).toBe(1);
  });
});
