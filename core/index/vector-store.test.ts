import { describe, expect, it } from 'vitest';
import { ENGINE_LANES, LANES_PER_MEMORY, normalize, VectorStore } from './vector-store.js';

describe('VectorStore', () => {
  it('pads slots to a multiple of 4 and reads back what was added', () => {
    const store = VectorStore.create({ dim: 5 });
    expect(store.paddedDim).toBe(8);
    const a = store.add([1, 2, 3, 4, 5]);
    const b = store.add(new Float32Array([6, 7, 8, 9, 10]));
    expect([a, b, store.count]).toEqual([0, 1, 2]);
    expect(Array.from(store.view(1))).toEqual([6, 7, 8, 9, 10]);
    const padded = new Float32Array(store.memory.buffer, store.offsetOf(0), store.paddedDim);
    expect(Array.from(padded)).toEqual([1, 2, 3, 4, 5, 0, 0, 0]);
  });

  it('grows its memory and keeps every slot readable after the grow', () => {
    const store = VectorStore.create({ dim: 100, initialSlots: 1 });
    const before = store.memory.buffer.byteLength;
    for (let i = 0; i < 2000; i++) store.add(Array.from({ length: 100 }, (_, j) => i + j));
    expect(store.memory.buffer.byteLength).toBeGreaterThan(before);
    expect(store.view(0)[3]).toBe(3);
    expect(store.view(1999)[99]).toBe(1999 + 99);
  });

  it('refuses a vector of the wrong dimension and stops at its declared maximum', () => {
    const store = VectorStore.create({ dim: 4096, maxBytes: 16 * 65_536, initialSlots: 1 });
    expect(() => store.add([1, 2])).toThrow(/dimensions/);
    const v = new Float32Array(4096);
    expect(() => {
      for (let i = 0; i < 1000; i++) store.add(v);
    }).toThrow(expect.objectContaining({ code: 'limit_exceeded' }));
  });

  it('re-opens the same memory read-only with its own scratch lane and sees later appends', () => {
    const store = VectorStore.create({ dim: 3 });
    store.add([1, 2, 3]);
    const other = VectorStore.open(store.handle());
    expect(other.readOnly).toBe(true);
    expect(other.lane.index).not.toBe(store.lane.index);
    expect(Array.from(other.view(0))).toEqual([1, 2, 3]);
    store.add([4, 5, 6]);
    expect(other.count).toBe(2);
    expect(() => other.add([0, 0, 0])).toThrow(/read-only/);
    const lane = other.lane.index;
    other.close();
    expect(VectorStore.open(store.handle()).lane.index).toBe(lane);
  });

  it('gives back the lanes a thread that ended held, and only those; a view\'s close frees only its own lane', () => {
    const store = VectorStore.create({ dim: 3 });
    const loopLanes = LANES_PER_MEMORY - ENGINE_LANES;
    const open = (thread: number) => VectorStore.open(store.handle(), { lanes: 'loop', thread });
    const a = Array.from({ length: loopLanes / 2 }, () => open(1));
    const b = Array.from({ length: loopLanes / 2 }, () => open(2));
    expect(() => open(3)).toThrow(/scratch lanes of the vector store for request loops/);
    // Thread 1 ended without closing its views: its lanes go back, thread 2's stay.
    expect(store.releaseLanesOf(1)).toBe(loopLanes / 2);
    expect(store.releaseLanesOf(1)).toBe(0);
    const again = a.map(() => open(3));
    expect(again.map((v) => v.lane.index).sort()).toEqual(a.map((v) => v.lane.index).sort());
    expect(() => open(3)).toThrow(/in use/);
    // A view of the ended thread closing late (never in practice) leaves thread 3's lane alone.
    a[0].close();
    expect(() => open(4)).toThrow(/in use/);
    b[0].close();
    expect(open(4).lane.index).toBe(b[0].lane.index);
    // The writer's engine lane is this thread's, untouched by the others' releases.
    expect(store.releaseLanesOf(2)).toBe(loopLanes / 2 - 1);
    expect(store.add([1, 2, 3])).toBe(0);
    expect(store.loadQuery([1, 2, 3])).toBe(store.lane.q);
  });

  it('normalize scales to unit length and leaves a zero vector alone', () => {
    const v = normalize(new Float32Array([3, 4]));
    expect(v[0]).toBeCloseTo(0.6, 6);
    expect(v[1]).toBeCloseTo(0.8, 6);
    expect(Array.from(normalize(new Float32Array(3)))).toEqual([0, 0, 0]);
  });
});
