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
    const v4 = Buffer.from(ok);
    v4[0] = 4;
    expect(() => decodeCommand(v4)).toThrow(/unknown version/);
    expect(() => decodeCommand(ok.subarray(0, 4))).toThrow();
    const wrong = Buffer.from(encodeCommand({ uid: '', bulk: false, op: { t: 'drop_collection', uid: 'x' } }));
    const withUid = Buffer.concat([Buffer.from([1, 0, 1, 0]), Buffer.from('u'), wrong.subarray(4)]);
    expect(() => decodeCommand(withUid)).toThrow(/carries a drop_collection/);
  });

  it('a move\'s state and a batch\'s commit are version 2, every other command stays version 1; each refuses the other version', () => {
    const state: ShardCommand = { uid: '', bulk: false, op: { t: 'move_state', move: 'm3', self: 0, targets: [0, 2, 5], finished: false } };
    const done: ShardCommand = { uid: '', bulk: false, op: { t: 'move_state', move: 'm3', self: 0, targets: [0, 2, 5], finished: true } };
    const commit: ShardCommand = { uid: '0123456789abcdef', bulk: false, op: { t: 'delete', ids: ['a', 'é'], move: { move: 'm3', cursor: 'zz' } } };
    for (const c of [state, done, commit]) {
      const b = encodeCommand(c);
      expect(b[0]).toBe(2);
      expect(decodeCommand(b)).toEqual(c);
    }
    const plain = encodeCommand({ uid: '0123456789abcdef', bulk: false, op: { t: 'delete', ids: ['a'] } });
    expect(plain[0]).toBe(1);
    // A build without moves reads version 1 only, so it stops at a move's entry instead of applying it
    // as a plain delete (which would drop the cursor); and neither kind passes under the other's version.
    const commitAsV1 = Buffer.from(encodeCommand(commit));
    commitAsV1[0] = 1;
    expect(() => decodeCommand(commitAsV1)).toThrow(/version 1 carries a delete of a move/);
    const plainAsV2 = Buffer.from(plain);
    plainAsV2[0] = 2;
    expect(() => decodeCommand(plainAsV2)).toThrow(/version 2 carries a delete/);
    const stateWithUid = Buffer.concat([Buffer.from([2, 0, 1, 0]), Buffer.from('u'), Buffer.from(encodeCommand(state)).subarray(4)]);
    expect(() => decodeCommand(stateWithUid)).toThrow(/carries a move_state/);
  });

  it('a batch handed out is version 3 (a build that knows version 2 stops at it), and is refused under another version', () => {
    const out: ShardCommand = { uid: '', bulk: false, op: { t: 'move_out', move: 'm3', uid: '0123456789abcdef', ids: ['a', 'é', 'zz'] } };
    const b = encodeCommand(out);
    expect(b[0]).toBe(3);
    expect(decodeCommand(b)).toEqual(out);
    const asV2 = Buffer.from(b);
    asV2[0] = 2;
    expect(() => decodeCommand(asV2)).toThrow(/version 2 carries a move_out/);
    const state = Buffer.from(encodeCommand({ uid: '', bulk: false, op: { t: 'move_state', move: 'm3', self: 0, targets: [0, 2], finished: false } }));
    state[0] = 3;
    expect(() => decodeCommand(state)).toThrow(/version 3 carries a move_state/);
  });
});
