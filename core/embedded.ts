/**
 * The embedded API (CONTRACT.md section 7): `openDatabase(options)` resolves to a database whose methods
 * are the MCP tools in camelCase, taking the REST bodies and resolving to the REST responses. It is the
 * engine over this process's data directory (core/engine/node.ts), as `svc serve`'s single node is: the
 * storage (core/collection/database.ts) is its `node`, and text, hybrid fusion and reranking are the
 * engine's, the same code a router runs. The bodies'
 * types (CollectionParams, SearchQuery, ...) are inferred from the one schema of each body
 * (core/base/bodies.ts) that REST, MCP and the proto check are held to, so an editor completes them and a
 * wrong body does not compile (core/testing/embedded-types.fixture.ts).
 */
import { invalidArgument, SvcError } from './base/errors.js';
import { LIMIT_VARIABLES, type Limits } from './base/limits.js';
import type { Embedder, Reranker } from './base/model.js';
import { Database as Storage } from './collection/database.js';
import { parseMasterKeyHex } from './crypto/keys.js';
import { NodeEngine } from './engine/node.js';
import { createEmbedder, createReranker, type ProviderOptions } from './providers/index.js';
import type { EngineApi } from './service/api.js';

export { SvcError, ERROR_CODES, type ErrorCode } from './base/errors.js';
export type * from './base/model.js';
export type { Limits } from './base/limits.js';

/**
 * What openDatabase resolves to: the engine over the data directory's storage (core/engine/node.ts),
 * which is its `node`, with the limits it enforces.
 */
export type Database = EngineApi & {
  readonly node: Storage;
  readonly limits: Limits;
  /** CONTRACT.md section 7's name for `stats()`: the MCP tool `database_stats`. */
  databaseStats(): ReturnType<EngineApi['stats']>;
  /** CONTRACT.md section 7's name for `upsertDocuments`: the MCP tool `upsert_document`, the REST body. */
  upsertDocument(...a: Parameters<EngineApi['upsertDocuments']>): ReturnType<EngineApi['upsertDocuments']>;
};

/** The node's engine with the contract's two names that differ from the engine's own. */
class EmbeddedDatabase extends NodeEngine<Storage> {
  databaseStats(): ReturnType<EngineApi['stats']> {
    return this.stats();
  }

  upsertDocument(...a: Parameters<EngineApi['upsertDocuments']>): ReturnType<EngineApi['upsertDocuments']> {
    return this.upsertDocuments(...a);
  }
}

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

/** Opens (creating if needed) a data directory in this process. */
export async function openDatabase(options: OpenOptions): Promise<Database> {
  const { storage, embedders, rerankers } = await openStorage(options);
  const db: Database = new EmbeddedDatabase(storage, { embedders, rerankers });
  return options.limitsFrom === 'environment' ? db : namingLimitOptions(db);
}

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

/** SVC_MAX_BATCH_SIZE -> maxBatchSize. */
const LIMIT_OF_VARIABLE: ReadonlyMap<string, string> = new Map(Object.entries(LIMIT_VARIABLES).map(([field, v]) => [v, field]));

/**
 * A limit error in the embedded caller's terms: the engine names the SVC_MAX_* variable (what an operator
 * of `svc serve` sets), but in-process the limit is the `limits` option of openDatabase.
 */
export function inOptionTerms(e: unknown): unknown {
  if (!(e instanceof SvcError) || e.code !== 'limit_exceeded') return e;
  const field = LIMIT_OF_VARIABLE.get(String(e.detail.variable));
  if (field === undefined || e.detail.what === undefined) return e;
  const { max, got, what } = e.detail;
  return new SvcError('limit_exceeded',
    `${String(what)} is ${String(got)}, above limits.${field}=${String(max)}. Fix: send less, or open the database with a larger limits.${field} (openDatabase's limits option)`,
    { ...e.detail, option: `limits.${field}` });
}

/**
 * The database with every method's limit errors rewritten by inOptionTerms. A proxy, so the object is
 * still the engine (instanceof, every method, `node`); each method is wrapped once.
 */
function namingLimitOptions(db: Database): Database {
  const wrapped = new Map<PropertyKey, unknown>();
  return new Proxy(db, {
    get(target, prop) {
      const v = Reflect.get(target, prop, target) as unknown;
      if (typeof v !== 'function' || prop === 'constructor') return v;
      let w = wrapped.get(prop);
      if (w === undefined) {
        const f = v as (...args: unknown[]) => unknown;
        w = (...args: unknown[]): unknown => {
          let r: unknown;
          try {
            r = f.apply(target, args);
          } catch (e) {
            throw inOptionTerms(e);
          }
          return r instanceof Promise ? r.catch((e: unknown) => { throw inOptionTerms(e); }) : r;
        };
        wrapped.set(prop, w);
      }
      return w;
    },
  });
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
