import type { Hit, PointOutput } from '../../core/base/model.js';
import type { CollectionSpec } from '../../core/collection/params.js';
import type { Rankings } from '../../core/query/ranking.js';
import { ReadView, type Declined, type MatchBits, type ReadGraph, type ReadViewHandle } from '../../core/collection/shared-reads.js';
import type { Link } from './link.js';
import type { ReadGateView } from './read-gate.js';

/** A name the engine thread had no view for is asked again after this long (it may be created meanwhile). */
const ASK_AGAIN_MS = 1000;
/** How often at most a loop tells the engine thread it searched a collection (what a read starts there). */
const NOTE_READ_MS = 50;
/** How often views are swept: dropped collections' closed, newer graphs taken, names with no view forgotten. */
const SWEEP_MS = 1000;
/** Filters whose match bits one view asks the engine thread for at once. */
const BITS_ASKED_MAX = 16;
/**
 * After bits came back already old (a write came during the ask), no more asks of that view for this
 * long: while a collection is written all along, asks would only cost the engine thread a copy each.
 */
const BITS_BACKOFF_MS = 100;
/** Most names a loop keeps an entry for (names come from clients). */
const ENTRIES_MAX = 4096;

/** Why a loop handed a search on before any view searched it: no view yet, or the gate closed (read-gate.ts). */
export type HandedOn = Declined | 'no_view' | 'paused';

/** Reads a loop answered itself, and those it handed on, by why. */
export interface Counts {
  local: number;
  readonly declined: Map<HandedOn, number>;
}

const counts = (): Counts => ({ local: 0, declined: new Map() });

type Entry =
  | { state: 'view'; view: ReadView; generation: number; graphAsked: boolean; notedAt: number; bitsAsked: Set<string>; bitsQuietAt: number }
  | { state: 'asking' }
  | { state: 'none'; at: number };

/**
 * A request loop's own searches (issue 20): per collection name, a ReadView over the engine thread's
 * shared memory (core/collection/shared-reads.ts), asked for once over the link. `search` answers a
 * plain dense search here, or null, and the caller sends it over the link as before: a view not yet
 * there, a graph epoch not yet received, a dropped collection, a filter whose match bits it lacks or
 * holds from before a write (it asks the engine thread for them, for the next search), a strong read,
 * input the engine refuses, a write that raced the search, and anything while the read gate is closed
 * or names another database (read-gate.ts: a read replica bootstrapping in place or swapping a re-bootstrap in, a
 * consensus member restoring a snapshot). Everything around the engine (auth, limits, audit, metrics)
 * is the loop's service layer, as for every other call.
 */
export class LocalReads {
  private readonly views = new Map<string, Entry>();
  /** Plain dense searches answered here (local) and handed on, by why. */
  readonly counts: Counts = counts();
  /** Hybrid searches, shard rankings, multi-vector searches, counts, point reads and pages, the same way. */
  readonly queryCounts: { readonly hybrid: Counts; readonly rankings: Counts; readonly multi_vector: Counts; readonly count: Counts; readonly get: Counts; readonly fetch: Counts } = {
    hybrid: counts(), rankings: counts(), multi_vector: counts(), count: counts(), get: counts(), fetch: counts(),
  };

  private readonly sweeper: NodeJS.Timeout;
  private closed = false;

  /**
   * `gate`: whether the engine thread's database may be read here now, and which one (read-gate.ts):
   * a search runs only while it is open for its view's database, and is answered only if it stayed open.
   */
  constructor(private readonly link: Link, private readonly gate: ReadGateView, private readonly now: () => number = () => performance.now()) {
    this.sweeper = setInterval(() => this.sweep(), SWEEP_MS);
    this.sweeper.unref();
  }

  /**
   * Without it a view would hold what it maps (a dropped collection's memory, a replaced graph's
   * arrays) until a search of that name came again: a dropped collection's view is closed, a view
   * whose graph is old asks for the new one, and names with no view are forgotten.
   */
  sweep(): void {
    const t = this.now();
    for (const [name, e] of this.views) {
      if (e.state === 'none' && t - e.at >= ASK_AGAIN_MS) this.views.delete(name);
      else if (e.state === 'view') {
        if (e.view.retired || this.stale(e)) {
          this.views.delete(name);
          e.view.close();
        } else {
          if (e.view.epoch !== e.view.heldEpoch) this.refresh(name, e);
          e.view.sweep();
        }
      }
    }
  }

  /** A plain dense search's answer from this loop's view (ReadView.search), or null: hand it on. */
  search(name: unknown, query: unknown): { hits: Hit[] } | null {
    return this.answer(name, this.counts, (v) => v.search(query as never));
  }

  /** A hybrid search's answer from this loop's view (ReadView.hybrid), or null. */
  hybrid(name: unknown, query: unknown): { hits: Hit[] } | null {
    return this.answer(name, this.queryCounts.hybrid, (v) => v.hybrid(query as never));
  }

  /** A shard's rankings from this loop's view (ReadView.rankings), or null. */
  rankings(name: unknown, body: unknown): Rankings | null {
    return this.answer(name, this.queryCounts.rankings, (v) => v.rankings(body as never));
  }

  /** A multi-vector search's answer from this loop's view (ReadView.searchMultiVector), or null. */
  multiVector(name: unknown, query: unknown): { hits: Hit[] } | null {
    return this.answer(name, this.queryCounts.multi_vector, (v) => v.searchMultiVector(query as never));
  }

  /** A point read's answer from this loop's view (ReadView.get): a point that is here, or null. */
  get(name: unknown, id: unknown, opts: unknown): PointOutput | null {
    return this.answer(name, this.queryCounts.get, (v) => v.get(id, opts as never), false);
  }

  /** A page of points from this loop's view (ReadView.fetch), or null. */
  fetch(name: unknown, query: unknown): { points: PointOutput[]; next_cursor: string | null } | null {
    return this.answer(name, this.queryCounts.fetch, (v) => v.fetch(query as never), false);
  }

  /** A count's answer from this loop's view (ReadView.count), or null. */
  count(name: unknown, query: unknown): { count: number } | null {
    return this.answer(name, this.queryCounts.count, (v) => v.count(query as never), false);
  }

  /**
   * The parameters of collection `name` as this loop's view holds them, while its database is the one
   * served and the view is current; null otherwise (a text query then goes to the engine thread whole).
   */
  specOf(name: unknown): CollectionSpec | null {
    if (typeof name !== 'string') return null;
    const e = this.views.get(name);
    if (e === undefined || (e.state === 'none' && this.now() - e.at >= ASK_AGAIN_MS)) {
      // Asked for now: the next text query of this name is answered here.
      if (e !== undefined || this.views.size < ENTRIES_MAX) this.ask(name);
      return null;
    }
    if (e.state !== 'view' || e.view.retired) return null;
    const open = this.gate.enter(e.generation);
    return open === null ? null : e.view.spec;
  }

  /**
   * `read` over the view of `name`, counted in `c`. `noted`: the engine thread is told the collection was
   * searched (what a read starts there: an absorb or a rebuild of a graph that is behind); a count or a
   * point read reads no graph.
   */
  private answer<T>(name: unknown, c: Counts, read: (v: ReadView) => T | null, noted = true): T | null {
    if (typeof name !== 'string') return null;
    const e = this.views.get(name);
    if (e === undefined || (e.state === 'none' && this.now() - e.at >= ASK_AGAIN_MS)) {
      if (e !== undefined || this.views.size < ENTRIES_MAX) this.ask(name);
      return this.declined(c, 'no_view');
    }
    if (e.state !== 'view') return this.declined(c, 'no_view');
    const v = e.view;
    const open = this.gate.enter(e.generation);
    if (open === null) {
      // Another database is served now (a replica's re-bootstrap swapped one in): this one is asked again.
      if (this.stale(e)) this.forget(name, e);
      return this.declined(c, 'paused');
    }
    const r = read(v);
    if (r !== null && !this.gate.still(open)) return this.declined(c, 'paused');
    if (r !== null) {
      c.local++;
      const t = this.now();
      if (noted && t - e.notedAt >= NOTE_READ_MS) {
        e.notedAt = t;
        this.link.notify('noteRead', v.uid, e.generation);
      }
      return r;
    }
    const why = v.declined ?? 'shape';
    if (why === 'retired') {
      // Dropped (or the database closed): the name may name a new collection now.
      this.forget(name, e);
    } else if (why === 'epoch') this.refresh(name, e);
    else if (why === 'filter' && v.wantBits !== null) this.askBits(name, e, v.wantBits);
    return this.declined(c, why);
  }

  /** A view of a database no longer served (its generation is not the gate's). */
  private stale(e: Extract<Entry, { state: 'view' }>): boolean {
    const g = this.gate.generation;
    return g !== 0 && g !== e.generation;
  }

  private forget(name: string, e: Extract<Entry, { state: 'view' }>): void {
    if (this.views.get(name) === e) this.views.delete(name);
    e.view.close();
  }

  /** Asks the engine thread for the graph epoch the view's header names (once at a time). */
  private refresh(name: string, e: Extract<Entry, { state: 'view' }>): void {
    if (e.graphAsked) return;
    e.graphAsked = true;
    const v = e.view;
    void (this.link.call('readGraph', v.uid, e.generation) as Promise<ReadGraph | null>).then((g) => {
      if (g !== null && this.views.get(name) === e) v.adoptGraph(g);
    }).catch(() => {
      // No lane for the codes, or the link closed: the view keeps declining, and asks again.
    }).finally(() => {
      e.graphAsked = false;
    });
  }

  /**
   * Asks the engine thread for a filter's match bits (once at a time per filter): this search was handed
   * on, the next ones with the same filter are answered here while no write comes between.
   */
  private askBits(name: string, e: Extract<Entry, { state: 'view' }>, want: { key: string; filter: unknown }): void {
    if (e.bitsAsked.has(want.key) || e.bitsAsked.size >= BITS_ASKED_MAX || this.now() < e.bitsQuietAt) return;
    e.bitsAsked.add(want.key);
    const v = e.view;
    void (this.link.call('matchBits', v.uid, e.generation, want.filter) as Promise<MatchBits | null>).then((m) => {
      if (m !== null && this.views.get(name) === e && !v.adoptBits(want, m)) e.bitsQuietAt = this.now() + BITS_BACKOFF_MS;
    }).catch(() => {
      // The link closed: the view keeps handing the filter on.
    }).finally(() => {
      e.bitsAsked.delete(want.key);
    });
  }

  close(): void {
    this.closed = true;
    clearInterval(this.sweeper);
    for (const e of this.views.values()) if (e.state === 'view') e.view.close();
    this.views.clear();
  }

  private declined(c: Counts, why: HandedOn): null {
    c.declined.set(why, (c.declined.get(why) ?? 0) + 1);
    return null;
  }

  private ask(name: string): void {
    this.views.set(name, { state: 'asking' });
    const none = (): void => {
      this.views.set(name, { state: 'none', at: this.now() });
    };
    void (this.link.call('readView', name) as Promise<{ handle: ReadViewHandle; generation: number } | null>).then((got) => {
      if (got === null) return none();
      // No scratch lane left in the store for this thread: this loop hands that collection's searches on.
      const view = new ReadView(got.handle);
      // Closed while it was asked for: its lanes go back at once.
      if (this.closed) return view.close();
      this.views.set(name, { state: 'view', view, generation: got.generation, graphAsked: false, notedAt: -Infinity, bitsAsked: new Set(), bitsQuietAt: -Infinity });
    }).catch(none);
  }
}
