/**
 * Opening a data directory's storage with its provider adapters: what openDatabase (core/embedded.ts)
 * puts its engine around, and what the server roles open and wrap themselves (a single node's engine, a
 * read replica's or a consensus member's rules). Not part of the package's export: the storage alone
 * has no embedding and internal methods a caller must not reach. The option types are re-exported by
 * core/embedded.ts, whose openDatabase takes them.
 */
import { invalidArgument, SvcError } from './base/errors.js';
import type { Limits } from './base/limits.js';
import type { Embedder, Reranker } from './base/model.js';
import { Database as Storage } from './collection/database.js';
import { parseMasterKeyHex } from './crypto/keys.js';
import { createEmbedder, createReranker, type ProviderOptions } from './providers/index.js';

export interface OpenOptions {
  dataDir: string;
  /** The 256-bit master key as 64 hex characters. */
  encryptionKey?: string;
  /** Plaintext (checksummed) data directory: development only. */
  insecure?: boolean;
  limits?: Partial<Limits>;
  /**
   * Where the caller sets the limits, so that a `limit_exceeded` error names the knob to turn:
   * `options` (the default) names this call's option (`limits.maxBatchSize`); `environment` names the
   * SVC_MAX_* variable, for the `svc` commands, whose limits come from their configuration.
   */
  limitsFrom?: 'options' | 'environment';
  snapshotDir?: string;
  /** Worker threads for dense searches (default 0: on the calling thread; SVC_SEARCH_WORKERS for `svc serve`). */
  searchWorkers?: number;
  /**
   * Threads building one large graph (default: every core but the search workers', at least two on two
   * cores; SVC_BUILD_WORKERS for `svc serve`).
   */
  buildWorkers?: number;
  /** Most bytes of WAL kept only for connected replication streams (default 1 GiB; SVC_REPLICATION_RETAIN_BYTES). */
  replicationRetainBytes?: number;
  /**
   * Whether a search right after a bulk load (more new points than the graph absorbs in place) waits
   * for the background graph build rather than scanning the new points exactly. Default true; the
   * server roles pass false so that their reads never wait unless they ask for `consistency: 'strong'`.
   */
  waitForBulkBuild?: boolean;
  /**
   * Whether graphs take large batches of new points in a build worker (on a copy of the graph, swapped
   * in when done) rather than in slices of the event loop. Default false; `svc serve` as a read replica
   * passes true, so its loop applies the leader's records first. The graph is the same either way.
   */
  absorbOffThread?: boolean;
  /**
   * Whether this is a consensus member's directory (`svc serve` with SVC_RAFT_MEMBERS passes true): damage
   * a power loss left in the WAL's unsynced tail is cut at open, for the member to replay from its
   * consensus log, instead of refused. Default false.
   */
  consensus?: boolean;
  /**
   * Whether collections also keep what a dense search reads in shared memory, for request loops that
   * search them themselves (`svc serve` with several loops, as a single node). Default false.
   */
  sharedReads?: boolean;
  /** Server-side embedding and reranking per collection (the `[embedding.<c>]` / `[rerank.<c>]` tables). */
  providers?: ProvidersOptions;
  /**
   * Where the database's own warnings go (a torn WAL tail cut off, a graph file not used and rebuilt);
   * default: nowhere.
   */
  log?: (level: 'debug' | 'info' | 'warn' | 'error', message: string, detail?: Record<string, unknown>) => void;
}

/** One provider table, key already resolved (the caller reads it from where it keeps secrets). */
export interface ProviderTableOptions {
  /** embedding: `hosted_a`, `local_compatible`, `http`, `hosted_b`, `fake`; rerank: `hosted_b`, `fake`. */
  provider: string;
  model: string;
  /** Required for `local_compatible` and `http`; defaults to the vendor's address for the hosted kinds. */
  endpoint?: string;
  /** The embedding dimension; must equal the collection's dim. Unused by rerankers. */
  dim?: number;
  /** The provider's secret; never stored, never logged, never in an error message. */
  apiKey?: string;
}

export interface ProvidersOptions {
  /** By collection name. */
  embedding?: Readonly<Record<string, ProviderTableOptions>>;
  /** By collection name. */
  rerank?: Readonly<Record<string, ProviderTableOptions>>;
  /** Per HTTP attempt. Default 30 000. */
  timeoutMs?: number;
  /** Extra attempts on 429, 5xx, timeouts and connection errors. Default 2. */
  retries?: number;
  /** Texts per embedding request. Default 96. */
  batchSize?: number;
}

export const DEFAULT_PROVIDER_TIMEOUT_MS = 30_000;
export const DEFAULT_PROVIDER_RETRIES = 2;

/**
 * A data directory's storage, opened and checked as openDatabase opens it, with its provider adapters:
 * for the server roles, which put the node's engine (core/engine/node.ts) around it themselves, inside
 * a read replica's or a consensus member's rules.
 */
export async function openStorage(options: OpenOptions): Promise<{
  storage: Storage;
  embedders: Map<string, Embedder>;
  rerankers: Map<string, Reranker>;
}> {
  if (typeof options !== 'object' || options === null) throw invalidArgument('openDatabase needs an options object');
  if (typeof options.dataDir !== 'string' || options.dataDir.length === 0) throw invalidArgument('dataDir must be a path');
  const insecure = options.insecure === true;
  if (insecure && options.encryptionKey !== undefined) {
    throw invalidArgument('give either encryptionKey or insecure: true, not both');
  }
  if (!insecure && options.encryptionKey === undefined) {
    throw invalidArgument('encryptionKey (64 hex characters) is required unless insecure: true');
  }
  const masterKey = insecure ? null : parseMasterKeyHex(String(options.encryptionKey));
  const { embedders, rerankers } = buildProviders(options.providers);
  const storage = await Storage.open({
    dataDir: options.dataDir,
    masterKey,
    limits: options.limits,
    snapshotDir: options.snapshotDir,
    searchWorkers: options.searchWorkers,
    buildWorkers: options.buildWorkers,
    replicationRetainBytes: options.replicationRetainBytes,
    waitForBulkBuild: options.waitForBulkBuild,
    absorbOffThread: options.absorbOffThread,
    consensus: options.consensus,
    ...(options.sharedReads === true ? { sharedReads: true } : {}),
    ...(options.log !== undefined ? { log: options.log } : {}),
  });
  try {
    await checkProviderDims(storage, embedders);
  } catch (e) {
    await storage.close();
    throw e;
  }
  return { storage, embedders, rerankers };
}

/** Provider tables to adapters; a bad table is `invalid_argument` naming it (`[embedding.docs]: ...`). */
export function buildProviders(p: ProvidersOptions | undefined): {
  embedders: Map<string, Embedder>;
  rerankers: Map<string, Reranker>;
} {
  const embedders = new Map<string, Embedder>();
  const rerankers = new Map<string, Reranker>();
  if (p === undefined) return { embedders, rerankers };
  if (typeof p !== 'object' || p === null) throw invalidArgument('providers must be an object');
  const opts: ProviderOptions = {
    timeoutMs: p.timeoutMs ?? DEFAULT_PROVIDER_TIMEOUT_MS,
    retries: p.retries ?? DEFAULT_PROVIDER_RETRIES,
    ...(p.batchSize !== undefined ? { batchSize: p.batchSize } : {}),
  };
  for (const [collection, table] of Object.entries(p.embedding ?? {})) {
    embedders.set(collection, named(`embedding.${collection}`, () => createEmbedder(table, opts)));
  }
  for (const [collection, table] of Object.entries(p.rerank ?? {})) {
    rerankers.set(collection, named(`rerank.${collection}`, () => createReranker(table, opts)));
  }
  return { embedders, rerankers };
}

function named<T>(table: string, make: () => T): T {
  try {
    return make();
  } catch (e) {
    if (e instanceof SvcError) throw new SvcError(e.code, `[${table}]: ${e.message}`);
    throw e;
  }
}

/** An existing collection whose provider gives another dim cannot be served: refuse to open. */
async function checkProviderDims(db: Storage, embedders: ReadonlyMap<string, Embedder>): Promise<void> {
  if (embedders.size === 0) return;
  const { collections } = await db.listCollections();
  for (const c of collections) {
    const e = embedders.get(c.name);
    if (e !== undefined && e.dim !== c.dim) {
      throw invalidArgument(
        `[embedding.${c.name}] has dim ${e.dim} but collection '${c.name}' has dim ${c.dim}. ` +
          `Fix: set dim = ${c.dim} with a model of that size, or use another collection`,
      );
    }
  }
}
