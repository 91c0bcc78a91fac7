import type { ProviderTableOptions, ProvidersOptions } from '../core/embedded.js';
import { ConfigError, type ProviderTable, type SvcConfig } from './config.js';

const TABLE_KEYS = ['provider', 'model', 'endpoint', 'dim', 'api_key_env'] as const;

/**
 * The `[embedding.<collection>]` and `[rerank.<collection>]` tables of svc.toml as openDatabase's
 * `providers` option, with each `api_key_env` resolved from `env` here, at startup. The key goes only
 * into the adapter in memory: never into the data directory, a log line or an error message.
 * A missing variable stops startup naming the variable and the table (the collection).
 */
export function providersFromConfig(config: SvcConfig, env: Readonly<Record<string, string | undefined>>): ProvidersOptions {
  return {
    embedding: tables('embedding', config.embedding, env),
    rerank: tables('rerank', config.rerank, env),
  };
}

function tables(
  kind: 'embedding' | 'rerank',
  from: Readonly<Record<string, ProviderTable>>,
  env: Readonly<Record<string, string | undefined>>,
): Record<string, ProviderTableOptions> {
  const out: Record<string, ProviderTableOptions> = {};
  for (const [collection, t] of Object.entries(from)) {
    const where = `[${kind}.${collection}]`;
    for (const k of Object.keys(t)) {
      if (!(TABLE_KEYS as readonly string[]).includes(k)) {
        throw new ConfigError(`${where}.${k}`, `unknown key. Fix: use ${TABLE_KEYS.join(', ')}`);
      }
    }
    const str = (k: string): string | undefined => {
      const v = t[k];
      if (v === undefined) return undefined;
      if (typeof v !== 'string') throw new ConfigError(`${where}.${k}`, 'must be a string');
      return v;
    };
    const dim = t.dim;
    if (dim !== undefined && (typeof dim !== 'number' || !Number.isInteger(dim) || dim < 1)) {
      throw new ConfigError(`${where}.dim`, 'must be a positive integer');
    }
    if (kind === 'embedding' && dim === undefined) {
      throw new ConfigError(`${where}.dim`, 'is required: the dimension of the vectors the model returns (it must equal the collection dim)');
    }
    const envName = str('api_key_env');
    let apiKey: string | undefined;
    if (envName !== undefined) {
      apiKey = env[envName];
      if (apiKey === undefined || apiKey === '') {
        throw new ConfigError(`${where}.api_key_env`, `names ${envName}, which is not set. Fix: export ${envName} with the provider's key`);
      }
    }
    const endpoint = str('endpoint');
    out[collection] = {
      provider: str('provider') ?? '',
      model: str('model') ?? '',
      ...(endpoint !== undefined ? { endpoint } : {}),
      ...(dim !== undefined ? { dim: dim as number } : {}),
      ...(apiKey !== undefined ? { apiKey } : {}),
    };
  }
  return out;
}
