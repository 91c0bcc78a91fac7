import type { ErrorCode } from '../../core/base/errors.js';

/**
 * When each error code of CONTRACT.md section 2 is answered, and what the caller does about it, for
 * docs/reference/errors.md. `Record<ErrorCode, ...>`: a new code does not build until it is explained here.
 */
export const ERROR_MEANINGS: Readonly<Record<ErrorCode, { when: string; fix: string }>> = {
  invalid_argument: {
    when: 'malformed JSON, a field the body does not have (named), a wrong type or dimension, a bad name or filter',
    fix: 'correct the request as the message says; retrying it unchanged fails again',
  },
  limit_exceeded: {
    when: 'a request over a per-request limit; the message names the SVC_MAX_* variable (embedded: the `limits` option of openDatabase)',
    fix: 'send less (split a batch, lower k), or raise the limit where the message says',
  },
  unauthenticated: { when: 'no key, or one the server does not know (with `www-authenticate: Bearer`)', fix: 'send `authorization: Bearer <key>` with a configured key' },
  permission_denied: { when: 'the key\'s role or collection scopes do not cover the operation', fix: 'use a key with the role and scope the operation needs (docs/reference/rest.md names them)' },
  read_only_replica: { when: 'a write sent to a read replica', fix: 'send writes to the leader' },
  not_found: { when: 'an unknown collection, point, document or route', fix: 'check the name or id; create the collection first' },
  already_exists: { when: 'creating a collection that exists (with another shape, when `exist_ok` is true)', fix: 'use it (`exist_ok: true` returns one of the same shape), drop it first, or pick another name' },
  rate_limited: { when: 'the key\'s token bucket is empty (with `retry-after`)', fix: 'retry after the seconds `retry-after` gives' },
  provider_error: { when: 'the embedding or rerank provider failed; nothing of the batch was stored', fix: 'retry later, or check the provider table of that collection' },
  not_ready: { when: 'the storage is not open yet (startup)', fix: 'retry once `/readyz` answers 200' },
  unavailable: {
    when: 'something the request needs could not answer in time: the data directory held by another process, a shard or leader',
    fix: 'retry later; for a held data directory, stop the process the message names',
  },
  shard_not_drained: {
    when: 'removing a cluster shard (`DELETE /cluster/shards/{id}`) that is not draining or still holds points',
    fix: 'drain it first (`POST /cluster/shards/{id}/drain`) and delete it once its points have moved',
  },
  moved: {
    when: 'internal, between a router and its shards during a rebalance: a point write reached the shard its points have left (docs/cluster.md, Rebalancing); a router sends them on to their new owner and never passes this code to a client',
    fix: 'a router does it itself; a client talking to a shard directly sends the write through the router',
  },
  internal: { when: 'a bug: logged with the request id; the client sees only that id', fix: 'report it with the request id (`x-request-id`)' },
};
