import { describe, expect, it } from 'vitest';
import { decodeCommand, encodeCommand, type ShardCommand } from './command.js';

describe('consensus commands (a shard write in a log entry)', () => {
  it('round-trips point writes, creates and drops', () => {
    const cmds: ShardCommand[] = [
      { uid: '0123456789abcdef', bulk: true, op: { t: 'upsert', points: [{ id: 'p1', vector: new Float32Array([1, 2.5, -3]), payload: { a: [1, 'x'] } }, { id: 'é', vector: new Float32Array([0, 0, 0]), payload: null }] } },
      { uid: '0123456789abcdef', bulk: false, op: { t: 'delete', ids: ['a', 'b'] } },
      { uid: '0123456789abcdef', bulk: false, op: { t: 'set_payload', mode: 'merge', points: [{ id: 'a', payload: { k: 1 } }] } },
      { uid: '', bulk: false, op: { t: 'create_collection', uid: 'fedcba9876543210', name: 'docs', params: { name: 'docs', dim: 3 }, origin_seq: 7 } },
      { uid: '', bulk: false, op: { t: 'drop_collection', uid: 'fedcba9876543210' } },
    ];
    for (const c of cmds) expect(decodeCommand(encodeCommand(c))).toEqual(c);
  });

  it('refuses an unknown version, a cut header, and a collection op under a collection uid', () => {
    const ok = encodeCommand({ uid: 'u', bulk: false, op: { t: 'delete', ids: ['a'] } });
    const v2 = Buffer.from(ok);
    v2[0] = 2;
    expect(() => decodeCommand(v2)).toThrow(/unknown version/);
    expect(() => decodeCommand(ok.subarray(0, 4))).toThrow();
    const wrong = Buffer.from(encodeCommand({ uid: '', bulk: false, op: { t: 'drop_collection', uid: 'x' } }));
    const withUid = Buffer.concat([Buffer.from([1, 0, 1, 0]), Buffer.from('u'), wrong.subarray(4)]);
    expect(() => decodeCommand(withUid)).toThrow(/carries a drop_collection/);
  });
});
