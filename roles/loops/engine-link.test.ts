import { describe, expect, it } from 'vitest';
import { SvcError } from '../../core/base/errors.js';
import { DEFAULT_LIMITS } from '../../core/base/limits.js';
import { parseCollectionParams } from '../../core/collection/params.js';
import { raftEngine } from '../../core/cluster/consensus/raft-engine.js';
import { FakeEmbedder } from '../../core/providers/fake.js';
import { engineOverLink } from './engine-link.js';

/** A loop's text queries (engine-link.ts): found by reviews, each failed before its fix. */
describe('a request loop\'s text queries', () => {
  const spec = parseCollectionParams({ name: 'txt', dim: 8, metric: 'cosine' }, DEFAULT_LIMITS);

  it('take the collection\'s parameters once: a view that goes while the query runs never makes it throw a TypeError', async () => {
    // The view stops being usable right after the query starts (a restore begins, the collection is dropped).
    const answers = [spec, null];
    const calls: string[] = [];
    const reads = { specOf: () => answers.shift() ?? null, rankings: () => null };
    const link = { call: (_t: string, op: string) => { calls.push(op); return Promise.resolve({ dense: [], text: [] }); }, notify: () => undefined };
    const engine = engineOverLink(link as never, reads as never, { limits: DEFAULT_LIMITS, embedders: new Map([['txt', new FakeEmbedder(8)]]), rerankers: new Map() });
    expect(await engine.searchText('txt', { text: 'shock wave' } as never)).toEqual({ hits: [] });
    // Its rankings were the engine thread's (the view declined them).
    expect(calls).toEqual(['rankings']);
  });

  it('hand a strong one whole to the engine thread: a consensus member\'s barrier comes before any check or embedding', async () => {
    let embeds = 0;
    const embedder = new FakeEmbedder(8);
    const counting = { dim: 8, embed: (t: string[], k: 'query' | 'document') => { embeds++; return embedder.embed(t, k); } };
    const member = {
      restoring: false, replaying: false, leaderReady: false,
      status: () => ({ role: 'follower', leaderId: null, term: 1 }),
      readBarrier: () => Promise.reject(new SvcError('unavailable', 'no leader confirmed the read in time', { reason: 'read_timeout' })),
    };
    const main = raftEngine({ db: {} as never, member: member as never, selfId: 'n1', forward: () => Promise.reject(new Error('x')), writeTimeoutMs: 50, readTimeoutMs: 50, close: async () => undefined });
    const reads = { specOf: () => spec, rankings: () => null };
    const link = { call: (_t: string, op: string, args: unknown[]) => (main as unknown as Record<string, (...a: unknown[]) => Promise<unknown>>)[op](...args), notify: () => undefined };
    const loop = engineOverLink(link as never, reads as never, { limits: DEFAULT_LIMITS, embedders: new Map([['txt', counting as never]]), rerankers: new Map() });
    const outcome = (p: Promise<unknown>) => p.then(() => 'ok', (e: SvcError) => `${e.code}/${String(e.detail?.reason)}`);
    for (const q of [{ text: '', consistency: 'strong' }, { text: 'x', k: 0, consistency: 'strong' }, { text: 'x', consistency: 'bogus' }]) {
      expect(await outcome(loop.searchText('txt', q as never)), JSON.stringify(q)).toBe(await outcome(main.searchText('txt', q as never)));
    }
    embeds = 0;
    await outcome(loop.searchText('txt', { text: 'shock wave', consistency: 'strong' } as never));
    expect(embeds).toBe(0);
  });
});
