/**
 * XXH64 (Yann Collet's xxHash, 64-bit variant) in plain 32-bit arithmetic: a fast, well-distributed,
 * seeded hash whose value is fixed by its published definition, so a router and a coordinator built from
 * any version of svc (or any other language) agree on it. Routing ranks shards by it (hrw.ts); a change
 * here would move points between shards, so the test pins published values.
 *
 * 64-bit values are two uint32 halves; BigInt would allocate on every step. Results are written into
 * `out` (hi, lo) so a ranking loop allocates nothing.
 */

/**
 * The register every helper reads and writes: [high, low]. A typed array, not two `let`s: a module
 * variable holding a uint32 above 2^30 is a boxed number, allocated on every write (measured: 7x slower).
 */
const R = new Int32Array(2);

const P1H = 0x9e3779b1, P1L = 0x85ebca87;
const P2H = 0xc2b2ae3d, P2L = 0x27d4eb4f;
const P3H = 0x165667b1, P3L = 0x9e3779f9;
const P4H = 0x85ebca77, P4L = 0xc2b2ae63;
const P5H = 0x27d4eb2f, P5L = 0x165667c5;

const TWO32 = 4294967296;

/** R += (bh, bl) mod 2^64. */
function add(bh: number, bl: number): void {
  const lo = (R[1] >>> 0) + (bl >>> 0);
  R[1] = lo;
  R[0] = (R[0] + bh + (lo >= TWO32 ? 1 : 0)) | 0;
}

/**
 * R *= (bh, bl) mod 2^64: the high half of the low 32x32 product from 16-bit pieces (Hacker's Delight,
 * mulhu), every partial below 2^32; the cross products only matter mod 2^32.
 */
function mul(bh: number, bl: number): void {
  const h = R[0], l = R[1];
  const a0 = l & 0xffff, a1 = l >>> 16, b0 = bl & 0xffff, b1 = bl >>> 16;
  const t = a0 * b0;
  const m1 = a1 * b0 + (t >>> 16);
  const m2 = a0 * b1 + (m1 & 0xffff);
  const hi = a1 * b1 + (m1 >>> 16) + (m2 >>> 16);
  R[0] = (hi + Math.imul(h, bl) + Math.imul(l, bh)) | 0;
  R[1] = Math.imul(l, bl);
}

/** R rotated left by r, 0 < r < 64. */
function rotl(r: number): void {
  let h = R[0], l = R[1];
  if (r >= 32) {
    const t = h; h = l; l = t; r -= 32;
  }
  if (r === 0) {
    R[0] = h; R[1] = l;
    return;
  }
  R[0] = (h << r) | (l >>> (32 - r));
  R[1] = (l << r) | (h >>> (32 - r));
}

/** R ^= R >>> s, 32 <= s < 64 (the avalanche's shifts). */
function xorShiftHigh(s: number): void {
  R[1] = R[1] ^ (R[0] >>> (s - 32));
}

/** R ^= R >>> s, 0 < s < 32. */
function xorShift(s: number): void {
  const h = R[0], l = R[1];
  R[1] = l ^ ((l >>> s) | (h << (32 - s)));
  R[0] = h ^ (h >>> s);
}

/** R ^= (h, l). */
function xor(h: number, l: number): void {
  R[0] = R[0] ^ h;
  R[1] = R[1] ^ l;
}

function set(h: number, l: number): void {
  R[0] = h;
  R[1] = l;
}

const u32 = (b: Uint8Array, i: number): number => (b[i] | (b[i + 1] << 8) | (b[i + 2] << 16) | (b[i + 3] << 24)) >>> 0;

/** R = round(R, lane) = rotl(R + lane * P2, 31) * P1; the lane is the 8 bytes at i. */
function round(b: Uint8Array, i: number): void {
  const accH = R[0], accL = R[1];
  set(u32(b, i + 4), u32(b, i));
  mul(P2H, P2L);
  add(accH, accL);
  rotl(31);
  mul(P1H, P1L);
}

/** R = (R ^ round(0, v)) * P1 + P4. */
function mergeRound(vh: number, vl: number): void {
  const accH = R[0], accL = R[1];
  set(vh, vl);
  mul(P2H, P2L);
  rotl(31);
  mul(P1H, P1L);
  xor(accH, accL);
  mul(P1H, P1L);
  add(P4H, P4L);
}

/**
 * XXH64 of `bytes[0, length)` with a 64-bit seed given as halves; the hash is written to out[0] (high
 * half) and out[1] (low half).
 */
export function xxh64(bytes: Uint8Array, length: number, seedHi: number, seedLo: number, out: Uint32Array | number[]): void {
  let i = 0;
  if (length >= 32) {
    // v1 = seed + P1 + P2, v2 = seed + P2, v3 = seed, v4 = seed - P1 (= seed + ~P1 + 1)
    set(seedHi, seedLo); add(P1H, P1L); add(P2H, P2L);
    let v1h = R[0], v1l = R[1];
    set(seedHi, seedLo); add(P2H, P2L);
    let v2h = R[0], v2l = R[1];
    set(seedHi, seedLo);
    let v3h = R[0], v3l = R[1];
    add(~P1H >>> 0, ~P1L >>> 0); add(0, 1);
    let v4h = R[0], v4l = R[1];
    for (; i + 32 <= length; i += 32) {
      set(v1h, v1l); round(bytes, i); v1h = R[0]; v1l = R[1];
      set(v2h, v2l); round(bytes, i + 8); v2h = R[0]; v2l = R[1];
      set(v3h, v3l); round(bytes, i + 16); v3h = R[0]; v3l = R[1];
      set(v4h, v4l); round(bytes, i + 24); v4h = R[0]; v4l = R[1];
    }
    set(v1h, v1l); rotl(1);
    let hh = R[0], hl = R[1];
    set(v2h, v2l); rotl(7); add(hh, hl); hh = R[0]; hl = R[1];
    set(v3h, v3l); rotl(12); add(hh, hl); hh = R[0]; hl = R[1];
    set(v4h, v4l); rotl(18); add(hh, hl);
    mergeRound(v1h, v1l);
    mergeRound(v2h, v2l);
    mergeRound(v3h, v3l);
    mergeRound(v4h, v4l);
  } else {
    set(seedHi, seedLo); add(P5H, P5L);
  }
  add(Math.floor(length / TWO32), length >>> 0);
  for (; i + 8 <= length; i += 8) {
    const accH = R[0], accL = R[1];
    set(0, 0); round(bytes, i);
    xor(accH, accL);
    rotl(27); mul(P1H, P1L); add(P4H, P4L);
  }
  if (i + 4 <= length) {
    const accH = R[0], accL = R[1];
    set(0, u32(bytes, i)); mul(P1H, P1L);
    xor(accH, accL);
    rotl(23); mul(P2H, P2L); add(P3H, P3L);
    i += 4;
  }
  for (; i < length; i++) {
    const accH = R[0], accL = R[1];
    set(0, bytes[i]); mul(P5H, P5L);
    xor(accH, accL);
    rotl(11); mul(P1H, P1L);
  }
  xorShiftHigh(33); mul(P2H, P2L);
  xorShift(29); mul(P3H, P3L);
  xorShiftHigh(32);
  out[0] = R[0] >>> 0;
  out[1] = R[1] >>> 0;
}
