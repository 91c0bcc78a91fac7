/**
 * What the cluster asks of a shard over the network. The HTTP implementation lives in roles/ (it holds
 * SVC_CLUSTER_SHARD_KEY and the sockets); tests give a fake. The router's data calls (search, upsert,
 * fetch) join this interface when the router comes.
 *
 * Every call fails with SvcError `unavailable` naming the shard when the shard cannot answer in time
 * or answers with an error: never with a made-up answer (a count of 0 for an unreachable shard).
 */
export interface ShardClient {
  /** The shard's total point count over every collection (`GET /v1/stats` `total_points`). */
  pointCount(url: string, signal?: AbortSignal): Promise<number>;
  /** Resolves when the shard answers `GET /readyz` with 200 (a standby that can take a shard's place). */
  ready(url: string, signal?: AbortSignal): Promise<void>;
}
