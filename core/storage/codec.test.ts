import { describe, expect, it } from 'vitest';
import fc from 'fast-check';
import { decodeOp, encodeOp, type AnyOp } from './codec.js';

const id = fc.string({ minLength: 1, maxLength: 40, unit: 'grapheme' });
const payload = fc.option(fc.dictionary(fc.string({ maxLength: 8 }), fc.jsonValue({ maxDepth: 2 })), { nil: null });
const vector = fc.float32Array({ maxLength: 16, noDefaultInfinity: false }).map((v) => Float32Array.from(v));
export const arbOp: fc.Arbitrary<AnyOp> = fc.oneof(
  fc.record({ t: fc.constant('upsert' as const), points: fc.array(fc.record({ id, vector, payload }), { maxLength: 6 }) }),
  fc.record({ t: fc.constant('delete' as const), ids: fc.array(id, { maxLength: 6 }) }),
  fc.record({
    t: fc.constant('upsert_docs' as const),
    docs: fc.array(fc.record({ id, count: fc.integer({ min: 0, max: 4 }), vectors: vector, payload }), { maxLength: 4 }),
  }),
  fc.record({ t: fc.constant('create_collection' as const), uid: fc.string({ unit: fc.constantFrom(...'0123456789abcdef'), minLength: 1, maxLength: 32 }), name: id, params: fc.dictionary(fc.string({ maxLength: 6 }), fc.jsonValue({ maxDepth: 2 })) }),
  fc.record({ t: fc.constant('drop_collection' as const), uid: fc.string({ unit: fc.constantFrom(...'0123456789abcdef'), minLength: 1, maxLength: 32 }) }),
  fc.record({
    t: fc.constant('create_collection' as const), uid: fc.constant('0123456789abcdef'), name: id, params: fc.constant({ dim: 2 }),
    origin_seq: fc.maxSafeNat(),
  }),
  fc.record({ t: fc.constant('replica_position' as const), leader_seq: fc.maxSafeNat() }),
  fc.record({ t: fc.constant('replica_origin' as const), history: fc.string({ maxLength: 40 }), leader_seq: fc.maxSafeNat() }),
  fc.record({
    t: fc.constant('set_payload' as const), mode: fc.constantFrom('merge' as const, 'replace' as const),
    points: fc.array(fc.record({ id, payload: fc.dictionary(fc.string({ maxLength: 8 }), fc.jsonValue({ maxDepth: 2 })) }), { maxLength: 6 }),
  }),
);

/** JSON turns -0 into 0 and drops undefined: compare against what JSON would keep. */
function viaJson(op: AnyOp): unknown {
  return JSON.parse(JSON.stringify(op, (_k, v) => (v instanceof Float32Array ? Array.from(v, (x) => (Number.isNaN(x) ? 'NaN' : Object.is(x, -0) ? '-0' : x)) : v)));
}

describe('record codec', () => {
  it('round-trips random ops (vectors bit-exact, payloads as JSON)', () => {
    fc.assert(fc.property(arbOp, (op) => {
      const back = decodeOp(encodeOp(op));
      expect(viaJson(back)).toEqual(viaJson(op));
      if (op.t === 'upsert' && back.t === 'upsert') {
        op.points.forEach((p, i) => expect(Buffer.from(back.points[i].vector.buffer).equals(Buffer.from(p.vector.buffer, p.vector.byteOffset, p.vector.byteLength))).toBe(true));
      }
    }), { numRuns: 500 });
  });

  it('refuses truncated input, trailing bytes and unknown tags', () => {
    const bytes = encodeOp({ t: 'upsert', points: [{ id: 'a', vector: new Float32Array([1, 2]), payload: { x: 1 } }] });
    for (let n = 0; n < bytes.length; n++) expect(() => decodeOp(bytes.subarray(0, n))).toThrow(/cannot decode/);
    expect(() => decodeOp(Buffer.concat([bytes, Buffer.from([0])]))).toThrow(/trailing/);
    expect(() => decodeOp(Uint8Array.from([200]))).toThrow(/unknown tag/);
    // A payload update with an unknown mode, or a payload that is not an object, is refused.
    const patch = encodeOp({ t: 'set_payload', mode: 'replace', points: [{ id: 'a', payload: { x: 1 } }] });
    for (let n = 0; n < patch.length; n++) expect(() => decodeOp(patch.subarray(0, n))).toThrow(/cannot decode/);
    const badMode = Uint8Array.from(patch);
    badMode[1] = 2;
    expect(() => decodeOp(badMode)).toThrow(/payload mode/);
    for (const bad of ['[1]', 'null', '7']) {
      const body = Buffer.from(bad);
      const w = Buffer.concat([Buffer.from([4, 0, 1, 0, 0, 0, 1, 0, 97]), Buffer.from(Uint32Array.from([body.length]).buffer), body]);
      expect(() => decodeOp(w), bad).toThrow(/not an object/);
    }
    // A create's origin seq is an optional trailing field: a record without it reads as before; one cut
    // inside it is refused.
    const plain = encodeOp({ t: 'create_collection', uid: 'ab', name: 'c', params: {} });
    const withSeq = encodeOp({ t: 'create_collection', uid: 'ab', name: 'c', params: {}, origin_seq: 2 ** 40 + 5 });
    expect(decodeOp(plain)).toEqual({ t: 'create_collection', uid: 'ab', name: 'c', params: {} });
    expect(decodeOp(withSeq)).toEqual({ t: 'create_collection', uid: 'ab', name: 'c', params: {}, origin_seq: 2 ** 40 + 5 });
    for (let n = plain.length + 1; n < withSeq.length; n++) expect(() => decodeOp(withSeq.subarray(0, n))).toThrow(/cannot decode/);
  });
});
