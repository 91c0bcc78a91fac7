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

export const moveBatchBody = obj({ move: str, self: int, targets: { type: 'array', items: int }, limit: int, lease_ms: int }, ['move', 'self', 'targets']);
export const moveCommitBody = obj({ move: str, token: str }, ['move', 'token']);
export const moveApplyBody = obj({
  collection: str, params: { type: 'object' }, records: { type: 'array', items: str }, deletes: { type: 'array', items: str },
}, ['collection', 'params', 'records']);
