import { createHmac, hkdfSync, timingSafeEqual } from 'node:crypto';
import { assert } from '../../base/assert.js';
import { WireError, WIRE_STRING_BYTES_MAX } from './codec.js';

/**
 * Mutual authentication of two members by a shared cluster secret (SVC_RAFT_SECRET), both ways, with
 * fresh nonces (docs in roles/raft/transport.ts). The dialer sends HELLO (its id, the id it calls, nonce
 * A); the acceptor answers CHALLENGE (nonce B, its proof); the dialer checks that proof and sends its
 * own. A proof is HMAC-SHA256 over a role label, both ids and both nonces, keyed by HKDF of the secret:
 * it shows the secret without revealing it, cannot be replayed (the other side's nonce is fresh), nor
 * reflected (the labels differ), nor moved to another pair of members (the ids are in it). Proofs are
 * compared in constant time. Without a secret (mutual TLS authenticates, or insecure mode) the proofs
 * are zero bytes and a side that has a secret refuses them.
 */

export const NONCE_BYTES = 32;
export const PROOF_BYTES = 32;
const HANDSHAKE_VERSION = 1;
const NO_PROOF = Buffer.alloc(PROOF_BYTES);

export type HandshakeRole = 'dialer' | 'acceptor';

/** The HMAC key for proofs; the secret itself is used nowhere else. */
export function authKey(secret: Uint8Array): Buffer {
  assert(secret.length > 0, 'a cluster secret is not empty');
  return Buffer.from(hkdfSync('sha256', secret, 'svc-raft', 'svc-raft/auth/v1', 32));
}

export function proof(key: Buffer | null, role: HandshakeRole, dialer: string, acceptor: string, nonceA: Uint8Array, nonceB: Uint8Array): Buffer {
  if (key === null) return NO_PROOF;
  const h = createHmac('sha256', key);
  for (const part of [`svc-raft/${role}/v1`, dialer, acceptor]) {
    const b = Buffer.from(part, 'utf8');
    const len = Buffer.alloc(2);
    len.writeUInt16LE(b.length, 0);
    h.update(len).update(b);
  }
  return h.update(nonceA).update(nonceB).digest();
}

/** Constant time; with no key (no secret here) only the zero proof passes. */
export function proofMatches(expected: Buffer, got: Uint8Array): boolean {
  return got.length === PROOF_BYTES && timingSafeEqual(expected, got);
}

export interface Hello {
  readonly from: string;
  readonly to: string;
  readonly nonce: Uint8Array;
}

const str = (s: string): Buffer => {
  const b = Buffer.from(s, 'utf8');
  assert(b.length > 0 && b.length <= WIRE_STRING_BYTES_MAX, 'a member id is 1 to 1024 bytes');
  const out = Buffer.allocUnsafe(2 + b.length);
  out.writeUInt16LE(b.length, 0);
  b.copy(out, 2);
  return out;
};

export function encodeHello(h: Hello): Buffer {
  return Buffer.concat([Buffer.from([HANDSHAKE_VERSION]), str(h.from), str(h.to), h.nonce]);
}

export function decodeHello(p: Buffer): Hello {
  if (p.length < 1 || p[0] !== HANDSHAKE_VERSION) throw new WireError(`unknown handshake version ${p[0]}`);
  let at = 1;
  const readStr = (what: string): string => {
    if (at + 2 > p.length) throw new WireError(`${what} runs past the end of the hello`);
    const n = p.readUInt16LE(at);
    if (n === 0 || n > WIRE_STRING_BYTES_MAX || at + 2 + n > p.length) throw new WireError(`${what} has a bad length ${n}`);
    const s = p.toString('utf8', at + 2, at + 2 + n);
    at += 2 + n;
    return s;
  };
  const from = readStr('from');
  const to = readStr('to');
  if (p.length - at !== NONCE_BYTES) throw new WireError('a hello ends with a 32-byte nonce');
  return { from, to, nonce: p.subarray(at) };
}

export function encodeChallenge(nonce: Uint8Array, acceptorProof: Uint8Array): Buffer {
  return Buffer.concat([Buffer.from([HANDSHAKE_VERSION]), nonce, acceptorProof]);
}

export function decodeChallenge(p: Buffer): { nonce: Buffer; proof: Buffer } {
  if (p.length !== 1 + NONCE_BYTES + PROOF_BYTES || p[0] !== HANDSHAKE_VERSION) throw new WireError('a malformed challenge');
  return { nonce: p.subarray(1, 1 + NONCE_BYTES), proof: p.subarray(1 + NONCE_BYTES) };
}

export function decodeProof(p: Buffer): Buffer {
  if (p.length !== PROOF_BYTES) throw new WireError('a malformed proof');
  return p;
}
