/**
 * The bodies of the internal rebalance routes (`/v1/cluster/move/*`, docs/cluster.md, Rebalancing). Kept
 * beside schemas.ts, not in it: a coordinator's calls, not the contract's. The engine checks them whole
 * again (core/collection/move.ts), as every body.
 */
type Schema = Record<string, unknown>;

const obj = (properties: Record<string, Schema>, required: string[] = []): Schema => ({
  type: 'object', additionalProperties: false, properties, required,
});
const str: Schema = { type: 'string' };
const int: Schema = { type: 'integer' };

const described = (schema: Schema, description: string): Schema => ({ ...schema, description });

export const moveBatchBody = obj({
  move: described(str, 'the move id'),
  self: described(int, 'this node\'s shard id'),
  targets: described({ type: 'array', items: int }, 'the shard ids the points go to (rendezvous hash)'),
  limit: described(int, 'most points in the batch (default 1000, at most 10000)'),
  lease_ms: described(int, 'how long the batch may hold writes before its commit (default 5000)'),
}, ['move', 'self', 'targets']);
export const moveCommitBody = obj({ move: str, token: str }, ['move', 'token']);
export const moveApplyBody = obj({
  collection: str,
  params: described({ type: 'object' }, 'the collection\'s parameters, as collection info gives them'),
  records: described({ type: 'array', items: str }, 'base64 of logical records (core/storage/codec.ts upsert or upsert_docs)'),
  deletes: described({ type: 'array', items: str }, 'ids an uncommitted earlier batch sent that are gone at the source since'),
}, ['collection', 'params', 'records']);
