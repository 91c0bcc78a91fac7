import { invalidArgument } from '../../base/errors.js';

/**
 * The routers that read the coordinator's map (docs/cluster.md, Rebalancing, "Routers first"), each by
 * the id it sends and the map version it said it routes by. A rebalance move starts only once every
 * router heard from lately routes by the map that names its joining or draining shard: a router that
 * did not would not look for moved points on the new shard, and while the coordinator is away (a crash
 * mid-move) it could not learn of it. Time alone (twice the refresh interval) was not enough: a router
 * on a loaded machine read late, the first batch moved, the coordinator died, and the router answered
 * 503 for the moved points until the coordinator was back.
 *
 * A router not heard from for `forgetMs` is taken to be gone (stopped, or a request loop replaced) and
 * no longer waited for. Pure: the caller passes the monotonic time.
 */
export interface MapReader {
  /** The router's id: one per router process (per request loop in a multi-loop one). */
  id: string;
  /** The map version it routed by when it asked; -1 when it has none of the coordinator's yet. */
  version: number;
}

export interface ReaderBehind {
  id: string;
  version: number;
  /** Ms since it was last heard from. */
  agoMs: number;
}

/**
 * Routers remembered at once. One more than that forgets only routers past `forgetMs`; with none to
 * forget, every move waits (as for a router behind) until enough of them are past it.
 */
export const MAP_READERS_MAX = 4096;

/** The header a router names itself by on `GET /cluster/map`, and the one with the version it routes by. */
export const ROUTER_ID_HEADER = 'svc-router-id';
export const ROUTER_MAP_VERSION_HEADER = 'svc-router-map-version';

const ID = /^[A-Za-z0-9_-]{1,64}$/;

/**
 * The reader a map request names, from its two headers: none when it sends no id (an operator's
 * `curl`, an older router). A malformed one is refused rather than guessed.
 */
export function parseMapReader(id: unknown, version: unknown): MapReader | null {
  if (id === undefined) return null;
  if (typeof id !== 'string' || !ID.test(id)) throw invalidArgument(`${ROUTER_ID_HEADER} must be 1 to 64 letters, digits, '-' or '_'`);
  if (version === undefined) return { id, version: -1 };
  const n = typeof version === 'string' && /^(0|[1-9][0-9]{0,15})$/.test(version) ? Number(version) : NaN;
  if (!Number.isSafeInteger(n)) throw invalidArgument(`${ROUTER_MAP_VERSION_HEADER} must be a map version (a whole number from 0)`);
  return { id, version: n };
}

export class MapReaders {
  private readonly readers = new Map<string, { version: number; atMs: number }>();
  /** When a router could not be remembered (the table full of live ones), or -Infinity. */
  private overflowAtMs = -Infinity;

  constructor(private readonly forgetMs: number, private readonly max = MAP_READERS_MAX) {
    if (!(forgetMs > 0)) throw new RangeError('forgetMs must be positive');
  }

  heard(reader: MapReader, nowMs: number): void {
    const known = this.readers.delete(reader.id); // re-inserted last: the map's order is oldest heard first
    if (!known && this.readers.size >= this.max) {
      this.forget(nowMs);
      if (this.readers.size >= this.max) {
        // Never a live router dropped to make room (it would no longer be waited for).
        this.overflowAtMs = nowMs;
        return;
      }
    }
    this.readers.set(reader.id, { version: reader.version, atMs: nowMs });
  }

  /**
   * The routers heard from within `forgetMs` that do not route by `version` (before it, or after it: a
   * coordinator whose state was reset), and forgets the rest.
   */
  behind(version: number, nowMs: number): ReaderBehind[] {
    this.forget(nowMs);
    const out: ReaderBehind[] = [];
    for (const [id, r] of this.readers) if (r.version !== version) out.push({ id, version: r.version, agoMs: nowMs - r.atMs });
    if (nowMs - this.overflowAtMs <= this.forgetMs) out.push({ id: `(routers past ${this.max}, not remembered)`, version: -1, agoMs: nowMs - this.overflowAtMs });
    return out;
  }

  /** Drops the routers not heard from within `forgetMs` (the oldest heard come first). */
  private forget(nowMs: number): void {
    for (const [id, r] of this.readers) {
      if (nowMs - r.atMs <= this.forgetMs) break;
      this.readers.delete(id);
    }
  }

  /** Routers heard from within `forgetMs`. */
  count(nowMs: number): number {
    let n = 0;
    for (const r of this.readers.values()) if (nowMs - r.atMs <= this.forgetMs) n++;
    return n;
  }
}
