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
import { SvcError } from './base/errors.js';
import { LIMIT_VARIABLES, type Limits } from './base/limits.js';
import type { Database as Storage } from './collection/database.js';
import { NodeEngine } from './engine/node.js';
import { openStorage, type OpenOptions } from './open-storage.js';
import type { EngineApi } from './service/api.js';

export type { OpenOptions, ProvidersOptions, ProviderTableOptions } from './open-storage.js';
export { buildProviders, DEFAULT_PROVIDER_RETRIES, DEFAULT_PROVIDER_TIMEOUT_MS } from './open-storage.js';

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

/** Opens (creating if needed) a data directory in this process. */
export async function openDatabase(options: OpenOptions): Promise<Database> {
  const { storage, embedders, rerankers } = await openStorage(options);
  const db: Database = new EmbeddedDatabase(storage, { embedders, rerankers });
  return options.limitsFrom === 'environment' ? db : namingLimitOptions(db);
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
