import { describe, expect, it } from 'vitest';
import { SvcError } from '../../base/errors.js';
import type { EngineApi } from '../../service/api.js';
import { LEADER_INDEX, leaderIndexOf, WriteForwarder, type ForwardedWrite } from './forward.js';
import type { ConsensusMember } from './member.js';
import { raftEngine } from './raft-engine.js';
import { GroupVersions } from './versions.js';

/**
 * The engine's part in rebalancing moves on a consensus group (issue 18): move steps run on the ready
 * leader and are forwarded from a follower like writes; a leader that stops leading ends its batch's
 * lease; a write refused as `moved` is answered only once this member applied through the leader's index.
 */

interface FakeMember {
  leaderReady: boolean;
  leaderId: string | null;
  applied: number[];
}

function fakeMember(m: FakeMember): ConsensusMember {
  return {
    get leaderReady() { return m.leaderReady; },
    status: () => ({ role: m.leaderReady ? 'leader' : 'follower', leaderId: m.leaderId, term: 1 }),
    whenApplied: async (index: number) => { m.applied.push(index); },
    readBarrier: async () => 0,
  } as unknown as ConsensusMember;
}

function fakeDb(calls: string[], lease: { held: boolean; ended: number }): EngineApi {
  return {
    moveBatch: async (body: unknown) => { calls.push(`moveBatch ${JSON.stringify(body)}`); lease.held = true; return { done: false, token: 't' }; },
    moveCommit: async () => { calls.push('moveCommit'); lease.held = false; return { moved: 1 }; },
    moveApply: async () => { calls.push('moveApply'); return { applied: 1, deleted: 0 }; },
    upsert: async () => { calls.push('upsert'); return { upserted: 1 }; },
    endMoveLease: () => { lease.ended++; lease.held = false; },
    get moveLeaseHeld() { return lease.held; },
  } as unknown as EngineApi;
}

const opts = { writeTimeoutMs: 2000, readTimeoutMs: 2000, leaderPollMs: 5, close: async () => undefined };

describe('raftEngine: a write\'s deadline', () => {
  it('a follower whose wait for a leader ends past the deadline never forwards the write (it was not taken)', async () => {
    const m: FakeMember = { leaderReady: false, leaderId: null, applied: [] };
    const sent: { aborted: boolean }[] = [];
    const follower = raftEngine({
      ...opts, writeTimeoutMs: 50, leaderPollMs: 40, db: fakeDb([], { held: false, ended: 0 }), member: fakeMember(m), selfId: 'n2',
      // The forwarder sends only while its signal is not aborted (WriteForwarder.request).
      forward: async (_to, _w, signal) => {
        sent.push({ aborted: signal.aborted });
        if (signal.aborted) throw new SvcError('unavailable', 'not sent', { reason: 'leader_unreachable' });
        return { value: { upserted: 1 }, index: 3 };
      },
    });
    // A leader becomes known just after the deadline, while the write sleeps between polls (at 0, 40, 80 ms).
    setTimeout(() => { m.leaderId = 'n1'; }, 52);
    const e = await (follower as unknown as Record<string, (n: string, b: unknown) => Promise<unknown>>).upsert('c', {}).catch((x: unknown) => x);
    // Not sent (a timer late by 10 ms may see the deadline before the leader: refused as no leader, as well).
    expect(['leader_unreachable', 'no_leader']).toContain((e as SvcError).detail.reason);
    expect(sent.filter((x) => !x.aborted)).toEqual([]);
  });
});

describe('raftEngine and rebalancing moves', () => {
  it('runs move steps on the ready leader; a follower forwards them (and a forwarded one is never forwarded again)', async () => {
    const calls: string[] = [];
    const m: FakeMember = { leaderReady: false, leaderId: 'n1', applied: [] };
    const forwarded: ForwardedWrite[] = [];
    const follower = raftEngine({
      ...opts, db: fakeDb(calls, { held: false, ended: 0 }), member: fakeMember(m), selfId: 'n2',
      forward: async (to, w) => { forwarded.push(w); expect(to).toBe('n1'); return { value: { done: true }, index: 9 }; },
    });
    expect(await (follower as unknown as Record<string, (b: unknown) => Promise<unknown>>).moveBatch({ move: 'm1' })).toEqual({ done: true });
    expect(forwarded).toEqual([{ op: 'moveBatch', args: [{ move: 'm1' }] }]);
    expect(m.applied).toEqual([9]);
    expect(calls).toEqual([]);
    // A move step forwarded here while this member does not lead is refused, not sent on.
    await expect(follower.forwarded({ op: 'moveCommit', args: [{}] })).rejects.toMatchObject({ detail: { reason: 'not_leader' } });
    // On the ready leader it runs, forwarded or not.
    m.leaderReady = true;
    expect(await follower.forwarded({ op: 'moveApply', args: [{}] })).toEqual({ applied: 1, deleted: 0 });
    expect(calls).toEqual(['moveApply']);
    await follower.close();
  });

  it('ends a batch\'s lease as soon as this member stops being the ready leader', async () => {
    const calls: string[] = [];
    const lease = { held: false, ended: 0 };
    const m: FakeMember = { leaderReady: true, leaderId: 'n1', applied: [] };
    const db = fakeDb(calls, lease);
    const engine = raftEngine({ ...opts, db, lease: db as unknown as { endMoveLease(): void; moveLeaseHeld: boolean }, member: fakeMember(m), selfId: 'n1', forward: async () => ({ value: null, index: 0 }) });
    await (engine as unknown as Record<string, (b: unknown) => Promise<unknown>>).moveBatch({ move: 'm1' });
    expect(lease.held).toBe(true);
    await new Promise((r) => setTimeout(r, 30));
    expect(lease.ended).toBe(0); // still leading: the lease is the batch's
    m.leaderReady = false;
    for (let i = 0; i < 100 && lease.ended === 0; i++) await new Promise((r) => setTimeout(r, 5));
    expect(lease.ended).toBe(1);
    await engine.close();
  });

  it('a forwarded write answered moved is answered once this member applied through the leader\'s index', async () => {
    const m: FakeMember = { leaderReady: false, leaderId: 'n1', applied: [] };
    const refusal = new SvcError('moved', '1 point(s) moved', { moved: { move: 'm1', ids: ['a'], targets: [0, 1] } });
    Object.defineProperty(refusal, LEADER_INDEX, { value: 77 });
    const engine = raftEngine({ ...opts, db: fakeDb([], { held: false, ended: 0 }), member: fakeMember(m), selfId: 'n2', forward: async () => { throw refusal; } });
    await expect(engine.upsert('c', { points: [] } as never)).rejects.toBe(refusal);
    expect(m.applied).toEqual([77]);
    // Other refusals are answered at once.
    const other = raftEngine({ ...opts, db: fakeDb([], { held: false, ended: 0 }), member: fakeMember(m), selfId: 'n2', forward: async () => { throw new SvcError('not_found', 'no'); } });
    await expect(other.upsert('c', { points: [] } as never)).rejects.toMatchObject({ code: 'not_found' });
    expect(m.applied).toEqual([77]);
  });

  it('the ready leader runs a source\'s move step only when every member reads its commands; a target\'s step is never gated', async () => {
    const calls: string[] = [];
    const m: FakeMember = { leaderReady: true, leaderId: 'n1', applied: [] };
    const versions = new GroupVersions('n1', ['n1', 'n2', 'n3'], { command: 3, stream: 1 });
    versions.heard('n2', { command: 3, stream: 1 });
    versions.heard('n3', null); // a build that sends no versions: version 1
    const engine = raftEngine({
      ...opts, db: fakeDb(calls, { held: false, ended: 0 }), member: fakeMember(m), selfId: 'n1', forward: async () => ({ value: null, index: 0 }),
      requireCommandVersion: (v, what) => versions.requireCommand(v, what),
    });
    const e = engine as unknown as Record<string, (b: unknown) => Promise<unknown>>;
    await expect(e.moveBatch({ move: 'm1' })).rejects.toMatchObject({ code: 'unavailable', detail: { reason: 'version_skew', older_members: [{ id: 'n3', command_version: 1 }] } });
    await expect(e.moveCommit({})).rejects.toThrow(/n3/);
    expect(calls).toEqual([]); // nothing ran, so nothing was proposed
    expect(await e.moveApply({})).toEqual({ applied: 1, deleted: 0 });
    versions.heard('n3', { command: 3, stream: 1 });
    await e.moveBatch({ move: 'm1' });
    expect(calls).toEqual(['moveApply', 'moveBatch {"move":"m1"}']);
    await engine.close();
  });

  it('the forwarder carries the leader\'s applied index with an error answer', async () => {
    const follower: WriteForwarder = new WriteForwarder({ send: (_to, p) => { queueMicrotask(() => leader.receive(p, 'f')); return true; }, handle: async () => null, appliedIndex: () => 0 });
    const leader: WriteForwarder = new WriteForwarder({
      send: (_to, p) => { queueMicrotask(() => follower.receive(p, 'l')); return true; },
      handle: async () => { throw new SvcError('moved', 'moved away', { moved: { move: 'm1', ids: ['a'], targets: [0, 1] } }); },
      appliedIndex: () => 31,
    });
    const e = await follower.request('l', { op: 'upsert', args: [] }, AbortSignal.timeout(2000)).catch((x: unknown) => x);
    expect(e).toMatchObject({ code: 'moved', detail: { moved: { ids: ['a'] } } });
    expect(leaderIndexOf(e)).toBe(31);
  });

  it('a forward that waits for the link to a member that stops leading goes to the new leader, within the same deadline', async () => {
    const m: FakeMember = { leaderReady: false, leaderId: 'n1', applied: [] };
    const up = new Set<string>();
    const waiters = new Map<string, () => void>();
    const ran: string[] = [];
    const leaders = new Map<string, WriteForwarder>();
    const follower: WriteForwarder = new WriteForwarder({
      send: (to, p) => { if (up.has(to)) queueMicrotask(() => leaders.get(to)!.receive(p, 'n2')); return up.has(to); },
      whenConnected: (to, ready) => { waiters.set(to, ready); return () => void waiters.delete(to); },
      handle: async () => null,
      appliedIndex: () => 0,
    });
    for (const id of ['n1', 'n3']) {
      leaders.set(id, new WriteForwarder({
        send: (_to, p) => { queueMicrotask(() => follower.receive(p, id)); return true; },
        handle: async (w) => { ran.push(`${id} ${w.op}`); return { upserted: 1 }; },
        appliedIndex: () => 5,
      }));
    }
    const engine = raftEngine({ ...opts, db: fakeDb([], { held: false, ended: 0 }), member: fakeMember(m), selfId: 'n2', forward: (to, w, signal) => follower.request(to, w, signal) });
    const write = engine.upsert('c', { points: [] } as never);
    for (let i = 0; i < 100 && !waiters.has('n1'); i++) await new Promise((r) => setTimeout(r, 5));
    expect(waiters.has('n1')).toBe(true);
    // n3 is elected while the write waits for the link to n1 (member-host abandons n1 on the change).
    m.leaderId = 'n3';
    up.add('n3');
    follower.abandon('n1', 'stopped leading');
    expect(await write).toEqual({ upserted: 1 });
    expect(ran).toEqual(['n3 upsert']);
    expect(m.applied).toEqual([5]);
    // With the same leader still named, a write never sent is answered as such, not sent again.
    m.leaderId = 'n1';
    const again = engine.upsert('c', { points: [] } as never).catch((e: unknown) => e);
    for (let i = 0; i < 100 && !waiters.has('n1'); i++) await new Promise((r) => setTimeout(r, 5));
    follower.abandon('n1', 'went away');
    expect(await again).toMatchObject({ code: 'unavailable', detail: { reason: 'leader_unreachable', leaderId: 'n1' } });
    expect(ran).toEqual(['n3 upsert']);
    await engine.close();
  });
});

describe('raftEngine: a refusal made from the leader\'s state', () => {
  it('is given only after a ReadIndex round confirms the state, the write running again over it', async () => {
    const m: FakeMember = { leaderReady: true, leaderId: 'n1', applied: [] };
    const events: string[] = [];
    let caught = false;
    const member = { ...fakeMember(m), get leaderReady() { return true; }, readBarrier: async () => { events.push('barrier'); caught = true; return 7; } } as unknown as ConsensusMember;
    // A collection this leader had not applied yet: not_found until the barrier brought it up to date.
    const db = {
      upsert: async () => {
        events.push('upsert');
        if (!caught) throw new SvcError('not_found', 'collection \'c\' does not exist');
        return { upserted: 1 };
      },
      delete: async () => {
        events.push('delete');
        throw new SvcError('not_found', 'collection \'gone\' does not exist');
      },
      count: async () => { throw new SvcError('invalid_argument', 'not a write'); },
    } as unknown as EngineApi;
    const leader = raftEngine({ ...opts, db, member, selfId: 'n1', forward: async () => { throw new Error('the leader never forwards'); } }) as unknown as Record<string, (...a: unknown[]) => Promise<unknown>>;
    expect(await leader.upsert('c', {})).toEqual({ upserted: 1 });
    expect(events).toEqual(['upsert', 'barrier', 'upsert']);
    // Still refused after one confirmation: that is the answer (once, not a loop).
    events.length = 0;
    await expect(leader.delete('gone', 'p')).rejects.toMatchObject({ code: 'not_found' });
    expect(events).toEqual(['delete', 'barrier', 'delete']);
    // A body refused against the collection's parameters (a dimension the group's collection of that name
    // may no longer have): confirmed too, then run again.
    events.length = 0;
    let dim = 3;
    const dims = raftEngine({
      ...opts, selfId: 'n1', forward: async () => { throw new Error('never'); },
      member: { ...fakeMember(m), get leaderReady() { return true; }, readBarrier: async () => { events.push('barrier'); dim = 4; return 8; } } as unknown as ConsensusMember,
      db: { upsert: async (_: string, b: { dim: number }) => { events.push('upsert'); if (b.dim !== dim) throw new SvcError('invalid_argument', `vector dimension ${b.dim}, the collection's is ${dim}`); return { upserted: 1 }; } } as unknown as EngineApi,
    }) as unknown as Record<string, (...a: unknown[]) => Promise<unknown>>;
    expect(await dims.upsert('c', { dim: 4 })).toEqual({ upserted: 1 });
    expect(events).toEqual(['upsert', 'barrier', 'upsert']);
    // A leader that cannot confirm (cut off from its quorum) answers unavailable, not its stale not_found.
    events.length = 0;
    const cutOff = raftEngine({
      ...opts, db, selfId: 'n1', forward: async () => { throw new Error('never'); },
      member: { ...fakeMember(m), get leaderReady() { return true; }, readBarrier: async () => { throw new SvcError('unavailable', 'the leader did not confirm the strong read in time', { reason: 'read_timeout' }); } } as unknown as ConsensusMember,
    }) as unknown as Record<string, (...a: unknown[]) => Promise<unknown>>;
    await expect(cutOff.delete('gone', 'p')).rejects.toMatchObject({ code: 'unavailable', detail: { reason: 'read_timeout' } });
    // A refusal that comes past the write's deadline (it waited at a gate) is not given unconfirmed either.
    const slow = raftEngine({
      ...opts, writeTimeoutMs: 5, selfId: 'n1', forward: async () => { throw new Error('never'); }, member,
      db: { setPayload: async () => { await new Promise((r) => setTimeout(r, 20)); throw new SvcError('not_found', 'point \'p\' does not exist'); } } as unknown as EngineApi,
    }) as unknown as Record<string, (...a: unknown[]) => Promise<unknown>>;
    await expect(slow.setPayload('c', {})).rejects.toMatchObject({ code: 'unavailable' });
  });
});

describe('raftEngine: a read across a snapshot restore', () => {
  it('a read that a restore began under (or began and ended under) is refused, not answered from half a state', async () => {
    const m: FakeMember = { leaderReady: false, leaderId: 'n1', applied: [] };
    let restoring = false;
    let begun = 0;
    const member = { ...fakeMember(m), get restoring() { return restoring; }, get replaying() { return false; }, get restoresBegun() { return begun; } } as unknown as ConsensusMember;
    let during: (() => void) | null = null;
    const db = {
      search: async () => { during?.(); await new Promise((r) => setTimeout(r, 1)); return { hits: [] }; },
      snapshot: async (b: { name: string }) => { during?.(); return { name: b.name }; },
    } as unknown as EngineApi;
    const f = raftEngine({ ...opts, db, member, selfId: 'n2', forward: async () => { throw new Error('reads are not forwarded'); } }) as unknown as Record<string, (...a: unknown[]) => Promise<unknown>>;
    expect(await f.search('c', { vector: [1], k: 1 })).toEqual({ hits: [] });
    // A restore begins (and ends) while the search waits: its answer may mix the two states.
    during = () => { begun++; };
    await expect(f.search('c', { vector: [1], k: 1 })).rejects.toMatchObject({ code: 'unavailable', detail: { reason: 'restoring' } });
    await expect(f.search('c', { vector: [1], k: 1, consistency: 'strong' })).rejects.toMatchObject({ detail: { reason: 'restoring' } });
    // A snapshot's copy written meanwhile may hold part of the restore: refused, naming what to do.
    await expect(f.snapshot({ name: 's1' })).rejects.toMatchObject({ code: 'unavailable', message: expect.stringMatching(/snapshot 's1'.*delete it/) });
    // One under way when the read begins: refused at once, strong or not.
    during = null;
    restoring = true;
    await expect(f.search('c', { vector: [1], k: 1 })).rejects.toMatchObject({ detail: { reason: 'restoring' } });
    await expect(f.search('c', { vector: [1], k: 1, consistency: 'strong' })).rejects.toMatchObject({ detail: { reason: 'restoring' } });
    restoring = false;
    expect(await f.search('c', { vector: [1], k: 1, consistency: 'strong' })).toEqual({ hits: [] });
  });
});
