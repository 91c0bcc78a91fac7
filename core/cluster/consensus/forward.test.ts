import { describe, expect, it } from 'vitest';
import { SvcError } from '../../base/errors.js';
import { COLLECTION_EXISTED, collectionExisted, type CollectionInfo } from '../../base/model.js';
import { WriteForwarder } from './forward.js';

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
});
