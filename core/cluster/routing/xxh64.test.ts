import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { xxh64 } from './xxh64.js';

/** The algorithm as published, in BigInt: slow and obviously the definition. */
const M = (1n << 64n) - 1n;
const P1 = 0x9E3779B185EBCA87n, P2 = 0xC2B2AE3D27D4EB4Fn, P3 = 0x165667B19E3779F9n, P4 = 0x85EBCA77C2B2AE63n, P5 = 0x27D4EB2F165667C5n;
const rotl = (x: bigint, r: bigint): bigint => ((x << r) | (x >> (64n - r))) & M;
const le = (b: Uint8Array, i: number, n: number): bigint => {
  let v = 0n;
  for (let j = n - 1; j >= 0; j--) v = (v << 8n) | BigInt(b[i + j]);
  return v;
};
const round = (acc: bigint, lane: bigint): bigint => (rotl((acc + lane * P2) & M, 31n) * P1) & M;
function reference(b: Uint8Array, seed: bigint): bigint {
  let i = 0;
  let h: bigint;
  if (b.length >= 32) {
    let v1 = (seed + P1 + P2) & M, v2 = (seed + P2) & M, v3 = seed, v4 = (seed - P1) & M;
    for (; i + 32 <= b.length; i += 32) {
      v1 = round(v1, le(b, i, 8)); v2 = round(v2, le(b, i + 8, 8)); v3 = round(v3, le(b, i + 16, 8)); v4 = round(v4, le(b, i + 24, 8));
    }
    h = (rotl(v1, 1n) + rotl(v2, 7n) + rotl(v3, 12n) + rotl(v4, 18n)) & M;
    for (const v of [v1, v2, v3, v4]) h = (((h ^ round(0n, v)) * P1) + P4) & M;
  } else {
    h = (seed + P5) & M;
  }
  h = (h + BigInt(b.length)) & M;
  for (; i + 8 <= b.length; i += 8) h = ((rotl(h ^ round(0n, le(b, i, 8)), 27n) * P1) + P4) & M;
  if (i + 4 <= b.length) {
    h = ((rotl(h ^ ((le(b, i, 4) * P1) & M), 23n) * P2) + P3) & M;
    i += 4;
  }
  for (; i < b.length; i++) h = (rotl(h ^ ((BigInt(b[i]) * P5) & M), 11n) * P1) & M;
  h ^= h >> 33n; h = (h * P2) & M; h ^= h >> 29n; h = (h * P3) & M; h ^= h >> 32n;
  return h;
}

function hash(b: Uint8Array, seed = 0n): bigint {
  const out = new Uint32Array(2);
  xxh64(b, b.length, Number(seed >> 32n), Number(seed & 0xffffffffn), out);
  return (BigInt(out[0]) << 32n) | BigInt(out[1]);
}

const text = (s: string): Uint8Array => new TextEncoder().encode(s);

describe('xxh64', () => {
  it('gives the published values', () => {
    expect(hash(text(''))).toBe(0xEF46DB3751D8E999n);
    expect(hash(text('a'))).toBe(0xD24EC4F1A98C6E5Bn);
    expect(hash(text('abc'))).toBe(0x44BC2CF5AD770999n);
    expect(hash(text('Nobody inspects the spammish repetition'))).toBe(0xFBCEA83C8A378BF1n);
    for (const s of ['', 'a', 'abc', 'Nobody inspects the spammish repetition']) expect(reference(text(s), 0n)).toBe(hash(text(s)));
  });

  it('equals the BigInt definition for every length and seed', () => {
    fc.assert(fc.property(fc.uint8Array({ maxLength: 200 }), fc.bigInt({ min: 0n, max: M }), (b, seed) => {
      expect(hash(b, seed)).toBe(reference(b, seed));
    }), { numRuns: 2000 });
  });

  it('hashes only the first `length` bytes', () => {
    const b = text('0123456789abcdefghijklmnopqrstuvwxyz-tail');
    const out = new Uint32Array(2);
    xxh64(b, 36, 0, 0, out);
    expect((BigInt(out[0]) << 32n) | BigInt(out[1])).toBe(hash(b.subarray(0, 36)));
  });
});
