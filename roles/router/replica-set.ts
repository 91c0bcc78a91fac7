import type { Dispatcher } from 'undici';
import { SvcError } from '../../core/base/errors.js';
import type { DataShard } from '../../core/engine/shard.js';
import type { ServiceLogger } from '../../core/service/log.js';
import type { HttpShard } from './http-shard.js';

/**
 * A shard with read replicas (SVC_CLUSTER_REPLICAS, or `replicas` in the coordinator's map; issue 16):
 * what the engine sees as that shard. docs/cluster.md, "Read replicas".
 *
 * - Writes, `stats` and snapshots go to the primary, always.
 * - A read goes to the usable replica with the fewest reads in flight from this router, ties taken in
 *   turn (round robin); one that cannot answer (`unavailable`: down, not ready, refusing the key, out of
 *   time) is skipped for REPLICA_DOWN_MS and the read goes to the next, then to the primary. The
 *   replicas together get at most half of SVC_CLUSTER_TIMEOUT_SECS, so the primary always has the other
 *   half: a read falls over within its one deadline, and never answers short.
 * - A replica answering `not_found` (a collection or point it may not have yet) is not the last word:
 *   the primary is asked. Other errors about the request itself are the answer, as from the primary.
 * - `consistency: "strong"` (search, multi-vector, rankings) reads the primary: it holds every
 *   acknowledged write, a replica only eventually.
 * - Usable: the replica answered /readyz with 200 at the last probe (a follower before its first
 *   bootstrap answers 503 not_ready), its /metrics show a follower (svc_replication_state), and its
 *   svc_replication_lag_seconds is at most SVC_CLUSTER_REPLICA_MAX_LAG_SECS. Until its first probe it is
 *   not used: a URL that is not a follower of this primary must never answer for it.
 */
export interface Replica {
  /** The shard's id. */
  shard: number;
  /** Its place in the shard's replica list, from 0 (metrics name replicas so, never by URL). */
  index: number;
  url: string;
  /** Its client, with no retries of its own: a read that fails here goes to the next copy instead. */
  client: HttpShard;
  /** Reads from this router in flight there now. */
  outstanding: number;
  /** The last probe found it ready, a follower and within the lag allowed. */
  usable: boolean;
  /** Why it is not usable (for the log); '' when it is. */
  why: string;
  /** After a failed read: skipped until then (performance.now() ms), or until a probe finds it ready. */
  downUntil: number;
}

export type FallbackReason = 'unavailable' | 'not_found';

export interface ReplicaSetOptions {
  id: number;
  primary: HttpShard;
  replicas: readonly Replica[];
  /** SVC_CLUSTER_TIMEOUT_SECS in ms: one read, every copy it tried included. */
  timeoutMs: number;
  /** A read a replica could not answer was answered by the primary (metrics). */
  onFallback?(shard: number, reason: FallbackReason): void;
}

/** How long a replica that failed a read is skipped (the next probe may clear it sooner). */
export const REPLICA_DOWN_MS = 2_000;
/** The share of a read's deadline its replicas may use, together; the primary has the rest. */
const REPLICA_SHARE = 0.5;

type Strongish = { consistency?: unknown } | null | undefined;
const strong = (q: unknown): boolean => (q as Strongish)?.consistency === 'strong';

export class ReplicaSet implements DataShard {
  private turn = 0;

  constructor(private readonly opts: ReplicaSetOptions) {}

  get primary(): HttpShard {
    return this.opts.primary;
  }

  get replicas(): readonly Replica[] {
    return this.opts.replicas;
  }

  // ---------------------------------------------------------------- reads: a replica, else the primary

  listCollections: DataShard['listCollections'] = () => this.read((s) => s.listCollections());
  collectionInfo: DataShard['collectionInfo'] = (name) => this.read((s) => s.collectionInfo(name));
  get: DataShard['get'] = (name, id, o) => this.read((s) => s.get(name, id, o));
  // A fetch or count body that says `consistency: "strong"` (the REST schema lets a fetch say it) reads the primary too.
  fetch: DataShard['fetch'] = (name, q) => (strong(q) ? this.primary.fetch(name, q) : this.read((s) => s.fetch(name, q)));
  count: DataShard['count'] = (name, q) => (strong(q) ? this.primary.count(name, q) : this.read((s) => s.count(name, q)));
  textStats: DataShard['textStats'] = (name, b) => (strong(b) ? this.primary.textStats(name, b) : this.read((s) => s.textStats(name, b)));
  search: DataShard['search'] = (name, q) => (strong(q) ? this.primary.search(name, q) : this.read((s) => s.search(name, q)));
  searchMultiVector: DataShard['searchMultiVector'] = (name, q) => (strong(q) ? this.primary.searchMultiVector(name, q) : this.read((s) => s.searchMultiVector(name, q)));
  rankings: DataShard['rankings'] = (name, b) => (strong(b) ? this.primary.rankings(name, b) : this.read((s) => s.rankings(name, b)));

  // ---------------------------------------------------------------- the primary only

  stats: DataShard['stats'] = () => this.primary.stats();
  snapshot: DataShard['snapshot'] = (b) => this.primary.snapshot(b);
  createCollection: DataShard['createCollection'] = (p) => this.primary.createCollection(p);
  deleteCollection: DataShard['deleteCollection'] = (name) => this.primary.deleteCollection(name);
  upsert: DataShard['upsert'] = (name, b) => this.primary.upsert(name, b);
  bulkUpsert: DataShard['bulkUpsert'] = (name, b) => this.primary.bulkUpsert(name, b);
  delete: DataShard['delete'] = (name, id) => this.primary.delete(name, id);
  setPayload: DataShard['setPayload'] = (name, b) => this.primary.setPayload(name, b);
  deletePoints: DataShard['deletePoints'] = (name, b) => this.primary.deletePoints(name, b);
  upsertDocuments: DataShard['upsertDocuments'] = (name, b) => this.primary.upsertDocuments(name, b);
  deleteDocument: DataShard['deleteDocument'] = (name, id) => this.primary.deleteDocument(name, id);

  /** The usable replicas to try, in order: fewest reads in flight first, equals in turn. */
  candidates(now: number): Replica[] {
    const all = this.opts.replicas;
    const n = all.length;
    const out: Replica[] = [];
    if (n === 0) return out;
    const first = this.turn++ % n;
    for (let i = 0; i < n; i++) {
      const r = all[(first + i) % n];
      if (r.usable && r.downUntil <= now) out.push(r);
    }
    // Array.prototype.sort is stable: equals keep their turn order.
    return out.sort((a, b) => a.outstanding - b.outstanding);
  }

  private async read<T>(fn: (s: HttpShard) => Promise<T>): Promise<T> {
    const started = performance.now();
    const order = this.candidates(started);
    if (order.length === 0) return fn(this.primary);
    const deadline = started + this.opts.timeoutMs;
    const replicaDeadline = started + this.opts.timeoutMs * REPLICA_SHARE;
    let reason: FallbackReason = 'unavailable';
    for (const r of order) {
      if (performance.now() >= replicaDeadline) break;
      r.outstanding++;
      try {
        return await fn(r.client.until(replicaDeadline));
      } catch (e) {
        if (!(e instanceof SvcError)) throw e;
        if (e.code === 'not_found') {
          reason = 'not_found';
          break;
        }
        // A refusal about the request itself is the answer (the primary would say the same); a replica's
        // own rate limit is not the caller's.
        if (e.code !== 'unavailable' && e.code !== 'rate_limited') throw e;
        r.downUntil = performance.now() + REPLICA_DOWN_MS;
      } finally {
        r.outstanding--;
      }
    }
    this.opts.onFallback?.(this.opts.id, reason);
    return fn(this.primary.until(deadline));
  }
}

/** What a probe found at a replica. */
export interface ReplicaState {
  ready: boolean;
  /** Its /metrics show a follower (some svc_replication_state is 1). */
  follower: boolean;
  /** svc_replication_lag_seconds; null when absent. */
  lagSeconds: number | null;
}

/** The probe's verdict: usable, or why not. */
export function judge(s: ReplicaState, maxLagMs: number): { usable: boolean; why: string } {
  if (!s.ready) return { usable: false, why: 'it is not ready (/readyz is not 200: before its first bootstrap, or down)' };
  if (!s.follower || s.lagSeconds === null) return { usable: false, why: 'it is not a read replica (its /metrics show no follower state); name only followers of the shard\'s primary' };
  if (s.lagSeconds * 1000 > maxLagMs) return { usable: false, why: `it is ${s.lagSeconds} s behind its leader (SVC_CLUSTER_REPLICA_MAX_LAG_SECS is ${maxLagMs / 1000})` };
  return { usable: true, why: '' };
}

/** Reads a replica's /readyz and /metrics (both open routes). */
export async function probeReplica(url: string, dispatcher: Dispatcher, timeoutMs: number): Promise<ReplicaState> {
  const get = async (path: string): Promise<{ status: number; text: string }> => {
    const res = await dispatcher.request({ origin: url, path, method: 'GET', headersTimeout: timeoutMs, bodyTimeout: timeoutMs });
    return { status: res.statusCode, text: await res.body.text() };
  };
  try {
    const ready = await get('/readyz');
    if (ready.status !== 200) return { ready: false, follower: false, lagSeconds: null };
    const m = await get('/metrics');
    const follower = /^svc_replication_state\{state="[a-z]+"\} 1$/m.test(m.text);
    const lag = /^svc_replication_lag_seconds (\S+)$/m.exec(m.text);
    return { ready: true, follower, lagSeconds: lag === null ? null : Number(lag[1]) };
  } catch {
    return { ready: false, follower: false, lagSeconds: null };
  }
}

export interface ReplicaProbeOptions {
  /** The replicas of the shards routed now (read at each round, so a new map applies). */
  replicas(): readonly Replica[];
  dispatcher: Dispatcher;
  /** Each probe's deadline. */
  timeoutMs: number;
  intervalMs: number;
  /** SVC_CLUSTER_REPLICA_MAX_LAG_SECS in ms. */
  maxLagMs: number;
  log: ServiceLogger;
  /** For tests: the probe itself. */
  probe?(url: string): Promise<ReplicaState>;
}

/** Probes every replica now and then every interval (from the end of the last round); logs each change. */
export function startReplicaProbe(opts: ReplicaProbeOptions): { stop(): Promise<void>; round(): Promise<void> } {
  const probe = opts.probe ?? ((url: string) => probeReplica(url, opts.dispatcher, opts.timeoutMs));
  let timer: NodeJS.Timeout | null = null;
  let running: Promise<void> | null = null;
  let stopped = false;
  const round = async (): Promise<void> => {
    await Promise.all(opts.replicas().map(async (r) => {
      const v = judge(await probe(r.url), opts.maxLagMs);
      if (v.usable) r.downUntil = 0;
      if (v.usable !== r.usable || v.why !== r.why) {
        const at = { shard: r.shard, replica: r.index, url: r.url };
        if (v.usable) opts.log.info(at, 'read replica usable: reads of its shard go to it');
        else opts.log.warn({ ...at, why: v.why }, 'read replica not used: its reads go to the other replicas or the primary');
      }
      r.usable = v.usable;
      r.why = v.why;
    }));
  };
  const schedule = (ms: number): void => {
    if (stopped) return;
    timer = setTimeout(() => {
      running = round().finally(() => {
        running = null;
        schedule(opts.intervalMs);
      });
    }, ms);
  };
  schedule(0);
  return {
    round,
    async stop() {
      stopped = true;
      if (timer !== null) clearTimeout(timer);
      await running;
    },
  };
}
