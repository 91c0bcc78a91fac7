import { systemClock, type Clock } from '../base/clock.js';
import { Prng } from '../base/prng.js';

/**
 * A linearizability checker for histories recorded against a real cluster (issue 17): Wing and Gong's
 * search for a legal sequential order, with Lowe's memo of (linearized set, model state) pairs, after
 * Porcupine (anishathalye/porcupine), and P-compositionality: a model may split the history into
 * independent parts (one per key) that are checked alone.
 *
 * Operations whose outcome is unknown (a timeout, a cut connection, a 503 that may have applied) are
 * first-class: such an operation may take effect at any instant after its call, or never. The search
 * succeeds once every operation with a known outcome is placed; the unknown ones are placed only where
 * they help. Between two known operations it places the smallest runs of unknown ones that reach each
 * model state, and its memo treats a configuration that used a superset of another's unknown operations
 * (same known set, equal state) as already explored, and it spends pending unknown operations with
 * equal inputs in one canonical order, so timed-out writes do not multiply the search.
 */

/** The output of an operation whose outcome is unknown; its return time is taken as Infinity. */
export const UNKNOWN: unique symbol = Symbol('unknown outcome');
export type Unknown = typeof UNKNOWN;

/**
 * One client operation: `call` and `return` are instants on one monotone time line (any unit). An
 * operation that returns at the instant another is called counts as concurrent with it (either order).
 */
export interface Operation<I, O> {
  readonly clientId: number;
  readonly input: I;
  /** When the client sent it. */
  readonly call: number;
  /** What the client saw, or UNKNOWN when it never learned. */
  readonly output: O | Unknown;
  /** When the client saw the output; Infinity (and ignored) when the output is UNKNOWN. */
  readonly return: number;
}

export type History<I, O> = readonly Operation<I, O>[];

/**
 * A sequential specification. States are values: `step` returns a new state and never mutates.
 * Inputs are plain data: the checker treats unknown-outcome operations whose inputs have the same
 * JSON text as interchangeable.
 */
export interface Model<I, O, S> {
  /**
   * Splits a history into parts that are linearizable as a whole iff each is (one per key for a
   * key-value store), by name. It may also drop operations of unknown outcome that provably cannot
   * matter (see kvRegisterModel). Without it the history is checked as one part.
   */
  partition?(history: History<I, O>): ReadonlyMap<string, History<I, O>>;
  init(): S;
  /**
   * Whether `input` can return `output` in `state`, and the state after. With output UNKNOWN it must
   * accept (any outcome is possible) and return the state after the operation takes effect.
   */
  step(state: S, input: I, output: O | Unknown): { readonly ok: boolean; readonly state: S };
  equal(a: S, b: S): boolean;
  describeOperation?(input: I, output: O | Unknown): string;
  describeState?(state: S): string;
}

/**
 * `ok` is true only when the history is proven linearizable; an exhausted time budget is `ok: false`
 * with verdict 'unknown' (never a pass). `key` names the part a violation (or the time out) was in.
 */
export type CheckResult =
  | { readonly ok: true; readonly verdict: 'ok' }
  | { readonly ok: false; readonly verdict: 'violation'; readonly key?: string; readonly explanation: string }
  | { readonly ok: false; readonly verdict: 'unknown'; readonly key?: string; readonly explanation: string };

export interface CheckOptions {
  /** The whole check's time budget; past it the verdict is 'unknown'. */
  readonly timeoutMs?: number;
  /** Measures the budget (monotonicMs); the system clock by default. */
  readonly clock?: Clock;
}

export const CHECK_TIMEOUT_MS_DEFAULT = 60_000;
/** Search steps between two readings of the clock. */
const CLOCK_CHECK_STEPS = 256;
/** Operations of the longest linearizable prefix shown in an explanation. */
const EXPLAIN_PREFIX_OPS = 8;

export function checkLinearizable<I, O, S>(model: Model<I, O, S>, history: History<I, O>, options: CheckOptions = {}): CheckResult {
  for (const op of history) validate(op);
  const clock = options.clock ?? systemClock;
  const deadlineMs = clock.monotonicMs() + (options.timeoutMs ?? CHECK_TIMEOUT_MS_DEFAULT);
  const numbers = new Map<Operation<I, O>, number>(history.map((op, i) => [op, i]));
  const parts = model.partition?.(history) ?? new Map([['', history]]);
  const timedOut: string[] = [];
  for (const [key, part] of parts) {
    const search = new PartitionSearch(model, part, clock, deadlineMs);
    const outcome = search.run();
    if (outcome === 'ok') continue;
    if (outcome === 'timeout') {
      timedOut.push(key);
      // Later parts get no time either; a violation found before the deadline still wins.
      continue;
    }
    const where = model.partition === undefined ? '' : `key ${JSON.stringify(key)}: `;
    return { ok: false, verdict: 'violation', ...(model.partition === undefined ? {} : { key }), explanation: where + search.explain(numbers) };
  }
  if (timedOut.length === 0) return { ok: true, verdict: 'ok' };
  const keys = model.partition === undefined ? '' : ` (undecided keys: ${timedOut.map((k) => JSON.stringify(k)).join(', ')})`;
  return {
    ok: false,
    verdict: 'unknown',
    ...(model.partition === undefined ? {} : { key: timedOut[0] }),
    explanation: `ran out of time after ${options.timeoutMs ?? CHECK_TIMEOUT_MS_DEFAULT} ms${keys}; no violation found in the rest`,
  };
}

function validate(op: Operation<unknown, unknown>): void {
  if (!Number.isFinite(op.call)) throw new Error(`linearizability: call time ${op.call} is not finite`);
  if (op.output === UNKNOWN) return;
  if (!Number.isFinite(op.return)) throw new Error('linearizability: an operation with a known output needs a finite return time (use UNKNOWN for timeouts)');
  if (op.return < op.call) throw new Error(`linearizability: return ${op.return} before call ${op.call}`);
}

class OutOfTime extends Error {}

/** A set of placed unknown-outcome operations and the state they lead to, with the order they ran in. */
interface Config<S> {
  readonly unknownBits: Uint32Array;
  readonly state: S;
  readonly run: readonly number[];
}

/** A node of the depth-first search: the known operation placed last, after its run of unknown ones. */
interface Frame<S> {
  readonly parent: Frame<S> | null;
  readonly knownBits: Uint32Array;
  readonly knownCount: number;
  readonly hash: number;
  readonly unknownBits: Uint32Array;
  readonly state: S;
  readonly run: readonly number[];
  /** Index into ops of the known operation placed last; -1 at the root. */
  readonly op: number;
  children?: Array<{ config: Config<S>; op: number; state: S }>;
  next: number;
}

interface Visit<S> {
  readonly knownBits: Uint32Array;
  unknownBits: Uint32Array;
  readonly state: S;
}

/** The search over one part of a history. */
class PartitionSearch<I, O, S> {
  private readonly ops: Operation<I, O>[];
  /** ops index -> bit in the known or the unknown bitset. */
  private readonly bit: Int32Array;
  private readonly knownByCall: number[];
  private readonly knownByReturn: number[];
  private readonly unknownByCall: number[];
  /** ops index -> class of unknown-outcome operations with equal inputs (interchangeable). */
  private readonly unknownClass: Int32Array;
  private readonly zobrist: Uint32Array;
  private readonly visited = new Map<number, Visit<S>[]>();
  private steps = 0;
  private deepest: Frame<S> | null = null;

  constructor(
    private readonly model: Model<I, O, S>,
    part: History<I, O>,
    private readonly clock: Clock,
    private readonly deadlineMs: number,
  ) {
    this.ops = [...part];
    this.bit = new Int32Array(this.ops.length);
    const known: number[] = [];
    const unknown: number[] = [];
    this.ops.forEach((op, i) => (op.output === UNKNOWN ? unknown : known).push(i));
    known.forEach((i, b) => (this.bit[i] = b));
    unknown.forEach((i, b) => (this.bit[i] = b));
    this.knownByCall = [...known].sort((a, b) => this.ops[a].call - this.ops[b].call);
    this.knownByReturn = [...known].sort((a, b) => this.ops[a].return - this.ops[b].return);
    this.unknownByCall = [...unknown].sort((a, b) => this.ops[a].call - this.ops[b].call);
    this.unknownClass = new Int32Array(this.ops.length);
    const classes = new Map<string, number>();
    for (const i of unknown) {
      const key = inputKey(this.ops[i].input) ?? `#${i}`;
      if (!classes.has(key)) classes.set(key, classes.size);
      this.unknownClass[i] = classes.get(key) ?? -1;
    }
    // Zobrist hashing of the known set: a seeded word per operation, xored in as it is placed.
    const prng = new Prng(0x11ea);
    this.zobrist = Uint32Array.from(known, () => prng.nextU32());
  }

  private get knownTotal(): number {
    return this.knownByCall.length;
  }

  run(): 'ok' | 'violation' | 'timeout' {
    try {
      return this.search() ? 'ok' : 'violation';
    } catch (e) {
      if (e instanceof OutOfTime) return 'timeout';
      throw e;
    }
  }

  private tick(): void {
    if (++this.steps % CLOCK_CHECK_STEPS === 0 && this.clock.monotonicMs() > this.deadlineMs) throw new OutOfTime();
  }

  private search(): boolean {
    if (this.clock.monotonicMs() > this.deadlineMs) throw new OutOfTime();
    if (this.knownTotal === 0) return true;
    const root: Frame<S> = {
      parent: null,
      knownBits: words(this.knownTotal),
      knownCount: 0,
      hash: 0,
      unknownBits: words(this.unknownByCall.length),
      state: this.model.init(),
      run: [],
      op: -1,
      next: 0,
    };
    this.deepest = root;
    const stack: Frame<S>[] = [root];
    while (stack.length > 0) {
      this.tick();
      const frame = stack[stack.length - 1];
      frame.children ??= this.expand(frame);
      if (frame.next >= frame.children.length) {
        frame.children = []; // explored: free the memory, keep the frame for the explanation
        stack.pop();
        continue;
      }
      const child = frame.children[frame.next++];
      if (frame.knownCount + 1 === this.knownTotal) return true; // the rest are unknown: optional
      const knownBits = frame.knownBits.slice();
      setBit(knownBits, this.bit[child.op]);
      const hash = (frame.hash ^ this.zobrist[this.bit[child.op]]) >>> 0;
      if (!this.remember(hash, knownBits, child.config.unknownBits, child.state)) continue;
      const next: Frame<S> = {
        parent: frame,
        knownBits,
        knownCount: frame.knownCount + 1,
        hash,
        unknownBits: child.config.unknownBits,
        state: child.state,
        run: child.config.run,
        op: child.op,
        next: 0,
      };
      if (next.knownCount > this.deepest.knownCount) this.deepest = next;
      stack.push(next);
    }
    return false;
  }

  /**
   * Lowe's memo with subsumption: a configuration is new unless one with the same known set and an
   * equal state, using a subset of its unknown-outcome operations, was seen. Then this one can do no
   * better: it has the same known operations left, and the extra unknown ones it spent were optional
   * and, never returning, constrain no other operation's place.
   */
  private remember(hash: number, knownBits: Uint32Array, unknownBits: Uint32Array, state: S): boolean {
    let bucket = this.visited.get(hash);
    if (bucket === undefined) {
      bucket = [];
      this.visited.set(hash, bucket);
    }
    for (const v of bucket) {
      if (!equalWords(v.knownBits, knownBits) || !this.model.equal(v.state, state)) continue;
      if (subsetWords(v.unknownBits, unknownBits)) return false;
      if (subsetWords(unknownBits, v.unknownBits)) {
        v.unknownBits = unknownBits; // the new one subsumes it
        return true;
      }
    }
    bucket.push({ knownBits, unknownBits, state });
    return true;
  }

  /** The earliest return among known operations not yet placed: nothing called after it can go next. */
  private horizon(knownBits: Uint32Array): number {
    for (const i of this.knownByReturn) if (!hasBit(knownBits, this.bit[i])) return this.ops[i].return;
    return Infinity;
  }

  /** The operations that may take effect next: not placed, called no later than the horizon. */
  private candidates(byCall: readonly number[], bits: Uint32Array, horizon: number): number[] {
    const out: number[] = [];
    for (const i of byCall) {
      if (this.ops[i].call > horizon) break;
      if (!hasBit(bits, this.bit[i])) out.push(i);
    }
    return out;
  }

  /**
   * The configurations reachable by running unknown-outcome candidates first, smallest runs first,
   * dropping any that a smaller run reaching an equal state subsumes (for a register: at most one per
   * pending write).
   */
  private closure(frame: Frame<S>, horizon: number): Config<S>[] {
    const optional = this.candidates(this.unknownByCall, frame.unknownBits, horizon);
    const configs: Config<S>[] = [{ unknownBits: frame.unknownBits, state: frame.state, run: [] }];
    let layer = configs;
    while (layer.length > 0 && optional.length > 0) {
      const nextLayer: Config<S>[] = [];
      for (const c of layer) {
        // Two pending unknown-outcome operations with equal inputs differ only in their calls, and
        // both calls are behind us: spend the earliest called of each class first, never a later one.
        const offered = new Set<number>();
        for (const u of optional) {
          if (hasBit(c.unknownBits, this.bit[u]) || offered.has(this.unknownClass[u])) continue;
          offered.add(this.unknownClass[u]);
          this.tick();
          const r = this.model.step(c.state, this.ops[u].input, UNKNOWN);
          if (!r.ok) continue;
          const unknownBits = c.unknownBits.slice();
          setBit(unknownBits, this.bit[u]);
          if (configs.some((o) => this.model.equal(o.state, r.state) && subsetWords(o.unknownBits, unknownBits))) continue;
          const config = { unknownBits, state: r.state, run: [...c.run, u] };
          configs.push(config);
          nextLayer.push(config);
        }
      }
      layer = nextLayer;
    }
    return configs;
  }

  private expand(frame: Frame<S>): Array<{ config: Config<S>; op: number; state: S }> {
    const horizon = this.horizon(frame.knownBits);
    const known = this.candidates(this.knownByCall, frame.knownBits, horizon);
    const children: Array<{ config: Config<S>; op: number; state: S }> = [];
    for (const config of this.closure(frame, horizon)) {
      for (const k of known) {
        this.tick();
        const r = this.model.step(config.state, this.ops[k].input, this.ops[k].output);
        if (r.ok) children.push({ config, op: k, state: r.state });
      }
    }
    return children;
  }

  /** Why the search failed: the longest linearizable prefix it found and what could not follow it. */
  explain(numbers: ReadonlyMap<Operation<I, O>, number>): string {
    const frame = this.deepest;
    if (frame === null) return 'not linearizable';
    const order: number[] = [];
    for (let f: Frame<S> | null = frame; f !== null && f.op >= 0; f = f.parent) order.unshift(...f.run, f.op);
    const name = (i: number): string => {
      const op = this.ops[i];
      const n = numbers.get(op);
      const ret = op.output === UNKNOWN ? 'unknown outcome' : String(op.return);
      return `${n === undefined ? '' : `#${n} `}client ${op.clientId}: ${this.describeOp(op)} [${op.call}, ${ret}]`;
    };
    const lines: string[] = [];
    const unknownCount = this.unknownByCall.length;
    lines.push(`not linearizable (${this.ops.length} operations, ${unknownCount} of unknown outcome).`);
    lines.push(
      order.length === 0
        ? 'No operation can go first.'
        : `The longest linearizable prefix found places ${order.length} operations${order.length > EXPLAIN_PREFIX_OPS ? `; the last ${EXPLAIN_PREFIX_OPS}` : ''}:`,
    );
    for (const i of order.slice(-EXPLAIN_PREFIX_OPS)) lines.push(`  ${name(i)}`);
    lines.push(`State after it: ${this.describeState(frame.state)}.`);
    const horizon = this.horizon(frame.knownBits);
    const configs = this.closure(frame, horizon);
    const others = configs.length > 1 ? ` (nor in the ${configs.length - 1} states that pending unknown-outcome writes could lead to)` : '';
    lines.push('Known-outcome operations that could take effect next:');
    for (const k of this.candidates(this.knownByCall, frame.knownBits, horizon)) {
      const fits = configs.some((c) => this.model.step(c.state, this.ops[k].input, this.ops[k].output).ok);
      // The one that returned first bounds the others: none called after its return can precede it.
      const due = this.ops[k].return === horizon ? `; it returned first, so it takes effect before anything called after ${horizon}` : '';
      lines.push(`  ${name(k)}: ${fits ? 'fits, but no order of the rest works after it' : `impossible in this state${others}`}${due}`);
    }
    return lines.join('\n');
  }

  private describeOp(op: Operation<I, O>): string {
    if (this.model.describeOperation !== undefined) return this.model.describeOperation(op.input, op.output);
    return `${JSON.stringify(op.input)} -> ${op.output === UNKNOWN ? '?' : JSON.stringify(op.output)}`;
  }

  private describeState(state: S): string {
    return this.model.describeState !== undefined ? this.model.describeState(state) : JSON.stringify(state);
  }
}

/** A canonical text for a plain-data input, or null when it has none (then it is in a class alone). */
function inputKey(input: unknown): string | null {
  try {
    return JSON.stringify(input) ?? null;
  } catch {
    return null;
  }
}

const words = (bits: number): Uint32Array => new Uint32Array((bits + 31) >>> 5);
const hasBit = (w: Uint32Array, i: number): boolean => (w[i >>> 5] & (1 << (i & 31))) !== 0;
const setBit = (w: Uint32Array, i: number): void => {
  w[i >>> 5] |= 1 << (i & 31);
};

function equalWords(a: Uint32Array, b: Uint32Array): boolean {
  for (let i = 0; i < a.length; i++) if (a[i] !== b[i]) return false;
  return true;
}

function subsetWords(a: Uint32Array, b: Uint32Array): boolean {
  for (let i = 0; i < a.length; i++) if ((a[i] & ~b[i]) !== 0) return false;
  return true;
}

// ---- A key-value register ----------------------------------------------------------------------

export type KvInput =
  | { readonly op: 'put'; readonly key: string; readonly value: string }
  | { readonly op: 'get'; readonly key: string }
  | { readonly op: 'delete'; readonly key: string };

/** A get's output carries `value` (null: absent); a put's or delete's is `{}`. */
export interface KvOutput {
  readonly value?: string | null;
}

/** One key's value; null when absent. */
export type KvState = string | null;

/**
 * A map of registers, checked one key at a time. Its partition also drops unknown-outcome operations
 * that cannot change the verdict: gets (they change nothing), and a put of v (a delete) when no get
 * that returned at or after its call saw v (absent). Such a write, wherever placed, is followed only by
 * other writes before any read that could see it, so removing it keeps a linearization legal. Give
 * every put a distinct value so that a read names the write it saw.
 */
export const kvRegisterModel: Model<KvInput, KvOutput, KvState> = {
  partition(history) {
    const byKey = new Map<string, Operation<KvInput, KvOutput>[]>();
    for (const op of history) {
      if (op.input.op === 'get' && op.output !== UNKNOWN && op.output.value === undefined) {
        throw new Error(`linearizability: a get of ${JSON.stringify(op.input.key)} without a value in its output`);
      }
      let ops = byKey.get(op.input.key);
      if (ops === undefined) byKey.set(op.input.key, (ops = []));
      ops.push(op);
    }
    for (const [key, ops] of byKey) byKey.set(key, ops.filter((op) => op.output !== UNKNOWN || kvMayMatter(op, ops)));
    return byKey;
  },
  init: () => null,
  step(state, input, output) {
    switch (input.op) {
      case 'put':
        return { ok: true, state: input.value };
      case 'delete':
        return { ok: true, state: null };
      case 'get':
        return { ok: output === UNKNOWN || output.value === state, state };
    }
  },
  equal: (a, b) => a === b,
  describeOperation(input, output) {
    const key = JSON.stringify(input.key);
    const result = output === UNKNOWN ? ' (unknown outcome)' : '';
    switch (input.op) {
      case 'put':
        return `put(${key}, ${JSON.stringify(input.value)})${result}`;
      case 'delete':
        return `delete(${key})${result}`;
      case 'get':
        return `get(${key}) -> ${output === UNKNOWN ? '?' : describeKv(output.value ?? null)}`;
    }
  },
  describeState: describeKv,
};

function describeKv(state: KvState): string {
  return state === null ? 'absent' : JSON.stringify(state);
}

/** Whether an unknown-outcome operation on one key could be what some get saw. */
function kvMayMatter(op: Operation<KvInput, KvOutput>, ops: readonly Operation<KvInput, KvOutput>[]): boolean {
  if (op.input.op === 'get') return false;
  const written = op.input.op === 'put' ? op.input.value : null;
  return ops.some((g) => g.input.op === 'get' && g.output !== UNKNOWN && g.return >= op.call && g.output.value === written);
}
