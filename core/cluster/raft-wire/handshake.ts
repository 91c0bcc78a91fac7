import { createHmac, hkdfSync, randomBytes, timingSafeEqual } from 'node:crypto';
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
 *
 * Versions (docs/consensus.md, Version skew): each side's nonce also says the highest command and
 * snapshot-stream versions its build reads, as `'svc-ver1' | command u8 | stream u8 | 22 random bytes`.
 * They ride in the nonce because no other part of the handshake has room an older build would ignore:
 * decodeHello wants exactly a 32-byte nonce after the ids, decodeChallenge and decodeProof exact lengths,
 * and an unknown frame or message type closes the connection. An older build treats the nonce as the
 * random bytes it always was (it only hashes it into the proofs), so it connects as before; this build
 * reads a nonce without the mark (an older build's, all random: the mark's 64 bits match by chance once
 * in 2^64) as "no versions". Both nonces are in both proofs, so with a secret a relay cannot change what
 * a member advertises without failing the handshake.
 *
 * A nonce with versions may also say the transport's link version (the frames a connection carries
 * besides messages: 1 pings, and pongs when a dialer's bytes arrive: roles/raft/transport.ts), as a
 * second mark after the first:
 * `'svc-ver1' | command u8 | stream u8 | 'svc-lnk1' | link u8 | 13 random bytes`. A build before it
 * (the first mark alone) put random bytes there, so without the second mark the link version is 0; 104
 * random bits keep the nonce fresh.
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

/** The highest versions a member reads, as its nonce carries them (core/cluster/consensus/versions.ts). */
export interface NonceVersions {
  readonly command: number;
  readonly stream: number;
}

const VERSIONS_MARK = Buffer.from('svc-ver1', 'latin1');

const LINK_MARK = Buffer.from('svc-lnk1', 'latin1');
const LINK_AT = VERSIONS_MARK.length + 2;

/**
 * A fresh nonce carrying `versions` (each 0 to 255) and, when above 0, the transport's `link` version;
 * null: all random, as builds before versions made them (tests stand in for such a build with it).
 */
export function versionedNonce(versions: NonceVersions | null, link = 0): Buffer {
  const n = randomBytes(NONCE_BYTES);
  if (versions === null) return n;
  assert(Number.isInteger(versions.command) && versions.command >= 0 && versions.command <= 255, 'a command version is a byte');
  assert(Number.isInteger(versions.stream) && versions.stream >= 0 && versions.stream <= 255, 'a stream version is a byte');
  assert(Number.isInteger(link) && link >= 0 && link <= 255, 'a link version is a byte');
  VERSIONS_MARK.copy(n, 0);
  n[VERSIONS_MARK.length] = versions.command;
  n[VERSIONS_MARK.length + 1] = versions.stream;
  if (link > 0) {
    LINK_MARK.copy(n, LINK_AT);
    n[LINK_AT + LINK_MARK.length] = link;
  }
  return n;
}

/** The transport link version a peer's nonce carries: 0 when it carries none (an older build's). */
export function nonceLinkVersion(nonce: Uint8Array): number {
  if (nonceVersions(nonce) === null) return 0;
  const b = Buffer.from(nonce.buffer, nonce.byteOffset, nonce.byteLength);
  if (!b.subarray(LINK_AT, LINK_AT + LINK_MARK.length).equals(LINK_MARK)) return 0;
  return b[LINK_AT + LINK_MARK.length];
}

/** The versions a peer's nonce carries; null when it carries none (an older build's). */
export function nonceVersions(nonce: Uint8Array): NonceVersions | null {
  if (nonce.length !== NONCE_BYTES) return null;
  const b = Buffer.from(nonce.buffer, nonce.byteOffset, nonce.byteLength);
  if (!b.subarray(0, VERSIONS_MARK.length).equals(VERSIONS_MARK)) return null;
  return { command: b[VERSIONS_MARK.length], stream: b[VERSIONS_MARK.length + 1] };
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
