import { randomBytes } from 'node:crypto';
import * as net from 'node:net';
import { afterEach, describe, expect, it } from 'vitest';
import fc from 'fast-check';
import type { Message } from '../../core/cluster/raft/index.js';
import { decodeMessages, encodeMessages } from '../../core/cluster/raft-wire/codec.js';
import { encodeFrame, FrameDecoder, FrameType } from '../../core/cluster/raft-wire/frame.js';
import {
  authKey, decodeChallenge, decodeHello, decodeProof, encodeChallenge, encodeHello, nonceLinkVersion, nonceVersions, proof, proofMatches, versionedNonce, type NonceVersions,
} from '../../core/cluster/raft-wire/handshake.js';
import { freePort } from '../testing/free-port.js';
import { WriteForwarder } from '../../core/cluster/consensus/forward.js';
import { LINK_VERSION, RaftTransport, type RaftPeer, type RaftTransportOptions } from './transport.js';

const SECRET = Buffer.from('correct horse battery staple, 32+ chars');
const open: RaftTransport[] = [];
const servers: net.Server[] = [];

afterEach(async () => {
  await Promise.all(open.splice(0).map((t) => t.close()));
  for (const s of servers.splice(0)) s.close();
});

interface Member {
  t: RaftTransport;
  got: Message[];
}

/** Members `ids`, started; `ghosts` are listed as peers but never run (the raw test clients pose as them). */
async function group(ids: string[], over: Partial<RaftTransportOptions> = {}, secrets: (Buffer | null)[] = [], ghosts: string[] = []): Promise<{ members: Member[]; peers: RaftPeer[] }> {
  const peers = await Promise.all([...ids, ...ghosts].map(async (id) => ({ id, host: '127.0.0.1', port: await freePort() })));
  const members = ids.map((id, k) => {
    const got: Message[] = [];
    const t = new RaftTransport({
      id, listen: { host: '127.0.0.1', port: peers[k].port }, peers, secret: secrets[k] === undefined ? SECRET : secrets[k], tls: null, insecure: false,
      onMessage: (m) => got.push(m), limits: { backoffBaseMs: 10, backoffMaxMs: 100, handshakeTimeoutMs: 1000 }, ...over,
    });
    open.push(t);
    return { t, got };
  });
  await Promise.all(members.map((m) => m.t.start()));
  return { members, peers };
}

async function until(what: string, cond: () => boolean, ms = 5000): Promise<void> {
  const end = Date.now() + ms;
  while (!cond()) {
    if (Date.now() > end) throw new Error(`timed out waiting: ${what}`);
    await new Promise((r) => setTimeout(r, 5));
  }
}

const hb = (from: string, to: string, term: number): Message => ({ type: 'heartbeat', from, to, term, commit: term, readSeq: 0, sent: 0 });
const app = (from: string, to: string, index: number, bytes: number): Message => ({
  type: 'app', from, to, term: 1, prevIndex: index - 1, prevTerm: 1, commit: 0, entries: [{ index, term: 1, data: new Uint8Array(bytes).fill(index % 251) }],
});

/** Sends until `cond` holds: the first messages may go before the links are up, and Raft would resend too. */
async function sendUntil(t: RaftTransport, msgs: () => Message[], cond: () => boolean): Promise<void> {
  const end = Date.now() + 5000;
  while (!cond()) {
    if (Date.now() > end) throw new Error('timed out sending');
    t.send(msgs());
    await new Promise((r) => setTimeout(r, 20));
  }
}

/** A raw client that completes the dialer's side of the handshake (or not), for malformed-input tests. */
async function rawDialer(port: number, from: string, to: string, secret: Buffer | null): Promise<net.Socket> {
  const s = net.connect({ host: '127.0.0.1', port });
  await new Promise<void>((r) => s.once('connect', () => r()));
  const nonceA = randomBytes(32);
  s.write(encodeFrame(FrameType.hello, encodeHello({ from, to, nonce: nonceA })));
  const d = new FrameDecoder();
  const challenge = await new Promise<Buffer>((resolve, reject) => {
    s.on('data', (c: Buffer) => { for (const f of d.push(c)) resolve(f.payload); });
    s.once('close', () => reject(new Error('closed during the handshake')));
  });
  const c = decodeChallenge(challenge);
  s.write(encodeFrame(FrameType.proof, proof(secret === null ? null : authKey(secret), 'dialer', from, to, nonceA, c.nonce)));
  return s;
}

const closed = (s: net.Socket): Promise<void> => new Promise((r) => (s.destroyed ? r() : s.once('close', () => r())));

describe('RaftTransport on 127.0.0.1', () => {
  it('three members exchange every kind of message, in order per pair, batched into few frames', async () => {
    const { members } = await group(['n1', 'n2', 'n3']);
    const ids = ['n1', 'n2', 'n3'];
    await sendUntil(members[0].t, () => [hb('n1', 'n2', 0), hb('n1', 'n3', 0)], () => members[1].got.length > 0 && members[2].got.length > 0);
    for (const m of members) m.got.length = 0;
    const kinds = (from: string, to: string): Message[] => [
      app(from, to, 7, 100),
      { type: 'appResp', from, to, term: 2, index: 7, reject: true, hintIndex: 3, hintTerm: 1 },
      { type: 'preVote', from, to, term: 3, lastIndex: 7, lastTerm: 2 },
      { type: 'voteResp', from, to, term: 3, reject: false },
      { type: 'heartbeatResp', from, to, term: 3, readSeq: 9, sent: 7, lastIndex: 7 },
      { type: 'snap', from, to, term: 3, snapshot: { meta: { index: 5, term: 2 }, data: new Uint8Array([1, 2, 3]) } },
      { type: 'readIndex', from, to, term: 3, ctx: 'r1' },
      { type: 'readIndexResp', from, to, term: 3, ctx: 'r1', index: 7 },
    ];
    for (const [k, m] of members.entries()) {
      const out: Message[] = [];
      for (const to of ids) if (to !== ids[k]) out.push(...kinds(ids[k], to), ...Array.from({ length: 200 }, (_, i) => hb(ids[k], to, i + 1)));
      m.t.send(out);
    }
    await until('all delivered', () => members.every((m) => m.got.length === 2 * 208));
    for (const [k, m] of members.entries()) {
      for (const from of ids.filter((x) => x !== ids[k])) {
        const mine = m.got.filter((x) => x.from === from);
        expect(JSON.stringify(mine)).toBe(JSON.stringify(decodeMessages(encodeMessages([...kinds(from, ids[k]), ...Array.from({ length: 200 }, (_, i) => hb(from, ids[k], i + 1))]))));
      }
    }
    // Pipelined and batched: 416 messages from each member went out in far fewer frames.
    for (const m of members) expect(m.t.stats.framesSent).toBeLessThan(100);
  });

  it('a member with a different secret is refused both ways and nothing it sends is delivered', async () => {
    const { members } = await group(['n1', 'n2'], {}, [SECRET, Buffer.from('a different secret of 32+ characters!!')]);
    await until('auth failures on both sides', () => members[0].t.stats.rejected.auth > 0 && members[1].t.stats.rejected.auth > 0);
    members[0].t.send([hb('n1', 'n2', 1)]);
    members[1].t.send([hb('n2', 'n1', 1)]);
    await new Promise((r) => setTimeout(r, 200));
    expect(members[0].got).toEqual([]);
    expect(members[1].got).toEqual([]);
    expect(members[0].t.stats.handshakes + members[1].t.stats.handshakes).toBe(0);
  });

  it('closes and counts malformed and oversize frames (fuzzed), before and after the handshake, and keeps serving', async () => {
    const { members, peers } = await group(['n1', 'n2'], { limits: { frameBytesMax: 64 << 10, backoffBaseMs: 10, backoffMaxMs: 100 } }, [], ['n3']);
    const port = peers[1].port;
    const n2 = members[1];
    await fc.assert(fc.asyncProperty(fc.uint8Array({ minLength: 1, maxLength: 600 }), fc.boolean(), async (junk, afterHandshake) => {
      const s = afterHandshake ? await rawDialer(port, 'n3', 'n2', SECRET) : net.connect({ host: '127.0.0.1', port });
      s.on('error', () => undefined);
      // A messages frame of junk, or raw junk on the stream.
      s.write(afterHandshake ? encodeFrame(FrameType.messages, junk) : junk);
      s.end();
      await closed(s);
    }), { numRuns: 60 });
    // A hello longer than any handshake, an oversize length after it, and a message claiming another
    // sender: each closes the connection.
    const oversizeBefore = n2.t.stats.rejected.oversize;
    const early = net.connect({ host: '127.0.0.1', port });
    early.on('error', () => undefined);
    const hello = Buffer.alloc(5);
    hello.writeUInt32LE(10_000, 0);
    hello[4] = FrameType.hello;
    early.write(Buffer.concat([hello, Buffer.alloc(6000)])); // within frameBytesMax, past the handshake bound
    await closed(early);
    expect(n2.t.stats.rejected.oversize).toBe(oversizeBefore + 1);
    const big = await rawDialer(port, 'n3', 'n2', SECRET);
    const head = Buffer.alloc(5);
    head.writeUInt32LE(1 << 20, 0);
    big.write(head);
    await closed(big);
    const spoof = await rawDialer(port, 'n3', 'n2', SECRET);
    spoof.write(encodeFrame(FrameType.messages, encodeMessages([hb('n1', 'n2', 1)])));
    await closed(spoof);
    const r = n2.t.stats.rejected;
    expect(r.oversize).toBe(oversizeBefore + 2);
    expect(r.misaddressed).toBe(1);
    expect(r.malformed).toBeGreaterThan(10);
    // Still serving its real peer.
    n2.got.length = 0;
    await sendUntil(members[0].t, () => [hb('n1', 'n2', 5)], () => n2.got.some((m) => m.term === 5));
  });

  it('a peer\'s newer connection replaces its older one (no half-open sockets pile up)', async () => {
    const { peers } = await group(['n1', 'n2'], {}, [], ['n3']);
    const first = await rawDialer(peers[1].port, 'n3', 'n2', SECRET);
    first.on('error', () => undefined);
    const second = await rawDialer(peers[1].port, 'n3', 'n2', SECRET);
    await closed(first);
    expect(second.destroyed).toBe(false);
    second.destroy();
  });

  it('a peer that stops reading: the queue stays bounded, the excess is dropped and counted', async () => {
    const port = await freePort();
    // A fake n2 that completes the handshake, then never reads again.
    const stalled = net.createServer((s) => {
      const d = new FrameDecoder();
      s.on('data', (c: Buffer) => {
        for (const f of d.push(c)) {
          if (f.type !== FrameType.hello) continue;
          const h = decodeHello(f.payload);
          const nonce = randomBytes(32);
          s.write(encodeFrame(FrameType.challenge, encodeChallenge(nonce, proof(authKey(SECRET), 'acceptor', h.from, h.to, h.nonce, nonce))));
          setTimeout(() => s.pause(), 20);
        }
      });
    });
    servers.push(stalled);
    await new Promise<void>((r) => stalled.listen(port, '127.0.0.1', () => r()));
    const t = new RaftTransport({
      id: 'n1', listen: { host: '127.0.0.1', port: await freePort() }, peers: [{ id: 'n1', host: '127.0.0.1', port: 1 }, { id: 'n2', host: '127.0.0.1', port }],
      secret: SECRET, tls: null, insecure: false, onMessage: () => undefined,
      limits: { queueMessagesMax: 64, queueBytesMax: 8 << 20, batchBytesMax: 256 << 10 },
    });
    open.push(t);
    await t.start();
    await until('handshake', () => t.stats.handshakes === 1);
    for (let round = 0; round < 60; round++) {
      t.send(Array.from({ length: 20 }, (_, i) => app('n1', 'n2', round * 20 + i + 1, 64 << 10)));
      await new Promise((r) => setImmediate(r));
    }
    expect(t.stats.dropped.queueFull).toBeGreaterThan(500);
    // What went to the socket is bounded by the kernel's buffers plus one batch, not by what was offered (75 MiB).
    expect(t.stats.bytesSent).toBeLessThan(40 << 20);
  });

  it('reconnects with backoff after the peer restarts, and delivers again', async () => {
    const { members, peers } = await group(['n1', 'n2']);
    await sendUntil(members[0].t, () => [hb('n1', 'n2', 1)], () => members[1].got.length > 0);
    await members[1].t.close();
    await sendUntil(members[0].t, () => [hb('n1', 'n2', 2)], () => members[0].t.stats.dropped.notConnected > 0);
    const got: Message[] = [];
    const again = new RaftTransport({
      id: 'n2', listen: { host: '127.0.0.1', port: peers[1].port }, peers, secret: SECRET, tls: null, insecure: false,
      onMessage: (m) => got.push(m),
    });
    open.push(again);
    await again.start();
    await sendUntil(members[0].t, () => [hb('n1', 'n2', 3)], () => got.some((m) => m.term === 3));
    expect(members[0].t.stats.reconnects).toBeGreaterThan(0);
  });

  it('tells its host when a peer\'s address refuses connections (its process is gone), never when a peer is only silent', async () => {
    const refused: string[] = [];
    const { members, peers } = await group(['n1', 'n2'], { onPeerRefused: (p) => refused.push(p) }, [], ['n3']);
    // n3 listens but never answers a hello: a hung process, or a cut link. Not a refusal.
    const silent = net.createServer(() => undefined);
    servers.push(silent);
    await new Promise<void>((r) => silent.listen(peers[2].port, '127.0.0.1', () => r()));
    // Dials to n3 before it listened were refused (as for a member not started yet); from now on none is.
    await new Promise((r) => setTimeout(r, 300));
    refused.length = 0;
    await sendUntil(members[0].t, () => [hb('n1', 'n2', 1), hb('n1', 'n3', 1)], () => members[1].got.length > 0);
    await new Promise((r) => setTimeout(r, 1500)); // past a handshake timeout: n1 dials n3 again
    expect(refused).toEqual([]);
    await members[1].t.close();
    await until('a dial to n2 refused', () => refused.includes('n2'));
    expect(refused.every((p) => p === 'n2')).toBe(true);
    expect(refused.length).toBeGreaterThan(0);
  });

  describe('whenConnected (a forwarded write waits for the link to its leader)', () => {
    /** n1 and n2 on loopback by name, each dial counted; a back-off of about a minute, so only a hurried dial connects in a test. */
    async function slowBackoff() {
      const dials: string[] = [];
      const lookup = ((host: string, options: { all?: boolean }, cb: (...a: unknown[]) => void) => {
        dials.push(host);
        if (options.all === true) cb(null, [{ address: '127.0.0.1', family: 4 }]);
        else cb(null, '127.0.0.1', 4);
      }) as unknown as net.LookupFunction;
      const peers = await Promise.all(['n1', 'n2'].map(async (id) => ({ id, host: `${id}.test`, port: await freePort() })));
      /** What n1 does with a forward frame and a message (set by a test). */
      const on1: { forward?: (p: Buffer, from: string) => void; message?: (m: Message) => void } = {};
      const make = (k: number, onForward?: (p: Buffer, from: string) => void, onMessage?: (m: Message) => void): RaftTransport => {
        const t = new RaftTransport({
          id: peers[k].id, listen: { host: '127.0.0.1', port: peers[k].port }, peers, secret: SECRET, tls: null, insecure: false, lookup,
          onMessage: onMessage ?? (() => undefined), onForward, random: () => 0.99,
          limits: { backoffBaseMs: 60_000, backoffMaxMs: 60_000, handshakeTimeoutMs: 1000 },
        });
        open.push(t);
        return t;
      };
      const n1 = make(0, (p, from) => on1.forward?.(p, from), (m) => on1.message?.(m));
      await n1.start();
      // n2 does not listen yet: n1's first dial fails and its link waits out a back-off (messages are dropped).
      await sendUntil(n1, () => [hb('n1', 'n2', 1)], () => n1.stats.dropped.notConnected > 0);
      return { n1, on1, make, dialsTo2: () => dials.filter((h) => h === 'n2.test').length };
    }

    it('a write forwarded while the link to the leader is in its back-off goes once the leader listens, and is answered', async () => {
      const { n1, on1, make, dialsTo2 } = await slowBackoff();
      // The two sides wired as member-host.ts wires them: n1 a follower, n2 its leader.
      const follower = new WriteForwarder({
        send: (to, p) => n1.sendForward(to, p), whenConnected: (to, ready) => n1.whenConnected(to, ready),
        handle: () => Promise.reject(new Error('a follower runs no forwarded write')), appliedIndex: () => 0,
      });
      const n2 = make(1, (p, from) => leader.receive(p, from));
      const leader = new WriteForwarder({ send: (to, p) => n2.sendForward(to, p), handle: async (w) => ({ ran: w.op }), appliedIndex: () => 3 });
      const heard: Message[] = [];
      on1.forward = (p, from) => follower.receive(p, from);
      on1.message = (m) => heard.push(m);
      // n1 hears its leader on the leader's own connection (heartbeats), while its own link waits out the back-off.
      await n2.start();
      await sendUntil(n2, () => [hb('n2', 'n1', 1)], () => heard.length > 0);
      expect(n1.sendForward('n2', Buffer.from('{}'))).toBe(false);
      expect(await follower.request('n2', { op: 'createCollection', args: [{ name: 'c' }] }, AbortSignal.timeout(3000))).toEqual({ value: { ran: 'createCollection' }, index: 3 });
      expect(follower.stats.waitedForLink).toBe(1);
      expect(dialsTo2()).toBe(2);
    });

    it('cuts a back-off short once: a waiter in the next back-off waits for it, and close drops the waiters', async () => {
      const { n1, dialsTo2 } = await slowBackoff();
      let called = 0;
      const dropped = n1.stats.dropped.notConnected;
      n1.whenConnected('n2', () => called++);
      await until('the hurried dial', () => dialsTo2() === 2);
      // It fails too (n2 is still down), and the link is in its next back-off.
      await sendUntil(n1, () => [hb('n1', 'n2', 2)], () => n1.stats.dropped.notConnected > dropped);
      const cancel = n1.whenConnected('n2', () => called++);
      await new Promise((r) => setTimeout(r, 200));
      expect(dialsTo2()).toBe(2);
      cancel();
      await n1.close();
      expect(called).toBe(0);
      // After close nothing waits, and a wait asked for then is never called.
      n1.whenConnected('n2', () => called++);
      await new Promise((r) => setTimeout(r, 20));
      expect(called).toBe(0);
    });
  });

  it('refuses a non-loopback address without TLS, and peers that could not authenticate each other, unless insecure', () => {
    const o = { id: 'n1', peers: [], secret: SECRET, tls: null, insecure: false, onMessage: () => undefined };
    expect(() => new RaftTransport({ ...o, listen: { host: '0.0.0.0', port: 7000 } })).toThrow(/not loopback and has no TLS/);
    expect(() => new RaftTransport({ ...o, listen: { host: '0.0.0.0', port: 7000 }, insecure: true })).not.toThrow();
    expect(() => new RaftTransport({ ...o, listen: { host: '127.0.0.1', port: 7000 }, secret: null })).toThrow(/SVC_RAFT_SECRET/);
  });
});

describe('RaftTransport: versions in the handshake', () => {
  /** Members a (versions given) and b (versions given; null stands in for a build before versions). */
  async function pair(va: NonceVersions | null, vb: NonceVersions | null): Promise<{ heard: Map<string, (NonceVersions | null)[]>; members: Member[] }> {
    const heard = new Map<string, (NonceVersions | null)[]>();
    const peers = await Promise.all(['a', 'b'].map(async (id) => ({ id, host: '127.0.0.1', port: await freePort() })));
    const members = [va, vb].map((versions, k) => {
      const got: Message[] = [];
      const id = peers[k].id;
      const t = new RaftTransport({
        id, listen: { host: '127.0.0.1', port: peers[k].port }, peers, secret: SECRET, tls: null, insecure: false, versions,
        onMessage: (m) => got.push(m), limits: { backoffBaseMs: 10, backoffMaxMs: 100, handshakeTimeoutMs: 1000 },
        onPeerVersions: (peer, v) => heard.set(`${id}<-${peer}`, [...(heard.get(`${id}<-${peer}`) ?? []), v]),
      });
      open.push(t);
      return { t, got };
    });
    await Promise.all(members.map((m) => m.t.start()));
    return { heard, members };
  }

  it('each member learns what its peer reads, from both directions, before a message goes', async () => {
    const { heard, members: [a, b] } = await pair({ command: 3, stream: 1 }, { command: 2, stream: 7 });
    await sendUntil(a.t, () => [hb('a', 'b', 1)], () => b.got.length > 0);
    await sendUntil(b.t, () => [hb('b', 'a', 1)], () => a.got.length > 0);
    // Each side hears the other twice: on the connection it dialled (the challenge) and on the one it accepted (the hello).
    expect(heard.get('a<-b')).toEqual([{ command: 2, stream: 7 }, { command: 2, stream: 7 }]);
    expect(heard.get('b<-a')).toEqual([{ command: 3, stream: 1 }, { command: 3, stream: 1 }]);
  });

  it('a peer of a build that sends no versions still connects both ways, and is heard as sending none', async () => {
    const { heard, members: [a, b] } = await pair({ command: 3, stream: 1 }, null);
    await sendUntil(a.t, () => [hb('a', 'b', 1)], () => b.got.length > 0);
    await sendUntil(b.t, () => [hb('b', 'a', 1)], () => a.got.length > 0);
    expect(heard.get('a<-b')).toEqual([null, null]);
    expect(a.t.stats.rejected).toMatchObject({ malformed: 0, auth: 0 });
    expect(b.t.stats.rejected).toMatchObject({ malformed: 0, auth: 0 });
  });

  it('an acceptor with the older build\'s strict decoders takes this build\'s hello and answers it', async () => {
    // The handshake's decoders are unchanged from the builds before versions: a hello must end in exactly
    // a 32-byte nonce, so the versions ride inside it and such a build reads them as random bytes.
    const port = await freePort();
    const key = authKey(SECRET);
    let proved = false;
    const server = net.createServer((s) => {
      const d = new FrameDecoder();
      let hello: ReturnType<typeof decodeHello> | null = null;
      const nonceB = randomBytes(32);
      s.on('data', (c: Buffer) => {
        for (const f of d.push(c)) {
          if (hello === null) {
            hello = decodeHello(f.payload);
            s.write(encodeFrame(FrameType.challenge, encodeChallenge(nonceB, proof(key, 'acceptor', hello.from, hello.to, hello.nonce, nonceB))));
          } else {
            proved = proofMatches(proof(key, 'dialer', hello.from, hello.to, hello.nonce, nonceB), decodeProof(f.payload));
            expect(nonceVersions(hello.nonce)).toEqual({ command: 3, stream: 1 });
          }
        }
      });
      s.on('error', () => undefined);
    });
    servers.push(server);
    await new Promise<void>((r) => server.listen(port, '127.0.0.1', () => r()));
    const heard: (NonceVersions | null)[] = [];
    const t = new RaftTransport({
      id: 'a', listen: { host: '127.0.0.1', port: await freePort() }, peers: [{ id: 'a', host: '127.0.0.1', port: 0 }, { id: 'old', host: '127.0.0.1', port }],
      secret: SECRET, tls: null, insecure: false, versions: { command: 3, stream: 1 }, onMessage: () => undefined,
      onPeerVersions: (_p, v) => heard.push(v), limits: { backoffBaseMs: 10, backoffMaxMs: 100, handshakeTimeoutMs: 1000 },
    });
    open.push(t);
    await t.start();
    await until('the handshake with the older acceptor', () => proved && t.stats.handshakes === 1);
    expect(heard).toEqual([null]);
  });
});

describe('RaftTransport: a connection that hangs', () => {
  const V = { command: 3, stream: 2 };
  const FAST = { backoffBaseMs: 10, backoffMaxMs: 100, handshakeTimeoutMs: 1000, pingIntervalMs: 50, linkDeadMs: 500 };
  const hung: net.Socket[] = [];
  afterEach(() => {
    for (const x of hung.splice(0)) x.destroy();
  });

  /**
   * A TCP relay to `target`: `hang()` makes every connection through it so far forward nothing either
   * way and close nothing, as a partition or a peer gone from its address (no FIN, no RST) leaves them;
   * connections made after it work.
   */
  async function relay(target: number, bytesPerS = 0): Promise<{ port: number; hang: () => void }> {
    const pairs: [net.Socket, net.Socket][] = [];
    const server = net.createServer((c) => {
      const u = net.connect({ host: '127.0.0.1', port: target });
      for (const x of [c, u]) x.on('error', () => undefined);
      if (bytesPerS === 0) c.pipe(u);
      else {
        // Dialler to peer at bytesPerS: each chunk passed on after its share of a second, reading paused meanwhile.
        c.on('data', (chunk: Buffer) => {
          c.pause();
          setTimeout(() => {
            if (!u.destroyed) u.write(chunk);
            c.resume();
          }, (1000 * chunk.length) / bytesPerS);
        });
      }
      u.pipe(c);
      c.on('close', () => u.destroy());
      u.on('close', () => c.destroy());
      pairs.push([c, u]);
    });
    servers.push(server);
    await new Promise<void>((r) => server.listen(0, '127.0.0.1', () => r()));
    return {
      port: (server.address() as net.AddressInfo).port,
      hang: () => {
        for (const [c, u] of pairs.splice(0)) {
          c.unpipe(u);
          u.unpipe(c);
          c.pause();
          u.pause();
          hung.push(c, u);
        }
      },
    };
  }

  /** n1 dials n2 through a relay (at `bytesPerS`, 0: as fast as it goes); n2 dials n1 directly. */
  async function viaRelay(bytesPerS = 0, onSnapshotFrame?: RaftTransportOptions['onSnapshotFrame']): Promise<{ n1: Member; n2: Member; relay: { hang: () => void }; lost: string[] }> {
    const versions = V;
    const [p1, p2] = [await freePort(), await freePort()];
    const r = await relay(p2, bytesPerS);
    const lost: string[] = [];
    const make = (id: string, port: number, peers: RaftPeer[], onPeerLost?: (p: string) => void, onSnap?: RaftTransportOptions['onSnapshotFrame']): Member => {
      const got: Message[] = [];
      const t = new RaftTransport({
        id, listen: { host: '127.0.0.1', port }, peers, secret: SECRET, tls: null, insecure: false, versions, onMessage: (m) => got.push(m), limits: FAST,
        ...(onPeerLost === undefined ? {} : { onPeerLost }), ...(onSnap === undefined ? {} : { onSnapshotFrame: onSnap }),
      });
      open.push(t);
      return { t, got };
    };
    const n1 = make('n1', p1, [{ id: 'n1', host: '127.0.0.1', port: p1 }, { id: 'n2', host: '127.0.0.1', port: r.port }], (p) => lost.push(p));
    const n2 = make('n2', p2, [{ id: 'n1', host: '127.0.0.1', port: p1 }, { id: 'n2', host: '127.0.0.1', port: p2 }], undefined, onSnapshotFrame);
    await Promise.all([n1.t.start(), n2.t.start()]);
    await sendUntil(n1.t, () => [hb('n1', 'n2', 1)], () => n2.got.length > 0);
    return { n1, n2, relay: r, lost };
  }

  it('is closed once it answers no ping for linkDeadMs, dialled again, and the peer gets what is sent after', async () => {
    const { n1, n2, relay: r, lost } = await viaRelay();
    r.hang();
    const t0 = performance.now();
    // Without pings this connection would hang on (TCP retransmits for about 15 minutes): term 2 would never arrive.
    await sendUntil(n1.t, () => [hb('n1', 'n2', 2)], () => n2.got.some((m) => m.term === 2));
    expect(performance.now() - t0).toBeGreaterThanOrEqual(FAST.linkDeadMs - 50);
    expect(n1.t.stats.deadLinks).toBe(1);
    expect(lost).toEqual(['n2']);
    expect(n1.t.stats.handshakes).toBe(2);
  });

  it('a slow link draining a backlog for many times linkDeadMs stays up: the peer says bytes arrive, not that a ping came', async () => {
    const got: number[] = [];
    // 4 MiB at 1.5 MB/s: close to 3 s of backlog ahead of every ping, six times the bound.
    const { n1, lost } = await viaRelay(1_500_000, (_kind, payload) => got.push(payload.length));
    const frames = 4;
    for (let i = 0; i < frames; i++) expect(n1.t.sendSnapshotFrame('n2', 'chunk', new Uint8Array(1 << 20).fill(i))).toBe(true);
    await until('every chunk across the slow link', () => got.length === frames, 20_000).catch((e) => { throw new Error(`${String(e)}: got ${got.length}, dead ${n1.t.stats.deadLinks}, lost ${lost.join()}, rejected ${JSON.stringify(n1.t.stats.rejected)}`); });
    expect(got).toEqual(Array(frames).fill(1 << 20));
    expect(n1.t.stats.deadLinks).toBe(0);
    expect(lost).toEqual([]);
    expect(n1.t.stats.handshakes).toBe(1);
  }, 30_000);

  it('a stall of this member\'s own event loop is not taken for a hung connection', async () => {
    const { n1, n2, lost } = await viaRelay();
    // Blocks this process (both members) for three times the bound: when it ends, timers run before the
    // sockets are read, so the pongs that wait are not seen yet.
    const end = performance.now() + 3 * FAST.linkDeadMs;
    while (performance.now() < end) { /* a stalled loop */ }
    await new Promise((r) => setTimeout(r, 4 * FAST.pingIntervalMs));
    await sendUntil(n1.t, () => [hb('n1', 'n2', 5)], () => n2.got.some((m) => m.term === 5));
    expect(n1.t.stats.deadLinks).toBe(0);
    expect(lost).toEqual([]);
  });

  it('an idle connection whose peer answers its pings stays up, however long', async () => {
    const { n1, n2 } = await viaRelay();
    await new Promise((r) => setTimeout(r, 6 * FAST.linkDeadMs));
    expect(n1.t.stats.deadLinks + n2.t.stats.deadLinks).toBe(0);
    expect(n1.t.stats.handshakes).toBe(1);
    expect(n2.t.stats.handshakes).toBe(1);
  });

  it('a peer that does not say it answers pings (an older build) is sent none, and its connection is never closed for silence', async () => {
    // Stands in for the build before pings: it advertises versions without the link mark, and closes a
    // connection on a frame type it does not know.
    const port = await freePort();
    const key = authKey(SECRET);
    const types: number[] = [];
    let connectionClosed = false;
    const server = net.createServer((s) => {
      const d = new FrameDecoder();
      let hello: ReturnType<typeof decodeHello> | null = null;
      let proved = false;
      const nonceB = versionedNonce(V);
      s.on('data', (c: Buffer) => {
        for (const f of d.push(c)) {
          if (hello === null) {
            hello = decodeHello(f.payload);
            s.write(encodeFrame(FrameType.challenge, encodeChallenge(nonceB, proof(key, 'acceptor', hello.from, hello.to, hello.nonce, nonceB))));
          } else if (!proved) {
            proved = proofMatches(proof(key, 'dialer', hello.from, hello.to, hello.nonce, nonceB), decodeProof(f.payload));
          } else {
            types.push(f.type);
          }
        }
      });
      s.on('close', () => { connectionClosed = true; });
      s.on('error', () => undefined);
    });
    servers.push(server);
    await new Promise<void>((r) => server.listen(port, '127.0.0.1', () => r()));
    const t = new RaftTransport({
      id: 'a', listen: { host: '127.0.0.1', port: await freePort() }, peers: [{ id: 'a', host: '127.0.0.1', port: 0 }, { id: 'old', host: '127.0.0.1', port }],
      secret: SECRET, tls: null, insecure: false, versions: V, onMessage: () => undefined, limits: FAST,
    });
    open.push(t);
    await t.start();
    await until('the handshake with the older acceptor', () => t.stats.handshakes === 1);
    const end = Date.now() + 4 * FAST.linkDeadMs;
    while (Date.now() < end) {
      t.send([hb('a', 'old', 1)]);
      await new Promise((r) => setTimeout(r, 20));
    }
    expect(types.length).toBeGreaterThan(0);
    expect(new Set(types)).toEqual(new Set([FrameType.messages]));
    expect(t.stats.deadLinks).toBe(0);
    expect(t.stats.handshakes).toBe(1);
    expect(connectionClosed).toBe(false);
  });

  it('the link version rides in the nonce after the versions, and a nonce without its mark reads as 0', () => {
    const withLink = versionedNonce(V, LINK_VERSION);
    expect(nonceVersions(withLink)).toEqual(V);
    expect(nonceLinkVersion(withLink)).toBe(1);
    // The bytes an older build reads are where they were.
    expect(withLink.subarray(0, 10)).toEqual(versionedNonce(V).subarray(0, 10));
    expect(nonceLinkVersion(versionedNonce(V))).toBe(0);
    expect(nonceLinkVersion(randomBytes(32))).toBe(0);
    expect(nonceLinkVersion(versionedNonce(null, LINK_VERSION))).toBe(0);
    // Fresh every time.
    expect(versionedNonce(V, LINK_VERSION).equals(versionedNonce(V, LINK_VERSION))).toBe(false);
  });
});
