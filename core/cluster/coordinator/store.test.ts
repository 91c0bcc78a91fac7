import { createHash } from 'node:crypto';
import { describe, expect, it } from 'vitest';
import { FaultyFileSystem, SimulatedCrash } from '../../testing/faulty-fs.js';
import { parseRegister, register, seedState, type CoordinatorState } from './state.js';
import { CoordinatorStateCorruption, decodeState, encodeState, FileStore } from './store.js';

const PATH = '/etc/svc/coordinator.json';
const state = (): CoordinatorState => {
  const s = seedState(['http://s0:6333', 'http://s1:6333'], new Map([[0, ['https://r0']]]));
  return { ...register(s, parseRegister({ url: 'http://s2:6333' })).state, lastScaleOutMs: 1_700_000_000_000 };
};
const text = (s: CoordinatorState): string => new TextDecoder().decode(encodeState(s));
const reseal = (body: Record<string, unknown>): Uint8Array => {
  // What a careless hand edit that recomputed the sum would write: checks beyond the sum still apply.
  const { sha256: _drop, ...rest } = body;
  const sum = createHash('sha256').update(JSON.stringify(rest, null, 2)).digest('hex');
  return new TextEncoder().encode(JSON.stringify({ ...rest, sha256: sum }, null, 2));
};

describe('coordinator state file', () => {
  it('round-trips a state, readable by a person', () => {
    const s = state();
    expect(decodeState(encodeState(s), PATH)).toEqual(s);
    expect(text(s)).toContain('"format": "svc-coordinator-state"');
    expect(text(s)).toContain('"next_id": 3');
  });

  it('refuses damage with the file and the fault named, never an empty state', () => {
    const good = JSON.parse(text(state())) as Record<string, any>;
    const cases: [Uint8Array, RegExp][] = [
      [new TextEncoder().encode('{"format": "svc-coord'), /not UTF-8 JSON/],
      [new Uint8Array([0xff, 0xfe]), /not UTF-8 JSON/],
      [new TextEncoder().encode('[]'), /not a JSON object/],
      [new TextEncoder().encode(text(state()).replace('"next_id": 3', '"next_id": 2')), /sha256 does not match/],
      [reseal({ ...good, format: 'other' }), /format is not/],
      [reseal({ ...good, format_version: 2 }), /format_version is 2/],
      [reseal({ ...good, next_id: 2 }), /shards\[2\]\.id 2 is not below next_id 2/],
      [reseal({ ...good, version: -1 }), /version is not a non-negative integer/],
      [reseal({ ...good, shards: [good.shards[0], good.shards[0]] }), /shard id 0 appears twice|appears twice/],
      [reseal({ ...good, shards: [{ ...good.shards[0], state: 'gone' }] }), /state is not one of/],
      [reseal({ ...good, shards: [{ ...good.shards[0], url: 'http://S0:6333/' }] }), /not in canonical form/],
      [reseal({ ...good, shards: [{ ...good.shards[0], url: 'nope' }] }), /not a URL/],
      [reseal({ ...good, shards: [{ ...good.shards[0], replicas: ['http://s1:6333'] }, good.shards[1]] }), /http:\/\/s1:6333 appears twice/],
    ];
    for (const [bytes, why] of cases) {
      let err: unknown;
      try {
        decodeState(bytes, PATH);
      } catch (e) {
        err = e;
      }
      expect(err, String(why)).toBeInstanceOf(CoordinatorStateCorruption);
      expect((err as Error).message).toMatch(why);
      expect((err as Error).message).toContain(PATH);
    }
  });

  it('a flipped bit anywhere is caught', async () => {
    const bytes = encodeState(state());
    for (let bit = 0; bit < bytes.length * 8; bit += 7) {
      const b = bytes.slice();
      b[bit >> 3] ^= 1 << (bit & 7);
      expect(() => decodeState(b, PATH), `bit ${bit}`).toThrow(CoordinatorStateCorruption);
    }
  });

  it('a second store on the same file is refused while the first holds it', async () => {
    const fs = new FaultyFileSystem(1);
    const a = await FileStore.open(fs, PATH);
    await expect(FileStore.open(fs, PATH)).rejects.toMatchObject({ code: 'unavailable', message: expect.stringContaining('in use') });
    await a.close();
    const b = await FileStore.open(fs, PATH);
    expect(await b.load()).toBeNull();
    await b.close();
  });

  it('after a power loss at any point of a save, the file holds the old state or the new one', async () => {
    const before = state();
    const after = register(before, parseRegister({ url: 'http://s3:6333' })).state;
    for (let point = 0; point < 40; point++) {
      const fs = new FaultyFileSystem(100 + point);
      const setup = await FileStore.open(fs, PATH);
      await setup.save(before);
      await setup.close();
      const store = await FileStore.open(fs, PATH);
      fs.crashAfter(point);
      let acked = false;
      try {
        await store.save(after);
        acked = true;
      } catch (e) {
        if (!(e instanceof SimulatedCrash)) throw e;
      }
      if (!fs.crashed) fs.crash();
      fs.restart();
      const reopened = await FileStore.open(fs, PATH);
      const loaded = await reopened.load();
      if (acked) expect(loaded, `crash point ${point}`).toEqual(after);
      else expect([before, after], `crash point ${point}`).toContainEqual(loaded);
      await reopened.close();
    }
  });
});
