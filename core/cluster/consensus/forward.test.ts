import { describe, expect, it } from 'vitest';
import { SvcError } from '../../base/errors.js';
import { COLLECTION_EXISTED, collectionExisted, type CollectionInfo } from '../../base/model.js';
import { FORWARD_UNSENT_MAX, WriteForwarder } from './forward.js';

/** Two forwarders wired to each other (a follower and its leader), with a switch to cut the wire. */
function pair(handle: (op: string, args: readonly unknown[]) => Promise<unknown>) {
  let up = true;
  const follower: WriteForwarder = new WriteForwarder({
    send: (_to, p) => { if (up) queueMicrotask(() => leader.receive(p, 'f')); return up; },
    handle: () => Promise.reject(new Error('a follower runs no forwarded write')),
    appliedIndex: () => 0,
  });
  const leader: WriteForwarder = new WriteForwarder({
    send: (_to, p) => { if (up) queueMicrotask(() => follower.receive(p, 'l')); return up; },
    handle: (w) => handle(w.op, w.args),
    appliedIndex: () => 42,
  });
  return { follower, leader, cut: () => { up = false; } };
}

/**
 * A follower whose own link to its leader is down until `connect()` (in its reconnect back-off, as when
 * it dialled before the leader listened), and a leader that answers every write it is handed.
 */
function reconnecting() {
  let up = false;
  const waiters = new Set<() => void>();
  const handled: string[] = [];
  const follower: WriteForwarder = new WriteForwarder({
    send: (_to, p) => { if (up) queueMicrotask(() => leader.receive(p, 'f')); return up; },
    whenConnected: (_to, ready) => { waiters.add(ready); return () => void waiters.delete(ready); },
    handle: () => Promise.reject(new Error('a follower runs no forwarded write')),
    appliedIndex: () => 0,
  });
  const leader: WriteForwarder = new WriteForwarder({
    send: (_to, p) => { queueMicrotask(() => follower.receive(p, 'l')); return true; },
    handle: async (w) => { handled.push(w.op); return { done: w.op }; },
    appliedIndex: () => 7,
  });
  const connect = (): void => {
    up = true;
    for (const w of [...waiters]) { waiters.delete(w); w(); }
  };
  return { follower, handled, waiters, connect };
}

describe('WriteForwarder (a follower member hands writes to its leader)', () => {
  it('brings back the leader\'s result with its applied index, its errors as they were, and exist_ok\'s mark', async () => {
    const p = pair(async (op, args) => {
      if (op === 'upsert') return { upserted: (args[1] as { points: unknown[] }).points.length };
      if (op === 'createCollection') {
        const info = { name: 'c', dim: 2 } as unknown as CollectionInfo;
        Object.defineProperty(info, COLLECTION_EXISTED, { value: true, enumerable: false });
        return info;
      }
      throw new SvcError('not_found', 'collection \'x\' does not exist', { why: 'test' });
    });
    const signal = AbortSignal.timeout(2000);
    expect(await p.follower.request('l', { op: 'upsert', args: ['c', { points: [{ id: 'a', vector: new Float32Array([1, 2]) }] }] }, signal))
      .toEqual({ value: { upserted: 1 }, index: 42 });
    const made = await p.follower.request('l', { op: 'createCollection', args: [{ name: 'c', dim: 2, exist_ok: true }] }, signal);
    expect(collectionExisted(made.value as CollectionInfo)).toBe(true);
    const err = await p.follower.request('l', { op: 'delete', args: ['x', 'a'] }, signal).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(SvcError);
    expect(err).toMatchObject({ code: 'not_found', detail: { why: 'test' } });
    // Garbage from a peer is dropped and counted, never thrown.
    p.leader.receive(Buffer.from('{not json'), 'f');
    expect(p.leader.stats.malformed).toBe(1);
  });

  it('fails a waiting write at once as not acknowledged when the leader goes away, and unreachable when it cannot be sent', async () => {
    const p = pair(() => new Promise(() => undefined)); // a leader that never answers
    const waiting = p.follower.request('l', { op: 'upsert', args: [] }, AbortSignal.timeout(60_000)).catch((e: unknown) => e);
    await Promise.resolve();
    p.follower.abandon('other', 'went away');
    p.follower.abandon('l', 'went away');
    const e = (await waiting) as SvcError;
    expect(e.code).toBe('unavailable');
    expect(e.detail.reason).toBe('not_acknowledged');
    p.cut();
    await expect(p.follower.request('l', { op: 'upsert', args: [] }, AbortSignal.timeout(1000))).rejects.toMatchObject({ detail: { reason: 'leader_unreachable' } });
    expect(p.follower.stats.unanswered).toBe(1);
  });

  it('a write whose link to the leader is reconnecting waits for the link, then goes and is answered', async () => {
    const r = reconnecting();
    const write = r.follower.request('l', { op: 'createCollection', args: [{ name: 'c', dim: 2 }] }, AbortSignal.timeout(5000));
    await new Promise((res) => setTimeout(res, 20));
    expect(r.handled).toEqual([]);
    expect(r.waiters.size).toBe(1);
    r.connect();
    expect(await write).toEqual({ value: { done: 'createCollection' }, index: 7 });
    expect(r.handled).toEqual(['createCollection']);
    expect(r.follower.stats).toMatchObject({ forwarded: 1, waitedForLink: 1, unanswered: 0 });
  });

  it('the deadline ends before the link is up: leader_unreachable, nothing sent, no wait left behind', async () => {
    const r = reconnecting();
    const deadline = new AbortController();
    const write = r.follower.request('l', { op: 'upsert', args: [] }, deadline.signal).catch((e: unknown) => e);
    await Promise.resolve();
    deadline.abort();
    const e = (await write) as SvcError;
    expect(e).toBeInstanceOf(SvcError);
    expect(e.code).toBe('unavailable');
    expect(e.detail).toEqual({ reason: 'leader_unreachable', leaderId: 'l' });
    expect(e.message).toMatch(/not sent, so it is not applied/);
    expect(r.waiters.size).toBe(0);
    // The link coming up later sends nothing: that write was answered already.
    r.connect();
    await new Promise((res) => setTimeout(res, 10));
    expect(r.handled).toEqual([]);
    expect(r.follower.stats.forwarded).toBe(0);
  });

  it('close, or the leader stopping, while a write waits for the link: it fails at once and is never sent', async () => {
    const r = reconnecting();
    const signal = AbortSignal.timeout(60_000);
    const toL = r.follower.request('l', { op: 'upsert', args: [] }, signal).catch((e: unknown) => e);
    const toOther = r.follower.request('m', { op: 'delete', args: [] }, signal).catch((e: unknown) => e);
    await Promise.resolve();
    expect(r.waiters.size).toBe(2);
    r.follower.abandon('l', 'stopped leading');
    expect(await toL).toMatchObject({ code: 'unavailable', detail: { reason: 'leader_unreachable', leaderId: 'l' } });
    expect(r.waiters.size).toBe(1);
    r.follower.close();
    expect(await toOther).toMatchObject({ code: 'unavailable', message: 'the consensus member is closing' });
    expect(r.waiters.size).toBe(0);
    await expect(r.follower.request('l', { op: 'upsert', args: [] }, signal)).rejects.toMatchObject({ message: 'the consensus member is closing' });
    r.connect();
    await new Promise((res) => setTimeout(res, 10));
    expect(r.handled).toEqual([]);
  });

  it(`at most ${FORWARD_UNSENT_MAX} writes wait for a link; the next fails at once`, async () => {
    const r = reconnecting();
    const deadlines = Array.from({ length: FORWARD_UNSENT_MAX }, () => new AbortController());
    const waiting = deadlines.map((d) => r.follower.request('l', { op: 'upsert', args: [] }, d.signal).catch((e: unknown) => e));
    await expect(r.follower.request('l', { op: 'upsert', args: [] }, AbortSignal.timeout(60_000))).rejects.toMatchObject({ detail: { reason: 'leader_unreachable' } });
    expect(r.waiters.size).toBe(FORWARD_UNSENT_MAX);
    for (const d of deadlines) d.abort();
    await Promise.all(waiting);
    expect(r.waiters.size).toBe(0);
  });
});
