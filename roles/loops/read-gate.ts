import type { MatchBits, ReadGraph, ReadViewHandle } from '../../core/collection/shared-reads.js';

/** What the engine thread answers a loop's LocalReads with, through its ReadGate (Database satisfies it). */
export interface LocalReadSource {
  readView(name: string): ReadViewHandle | null;
  readGraph(uid: string): ReadGraph | null;
  /** A filter's match bits for a loop's filtered searches, or null (Database.matchBits). */
  matchBits(uid: string, filter: unknown): MatchBits | null;
  noteRead(uid: string): void;
  /** Thread `thread` ended without closing its views: the scratch lanes it held go back; how many. */
  releaseLanesOf(thread: number): number;
}

/**
 * Whether the request loops may answer searches themselves (local-reads.ts) now, and from which
 * database: two int32 words in shared memory, which the engine thread alone writes.
 *
 * - word 0, the state: odd while the loops may read, even while they may not. Every change adds one,
 *   so a loop that finds the same odd value after a search as before knows the gate stayed open
 *   throughout (a seqlock: a search that spans a closing is handed to the engine thread).
 * - word 1, the generation of the database the loops read: a new one each time another Database object
 *   is served (a read replica's re-bootstrap swaps one in); written only while the gate is closed. A
 *   loop's view of another generation is closed and asked for again.
 *
 * The engine thread closes the gate whenever its engine would not answer a read from its database as
 * it is: a read replica before its first bootstrap and while one runs in place (not_ready), while a
 * re-bootstrap's directory is swapped in (reads wait for the new database), a consensus member while it
 * restores a snapshot (unavailable, `restoring`). Each of those states notifies the gate (`update`) at
 * the moment it changes, so the loops answer exactly where the engine thread would answer from the
 * same database with no other condition.
 */
export class ReadGate {
  readonly buffer = new SharedArrayBuffer(8);
  private readonly cells = new Int32Array(this.buffer);
  private readonly generations = new WeakMap<LocalReadSource, number>();
  private nextGeneration = 1;
  private source: LocalReadSource | null = null;
  /** The last database served: while the gate is closed, the one it may open on again. */
  private last: LocalReadSource | null = null;
  private current: () => LocalReadSource | null = () => null;

  /** From now on the loops read what `current` names (null: none, the gate is closed); checked now. */
  follow(current: () => LocalReadSource | null): void {
    this.current = current;
    this.update();
  }

  /** What `current` names may have changed: the gate follows it before this returns. */
  update(): void {
    const s = this.current();
    if (s === this.source) return;
    const c = this.cells;
    if ((Atomics.load(c, 0) & 1) === 1) Atomics.add(c, 0, 1);
    this.source = s;
    if (s === null) return;
    this.last = s;
    let g = this.generations.get(s);
    if (g === undefined) this.generations.set(s, g = this.nextGeneration++);
    Atomics.store(c, 1, g);
    Atomics.add(c, 0, 1);
  }

  private generation(): number {
    return Atomics.load(this.cells, 1);
  }

  /** A loop's ask for collection `name`'s view, with the generation it belongs to; null while closed. */
  readView(name: string): { handle: ReadViewHandle; generation: number } | null {
    const s = this.source;
    if (s === null) return null;
    const handle = s.readView(name);
    return handle === null ? null : { handle, generation: this.generation() };
  }

  /** The graph epoch of collection `uid` in database `generation`, if it is the one read now. */
  readGraph(uid: string, generation: number): ReadGraph | null {
    return this.source === null || generation !== this.generation() ? null : this.source.readGraph(uid);
  }

  /** A filter's match bits in collection `uid` of database `generation`, if it is the one read now. */
  matchBits(uid: string, generation: number, filter: unknown): MatchBits | null {
    return this.source === null || generation !== this.generation() ? null : this.source.matchBits(uid, filter);
  }

  noteRead(uid: string, generation: number): void {
    if (this.source !== null && generation === this.generation()) this.source.noteRead(uid);
  }

  /**
   * A loop's thread ended, maybe without closing its views (loops.ts): the scratch lanes it held in the
   * database the loops read go back, or in the last one read while the gate is closed (it may open on
   * it again); how many. A database swapped out is read by no loop again: its lanes do not matter.
   */
  releaseLanesOf(thread: number): number {
    return (this.source ?? this.last)?.releaseLanesOf(thread) ?? 0;
  }
}

/** A loop's side of the gate. */
export class ReadGateView {
  private readonly cells: Int32Array;

  constructor(buffer: SharedArrayBuffer) {
    this.cells = new Int32Array(buffer);
  }

  /** The database generation the loops read now (0: none yet). */
  get generation(): number {
    return Atomics.load(this.cells, 1);
  }

  /** Before a search of a view of database `generation`: the state to check after it, or null (do not search). */
  enter(generation: number): number | null {
    const s = Atomics.load(this.cells, 0);
    // Odd, whatever its sign: the state word wraps after 2^31 changes.
    return (s & 1) !== 0 && Atomics.load(this.cells, 1) === generation ? s : null;
  }

  /** After the search: the gate stayed open throughout (else its answer is not given). */
  still(state: number): boolean {
    return Atomics.load(this.cells, 0) === state;
  }
}
