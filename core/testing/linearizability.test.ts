import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import type { Clock } from '../base/clock.js';
import { Prng } from '../base/prng.js';
import { checkLinearizable, kvRegisterModel, UNKNOWN, type KvInput, type KvOutput, type Model, type Operation } from './linearizability.js';

type Op = Operation<KvInput, KvOutput>;

const put = (clientId: number, key: string, value: string, call: number, ret: number): Op => ({ clientId, input: { op: 'put', key, value }, call, output: {}, return: ret });
const get = (clientId: number, key: string, value: string | null, call: number, ret: number): Op => ({ clientId, input: { op: 'get', key }, call, output: { value }, return: ret });
const del = (clientId: number, key: string, call: number, ret: number): Op => ({ clientId, input: { op: 'delete', key }, call, output: {}, return: ret });
/** A put whose client timed out: it may apply at any point after its call, or never. */
const lostPut = (clientId: number, key: string, value: string, call: number): Op => ({ clientId, input: { op: 'put', key, value }, call, output: UNKNOWN, return: Infinity });
const lostDel = (clientId: number, key: string, call: number): Op => ({ clientId, input: { op: 'delete', key }, call, output: UNKNOWN, return: Infinity });

const check = (history: Op[], timeoutMs = 5_000) => checkLinearizable(kvRegisterModel, history, { timeoutMs });

describe('checkLinearizable on a key-value register: classic cases', () => {
  it('flags a stale read after an acknowledged write', () => {
    const r = check([put(1, 'x', 'a', 0, 1), put(1, 'x', 'b', 2, 3), get(2, 'x', 'a', 4, 5)]);
    expect(r.verdict).toBe('violation');
    expect(r.ok).toBe(false);
    if (r.verdict !== 'violation') return;
    expect(r.key).toBe('x');
    expect(r.explanation).toContain('get("x") -> "a"');
    expect(r.explanation).toContain('State after it: "b"');
  });

  it('flags a read of absent after an acknowledged write', () => {
    expect(check([put(1, 'x', 'a', 0, 1), get(2, 'x', null, 2, 3)]).verdict).toBe('violation');
  });

  it('accepts a get concurrent with a put in either order', () => {
    expect(check([put(1, 'x', 'a', 0, 10), get(2, 'x', null, 1, 5)]).ok).toBe(true);
    expect(check([put(1, 'x', 'a', 0, 10), get(2, 'x', 'a', 1, 5)]).ok).toBe(true);
    // Two reads inside one write: once one saw the new value, a later one cannot see the old.
    expect(check([put(1, 'x', 'a', 0, 10), get(2, 'x', 'a', 1, 2), get(3, 'x', null, 3, 4)]).verdict).toBe('violation');
    expect(check([put(1, 'x', 'a', 0, 10), get(2, 'x', null, 1, 2), get(3, 'x', 'a', 3, 4)]).ok).toBe(true);
  });

  it('treats operations that touch (one returns when the other is called) as concurrent', () => {
    expect(check([put(1, 'x', 'a', 0, 5), get(2, 'x', null, 5, 6)]).ok).toBe(true);
    expect(check([put(1, 'x', 'a', 0, 5), get(2, 'x', null, 6, 7)]).verdict).toBe('violation');
  });

  it('flags a read of a value no put wrote', () => {
    const r = check([put(1, 'x', 'a', 0, 1), get(2, 'x', 'zzz', 2, 3)]);
    expect(r.verdict).toBe('violation');
    if (r.verdict === 'violation') expect(r.explanation).toContain('impossible in this state');
  });

  it('accepts a timed-out put whose value is read later', () => {
    expect(check([put(1, 'x', 'a', 0, 1), lostPut(1, 'x', 'b', 2), get(2, 'x', 'b', 100, 101)]).ok).toBe(true);
  });

  it('accepts a timed-out put that is never read', () => {
    expect(check([put(1, 'x', 'a', 0, 1), lostPut(1, 'x', 'b', 2), get(2, 'x', 'a', 100, 101), get(3, 'x', 'a', 200, 201)]).ok).toBe(true);
  });

  it('lets a timed-out put apply late, but not be undone once seen', () => {
    const base = [put(1, 'x', 'a', 0, 1), lostPut(1, 'x', 'b', 2), get(2, 'x', 'a', 50, 51), get(2, 'x', 'b', 60, 61)];
    expect(check(base).ok).toBe(true);
    expect(check([...base, get(3, 'x', 'a', 70, 71)]).verdict).toBe('violation');
  });

  it('lets a timed-out put explain a read that returned the instant it was sent', () => {
    expect(check([get(2, 'x', 'b', 0, 5), lostPut(1, 'x', 'b', 5)]).ok).toBe(true);
  });

  it('flags a timed-out put read before it was sent', () => {
    expect(check([get(2, 'x', 'b', 0, 1), lostPut(1, 'x', 'b', 2)]).verdict).toBe('violation');
  });

  it('flags a delete followed by a read of the old value', () => {
    expect(check([put(1, 'x', 'a', 0, 1), del(1, 'x', 2, 3), get(2, 'x', 'a', 4, 5)]).verdict).toBe('violation');
    expect(check([put(1, 'x', 'a', 0, 1), del(1, 'x', 2, 3), get(2, 'x', null, 4, 5)]).ok).toBe(true);
    // A timed-out delete may explain an absent read, and once it did, the old value is gone.
    expect(check([put(1, 'x', 'a', 0, 1), lostDel(1, 'x', 2), get(2, 'x', 'a', 4, 5), get(2, 'x', null, 6, 7)]).ok).toBe(true);
    expect(check([put(1, 'x', 'a', 0, 1), lostDel(1, 'x', 2), get(2, 'x', null, 4, 5), get(2, 'x', 'a', 6, 7)]).verdict).toBe('violation');
  });

  it('checks each key alone and names the one that fails', () => {
    const r = check([put(1, 'x', 'a', 0, 1), put(1, 'y', 'b', 2, 3), get(2, 'y', 'b', 4, 5), get(2, 'x', 'b', 6, 7)]);
    expect(r.verdict).toBe('violation');
    if (r.verdict === 'violation') expect(r.key).toBe('x');
  });

  it('says unknown, never ok, when it runs out of time', () => {
    let reads = 0;
    const clock: Clock = { nowMs: () => 0, monotonicMs: () => (reads++ === 0 ? 0 : 1e12) };
    const r = checkLinearizable(kvRegisterModel, [put(1, 'x', 'a', 0, 1), get(2, 'x', 'a', 2, 3)], { timeoutMs: 10, clock });
    expect(r).toMatchObject({ ok: false, verdict: 'unknown', key: 'x' });
  });

  it('rejects malformed histories', () => {
    expect(() => check([put(1, 'x', 'a', 5, 1)])).toThrow(/before call/);
    expect(() => check([put(1, 'x', 'a', 0, Infinity)])).toThrow(/finite return/);
  });

  it('keeps many timed-out writes that were read from multiplying the search', () => {
    // 24 concurrent lost puts, each read once in a scrambled order, then a read of one of them again
    // after another was seen: every value was written, yet the last read is stale.
    const ops: Op[] = [];
    const n = 24;
    for (let i = 0; i < n; i++) ops.push(lostPut(i, 'x', `v${i}`, i));
    const order = Array.from({ length: n }, (_, i) => (i * 7) % n);
    order.forEach((v, j) => ops.push(get(100, 'x', `v${v}`, 100 + 2 * j, 101 + 2 * j)));
    expect(check(ops, 2_000).ok).toBe(true);
    const r = check([...ops, get(101, 'x', `v${order[0]}`, 1000, 1001)], 2_000);
    expect(r.verdict).toBe('violation');
  });

  it('does not try every subset of interchangeable timed-out writes', () => {
    // 20 lost deletes, then 20 rounds of a put and an absent read (each needing one of the deletes),
    // then a read of a value overwritten long ago.
    const ops: Op[] = [];
    const n = 20;
    for (let i = 0; i < n; i++) ops.push(lostDel(i, 'x', i));
    for (let j = 0; j < n; j++) ops.push(put(100, 'x', `v${j}`, 100 + 4 * j, 101 + 4 * j), get(101, 'x', null, 102 + 4 * j, 103 + 4 * j));
    expect(check(ops, 2_000).ok).toBe(true);
    expect(check([...ops, get(102, 'x', 'v0', 1000, 1001)], 2_000).verdict).toBe('violation');
  });

  it('works with a model that has no partition and no describe', () => {
    // A counter: inputs are increments, outputs the value after.
    const counter: Model<number, number, number> = {
      init: () => 0,
      step: (s, inc, out) => ({ ok: out === UNKNOWN || out === s + inc, state: s + inc }),
      equal: (a, b) => a === b,
    };
    const op = (c: number, inc: number, out: number | typeof UNKNOWN, call: number, ret: number): Operation<number, number> => ({ clientId: c, input: inc, call, output: out, return: ret });
    expect(checkLinearizable(counter, [op(1, 1, 2, 0, 10), op(2, 1, 1, 1, 9)]).ok).toBe(true);
    expect(checkLinearizable(counter, [op(1, 1, 2, 0, 10), op(2, 1, UNKNOWN, 1, Infinity)]).ok).toBe(true);
    const r = checkLinearizable(counter, [op(1, 1, 1, 0, 1), op(2, 1, 1, 2, 3)]);
    expect(r).toMatchObject({ ok: false, verdict: 'violation' });
    if (r.verdict === 'violation') expect(r.key).toBeUndefined();
  });
});

// ---- Simulated histories -------------------------------------------------------------------------

interface SimOptions {
  readonly clients: number;
  readonly keys: number;
  readonly opsPerClient: number;
  /** Probability that a client times out on an operation (which then applies or not, maybe late). */
  readonly lossP: number;
}

/**
 * Clients run operations one after another against one linearizable map: each takes effect at an
 * instant between its call and its return. A lost operation returns UNKNOWN; it takes effect at a
 * random instant after its call (possibly after the client moved on) or never. Integer times make
 * ties common; operations taking effect at one instant run in a random order, which the real-time
 * order allows since the touching ones count as concurrent.
 */
function simulate(seed: number, o: SimOptions): Op[] {
  const rng = new Prng(seed);
  const ops: Op[] = [];
  const effects: Array<{ at: number; tie: number; index: number }> = [];
  let written = 0;
  for (let c = 0; c < o.clients; c++) {
    let t = rng.int(5);
    for (let j = 0; j < o.opsPerClient; j++) {
      const key = `k${rng.int(o.keys)}`;
      const roll = rng.next();
      const input: KvInput = roll < 0.5 ? { op: 'get', key } : roll < 0.85 ? { op: 'put', key, value: `v${written++}` } : { op: 'delete', key };
      const call = t;
      const lost = rng.next() < o.lossP;
      if (lost) {
        if (rng.next() < 0.5) effects.push({ at: call + rng.int(40), tie: rng.next(), index: ops.length });
        ops.push({ clientId: c, input, call, output: UNKNOWN, return: Infinity });
        t = call + 5 + rng.int(10); // the client gives up and moves on
      } else {
        const at = call + rng.int(6);
        const ret = at + rng.int(6);
        effects.push({ at, tie: rng.next(), index: ops.length });
        ops.push({ clientId: c, input, call, output: {}, return: ret });
        t = ret + rng.int(4);
      }
    }
  }
  effects.sort((a, b) => a.at - b.at || a.tie - b.tie);
  const map = new Map<string, string>();
  for (const { index } of effects) {
    const op = ops[index];
    const { input } = op;
    if (input.op === 'put') map.set(input.key, input.value);
    else if (input.op === 'delete') map.delete(input.key);
    else if (op.output !== UNKNOWN) ops[index] = { ...op, output: { value: map.get(input.key) ?? null } };
  }
  return ops;
}

const knownGets = (ops: Op[]): number[] => ops.flatMap((op, i) => (op.input.op === 'get' && op.output !== UNKNOWN ? [i] : []));

const withValue = (ops: Op[], i: number, value: string | null): Op[] => ops.map((op, j) => (j === i ? { ...op, output: { value } } : op));

/** A known get and a value some known put wrote that another known write surely overwrote before it. */
function staleRead(ops: Op[]): { index: number; value: string } | null {
  for (const g of knownGets(ops)) {
    const read = ops[g];
    for (const w of ops) {
      if (w.output === UNKNOWN || w.input.op === 'get' || w.input.key !== read.input.key || w.return >= read.call) continue;
      for (const p of ops) {
        if (p.output === UNKNOWN || p.input.op !== 'put' || p.input.key !== read.input.key || p.return >= w.call) continue;
        return { index: g, value: p.input.value };
      }
    }
  }
  return null;
}

/** The exact oracle: tries every order of every subset that holds all known operations. */
function bruteForce(ops: Op[]): boolean {
  const placed = new Array<boolean>(ops.length).fill(false);
  const known = ops.filter((op) => op.output !== UNKNOWN).length;
  const go = (state: string | null, placedKnown: number): boolean => {
    if (placedKnown === known) return true;
    for (let x = 0; x < ops.length; x++) {
      if (placed[x]) continue;
      if (ops.some((y, j) => !placed[j] && y.output !== UNKNOWN && y.return < ops[x].call)) continue;
      const r = kvRegisterModel.step(state, ops[x].input, ops[x].output);
      if (!r.ok) continue;
      placed[x] = true;
      const found = go(r.state, placedKnown + (ops[x].output === UNKNOWN ? 0 : 1));
      placed[x] = false;
      if (found) return true;
    }
    return false;
  };
  return go(null, 0);
}

/** A small one-key history with random times and outputs, values repeating, some outcomes unknown. */
function randomHistory(seed: number): Op[] {
  const rng = new Prng(seed);
  const values = ['a', 'b', 'c'];
  const n = 1 + rng.int(7);
  return Array.from({ length: n }, (_, c): Op => {
    const call = rng.int(12);
    const ret = call + rng.int(6);
    const roll = rng.next();
    const lost = rng.next() < 0.3;
    if (roll < 0.5) return lost ? { ...get(c, 'x', null, call, Infinity), output: UNKNOWN } : get(c, 'x', rng.int(4) === 0 ? null : values[rng.int(3)], call, ret);
    if (roll < 0.85) return lost ? lostPut(c, 'x', values[rng.int(3)], call) : put(c, 'x', values[rng.int(3)], call, ret);
    return lost ? lostDel(c, 'x', call) : del(c, 'x', call, ret);
  });
}

const small: SimOptions = { clients: 6, keys: 3, opsPerClient: 12, lossP: 0.15 };

describe('checkLinearizable on simulated linearizable registers', () => {
  it('accepts every history a linearizable register produces', () => {
    fc.assert(
      fc.property(fc.integer({ min: 0, max: 2 ** 31 - 1 }), (seed) => {
        const r = check(simulate(seed, small));
        expect(r, `seed ${seed}`).toEqual({ ok: true, verdict: 'ok' });
      }),
      { numRuns: 300 },
    );
  });

  it('flags a read of a value never written', () => {
    fc.assert(
      fc.property(fc.integer({ min: 0, max: 2 ** 31 - 1 }), fc.nat(), (seed, pick) => {
        const ops = simulate(seed, small);
        const gets = knownGets(ops);
        fc.pre(gets.length > 0);
        const r = check(withValue(ops, gets[pick % gets.length], 'never-written'));
        expect(r.verdict, `seed ${seed}`).toBe('violation');
      }),
      { numRuns: 300 },
    );
  });

  it('flags a read of a value overwritten before the read began', () => {
    let tried = 0;
    fc.assert(
      fc.property(fc.integer({ min: 0, max: 2 ** 31 - 1 }), (seed) => {
        const ops = simulate(seed, small);
        const stale = staleRead(ops);
        fc.pre(stale !== null);
        if (stale === null) return;
        tried++;
        const r = check(withValue(ops, stale.index, stale.value));
        expect(r.verdict, `seed ${seed}`).toBe('violation');
      }),
      { numRuns: 300 },
    );
    expect(tried).toBeGreaterThan(100);
  });

  it('agrees with an exhaustive search on small histories', () => {
    let violations = 0;
    let runs = 0;
    fc.assert(
      fc.property(fc.integer({ min: 0, max: 2 ** 31 - 1 }), fc.boolean(), (seed, simulated) => {
        let ops = randomHistory(seed);
        if (simulated) {
          // Near-linearizable: a simulated history, one read perhaps moved to another value.
          ops = simulate(seed, { clients: 3, keys: 1, opsPerClient: 3, lossP: 0.3 });
          const gets = knownGets(ops);
          const rng = new Prng(seed ^ 0x5eed);
          if (gets.length > 0 && rng.next() < 0.5) ops = withValue(ops, gets[rng.int(gets.length)], rng.int(3) === 0 ? null : `v${rng.int(6)}`);
        }
        const want = bruteForce(ops);
        const got = check(ops);
        runs++;
        if (!want) violations++;
        expect(got.verdict, `seed ${seed} simulated ${simulated}`).toBe(want ? 'ok' : 'violation');
      }),
      { numRuns: 2000 },
    );
    expect(violations).toBeGreaterThan(runs / 5);
    expect(violations).toBeLessThan((runs * 4) / 5);
  });

  it('checks thousands of operations over dozens of keys quickly, with lost writes', () => {
    const big: SimOptions = { clients: 40, keys: 30, opsPerClient: 100, lossP: 0.1 };
    for (const seed of [1, 2, 3]) {
      const ops = simulate(seed, big);
      expect(ops.length).toBe(4000);
      expect(check(ops, 5_000), `seed ${seed}`).toEqual({ ok: true, verdict: 'ok' });
      const stale = staleRead(ops);
      expect(stale).not.toBeNull();
      if (stale === null) return;
      const r = check(withValue(ops, stale.index, stale.value), 5_000);
      expect(r.verdict, `seed ${seed}`).toBe('violation');
    }
  });
});
