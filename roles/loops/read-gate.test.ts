import { describe, expect, it } from 'vitest';
import type { ReadGraph, ReadViewHandle } from '../../core/collection/shared-reads.js';
import { ReadGate, ReadGateView, type LocalReadSource } from './read-gate.js';

/** A database stand-in: its handles name it, and it records what the loops noted and whose lanes went back. */
function source(name: string): LocalReadSource & { noted: string[]; released: number[] } {
  const noted: string[] = [];
  const released: number[] = [];
  return {
    noted,
    released,
    releaseLanesOf: (thread) => { released.push(thread); return 1; },
    readView: (c) => ({ uid: `${name}/${c}` }) as unknown as ReadViewHandle,
    readGraph: (uid) => ({ epoch: 1, data: null, from: `${name}/${uid}` }) as unknown as ReadGraph,
    noteRead: (uid) => { noted.push(uid); },
  };
}

describe('the read gate between the engine thread and its loops', () => {
  it('is open only while the engine thread names a database, and tells a loop which one', () => {
    const gate = new ReadGate();
    const loop = new ReadGateView(gate.buffer);
    let current: LocalReadSource | null = null;
    gate.follow(() => current);
    // Nothing served yet: closed, and no view is handed out.
    expect(loop.enter(0)).toBeNull();
    expect(gate.readView('c')).toBeNull();

    const a = source('a');
    current = a;
    gate.update();
    const got = gate.readView('c')!;
    expect(got).toEqual({ handle: { uid: 'a/c' }, generation: 1 });
    const s = loop.enter(1)!;
    expect(s).toBeGreaterThan(0);
    expect(loop.still(s)).toBe(true);
    // Nothing changed: an update is no change.
    gate.update();
    expect(loop.still(s)).toBe(true);

    // Closed (a bootstrap in place, a restore): a search that began before is not answered, none begins.
    current = null;
    gate.update();
    expect(loop.still(s)).toBe(false);
    expect(loop.enter(1)).toBeNull();
    expect(gate.readView('c')).toBeNull();
    expect(gate.readGraph('a/c', 1)).toBeNull();

    // The same database again: same generation (its views stay good), a new state.
    current = a;
    gate.update();
    const s2 = loop.enter(1)!;
    expect(s2).toBeGreaterThan(s);
    expect(loop.generation).toBe(1);

    // Another database (a re-bootstrap's swap): a new generation; the old one's views get nothing.
    const b = source('b');
    current = b;
    gate.update();
    expect(loop.still(s2)).toBe(false);
    expect(loop.enter(1)).toBeNull();
    expect(loop.generation).toBe(2);
    expect(loop.enter(2)).toBeGreaterThan(s2);
    expect(gate.readView('c')).toEqual({ handle: { uid: 'b/c' }, generation: 2 });
    expect(gate.readGraph('x', 1)).toBeNull();
    expect(gate.readGraph('x', 2)).toMatchObject({ from: 'b/x' });
    gate.noteRead('x', 1);
    gate.noteRead('y', 2);
    expect(a.noted).toEqual([]);
    expect(b.noted).toEqual(['y']);
  });

  it('gives a dead loop\'s lanes back in the database read, or the last one read while closed', () => {
    const gate = new ReadGate();
    let current: LocalReadSource | null = null;
    gate.follow(() => current);
    expect(gate.releaseLanesOf(7)).toBe(0);
    const a = source('a');
    current = a;
    gate.update();
    expect(gate.releaseLanesOf(7)).toBe(1);
    // Closed (a restore): the loops may read `a` again once it opens, so its lanes still matter.
    current = null;
    gate.update();
    expect(gate.releaseLanesOf(8)).toBe(1);
    const b = source('b');
    current = b;
    gate.update();
    expect(gate.releaseLanesOf(9)).toBe(1);
    expect([a.released, b.released]).toEqual([[7, 8], [9]]);
  });
});
