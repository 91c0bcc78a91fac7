import { describe, expect, it } from 'vitest';
import fc from 'fast-check';
import { xchacha20poly1305 } from '@noble/ciphers/chacha.js';
import { xchachaDecrypt, xchachaEncrypt } from './xchacha.js';
import { InsecureSealer, XChaChaSealer, type Sealer } from './sealer.js';
import { parseMasterKeyHex, randomDataKey, unwrapDataKey, wrapDataKey } from './keys.js';
import { SvcError } from '../base/errors.js';

const hex = (s: string) => new Uint8Array(Buffer.from(s.replace(/\s+/g, ''), 'hex'));

describe('XChaCha20-Poly1305 (hchacha from noble + OpenSSL chacha20-poly1305)', () => {
  it('matches draft-irtf-cfrg-xchacha appendix A.3.1', () => {
    const plain = new Uint8Array(Buffer.from("Ladies and Gentlemen of the class of '99: If I could offer you only one tip for the future, sunscreen would be it."));
    const aad = hex('50515253c0c1c2c3c4c5c6c7');
    const key = hex('808182838485868788898a8b8c8d8e8f909192939495969798999a9b9c9d9e9f');
    const nonce = hex('404142434445464748494a4b4c4d4e4f5051525354555657');
    const expected = hex(`bd6d179d3e83d43b9576579493c0e939572a1700252bfaccbed2902c21396cbb731c7f1b0b4aa6440bf3a82f4eda7e39ae64c6708c54c216cb96b72e1213b4522f8c9ba40db5d945b11b69b982c1bb9e3f3fac2bc369488f76b2383565d3fff921f9664c97637da9768812f615c68b13b52e
      c0875924c1c7987947deafd8780acf49`);
    expect(Buffer.from(xchachaEncrypt(key, nonce, plain, aad)).toString('hex')).toBe(Buffer.from(expected).toString('hex'));
    expect(Buffer.from(xchachaDecrypt(key, nonce, expected, aad)!).toString()).toBe(Buffer.from(plain).toString());
  });

  it('gives the same bytes as noble xchacha20poly1305 for random inputs', () => {
    fc.assert(fc.property(
      fc.uint8Array({ minLength: 32, maxLength: 32 }), fc.uint8Array({ minLength: 24, maxLength: 24 }),
      fc.uint8Array({ maxLength: 300 }), fc.uint8Array({ maxLength: 40 }),
      (key, nonce, plain, aad) => {
        const ours = xchachaEncrypt(key, nonce, plain, aad);
        const theirs = xchacha20poly1305(key, nonce, aad).encrypt(plain);
        expect(Buffer.from(ours).equals(Buffer.from(theirs))).toBe(true);
        expect(Buffer.from(xchachaDecrypt(key, nonce, theirs, aad)!).equals(Buffer.from(plain))).toBe(true);
      }), { numRuns: 200 });
  });
});

describe.each<[string, () => Sealer]>([
  ['XChaChaSealer', () => new XChaChaSealer(randomDataKey())],
  ['InsecureSealer', () => new InsecureSealer()],
])('%s', (_name, make) => {
  it('round-trips and refuses another aad', () => {
    const s = make();
    const sealed = s.seal(Buffer.from('hello'), Buffer.from('aad-1'));
    expect(Buffer.from(s.open(sealed, Buffer.from('aad-1'))).toString()).toBe('hello');
    expect(() => s.open(sealed, Buffer.from('aad-2'))).toThrow();
  });

  it('detects every single-bit flip of a sealed 1 KiB block', () => {
    const s = make();
    const plain = new Uint8Array(1024).map((_, i) => i * 7);
    const aad = Buffer.from('segment/3/block/0');
    const sealed = s.seal(plain, aad);
    for (let bit = 0; bit < sealed.length * 8; bit++) {
      const damaged = Uint8Array.from(sealed);
      damaged[bit >> 3] ^= 1 << (bit & 7);
      expect(() => s.open(damaged, aad), `bit ${bit}`).toThrow();
    }
  });
});

describe('XChaChaSealer', () => {
  it('uses a fresh nonce per seal and hides the plaintext', () => {
    const s = new XChaChaSealer(randomDataKey());
    const plain = Buffer.from('the same secret text, twice');
    const a = Buffer.from(s.seal(plain, new Uint8Array()));
    const b = Buffer.from(s.seal(plain, new Uint8Array()));
    expect(a.equals(b)).toBe(false);
    expect(a.includes(plain)).toBe(false);
  });

  it('never repeats a nonce across the nonce pool\'s refills (2,000 seals, 256 to a fill), and each seal opens alone', () => {
    const s = new XChaChaSealer(randomDataKey());
    const seen = new Set<string>();
    const sealed: Uint8Array[] = [];
    for (let i = 0; i < 2000; i++) {
      const x = s.seal(Buffer.from(`record ${i}`), Buffer.from(`aad ${i}`));
      seen.add(Buffer.from(x.subarray(0, 24)).toString('hex'));
      sealed.push(x);
    }
    expect(seen.size).toBe(2000);
    // A sealed record owns its bytes: none is a view another seal writes into later.
    for (let i = 0; i < 2000; i++) expect(Buffer.from(s.open(sealed[i], Buffer.from(`aad ${i}`))).toString()).toBe(`record ${i}`);
  });

  it('writes what an independent XChaCha20-Poly1305 (noble) opens with the key bytes, and opens what it writes, at every length', () => {
    const key = randomDataKey();
    const s = new XChaChaSealer(key);
    for (const n of [0, 1, 15, 16, 63, 64, 65, 1000, 4096, 70_000]) {
      const plain = new Uint8Array(n).map((_, i) => (i * 31 + n) & 255);
      const aad = Buffer.from(`aad ${n}`);
      const sealed = s.seal(plain, aad);
      const nonce = sealed.subarray(0, 24);
      expect(Buffer.from(xchacha20poly1305(key, nonce, aad).decrypt(sealed.subarray(24))).equals(Buffer.from(plain))).toBe(true);
      const theirs = Buffer.concat([nonce, xchacha20poly1305(key, nonce, aad).encrypt(plain)]);
      expect(Buffer.from(s.open(theirs, aad)).equals(Buffer.from(plain))).toBe(true);
    }
  });

  it('keeps its own copy of the key: the caller may zero its bytes after (as the data directory does)', () => {
    const key = randomDataKey();
    const kept = Buffer.from(key);
    const s = new XChaChaSealer(key);
    key.fill(0);
    const sealed = s.seal(Buffer.from('after the zeroing'), new Uint8Array());
    expect(Buffer.from(new XChaChaSealer(kept).open(sealed, new Uint8Array())).toString()).toBe('after the zeroing');
  });

  it('refuses a different key', () => {
    const sealed = new XChaChaSealer(randomDataKey()).seal(Buffer.from('x'), new Uint8Array());
    expect(() => new XChaChaSealer(randomDataKey()).open(sealed, new Uint8Array())).toThrow();
  });
});

describe('master key', () => {
  const good = 'ab'.repeat(32);

  it('parses 64 hex characters', () => {
    expect(parseMasterKeyHex(good)).toEqual(new Uint8Array(32).fill(0xab));
    expect(parseMasterKeyHex(good.toUpperCase())).toEqual(new Uint8Array(32).fill(0xab));
  });

  it.each(['', 'ab'.repeat(31), 'ab'.repeat(33), 'zz' + 'ab'.repeat(31)])('refuses %j without echoing it', (bad) => {
    let err: unknown;
    try { parseMasterKeyHex(bad); } catch (e) { err = e; }
    expect(err).toBeInstanceOf(SvcError);
    expect((err as SvcError).code).toBe('invalid_argument');
    expect((err as SvcError).message).toMatch(/64 hex/);
    if (bad.length > 4) expect((err as SvcError).message).not.toContain(bad.slice(2, 10));
  });

  it('wraps a data key bound to the collection uid', () => {
    const master = parseMasterKeyHex(good);
    const dk = randomDataKey();
    const wrapped = wrapDataKey(master, dk, 'uid-1');
    expect(unwrapDataKey(master, wrapped, 'uid-1')).toEqual(dk);
    expect(() => unwrapDataKey(master, wrapped, 'uid-2')).toThrow();
    expect(() => unwrapDataKey(parseMasterKeyHex('cd'.repeat(32)), wrapped, 'uid-1')).toThrow();
    expect(Buffer.from(wrapped).includes(Buffer.from(dk))).toBe(false);
  });
});
