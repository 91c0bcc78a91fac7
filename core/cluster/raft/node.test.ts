import { describe, expect, it } from 'vitest';
import { AssertionError } from '../../base/assert.js';
import { Prng } from '../../base/prng.js';
import { MemoryStorage, RaftNode, type Ready } from './index.js';

function node(id: string, members: string[], storage = new MemoryStorage(), extra = {}): RaftNode {
  return new RaftNode({ id, members, storage, prng: new Prng(1), electionTicks: 10, heartbeatTicks: 1, ...extra });
}

/** Does what a host must for one Ready (no network: messages are returned). */
function handle(n: RaftNode, storage: MemoryStorage): Ready {
  const rd = n.ready();
  if (rd.snapshot) storage.applySnapshot(rd.snapshot);
  storage.append(rd.entries);
  if (rd.hardState) storage.setHardState(rd.hardState);
  n.advance(rd);
  return rd;
}

describe('RaftNode', () => {
  it('a single member elects itself on its first timeout and commits once its own disk has the entry', () => {
    const storage = new MemoryStorage();
    const n = node('a', ['a'], storage);
    for (let t = 0; t < 20 && n.status().role !== 'leader'; t++) n.tick();
    expect(n.status()).toMatchObject({ role: 'leader', term: 1, commit: 0 });
    const p = n.propose(new TextEncoder().encode('x'));
    expect(p).toEqual({ ok: true, index: 2, term: 1 });
    const first = handle(n, storage); // persists the no-op and the write; nothing committed before that
    expect(first.entries.map((e) => e.index)).toEqual([1, 2]);
    expect(first.committedEntries).toEqual([]);
    const second = handle(n, storage);
    expect(second.hardState).toMatchObject({ term: 1, vote: 'a', commit: 2 });
    expect(second.committedEntries.map((e) => e.index)).toEqual([1, 2]);
    expect(n.readIndex('r').ok).toBe(true);
    expect(handle(n, storage).readStates).toEqual([{ ctx: 'r', index: 2 }]);
  });

  it('a restart whose state machine applied past the durable commit index (a commit-only hard state, unsynced, lost) counts those entries committed', () => {
    const storage = new MemoryStorage();
    storage.append([1, 2, 3, 4].map((index) => ({ index, term: 1, data: new Uint8Array([index]) })));
    storage.setHardState({ term: 1, vote: 'a', commit: 2 });
    const n = node('a', ['a', 'b', 'c'], storage, { applied: 3 });
    expect(n.status()).toMatchObject({ commit: 3, applied: 3 });
    // Past the log it holds is no commit it knows of: refused.
    expect(() => node('a', ['a', 'b', 'c'], storage, { applied: 5 })).toThrow(AssertionError);
  });

  it('a follower refuses a proposal and names the leader it knows (none at first)', () => {
    const n = node('b', ['a', 'b', 'c']);
    expect(n.propose(new Uint8Array(1))).toEqual({ ok: false, reason: 'not_leader', leaderId: null });
    n.step({ type: 'heartbeat', from: 'a', to: 'b', term: 3, commit: 0, readSeq: 0, sent: 0 });
    expect(n.propose(new Uint8Array(1))).toEqual({ ok: false, reason: 'not_leader', leaderId: 'a' });
    expect(n.readIndex('r')).toEqual({ ok: true }); // forwarded to a
    expect(n.ready().messages).toContainEqual({ type: 'readIndex', from: 'b', to: 'a', term: 3, ctx: 'r' });
  });

  it('refuses proposals past maxUncommittedEntries (busy), so a leader without a quorum cannot grow its log without bound', () => {
    const storage = new MemoryStorage();
    const n = node('a', ['a', 'b', 'c'], storage, { maxUncommittedEntries: 3 });
    n.campaign();
    handle(n, storage);
    n.step({ type: 'preVoteResp', from: 'b', to: 'a', term: 1, reject: false });
    handle(n, storage);
    n.step({ type: 'voteResp', from: 'b', to: 'a', term: 1, reject: false });
    expect(n.status().role).toBe('leader'); // its no-op is entry 1
    expect(n.propose(new Uint8Array(1)).ok).toBe(true);
    expect(n.propose(new Uint8Array(1)).ok).toBe(true);
    expect(n.propose(new Uint8Array(1))).toEqual({ ok: false, reason: 'busy' });
  });

  it('ignores messages from non-members and to others', () => {
    const n = node('a', ['a', 'b', 'c']);
    n.step({ type: 'heartbeat', from: 'x', to: 'a', term: 9, commit: 0, readSeq: 0, sent: 0 });
    n.step({ type: 'heartbeat', from: 'b', to: 'c', term: 9, commit: 0, readSeq: 0, sent: 0 });
    expect(n.status()).toMatchObject({ term: 0, leaderId: null });
  });

  it('takes one Ready at a time, and only the outstanding one back', () => {
    const n = node('a', ['a']);
    n.campaign();
    const rd = n.ready();
    expect(() => n.ready()).toThrow(AssertionError);
    expect(n.hasReady()).toBe(false);
    expect(() => n.advance({ ...rd })).toThrow(AssertionError);
    n.advance(rd);
  });

  it('rejects a group it is not part of, and a vote for a stranger on disk', () => {
    expect(() => node('z', ['a', 'b'])).toThrow(AssertionError);
    const storage = new MemoryStorage();
    storage.setHardState({ term: 2, vote: 'q', commit: 0 });
    expect(() => node('a', ['a', 'b', 'c'], storage)).toThrow(AssertionError);
  });

  it('a member that starts with nothing durable grants no vote during amnesiaTicks; pre-votes and a member with state are answered at once', () => {
    const vote = (n: RaftNode, storage: MemoryStorage, type: 'vote' | 'preVote', term: number) => {
      n.step({ type, from: 'a', to: 'b', term, lastIndex: 0, lastTerm: 0 });
      return handle(n, storage).messages.find((m) => m.type === `${type}Resp`) as { reject: boolean } | undefined;
    };
    const fresh = new MemoryStorage();
    const n = node('b', ['a', 'b', 'c'], fresh, { amnesiaTicks: 25, electionTicks: 100 });
    expect(vote(n, fresh, 'preVote', 1)?.reject).toBe(false);
    expect(vote(n, fresh, 'vote', 1)?.reject).toBe(true);
    for (let t = 0; t < 25; t++) n.tick();
    expect(vote(n, fresh, 'vote', 2)?.reject).toBe(false);
    // One that has voted before (durable state) is no amnesiac: it answers at once.
    const known = new MemoryStorage();
    known.setHardState({ term: 3, vote: null, commit: 0 });
    const m = node('b', ['a', 'b', 'c'], known, { amnesiaTicks: 25, electionTicks: 100 });
    expect(vote(m, known, 'vote', 4)?.reject).toBe(false);
  });
});
