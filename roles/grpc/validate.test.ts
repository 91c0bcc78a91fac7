import { BinaryWriter } from '@bufbuild/protobuf/wire';
import { describe, expect, it } from 'vitest';
import { Struct_FieldsEntry } from '../../proto/gen/google/protobuf/struct.js';
import * as pb from '../../proto/gen/svc.js';
import { checkJsonKeys } from '../../core/base/json-keys.js';
import * as c from './convert.js';

const wire = (m: pb.UpsertRequest): pb.UpsertRequest => pb.UpsertRequest.decode(pb.UpsertRequest.encode(m).finish());

/** A Struct holding the key `__proto__`, encoded by hand as any protobuf client may send it. */
function protoKeyStruct(value: unknown): Uint8Array {
  const entry = Struct_FieldsEntry.encode({ key: '__proto__', value }).finish();
  return new BinaryWriter().uint32(10).bytes(entry).finish();
}

describe('gRPC body checks', () => {
  // REST refuses JSON with a `__proto__` key (fastify's prototype-poisoning check). The generated Struct
  // decoder used to drop such a key silently; it now keeps it as an own key, at any depth, touching no
  // prototype, so the engine refuses the body with invalid_argument as it does on every transport.
  it('keeps a __proto__ key of a payload or filter as an own key, for the engine to refuse', () => {
    const point = Buffer.concat([pb.PointInput.encode({ id: 'x', vector: [1] }).finish(), new BinaryWriter().uint32(26).bytes(protoKeyStruct({ admin: true })).finish()]);
    const upsert = pb.UpsertRequest.decode(Buffer.concat([pb.UpsertRequest.encode({ collection: 'c', points: [] }).finish(), new BinaryWriter().uint32(18).bytes(point).finish()]));
    const body = c.upsertBody(upsert);
    const payload = body.points[0].payload!;
    expect(Object.hasOwn(payload, '__proto__')).toBe(true);
    expect(Object.getPrototypeOf(payload)).toBe(Object.prototype);
    expect(({} as Record<string, unknown>).admin).toBeUndefined();
    expect(() => checkJsonKeys(payload, 'points[0].payload')).toThrow(expect.objectContaining({ code: 'invalid_argument' }));
    const search = pb.SearchRequest.decode(Buffer.concat([pb.SearchRequest.encode({ collection: 'c', vector: [1] }).finish(), new BinaryWriter().uint32(34).bytes(protoKeyStruct([1])).finish()]));
    const q = c.searchQuery(search);
    expect(Object.hasOwn(q.filter!, '__proto__')).toBe(true);
    expect(Object.getPrototypeOf(q.filter)).toBe(Object.prototype);
    expect(() => checkJsonKeys(q.filter, 'filter')).toThrow(/__proto__/);
    // A primitive value under the key (which a prototype assignment ignores) is kept too.
    const scalar = pb.SearchRequest.decode(Buffer.concat([pb.SearchRequest.encode({ collection: 'c', vector: [1] }).finish(), new BinaryWriter().uint32(34).bytes(protoKeyStruct('x')).finish()]));
    expect(Object.getOwnPropertyDescriptor(c.searchQuery(scalar).filter, '__proto__')?.value).toBe('x');
  });

  it('accepts ordinary payloads and refuses wrong enumerated strings with the REST message', () => {
    const req = wire({ collection: 'c', points: [{ id: 'x', vector: [1], payload: { tags: ['a'], n: { m: null } } }] });
    expect(c.upsertBody(req)).toEqual({ points: [{ id: 'x', vector: [1], payload: { tags: ['a'], n: { m: null } } }] });
    const bad = pb.FetchRequest.decode(pb.FetchRequest.encode({ collection: 'c', consistency: 'now' }).finish());
    expect(() => c.fetchQuery(bad)).toThrow('body/consistency must be one of: eventual, strong');
  });
});
