import { describe, expect, it } from 'vitest';
import fc from 'fast-check';
import type { Message } from '../raft/types.js';
import { decodeMessages, encodeMessages, encodedMessageBytes, WireError } from './codec.js';
import { encodeFrame, FrameDecoder, FrameType } from './frame.js';
import { authKey, decodeChallenge, decodeHello, encodeChallenge, encodeHello, proof, proofMatches } from './handshake.js';

const id = fc.string({ minLength: 1, maxLength: 12 });
const n = fc.nat({ max: Number.MAX_SAFE_INTEGER });
const entry = fc.record({ index: n, term: n, data: fc.uint8Array({ maxLength: 40 }) });
const base = { from: id, to: id, term: n };

/** Every message variant, with arbitrary fields. */
const arbMessage: fc.Arbitrary<Message> = fc.oneof(
  fc.record({ ...base, type: fc.constant('app' as const), prevIndex: n, prevTerm: n, commit: n, entries: fc.array(entry, { maxLength: 5 }) }),
  fc.record({ ...base, type: fc.constant('appResp' as const), index: n, reject: fc.boolean(), hintIndex: n, hintTerm: n }),
  fc.record({ ...base, type: fc.constantFrom('vote' as const, 'preVote' as const), lastIndex: n, lastTerm: n }),
  fc.record({ ...base, type: fc.constantFrom('voteResp' as const, 'preVoteResp' as const), reject: fc.boolean() }),
  fc.record({ ...base, type: fc.constant('heartbeat' as const), commit: n, readSeq: n, sent: n }),
  fc.record({ ...base, type: fc.constant('heartbeatResp' as const), readSeq: n, sent: n, lastIndex: n }),
  fc.record({ ...base, type: fc.constant('snap' as const), snapshot: fc.record({ meta: fc.record({ index: n, term: n }), data: fc.uint8Array({ maxLength: 100 }) }) }),
  fc.record({ ...base, type: fc.constant('readIndex' as const), ctx: fc.string({ maxLength: 20 }) }),
  fc.record({ ...base, type: fc.constant('readIndexResp' as const), ctx: fc.string({ maxLength: 20 }), index: n }),
);

/** Uint8Array fields compare by content, whatever their concrete class. */
const plain = (v: unknown): unknown => JSON.parse(JSON.stringify(v, (_k, x: unknown) => (x instanceof Uint8Array ? Buffer.from(x).toString('hex') : x)));

describe('raft wire codec', () => {
  it('round-trips every message variant, and predicts its encoded size', () => {
    fc.assert(fc.property(fc.array(arbMessage, { maxLength: 8 }), (msgs) => {
      const bytes = encodeMessages(msgs);
      expect(bytes.length).toBe(5 + msgs.reduce((s, m) => s + encodedMessageBytes(m), 0));
      expect(plain(decodeMessages(bytes))).toEqual(plain(msgs));
    }), { numRuns: 300 });
  });

  it('refuses any damage with a WireError only: truncation, extension, flipped bytes, random bytes', () => {
    fc.assert(fc.property(fc.array(arbMessage, { minLength: 1, maxLength: 4 }), fc.nat(), fc.integer({ min: 0, max: 255 }), (msgs, at, x) => {
      const good = encodeMessages(msgs);
      const cut = good.subarray(0, at % good.length);
      expect(() => decodeMessages(cut)).toThrow(WireError);
      expect(() => decodeMessages(Buffer.concat([good, Buffer.from([x])]))).toThrow(WireError);
      const flipped = Buffer.from(good);
      flipped[at % good.length] ^= 1 + (x % 255);
      try {
        decodeMessages(flipped); // a flip inside data or a number may still decode: that is the frame's business
      } catch (e) {
        expect(e).toBeInstanceOf(WireError);
      }
    }), { numRuns: 300 });
    fc.assert(fc.property(fc.uint8Array({ maxLength: 200 }), (junk) => {
      try {
        decodeMessages(junk);
      } catch (e) {
        expect(e).toBeInstanceOf(WireError);
      }
    }), { numRuns: 1000 });
  });

  it('rejects an unknown version, a u64 past 2^53 and a non-canonical bool', () => {
    const vote = encodeMessages([{ type: 'voteResp', from: 'a', to: 'b', term: 1, reject: true }]);
    const v2 = Buffer.from(vote);
    v2[0] = 2;
    expect(() => decodeMessages(v2)).toThrow(/version 2/);
    const bool = Buffer.from(vote);
    bool[bool.length - 1] = 2;
    expect(() => decodeMessages(bool)).toThrow(/not a bool/);
    const big = Buffer.from(vote);
    big.writeUInt32LE(0xffffffff, 1 + 4 + 1 + 3 + 3 + 4); // the high word of term
    expect(() => decodeMessages(big)).toThrow(/2\^53/);
  });
});

describe('frames', () => {
  it('reassembles frames split at any byte, and refuses an oversize length before buffering it', () => {
    fc.assert(fc.property(fc.array(fc.uint8Array({ maxLength: 300 }), { minLength: 1, maxLength: 6 }), fc.array(fc.nat(), { maxLength: 10 }), (payloads, cuts) => {
      const stream = Buffer.concat(payloads.map((p) => encodeFrame(FrameType.messages, p)));
      const points = [...new Set(cuts.map((c) => c % (stream.length + 1)))].sort((a, b) => a - b);
      const d = new FrameDecoder(1024);
      const got: Buffer[] = [];
      let prev = 0;
      for (const p of [...points, stream.length]) {
        for (const f of d.push(stream.subarray(prev, p))) got.push(f.payload);
        prev = p;
      }
      expect(got.map((b) => b.toString('hex'))).toEqual(payloads.map((p) => Buffer.from(p).toString('hex')));
    }));
    const d = new FrameDecoder(1024);
    const head = Buffer.alloc(4);
    head.writeUInt32LE(5000, 0);
    expect(() => [...d.push(head)]).toThrow(expect.objectContaining({ kind: 'oversize' }));
    expect(() => [...new FrameDecoder(1024).push(Buffer.from([0, 0, 0, 0]))]).toThrow(/empty frame/);
    expect(() => [...new FrameDecoder(1024).push(Buffer.from([1, 0, 0, 0, 99]))]).toThrow(/unknown frame type/);
  });
});

describe('handshake', () => {
  const a = Buffer.alloc(32, 1);
  const b = Buffer.alloc(32, 2);
  it('a proof needs the secret, and binds the role, both ids and both nonces', () => {
    const k = authKey(Buffer.from('s'.repeat(32)));
    const p = proof(k, 'dialer', 'n1', 'n2', a, b);
    expect(proofMatches(p, proof(authKey(Buffer.from('s'.repeat(32))), 'dialer', 'n1', 'n2', a, b))).toBe(true);
    expect(proofMatches(p, proof(authKey(Buffer.from('t'.repeat(32))), 'dialer', 'n1', 'n2', a, b))).toBe(false);
    expect(proofMatches(p, proof(k, 'acceptor', 'n1', 'n2', a, b))).toBe(false);
    expect(proofMatches(p, proof(k, 'dialer', 'n3', 'n2', a, b))).toBe(false);
    expect(proofMatches(p, proof(k, 'dialer', 'n1', 'n2', b, a))).toBe(false);
    expect(proofMatches(p, proof(null, 'dialer', 'n1', 'n2', a, b))).toBe(false);
    expect(proofMatches(p, p.subarray(0, 16))).toBe(false);
  });

  it('hello and challenge round-trip; malformed ones are WireErrors', () => {
    expect(decodeHello(encodeHello({ from: 'n1', to: 'n2', nonce: a }))).toEqual({ from: 'n1', to: 'n2', nonce: a });
    expect(decodeChallenge(encodeChallenge(a, b))).toEqual({ nonce: a, proof: b });
    fc.assert(fc.property(fc.uint8Array({ maxLength: 120 }), (junk) => {
      for (const f of [decodeHello, decodeChallenge]) {
        try {
          f(Buffer.from(junk));
        } catch (e) {
          expect(e).toBeInstanceOf(WireError);
        }
      }
    }), { numRuns: 500 });
  });
});
