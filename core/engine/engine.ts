import { BODIES, bodyKeys } from '../base/bodies.js';
import { invalidArgument, notFound, SvcError } from '../base/errors.js';
import { compareFetchIds } from '../base/id-order.js';
import type { Limits } from '../base/limits.js';
import {
  collectionExisted, markCollectionExisted,
  type CollectionInfo, type CountQuery, type DatabaseStats, type DeletePointsBody, type DocumentInput, type Embedder, type FetchQuery,
  type Hit, type HybridQuery, type MultiVectorQuery, type Payload, type PointOutput, type Reranker, type SearchQuery, type SetPayloadBody,
  type SnapshotResult, type TextPointInput, type TextQuery,
} from '../base/model.js';
import { checkPointId } from '../base/names.js';
import { owner } from '../cluster/routing/hrw.js';
import { parseCollectionParams, specOfInfo, splitExistOk, type CollectionSpec } from '../collection/params.js';
import {
  checkPayloadResults, parseDocuments, parsePayloadUpdate, parsePoints, parseTextPoints,
} from '../collection/points.js';
import {
  checkObject, encodeCursor, fusionDepth, parseBool, parseDepth, parseFetchLimit, parseK, parseQueryTerms, parseRerankPool, parseRrfK0,
} from '../collection/queries.js';
import { compileFilter } from '../query/filter.js';
import { mergeTopK, scoreOrder, type ScoreOrder } from '../query/merge.js';
import {
  checkTextStats, fuseRankings, sumTextStats, type Ranked, type Rankings, type RankingsBody, type TextStats, type TextStatsBody,
} from '../query/ranking.js';
import { DEFAULT_RRF_K0 } from '../query/rrf.js';
import type { EngineApi, ReplicateRequest, ReplicationEvent } from '../service/api.js';
import type { DataShard, ShardRef } from './shard.js';

/**
 * The engine over a set of shards (issue 16): what a router serves over remote shards, and what a
 * single node, a read replica, a consensus member and the embedded API serve over their one local shard
 * (NodeEngine, node.ts: the node's Database). The orchestration that is not storage lives here once:
 * embedding text, fusing rankings, reranking. It parses each request as a single
 * node would (so a bad batch is refused whole, before any shard sees it), sends each point write to the
 * rendezvous-hash owner of its id (core/cluster/routing/hrw.ts, ranked by shard id), and answers reads by
 * scatter-gather: each shard's top k, merged into the global top k (core/query/merge.ts); hybrid and
 * text queries fuse the merged rankings, with BM25 over the whole collection's statistics (summed
 * first, as Elasticsearch's dfs phase does), so every answer equals the one a single node holding all
 * the points gives. A text query is embedded and reranked once, here.
 *
 * A shard that cannot answer fails the request with `unavailable` naming it (its client says so); no
 * answer is ever made from the shards that did answer.
 */

export interface EngineOptions {
  /** The shards to route by now (the map's, by id): read per request, so a new map applies at once. */
  shards(): readonly ShardRef[];
  /**
   * Every shard that may hold points (joining ones too, during a rebalance move): what scatter reads,
   * deletes by filter and collection changes reach. Default: shards().
   */
  present?(): readonly ShardRef[];
  /** Whether a rebalance move runs (a joining shard, or a draining one not yet moved): reads ask further. */
  moving?(): boolean;
  /**
   * A shard answered `moved` (its map is newer than ours): refresh the map now; resolves once it was
   * read (or could not be).
   */
  mapStale?(): Promise<void>;
  limits: Limits;
  embedders?: ReadonlyMap<string, Embedder>;
  rerankers?: ReadonlyMap<string, Reranker>;
  /** How long a collection's parameters are reused before they are asked again (default 1 s). */
  specTtlMs?: number;
  /**
   * A collection's parameters as the node that holds them has them now (NodeEngine: its own database),
   * instead of asked of a shard and kept specTtlMs.
   */
  specOf?(name: string): CollectionSpec;
  monotonicMs(): number;
}

/** Points read at once when a payload update across shards checks its batch first. */
const PAYLOAD_READS_AT_ONCE = 32;

/** Collection writes (creates, drops) that fail on some shards are retried this many times before reporting. */
const CLUSTER_WRITE_ATTEMPTS = 3;

/** Times a point write follows `moved` answers before it gives up (one move moves a point once). */
const MOVED_HOPS_MAX = 4;

export class Engine implements EngineApi {
  private readonly specs = new Map<string, { spec: CollectionSpec; at: number }>();
  private readonly asking = new Map<string, Promise<CollectionSpec>>();

  constructor(private readonly opts: EngineOptions) {}

  get limits(): Limits {
    return this.opts.limits;
  }

  private shards(): readonly ShardRef[] {
    const s = this.opts.shards();
    if (s.length === 0) throw new SvcError('unavailable', 'the cluster has no shards to route to');
    return s;
  }

  /** The shard that owns a point (or document) id. */
  private ownerOf(id: string, shards: readonly ShardRef[]): ShardRef {
    const at = owner(id, shards.map((s) => s.id));
    return shards.find((s) => s.id === at)!;
  }

  /** Ids grouped by owner, each group in the order given. */
  private byOwner<T>(items: readonly T[], idOf: (t: T) => string): Map<ShardRef, T[]> {
    const shards = this.shards();
    const out = new Map<ShardRef, T[]>();
    for (const it of items) {
      const s = this.ownerOf(idOf(it), shards);
      const list = out.get(s);
      if (list === undefined) out.set(s, [it]);
      else list.push(it);
    }
    return out;
  }

  /** Every shard that may hold points (joining ones too, mid-move). */
  private present(): readonly ShardRef[] {
    const s = this.opts.present?.() ?? this.shards();
    if (s.length === 0) throw new SvcError('unavailable', 'the cluster has no shards to route to');
    return s;
  }

  private get moving(): boolean {
    return this.opts.moving?.() ?? false;
  }

  /**
   * Every shard's answer, or the first failure (an error of the request itself, or a shard's
   * unavailability). A joining shard that lacks the collection holds none of its points yet (the move
   * creates it there with its first batch): it is left out of the answer, not an error.
   */
  private async all<T>(fn: (s: ShardRef) => Promise<T>): Promise<T[]> {
    return this.each(this.present(), fn);
  }

  private async each<T>(shards: readonly ShardRef[], fn: (s: ShardRef) => Promise<T>): Promise<T[]> {
    const r = await Promise.all(shards.map((s) => (s.state !== 'joining' ? fn(s) : fn(s).catch((e: unknown) => {
      if (e instanceof SvcError && e.code === 'not_found') return SKIPPED;
      throw e;
    }))));
    return r.filter((x): x is Awaited<T> => x !== SKIPPED);
  }

  /**
   * A point write split by owner and sent in parallel, following `moved` answers: a shard that a
   * rebalance move has taken some of the ids from refuses the whole part (nothing of it is written), and
   * names those ids and the move's target set; they go to their owners there, the rest to the same shard
   * again, and the map is read again (it is older than the shard's). Never passed to the caller.
   */
  private async routeWrite<T, R>(items: readonly T[], idOf: (t: T) => string, send: (s: ShardRef, part: T[]) => Promise<R>): Promise<R[]> {
    let groups = this.byOwner(items, idOf);
    const out: R[] = [];
    for (let hop = 0; hop <= MOVED_HOPS_MAX; hop++) {
      const list = [...groups];
      const settled = await Promise.allSettled(list.map(([s, part]) => send(s, part)));
      const next = new Map<ShardRef, T[]>();
      let failure: unknown;
      let stale = false;
      for (let i = 0; i < settled.length; i++) {
        const r = settled[i];
        if (r.status === 'fulfilled') {
          out.push(r.value);
          continue;
        }
        const moved = movedOf(r.reason);
        if (moved === null) {
          failure ??= r.reason;
          continue;
        }
        stale = true;
        const [from, part] = list[i];
        const gone = new Set(moved.ids);
        for (const it of part) {
          const id = idOf(it);
          const to = gone.has(id) ? await this.shardById(owner(id, moved.targets)) : from;
          const l = next.get(to);
          if (l === undefined) next.set(to, [it]);
          else l.push(it);
        }
      }
      if (stale) void this.opts.mapStale?.();
      if (failure !== undefined) throw failure;
      if (next.size === 0) return out;
      groups = next;
    }
    throw new SvcError('unavailable', `a point write kept meeting moved points after ${MOVED_HOPS_MAX} hops: the cluster is rebalancing; send it again`);
  }

  /** A shard of the map by id, joining ones included; an unknown one makes the map be read again first. */
  private async shardById(id: number): Promise<ShardRef> {
    const find = () => this.present().find((s) => s.id === id);
    let s = find();
    if (s === undefined) {
      await this.opts.mapStale?.();
      s = find();
    }
    if (s === undefined) throw new SvcError('unavailable', `shard ${id} holds moved points but is not in this router's shard map yet`, { shard: id });
    return s;
  }

  /**
   * A point from its owner; during a rebalance move, when the owner lacks it, from the other shards
   * (it may have moved to its new owner already, or not yet from its old one).
   */
  private async getPoint(name: string, id: string, opts: { with_vector?: boolean }, primary = false): Promise<PointOutput> {
    // `primary`: a shard's primary, never one of its read replicas (a read that a write is checked against).
    const copy = (s: ShardRef): DataShard => (primary ? s.primary ?? s.shard : s.shard);
    const first = this.ownerOf(id, this.shards());
    try {
      return await copy(first).get(name, id, opts);
    } catch (e) {
      const moved = movedOf(e);
      if (moved !== null) {
        // The owner's move took it: ask its new owner (our map is older than the move; read it again).
        void this.opts.mapStale?.();
        return copy(await this.shardById(owner(id, moved.targets))).get(name, id, opts);
      }
      if (!(e instanceof SvcError && e.code === 'not_found') || !this.moving) throw e;
      const others = this.present().filter((s) => s.id !== first.id);
      const found = await Promise.all(others.map((s) => copy(s).get(name, id, opts).catch((x: unknown) => {
        if (x instanceof SvcError && (x.code === 'not_found' || x.code === 'moved')) return null;
        throw x;
      })));
      const hit = found.find((p) => p !== null);
      if (hit === undefined || hit === null) throw e;
      return hit;
    }
  }

  /**
   * A collection's parameters (for parsing and merge order), asked of a shard's primary (a replica may
   * not have a new collection yet) and kept briefly. Requests that find it expired together share one
   * question instead of each asking.
   */
  private async spec(name: string): Promise<CollectionSpec> {
    if (this.opts.specOf !== undefined) return this.opts.specOf(name);
    const now = this.opts.monotonicMs();
    const have = this.specs.get(name);
    if (have !== undefined && now - have.at < (this.opts.specTtlMs ?? 1000)) return have.spec;
    let asking = this.asking.get(name);
    if (asking === undefined) {
      const first = this.shards()[0];
      asking = (first.primary ?? first.shard).collectionInfo(name).then((info) => {
        const spec = specOfInfo(info, this.limits);
        this.specs.set(name, { spec, at: now });
        return spec;
      }).finally(() => this.asking.delete(name));
      this.asking.set(name, asking);
    }
    return asking;
  }

  private async pointSpec(name: string): Promise<CollectionSpec> {
    const spec = await this.spec(name);
    if (spec.multivector) throw invalidArgument(`collection '${spec.name}' is a multivector collection: use documents and query/multi`);
    return spec;
  }

  private async multiSpec(name: string): Promise<CollectionSpec> {
    const spec = await this.spec(name);
    if (!spec.multivector) throw invalidArgument(`collection '${spec.name}' is not a multivector collection: use points, not documents`);
    return spec;
  }

  // ---------------------------------------------------------------- collections

  async listCollections(): Promise<{ collections: CollectionInfo[] }> {
    const lists = await this.all((s) => s.shard.listCollections());
    const byName = new Map<string, CollectionInfo>();
    for (const l of lists) for (const c of l.collections) byName.set(c.name, combine(byName.get(c.name), c));
    return { collections: [...byName.values()].sort((a, b) => (a.name < b.name ? -1 : a.name > b.name ? 1 : 0)) };
  }

  async collectionInfo(name: string): Promise<CollectionInfo> {
    const infos = await this.all((s) => s.shard.collectionInfo(name));
    return infos.reduce<CollectionInfo | undefined>((acc, c) => combine(acc, c), undefined)!;
  }

  /**
   * On every shard, ending the same on all of them: each is asked with exist_ok (so asking again is
   * harmless), and a shard that fails is asked again; one still failing makes the answer `unavailable`
   * naming it (asking again completes the create). Exists everywhere already: `already_exists` unless
   * the caller said exist_ok.
   */
  async createCollection(params: unknown): Promise<CollectionInfo> {
    const { existOk, rest } = splitExistOk(params);
    const spec = parseCollectionParams(rest, this.limits);
    await this.checkEmbedderDim(spec);
    const shape = rest as object;
    const infos = await this.everyShard(`create collection '${spec.name}'`, (s) => s.shard.createCollection({ ...shape, exist_ok: true } as never));
    this.specs.delete(spec.name);
    const existed = infos.every((i) => collectionExisted(i));
    if (existed && !existOk) throw new SvcError('already_exists', `collection '${spec.name}' already exists`);
    const info = infos.reduce<CollectionInfo | undefined>((acc, c) => combine(acc, c), undefined)!;
    return existed ? markCollectionExisted(info) : info;
  }

  async deleteCollection(name: string): Promise<{ existed: boolean }> {
    const r = await this.everyShard(`drop collection '${String(name)}'`, (s) => s.shard.deleteCollection(name));
    this.specs.delete(name);
    return { existed: r.some((x) => x.existed) };
  }

  /** A collection write on every shard, each retried a bounded number of times; never left silently partial. */
  private async everyShard<T>(what: string, fn: (s: ShardRef) => Promise<T>): Promise<T[]> {
    const shards = this.present();
    const out = new Array<T>(shards.length);
    let left = shards.map((_, i) => i);
    let lastErrors: { shard: ShardRef; error: unknown }[] = [];
    for (let attempt = 0; attempt < CLUSTER_WRITE_ATTEMPTS && left.length > 0; attempt++) {
      const settled = await Promise.allSettled(left.map((i) => fn(shards[i])));
      lastErrors = [];
      const again: number[] = [];
      settled.forEach((r, j) => {
        const i = left[j];
        if (r.status === 'fulfilled') out[i] = r.value;
        else if (r.reason instanceof SvcError && r.reason.code !== 'unavailable' && r.reason.code !== 'internal') throw r.reason;
        else {
          again.push(i);
          lastErrors.push({ shard: shards[i], error: r.reason });
        }
      });
      left = again;
    }
    if (left.length > 0) {
      const names = lastErrors.map((e) => e.shard.name).join(', ');
      const done = shards.length - left.length;
      throw new SvcError('unavailable', `${what}: ${names} could not answer (${done} of ${shards.length} shards done; `
        + 'asking again completes it)', { shards: lastErrors.map((e) => e.shard.id) });
    }
    return out;
  }

  // ---------------------------------------------------------------- point writes

  async upsert(name: string, body: { points: unknown }): Promise<{ upserted: number }> {
    return this.pointWrite(name, body, 'upsert body', 'maxBatchSize', (s, points) => s.shard.upsert(name, { points } as never));
  }

  async bulkUpsert(name: string, body: { points: unknown }): Promise<{ upserted: number }> {
    return this.pointWrite(name, body, 'bulk body', 'maxBulkBatchSize', (s, points) => s.shard.bulkUpsert(name, { points } as never));
  }

  /**
   * Checked whole here (a bad point refuses the batch before any shard stores any of it), then each
   * owner's part sent in parallel. A shard that fails fails the call naming it; the parts the others
   * stored stay (an upsert is idempotent: sending the batch again completes it).
   */
  private async pointWrite(
    name: string, body: { points: unknown }, what: string, limit: 'maxBatchSize' | 'maxBulkBatchSize',
    send: (s: ShardRef, points: unknown[]) => Promise<{ upserted: number }>,
  ): Promise<{ upserted: number }> {
    const spec = await this.pointSpec(name);
    const b = checkObject(body, what, ['points']);
    const parsed = parsePoints(b.points, spec, this.limits, limit);
    if (parsed.length === 0) return { upserted: 0 };
    const raw = b.points as unknown[];
    const r = await this.routeWrite(raw.map((p, i) => ({ p, id: checkPointId((p as { id: unknown }).id), i })), (x) => x.id, (s, items) => send(s, items.map((x) => x.p)));
    return { upserted: r.reduce((n, x) => n + x.upserted, 0) };
  }

  async get(name: string, id: string, opts: { with_vector?: boolean } = {}): Promise<PointOutput> {
    return this.getPoint(name, checkPointId(id), opts);
  }

  async delete(name: string, id: string): Promise<{ deleted: boolean }> {
    const [r] = await this.routeWrite([checkPointId(id)], (x) => x, (s) => s.shard.delete(name, id));
    return r;
  }

  /**
   * All or nothing, as on one node. A batch whose ids one shard owns goes there, which checks and applies
   * it at once. A batch across shards first reads each point from its owner, so that an unknown id (the
   * first in batch order, as one node names it) or a merged payload over the limits refuses the whole
   * batch before any shard changes anything. (A delete racing the update between that read and the
   * update can still make one shard refuse its part while the others apply theirs.)
   */
  async setPayload(name: string, body: SetPayloadBody): Promise<{ updated: number }> {
    const spec = await this.spec(name);
    const { mode, points } = parsePayloadUpdate(body, this.limits);
    if (points.length === 0) return { updated: 0 };
    const groups = this.byOwner(points, (p) => p.id);
    if (groups.size > 1) {
      const current = await this.payloadsOf(name, [...new Set(points.map((p) => p.id))]);
      const missing = points.find((p) => !current.has(p.id));
      if (missing !== undefined) throw notFound(`point '${missing.id}' does not exist in collection '${spec.name}'; no payload was changed`);
      checkPayloadResults(points, mode, (id) => current.get(id)!, this.limits);
    }
    const r = await this.routeWrite(points, (p) => p.id, (s, items) => s.shard.setPayload(name, { points: items, mode }));
    return { updated: r.reduce((n, x) => n + x.updated, 0) };
  }

  /** The payloads of the points of `ids` that exist, each read from its owner (a few at a time). */
  private async payloadsOf(name: string, ids: readonly string[]): Promise<Map<string, Payload>> {
    const out = new Map<string, Payload>();
    for (let i = 0; i < ids.length; i += PAYLOAD_READS_AT_ONCE) {
      await Promise.all(ids.slice(i, i + PAYLOAD_READS_AT_ONCE).map(async (id) => {
        try {
          // From the primaries: what a write is checked against must not be a replica's older copy.
          out.set(id, (await this.getPoint(name, id, {}, true)).payload);
        } catch (e) {
          if (!(e instanceof SvcError && e.code === 'not_found')) throw e;
        }
      }));
    }
    return out;
  }

  async deletePoints(name: string, body: DeletePointsBody): Promise<{ deleted: number }> {
    const b = checkObject(body, 'delete body', bodyKeys(BODIES.deletePoints));
    if (b.ids !== undefined && b.ids !== null && b.filter === undefined) {
      if (!Array.isArray(b.ids)) throw invalidArgument('ids must be a list');
      const r = await this.routeWrite(b.ids.map((id: unknown) => checkPointId(id)), (id) => id, (s, ids) => s.shard.deletePoints(name, { ids }));
      return { deleted: r.reduce((n, x) => n + x.deleted, 0) };
    }
    if (!this.moving) {
      const r = await this.all((s) => s.shard.deletePoints(name, body));
      return { deleted: r.reduce((n, x) => n + x.deleted, 0) };
    }
    // Mid-move, sources before targets: a source holds its writes while a batch is out, so its delete
    // runs after the batch's commit, and the targets' after the batch landed there. Draining shards are
    // only sources, joining ones only targets; active ones are the targets of a drain and the sources
    // of a join (one move runs at a time, and never both kinds with an active shard in between).
    let deleted = 0;
    const present = this.present();
    const waves = (['draining', 'active', 'joining'] as const).map((st) => present.filter((s) => (s.state ?? 'active') === st));
    for (const wave of waves) {
      const r = await Promise.all(wave.map((s) => s.shard.deletePoints(name, body)));
      deleted += r.reduce((n, x) => n + x.deleted, 0);
    }
    return { deleted };
  }

  async upsertText(name: string, body: { points: TextPointInput[] }): Promise<{ upserted: number }> {
    const spec = await this.pointSpec(name);
    const embedder = this.embedderFor(spec);
    const items = parseTextPoints(body, this.limits);
    // Nothing to embed: answered as an empty plain upsert is (on a consensus member, only once the
    // collection is shown current: Database.unchanged).
    if (items.length === 0) return this.upsert(name, { points: [] });
    // Embedded once, here, before any shard stores anything: a provider failure stores nothing.
    const vectors = await embedder.embed(items.map((x) => x.text), 'document');
    return this.upsert(name, { points: items.map((x, i) => ({ id: x.id, vector: Array.from(vectors[i]), payload: x.payload })) });
  }

  async upsertDocuments(name: string, body: { documents: DocumentInput[] }): Promise<{ upserted: number }> {
    const spec = await this.multiSpec(name);
    const docs = parseDocuments(body, spec, this.limits);
    if (docs.length === 0) return { upserted: 0 };
    const raw = (body as { documents: unknown[] }).documents;
    const r = await this.routeWrite(raw, (d) => checkPointId((d as { id: unknown }).id), (s, documents) => s.shard.upsertDocuments(name, { documents } as never));
    return { upserted: r.reduce((n, x) => n + x.upserted, 0) };
  }

  async deleteDocument(name: string, id: string): Promise<{ deleted: boolean }> {
    const [r] = await this.routeWrite([checkPointId(id)], (x) => x, (s) => s.shard.deleteDocument(name, id));
    return r;
  }

  // ---------------------------------------------------------------- reads

  /** Pages through every shard with one cursor: each shard's page after it, merged in id order. */
  async fetch(name: string, query: FetchQuery = {}): Promise<{ points: PointOutput[]; next_cursor: string | null }> {
    const q = checkObject(query, 'fetch body', bodyKeys(BODIES.fetch));
    const limit = parseFetchLimit(q.limit, this.limits);
    const body = { ...query, limit };
    const pages = await this.all((s) => s.shard.fetch(name, body));
    const sorted = pages.flatMap((p) => p.points).sort((a, b) => compareFetchIds(a.id, b.id));
    // Mid-move a point may be on its old and its new owner for the length of a batch: once here.
    const merged = sorted.filter((p, i) => i === 0 || p.id !== sorted[i - 1].id);
    const points = merged.slice(0, limit);
    const more = merged.length > limit || pages.some((p) => p.next_cursor !== null);
    // A cursor is the last id given, encoded as every shard encodes it: each reads it the same way.
    return { points, next_cursor: more && points.length > 0 ? encodeCursor(points[points.length - 1].id) : null };
  }

  async count(name: string, query: CountQuery = {}): Promise<{ count: number }> {
    // From the primaries: a count takes no consistency, and one right after a write must include it
    // (a read replica holds acknowledged writes only eventually). Counting is cheap to serve there.
    const r = await this.all((s) => (s.primary ?? s.shard).count(name, query));
    return { count: r.reduce((n, x) => n + x.count, 0) };
  }

  async search(name: string, query: SearchQuery): Promise<{ hits: Hit[] }> {
    const spec = await this.pointSpec(name);
    const k = parseK((query as { k?: unknown } | null)?.k, this.limits);
    const r = await this.all((s) => s.shard.search(name, query));
    return { hits: mergeTopK(r.map((x) => x.hits), k, scoreOrder(spec.metric)) };
  }

  async searchMultiVector(name: string, query: MultiVectorQuery): Promise<{ hits: Hit[] }> {
    await this.multiSpec(name);
    const k = parseK((query as { k?: unknown } | null)?.k, this.limits);
    const r = await this.all((s) => s.shard.searchMultiVector(name, query));
    return { hits: mergeTopK(r.map((x) => x.hits), k, 'higher_first') };
  }

  async hybridSearch(name: string, query: HybridQuery): Promise<{ hits: Hit[] }> {
    const spec = await this.pointSpec(name);
    const q = checkObject(query, 'hybrid body', bodyKeys(BODIES.hybridSearch));
    const k = parseK(q.k, this.limits);
    const k0 = parseRrfK0(q.rrf_k0);
    const { k: _k, rrf_k0: _k0, ...rest } = q;
    const r = await this.gather(name, spec, rest, fusionDepth(k, this.limits), undefined);
    return { hits: fuseRankings([r.dense, r.sparse, r.text].filter((l) => l !== undefined), k, k0) };
  }

  async searchText(name: string, query: TextQuery): Promise<{ hits: Hit[] }> {
    const spec = await this.pointSpec(name);
    const q = checkObject(query, 'text query body', bodyKeys(BODIES.searchText));
    if (typeof q.text !== 'string' || q.text.length === 0) throw invalidArgument('text must be a non-empty string');
    const k = parseK(q.k, this.limits);
    // Checked before the provider is called: a bad filter or text costs no embedding (the shards check
    // them again, as they check everything they answer).
    if (q.filter !== undefined && q.filter !== null) compileFilter(q.filter, spec.filterable);
    const rerank = parseBool(q.rerank, 'rerank', false);
    const pool = parseRerankPool(q.rerank_pool, k, this.limits);
    const withPayload = parseBool(q.with_payload, 'with_payload', true);
    const withVector = parseBool(q.with_vector, 'with_vector', false);
    parseQueryTerms(q.text, this.limits);
    const embedder = this.embedderFor(spec);
    const reranker = rerank ? this.opts.rerankers?.get(spec.name) : undefined;
    if (rerank && reranker === undefined) {
      throw invalidArgument(`collection '${spec.name}' has no rerank provider: configure [rerank.${spec.name}] in svc.toml`);
    }
    const [qv] = await embedder.embed([q.text], 'query');
    const want = reranker === undefined ? k : pool;
    // The vector as the provider gave it: each shard checks and normalizes it once, as it does a query's.
    // The reranker reads each candidate's text, which is in its payload.
    const r = await this.gather(name, spec, {
      vector: Array.from(qv), query_text: q.text, filter: q.filter, with_payload: withPayload || reranker !== undefined, with_vector: withVector, consistency: q.consistency,
    }, fusionDepth(want, this.limits), undefined);
    const fused = fuseRankings([r.dense!, r.text!].filter((l) => l.length > 0), want, DEFAULT_RRF_K0);
    if (reranker === undefined) return { hits: fused };
    if (fused.length === 0) return { hits: [] };
    const docs = fused.map((h) => (typeof h.payload?.__svc_text__ === 'string' ? h.payload.__svc_text__ : ''));
    const order = await reranker.rerank(q.text, docs, Math.min(k, docs.length));
    return {
      hits: order.slice(0, k).map((o, rank) => {
        const { id, payload, vector: v } = fused[o.index];
        const h: Hit = { id, rank, score: o.score };
        if (withPayload) h.payload = payload;
        if (v !== undefined) h.vector = v;
        return h;
      }),
    };
  }

  /**
   * Every shard's rankings, `depth` deep, merged into the collection's: BM25 first gets the whole
   * collection's statistics (a first round when there is more than one shard), so each shard scores
   * with the idf and average length one node of everything would.
   */
  private async gather(name: string, spec: CollectionSpec, body: Record<string, unknown>, depth: number, given: TextStats | undefined): Promise<Rankings> {
    const shards = this.present();
    let textStats = given;
    if (textStats === undefined && shards.length > 1 && typeof body.query_text === 'string') {
      // A strong read's statistics come from the primaries its rankings come from, each confirmed current
      // (a consensus member's ReadIndex round) as its rankings are.
      const strong = body.consistency === 'strong';
      const ask = strong ? { text: body.query_text, consistency: 'strong' } : { text: body.query_text };
      textStats = sumTextStats(await this.each(shards, (s) => {
        const shard = strong ? s.primary ?? s.shard : s.shard;
        // A shard of an older build knows no consistency here (its body is strict): asked as before, so
        // that a rolling upgrade (routers first) keeps strong hybrid searches answering meanwhile.
        return shard.textStats(name, ask).catch((e: unknown) => {
          if (strong && e instanceof SvcError && e.code === 'invalid_argument' && e.message.includes('consistency')) return shard.textStats(name, { text: body.query_text });
          throw e;
        });
      }));
    }
    // One body for every shard (its JSON is written once).
    const ask = { ...body, depth, ...(textStats === undefined ? {} : { text_stats: textStats }) };
    // One shard's rankings are the collection's (each best first, ties by id, `depth` deep): as they are.
    if (shards.length === 1 && shards[0].state !== 'joining') return shards[0].shard.rankings(name, ask);
    const parts = await this.each(shards, (s) => s.shard.rankings(name, ask));
    if (parts.length === 1) return parts[0];
    const merge = (lists: (Ranked[] | undefined)[], order: ScoreOrder): Ranked[] | undefined => {
      if (lists.every((l) => l === undefined)) return undefined;
      return mergeTopK(lists.map((l) => (l ?? []).map((r) => ({ ...r, rank: 0 }))), depth, order).map(({ rank: _, ...r }) => r);
    };
    return {
      dense: merge(parts.map((p) => p.dense), scoreOrder(spec.metric)),
      sparse: merge(parts.map((p) => p.sparse), 'higher_first'),
      text: merge(parts.map((p) => p.text), 'higher_first'),
    };
  }

  /**
   * The rankings themselves, as a shard answers them (an engine over shards can be a shard in turn):
   * every shard's, merged, BM25 over `text_stats` when given, else over the summed statistics.
   */
  async rankings(name: string, body: RankingsBody): Promise<Rankings> {
    const spec = await this.pointSpec(name);
    const { depth: d, text_stats: stats, ...q } = checkObject(body, 'rankings body', bodyKeys(BODIES.rankings));
    const depth = parseDepth(d, this.limits);
    const given = stats === undefined || stats === null ? undefined : checkTextStats(stats, this.limits.maxSparseTerms);
    return this.gather(name, spec, q, depth, given);
  }

  /** The collection's BM25 statistics for a query text's terms: every shard's, summed. */
  async textStats(name: string, body: TextStatsBody): Promise<TextStats> {
    await this.pointSpec(name);
    const b = checkObject(body, 'text stats body', bodyKeys(BODIES.textStats));
    return sumTextStats(await this.all((s) => s.shard.textStats(name, b)));
  }

  /**
   * A new collection whose embedding provider gives another dim could never take text: refused. One
   * that exists already is answered as the shards answer it (already_exists, or exist_ok's answer).
   */
  protected async checkEmbedderDim(spec: CollectionSpec): Promise<void> {
    const e = this.opts.embedders?.get(spec.name);
    if (e === undefined || e.dim === spec.dim) return;
    const exists = await this.collectionInfo(spec.name).then(() => true, (x: unknown) => {
      if (x instanceof SvcError && x.code === 'not_found') return false;
      throw x;
    });
    if (!exists) throw invalidArgument(`collection '${spec.name}' has dim ${spec.dim} but its embedding provider gives ${e.dim}`);
  }

  private embedderFor(spec: CollectionSpec): Embedder {
    const e = this.opts.embedders?.get(spec.name);
    if (e === undefined) throw invalidArgument(`collection '${spec.name}' has no embedding provider: configure [embedding.${spec.name}] in svc.toml`);
    if (e.dim !== spec.dim) throw invalidArgument(`collection '${spec.name}' has dim ${spec.dim} but its embedding provider gives ${e.dim}`);
    return e;
  }

  // ---------------------------------------------------------------- the node

  async stats(): Promise<DatabaseStats> {
    const all = await this.all((s) => s.shard.stats());
    const per = new Map<string, DatabaseStats['per_collection'][number]>();
    for (const st of all) {
      for (const c of st.per_collection) {
        const have = per.get(c.name);
        per.set(c.name, have === undefined ? { ...c } : {
          ...have, count: have.count + c.count, vector_bytes: have.vector_bytes + c.vector_bytes, graph_bytes: have.graph_bytes + c.graph_bytes,
          index_state: have.index_state === 'stale' || c.index_state === 'stale' ? 'stale' : have.index_state,
        });
      }
    }
    const cols = [...per.values()].sort((a, b) => (a.name < b.name ? -1 : a.name > b.name ? 1 : 0));
    return {
      collections: cols.length,
      total_points: cols.reduce((n, c) => n + c.count, 0),
      per_collection: cols,
      snapshot_status: {
        manifest_version: Math.min(...all.map((s) => s.snapshot_status.manifest_version)),
        disk_bytes: all.reduce((n, s) => n + s.snapshot_status.disk_bytes, 0),
      },
    };
  }

  /** A snapshot of the same name on every shard (each in its own node's snapshot directory). */
  async snapshot(body: { name: string }): Promise<SnapshotResult> {
    const r = await this.everyShard(`snapshot '${String(body?.name)}'`, (s) => s.shard.snapshot(body));
    return {
      name: r[0].name,
      path: r.map((x) => x.path).join(', '),
      manifest_version: Math.min(...r.map((x) => x.manifest_version)),
      disk_bytes: r.reduce((n, x) => n + x.disk_bytes, 0),
    };
  }

  async moveBatch(_body?: unknown): Promise<unknown> {
    throw invalidArgument('a router holds no points to move: a coordinator moves them between the shards themselves');
  }

  async moveCommit(_body?: unknown): Promise<unknown> {
    return this.moveBatch();
  }

  async moveApply(_body?: unknown): Promise<unknown> {
    return this.moveBatch();
  }

  // eslint-disable-next-line require-yield
  async *replicate(_body?: ReplicateRequest, _signal?: AbortSignal): AsyncIterable<ReplicationEvent> {
    throw invalidArgument('a router has no replication stream of its own: replicate each shard from its node');
  }

  async close(): Promise<void> {
    this.specs.clear();
  }
}

/** One collection's info from several shards: the same parameters, the counts summed. */
function combine(acc: CollectionInfo | undefined, c: CollectionInfo): CollectionInfo {
  if (acc === undefined) return { ...c };
  return { ...acc, count: acc.count + c.count, index_state: acc.index_state === 'stale' || c.index_state === 'stale' ? 'stale' : acc.index_state };
}

/** A joining shard's answer left out (see Engine.all). */
const SKIPPED: unique symbol = Symbol('skipped');

/** A shard's `moved` answer (core/collection/move.ts): the ids that left and the move's target set; else null. */
function movedOf(e: unknown): { ids: string[]; targets: number[] } | null {
  if (!(e instanceof SvcError) || e.code !== 'moved') return null;
  const m = e.detail.moved as { ids?: unknown; targets?: unknown } | undefined;
  if (!Array.isArray(m?.ids) || !Array.isArray(m.targets) || m.targets.length === 0) return null;
  if (!m.ids.every((x) => typeof x === 'string') || !m.targets.every((x) => Number.isSafeInteger(x) && x >= 0)) return null;
  return { ids: m.ids as string[], targets: m.targets as number[] };
}
