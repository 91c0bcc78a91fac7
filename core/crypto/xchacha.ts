import { createCipheriv, createDecipheriv } from 'node:crypto';
import { hchacha } from '@noble/ciphers/chacha.js';
import { assert } from '../base/assert.js';

/**
 * XChaCha20-Poly1305 at OpenSSL speed: HChaCha20(key, nonce[0..16)) gives a subkey (noble), then the IETF
 * ChaCha20-Poly1305 of node:crypto runs with nonce = 4 zero bytes + nonce[16..24). Same bytes as
 * draft-irtf-cfrg-xchacha; noble alone is ~8x slower here (FACTS.md).
 */
export const XCHACHA_KEY_BYTES = 32;
export const XCHACHA_NONCE_BYTES = 24;
export const POLY1305_TAG_BYTES = 16;

const SIGMA = new Uint32Array([0x61707865, 0x3320646e, 0x79622d32, 0x6b206574]);
assert(new Uint8Array(new Uint32Array([1]).buffer)[0] === 1, 'svc runs on little-endian machines only');

function u32le(bytes: Uint8Array, words: number): Uint32Array {
  const out = new Uint32Array(words);
  const view = new DataView(bytes.buffer, bytes.byteOffset, words * 4);
  for (let i = 0; i < words; i++) out[i] = view.getUint32(i * 4, true);
  return out;
}

/** A 32-byte key as the eight little-endian words HChaCha20 takes (a sealer reads them once, not per seal). */
export function xchachaKeyWords(key: Uint8Array): Uint32Array {
  assert(key.length === XCHACHA_KEY_BYTES, 'xchacha key is 32 bytes');
  return u32le(key, 8);
}

/** HChaCha20 subkey for a 32-byte key (or its words) and the first 16 bytes of a 24-byte nonce. */
export function hchacha20(key: Uint8Array | Uint32Array, nonce: Uint8Array): Buffer {
  const words = key instanceof Uint32Array ? key : xchachaKeyWords(key);
  assert(words.length === 8, 'xchacha key is 32 bytes');
  assert(nonce.length >= 16, 'hchacha nonce is 16 bytes');
  const out = new Uint32Array(8);
  hchacha(SIGMA, words, u32le(nonce.subarray(0, 16), 4), out);
  // The words' own bytes are the subkey on a little-endian machine, the only kind svc runs on
  // (core/storage/codec.ts refuses the others; noble's hchacha takes words as little-endian memory too).
  return Buffer.from(out.buffer, 0, 32);
}

function ietfNonce(nonce: Uint8Array): Buffer {
  const iv = Buffer.alloc(12);
  iv.set(nonce.subarray(16, 24), 4);
  return iv;
}

/** Returns ciphertext || tag (no nonce). */
export function xchachaEncrypt(key: Uint8Array | Uint32Array, nonce: Uint8Array, plain: Uint8Array, aad: Uint8Array): Buffer {
  const out = Buffer.allocUnsafe(plain.length + POLY1305_TAG_BYTES);
  xchachaEncryptInto(key, nonce, plain, aad, out, 0);
  return out;
}

/** Writes ciphertext || tag into `out` at `at` (plain.length + 16 bytes): no copy of the whole through a concat. */
export function xchachaEncryptInto(key: Uint8Array | Uint32Array, nonce: Uint8Array, plain: Uint8Array, aad: Uint8Array, out: Uint8Array, at: number): void {
  assert(nonce.length === XCHACHA_NONCE_BYTES, 'xchacha nonce is 24 bytes');
  assert(out.length - at >= plain.length + POLY1305_TAG_BYTES, 'room for the ciphertext and its tag');
  const c = createCipheriv('chacha20-poly1305', hchacha20(key, nonce), ietfNonce(nonce), { authTagLength: POLY1305_TAG_BYTES });
  c.setAAD(aad, { plaintextLength: plain.length });
  const body = c.update(plain);
  c.final();
  // A stream cipher gives back every byte at once; were it ever fewer, the tag must not leave a gap of
  // uninitialised memory (the output comes from allocUnsafe) that would reach the disk.
  assert(body.length === plain.length, 'chacha20-poly1305 returned every byte of the plaintext');
  out.set(body, at);
  out.set(c.getAuthTag(), at + plain.length);
}

/** Opens ciphertext || tag; returns null when authentication fails (any tamper). */
export function xchachaDecrypt(key: Uint8Array | Uint32Array, nonce: Uint8Array, sealed: Uint8Array, aad: Uint8Array): Buffer | null {
  assert(nonce.length === XCHACHA_NONCE_BYTES, 'xchacha nonce is 24 bytes');
  if (sealed.length < POLY1305_TAG_BYTES) return null;
  const bodyLen = sealed.length - POLY1305_TAG_BYTES;
  const d = createDecipheriv('chacha20-poly1305', hchacha20(key, nonce), ietfNonce(nonce), { authTagLength: POLY1305_TAG_BYTES });
  d.setAAD(aad, { plaintextLength: bodyLen });
  d.setAuthTag(sealed.subarray(bodyLen));
  const out = d.update(sealed.subarray(0, bodyLen));
  try {
    d.final();
  } catch {
    return null;
  }
  return out;
}
