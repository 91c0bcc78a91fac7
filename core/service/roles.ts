import type { OperationName, Role } from './api.js';

/**
 * The one role table (CONTRACT.md section 3). `Record<OperationName, ...>` makes the compiler refuse a
 * new operation without an entry; `policyFor` refuses (default deny) any name that is not in the table.
 *
 * `collection`: where the operation's collection name comes from, for the scope check; `all` means the
 * operation reaches every collection (a snapshot), so only a key scoped to `*` may run it.
 * `audited`: mutating or administrative operations, appended to the audit log on every outcome.
 */
export interface OperationPolicy {
  readonly role: Role;
  readonly collection: 'none' | 'arg' | 'params.name' | 'all';
  readonly audited: boolean;
}

export const OPERATION_POLICIES: Readonly<Record<OperationName, OperationPolicy>> = Object.freeze({
  listCollections: { role: 'read', collection: 'none', audited: false },
  collectionInfo: { role: 'read', collection: 'arg', audited: false },
  get: { role: 'read', collection: 'arg', audited: false },
  fetch: { role: 'read', collection: 'arg', audited: false },
  count: { role: 'read', collection: 'arg', audited: false },
  search: { role: 'read', collection: 'arg', audited: false },
  hybridSearch: { role: 'read', collection: 'arg', audited: false },
  searchText: { role: 'read', collection: 'arg', audited: false },
  searchMultiVector: { role: 'read', collection: 'arg', audited: false },
  stats: { role: 'read', collection: 'none', audited: false },
  // What a router asks of its shards (with SVC_CLUSTER_SHARD_KEY): reads, like the queries they serve.
  rankings: { role: 'read', collection: 'arg', audited: false },
  textStats: { role: 'read', collection: 'arg', audited: false },
  upsert: { role: 'write', collection: 'arg', audited: true },
  bulkUpsert: { role: 'write', collection: 'arg', audited: true },
  delete: { role: 'write', collection: 'arg', audited: true },
  setPayload: { role: 'write', collection: 'arg', audited: true },
  deletePoints: { role: 'write', collection: 'arg', audited: true },
  upsertText: { role: 'write', collection: 'arg', audited: true },
  upsertDocuments: { role: 'write', collection: 'arg', audited: true },
  deleteDocument: { role: 'write', collection: 'arg', audited: true },
  createCollection: { role: 'admin', collection: 'params.name', audited: true },
  deleteCollection: { role: 'admin', collection: 'arg', audited: true },
  snapshot: { role: 'admin', collection: 'all', audited: true },
  replicate: { role: 'admin', collection: 'all', audited: true },
  // A coordinator's rebalance steps (SVC_CLUSTER_SHARD_KEY): every collection of the node, like a
  // snapshot. Not audited one by one: the coordinator audits each move's start and end.
  moveBatch: { role: 'admin', collection: 'all', audited: false },
  moveCommit: { role: 'admin', collection: 'all', audited: false },
  moveApply: { role: 'admin', collection: 'all', audited: false },
});

/**
 * The coordinator's membership API (CONTRACT.md sections 3 and 11): admin only, and reaching the whole
 * cluster, so only a key scoped to `*` (like a snapshot). Reading the map is not audited; changes are.
 */
export const CLUSTER_OPERATIONS = ['clusterMap', 'registerShard', 'drainShard', 'removeShard', 'clusterRaft'] as const;
export type ClusterOperationName = (typeof CLUSTER_OPERATIONS)[number];

export const CLUSTER_POLICIES: Readonly<Record<ClusterOperationName, OperationPolicy>> = Object.freeze({
  clusterMap: { role: 'admin', collection: 'all', audited: false },
  registerShard: { role: 'admin', collection: 'all', audited: true },
  drainShard: { role: 'admin', collection: 'all', audited: true },
  removeShard: { role: 'admin', collection: 'all', audited: true },
  // A consensus member's view of its group (GET /cluster/raft).
  clusterRaft: { role: 'admin', collection: 'all', audited: false },
});

/** The policy for an operation name, or undefined: a caller must refuse when it is undefined. */
export function policyFor(op: string): OperationPolicy | undefined {
  if (Object.prototype.hasOwnProperty.call(OPERATION_POLICIES, op)) return OPERATION_POLICIES[op as OperationName];
  if (Object.prototype.hasOwnProperty.call(CLUSTER_POLICIES, op)) return CLUSTER_POLICIES[op as ClusterOperationName];
  return undefined;
}

const RANK: Readonly<Record<Role, number>> = { read: 1, write: 2, admin: 3 };

/** read is contained in write, write in admin. */
export function roleAllows(have: Role, need: Role): boolean {
  return RANK[have] >= RANK[need];
}

/** Scopes are exact names or trailing-`*` prefixes; `*` alone is every collection. */
export function scopeAllows(scopes: readonly string[], collection: string): boolean {
  for (const s of scopes) {
    if (s.endsWith('*')) {
      if (collection.startsWith(s.slice(0, -1))) return true;
    } else if (s === collection) {
      return true;
    }
  }
  return false;
}

/**
 * What each operation does to a node's data, for the engines that treat them by kind (a read replica
 * refuses writes; a consensus member proposes them): `read`, `write` (points or collections), `stream`
 * (the replication stream), `move` (a coordinator's rebalance steps). The compiler refuses a new
 * operation without one.
 */
export type OperationKind = 'read' | 'write' | 'stream' | 'move';

export const OPERATION_KINDS: Readonly<Record<OperationName, OperationKind>> = Object.freeze({
  listCollections: 'read', collectionInfo: 'read', get: 'read', fetch: 'read', count: 'read', search: 'read', hybridSearch: 'read',
  searchText: 'read', searchMultiVector: 'read', stats: 'read', snapshot: 'read', rankings: 'read', textStats: 'read',
  upsert: 'write', bulkUpsert: 'write', delete: 'write', setPayload: 'write', deletePoints: 'write', upsertText: 'write',
  upsertDocuments: 'write', deleteDocument: 'write', createCollection: 'write', deleteCollection: 'write',
  replicate: 'stream', moveBatch: 'move', moveCommit: 'move', moveApply: 'move',
});
