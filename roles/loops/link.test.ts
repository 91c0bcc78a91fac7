import { MessageChannel } from 'node:worker_threads';
import { afterEach, describe, expect, it } from 'vitest';
import { SvcError } from '../../core/base/errors.js';
import { Link, LinkClosed, type LinkPort } from './link.js';

/** Both ends of a link over a real MessageChannel (structured clone, as between threads). */
function pair(): { a: Link; b: Link; close(): void } {
  const { port1, port2 } = new MessageChannel();
  const a = new Link(port1 as unknown as LinkPort);
  const b = new Link(port2 as unknown as LinkPort);
  return { a, b, close: () => { port1.close(); port2.close(); } };
}

/** A pair whose `a` end counts its postMessage calls. */
function countingPair(): { a: Link; b: Link; posts: { n: number } } {
  const { port1, port2 } = new MessageChannel();
  const posts = { n: 0 };
  const counting: LinkPort = {
    postMessage: (v) => { posts.n++; port1.postMessage(v); },
    on: (e, l) => port1.on(e, l),
    off: (e, l) => port1.off(e, l),
  };
  open = { close: () => { port1.close(); port2.close(); } };
  return { a: new Link(counting), b: new Link(port2 as unknown as LinkPort), posts };
}

let open: { close(): void } | null = null;
afterEach(() => { open?.close(); open = null; });

describe('Link', () => {
  it('answers a call with the value, cloned, and an SvcError as the same SvcError', async () => {
    const p = pair();
    open = p;
    p.b.handle('add', (x, y) => (x as number) + (y as number));
    p.b.handle('hits', async () => ({ hits: [{ id: 'a', score: 0.5, payload: { tags: ['x'] } }], v: new Float32Array([1, 2]) }));
    p.b.handle('refuse', () => { throw new SvcError('read_only_replica', 'this node is a read replica', { leader: 'http://l:1' }); });
    p.b.handle('bug', () => { throw new TypeError('x is undefined'); });
    expect(await p.a.call('add', 2, 3)).toBe(5);
    const got = await p.a.call('hits') as { hits: unknown[]; v: Float32Array };
    expect(got.hits).toEqual([{ id: 'a', score: 0.5, payload: { tags: ['x'] } }]);
    expect(got.v).toBeInstanceOf(Float32Array);
    const refused = await p.a.call('refuse').catch((e: unknown) => e);
    expect(refused).toBeInstanceOf(SvcError);
    expect(refused).toMatchObject({ code: 'read_only_replica', message: 'this node is a read replica', detail: { leader: 'http://l:1' } });
    // A bug on the other side is an internal error, its message kept out of the answer's text.
    const bug = await p.a.call('bug').catch((e: unknown) => e) as SvcError;
    expect(bug.code).toBe('internal');
    expect(bug.message).toBe('internal error');
    expect(await p.a.call('nothing').catch((e: unknown) => (e as SvcError).code)).toBe('internal');
  });

  it('a value that cannot be cloned fails its call instead of hanging it', async () => {
    const p = pair();
    open = p;
    p.b.handle('fn', () => ({ f: () => 1 }));
    expect(await p.a.call('fn').catch((e: unknown) => (e as SvcError).code)).toBe('internal');
  });

  it('sends the messages of one turn in one postMessage, in order; an argument that cannot be cloned fails only its call', async () => {
    const { a, b, posts } = countingPair();
    const order: number[] = [];
    b.handle('note', (i) => { order.push(i as number); return i; });
    const calls = Array.from({ length: 20 }, (_, i) => a.call('note', i));
    const bad = a.call('note', { f: () => 1 }).catch((e: unknown) => (e as SvcError).code);
    const after = a.call('note', 20);
    expect(await Promise.all(calls)).toEqual(Array.from({ length: 20 }, (_, i) => i));
    expect(await after).toBe(20);
    // The batch could not be cloned whole: it went again one message at a time, the bad one refused.
    expect(await bad).toBe('internal');
    expect(order).toEqual(Array.from({ length: 21 }, (_, i) => i));
    posts.n = 0;
    await Promise.all(Array.from({ length: 20 }, (_, i) => a.call('note', i)));
    expect(posts.n).toBe(1);
  });

  it('a call made in the same turn as a close is refused and never sent', async () => {
    const { a, posts } = countingPair();
    const late = a.call('late');
    a.close('the loop ended');
    await expect(late).rejects.toBeInstanceOf(LinkClosed);
    await new Promise((r) => setImmediate(r));
    expect(posts.n).toBe(0);
  });

  it('streams every item in order, and the producer never runs more than a window ahead of a slow reader', async () => {
    const p = pair();
    open = p;
    let produced = 0;
    p.b.handleStream('count', async function* (_signal, n) {
      for (let i = 0; i < (n as number); i++) {
        produced++;
        yield i;
      }
    });
    const got: number[] = [];
    let maxAhead = 0;
    for await (const v of p.a.stream('count', [500])) {
      got.push(v as number);
      if (got.length % 50 === 0) await new Promise((r) => setTimeout(r, 5));
      maxAhead = Math.max(maxAhead, produced - got.length);
    }
    expect(got).toEqual(Array.from({ length: 500 }, (_, i) => i));
    expect(maxAhead).toBeLessThanOrEqual(65);
  });

  it('a reader that leaves, or aborts, ends the producer through its signal; an error ends the reader', async () => {
    const p = pair();
    open = p;
    const ended: string[] = [];
    p.b.handleStream('forever', async function* (signal) {
      let i = 0;
      try {
        while (!signal.aborted) {
          yield i++;
          await new Promise((r) => setTimeout(r, 1));
        }
      } finally {
        ended.push(signal.aborted ? 'aborted' : 'returned');
      }
    });
    for await (const v of p.a.stream('forever', [])) if ((v as number) >= 3) break;
    const ac = new AbortController();
    const seen: unknown[] = [];
    const reading = (async () => { for await (const v of p.a.stream('forever', [], ac.signal)) seen.push(v); })();
    await new Promise((r) => setTimeout(r, 20));
    ac.abort(new SvcError('unavailable', 'client went away'));
    await expect(reading).rejects.toMatchObject({ code: 'unavailable' });
    await expect.poll(() => ended).toEqual(['aborted', 'aborted']);

    p.b.handleStream('fails', async function* () {
      yield 1;
      throw new SvcError('unavailable', 'retention exceeded', { reason: 'retention_exceeded' });
    });
    const items: unknown[] = [];
    const failed = await (async () => { for await (const v of p.a.stream('fails', [])) items.push(v); })().catch((e: unknown) => e);
    expect(items).toEqual([1]);
    expect(failed).toMatchObject({ code: 'unavailable', detail: { reason: 'retention_exceeded' } });
  });

  it('close fails every call and stream in flight with unavailable', async () => {
    const p = pair();
    open = p;
    p.b.handle('never', () => new Promise(() => undefined));
    p.b.handleStream('idle', async function* () {
      await new Promise(() => undefined);
      yield 'never';
    });
    const call = p.a.call('never');
    const stream = (async () => { for await (const _ of p.a.stream('idle', [])) { /* nothing comes */ } })();
    await new Promise((r) => setTimeout(r, 10));
    p.a.close('the loop ended');
    await expect(call).rejects.toBeInstanceOf(LinkClosed);
    await expect(stream).rejects.toMatchObject({ code: 'unavailable', message: 'the loop ended' });
    await expect(p.a.call('never')).rejects.toMatchObject({ code: 'unavailable' });
  });
});
