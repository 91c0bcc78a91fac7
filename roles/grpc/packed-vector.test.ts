import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { SearchRequest } from '../../proto/gen/svc.js';
import { decodeWithPackedFloats } from './packed-vector.js';

const fast = (b: Uint8Array) => decodeWithPackedFloats(b, 2, (x) => SearchRequest.decode(x));

/** Either decoder's result with the vector as a plain array, or the fact that it threw. */
function outcome(decode: () => { vector: ArrayLike<number> }): unknown {
  try {
    const r = decode();
    return { ok: { ...r, vector: Array.from(r.vector) } };
  } catch {
    return 'threw';
  }
}

const message = fc.record({
  collection: fc.string({ maxLength: 12 }),
  vector: fc.array(fc.float(), { maxLength: 40 }),
  k: fc.option(fc.nat(1000), { nil: undefined }),
  ef_search: fc.option(fc.nat(1000), { nil: undefined }),
  with_payload: fc.option(fc.boolean(), { nil: undefined }),
  with_vector: fc.option(fc.boolean(), { nil: undefined }),
  consistency: fc.option(fc.constantFrom('eventual', 'strong', 'x'), { nil: undefined }),
  filter: fc.option(fc.constant({ eq: { field: 'n', value: 1 } }), { nil: undefined }),
});
const encode = (m: Parameters<typeof SearchRequest.fromPartial>[0]) => SearchRequest.encode(SearchRequest.fromPartial(m)).finish();

/** The vector as one float per tag (wire type 5), which the protocol allows instead of packed. */
function unpacked(values: number[]): Uint8Array {
  const out = Buffer.alloc(values.length * 5);
  values.forEach((v, i) => {
    out[i * 5] = (2 << 3) | 5;
    out.writeFloatLE(v, i * 5 + 1);
  });
  return out;
}

describe('decodeWithPackedFloats (Search requests)', () => {
  it('decodes every message as the generated decoder does, with the vector as a Float32Array', () => {
    fc.assert(fc.property(message, (m) => {
      const bytes = encode(m);
      const r = fast(bytes);
      if (m.vector.length > 0) expect(r.vector).toBeInstanceOf(Float32Array);
      expect(outcome(() => r)).toEqual(outcome(() => SearchRequest.decode(bytes)));
    }), { numRuns: 300 });
  });

  it('agrees on concatenated messages (packed chunks join, other fields merge), unpacked floats and unknown fields', () => {
    const unknown = Buffer.from([(99 << 3) | 0, 0x96, 0x01, (98 << 3) | 2, 3, 1, 2, 3, (97 << 3) | 5, 0, 0, 0x80, 0x3f]);
    fc.assert(fc.property(message, message, fc.array(fc.float(), { maxLength: 8 }), fc.boolean(), (a, b, loose, withUnknown) => {
      const parts = [encode(a), ...(withUnknown ? [unknown] : []), encode(b)];
      const joined = Buffer.concat(parts);
      expect(outcome(() => fast(joined))).toEqual(outcome(() => SearchRequest.decode(joined)));
      const mixed = Buffer.concat([encode(a), unpacked(loose)]);
      expect(outcome(() => fast(mixed))).toEqual(outcome(() => SearchRequest.decode(mixed)));
      // A zero tag ends decoding for the generated decoder: what follows it is not read.
      const stopped = Buffer.concat([encode(a), Buffer.from([0]), encode(b)]);
      expect(outcome(() => fast(stopped))).toEqual(outcome(() => SearchRequest.decode(stopped)));
    }), { numRuns: 200 });
  });

  it('on truncated bytes fails exactly where the generated decoder fails', () => {
    fc.assert(fc.property(message, fc.nat(), (m, at) => {
      const bytes = encode(m);
      const cut = bytes.subarray(0, bytes.length === 0 ? 0 : at % bytes.length);
      expect(outcome(() => fast(cut))).toEqual(outcome(() => SearchRequest.decode(cut)));
    }), { numRuns: 1000 });
  });

  it('on corrupted bytes either rejects them or gives a well-typed message', () => {
    // Not always the generated decoder's answer: when a corrupted length makes a nested message
    // overrun, the generated decoder reads on past it and takes what follows for fields; the walk
    // here reads the top level by its own lengths. Both answers are garbage that validation then
    // judges; neither decoder may return something other than a SearchRequest's shape.
    fc.assert(fc.property(message, fc.nat(), fc.nat(255), (m, at, byte) => {
      const damaged = Buffer.from(encode(m));
      if (damaged.length === 0) return;
      damaged[at % damaged.length] = byte;
      let r: ReturnType<typeof fast>;
      try {
        r = fast(damaged);
      } catch {
        return;
      }
      expect(typeof r.collection).toBe('string');
      expect(r.vector instanceof Float32Array || Array.isArray(r.vector)).toBe(true);
      for (const key of ['k', 'ef_search'] as const) expect(r[key] === undefined || Number.isInteger(r[key])).toBe(true);
      for (const key of ['with_payload', 'with_vector'] as const) expect(r[key] === undefined || typeof r[key] === 'boolean').toBe(true);
    }), { numRuns: 2000 });
  });
});
