import { systemClock } from '../base/clock.js';
import type { CollectionInfo, Embedder, Reranker } from '../base/model.js';
import { parseCollectionParams, splitExistOk } from '../collection/params.js';
import type { EngineApi } from '../service/api.js';
import { Engine } from './engine.js';
import type { NodeShard } from './shard.js';

export interface NodeEngineOptions {
  /** Server-side embedding per collection (the `[embedding.<c>]` tables). */
  embedders?: ReadonlyMap<string, Embedder>;
  /** Server-side reranking per collection (the `[rerank.<c>]` tables). */
  rerankers?: ReadonlyMap<string, Reranker>;
}

/**
 * The engine of one node over its own storage (issue 16, "the single node on the Engine"): what `svc
 * serve` serves as a single node, what `openDatabase` resolves to, and what a read replica's and a
 * consensus member's rules wrap (follower-engine.ts, raft-engine.ts), each over the node's Database.
 *
 * The orchestration that is not storage (embedding text, fusing a hybrid or text query's rankings,
 * reranking) is the Engine's, the same code a router runs over remote shards, so the two cannot drift.
 * Everything the node answers whole (point reads and writes, dense and multi-vector search, a query's
 * rankings, stats, snapshots, moves, the replication stream) goes straight to it: no spec lookup, no
 * routing, no merge of one list, so a dense search costs what the database's own does.
 */
export class NodeEngine<N extends NodeShard = NodeShard> extends Engine {
  constructor(readonly node: N, opts: NodeEngineOptions = {}) {
    super({
      shards: () => [{ id: 0, name: 'this node', shard: node }],
      limits: node.limits,
      ...opts,
      // The node's own parameters as they are now: no copy, no parse, never an old shape.
      specOf: (name) => node.collectionSpec(name),
      monotonicMs: () => systemClock.monotonicMs(),
    });
  }

  // ---------------------------------------------------------------- the node's own answers

  override async createCollection(params: unknown): Promise<CollectionInfo> {
    await this.checkEmbedderDim(parseCollectionParams(splitExistOk(params).rest, this.limits));
    return this.node.createCollection(params as never);
  }

  override listCollections(...a: Parameters<EngineApi['listCollections']>) { return this.node.listCollections(...a); }
  override collectionInfo(...a: Parameters<EngineApi['collectionInfo']>) { return this.node.collectionInfo(...a); }
  override deleteCollection(...a: Parameters<EngineApi['deleteCollection']>) { return this.node.deleteCollection(...a); }
  override upsert(...a: Parameters<EngineApi['upsert']>) { return this.node.upsert(...a); }
  override bulkUpsert(...a: Parameters<EngineApi['bulkUpsert']>) { return this.node.bulkUpsert(...a); }
  override get(...a: Parameters<EngineApi['get']>) { return this.node.get(...a); }
  override delete(...a: Parameters<EngineApi['delete']>) { return this.node.delete(...a); }
  override fetch(...a: Parameters<EngineApi['fetch']>) { return this.node.fetch(...a); }
  override count(...a: Parameters<EngineApi['count']>) { return this.node.count(...a); }
  override setPayload(...a: Parameters<EngineApi['setPayload']>) { return this.node.setPayload(...a); }
  override deletePoints(...a: Parameters<EngineApi['deletePoints']>) { return this.node.deletePoints(...a); }
  override search(...a: Parameters<EngineApi['search']>) { return this.node.search(...a); }
  override searchMultiVector(...a: Parameters<EngineApi['searchMultiVector']>) { return this.node.searchMultiVector(...a); }
  override upsertDocuments(...a: Parameters<EngineApi['upsertDocuments']>) { return this.node.upsertDocuments(...a); }
  override deleteDocument(...a: Parameters<EngineApi['deleteDocument']>) { return this.node.deleteDocument(...a); }
  override rankings(...a: Parameters<EngineApi['rankings']>) { return this.node.rankings(...a); }
  override textStats(...a: Parameters<EngineApi['textStats']>) { return this.node.textStats(...a); }
  override stats(...a: Parameters<EngineApi['stats']>) { return this.node.stats(...a); }
  override snapshot(...a: Parameters<EngineApi['snapshot']>) { return this.node.snapshot(...a); }
  override moveBatch(...a: Parameters<EngineApi['moveBatch']>) { return this.node.moveBatch(...a); }
  override moveCommit(...a: Parameters<EngineApi['moveCommit']>) { return this.node.moveCommit(...a); }
  override moveApply(...a: Parameters<EngineApi['moveApply']>) { return this.node.moveApply(...a); }
  override replicate(...a: Parameters<EngineApi['replicate']>) { return this.node.replicate(...a); }

  override async close(): Promise<void> {
    await super.close();
    await this.node.close();
  }
}
