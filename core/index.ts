/**
 * The embedded API (CONTRACT.md section 7): `openDatabase(options)` resolves to a database whose methods
 * are the MCP tools in camelCase, taking the REST bodies and resolving to the REST responses.
 */
import { invalidArgument } from './base/errors.js';
import type { Limits } from './base/limits.js';
import { Database } from './collection/database.js';
import { parseMasterKeyHex } from './crypto/keys.js';
import type { EngineApi } from './service/api.js';

export { SvcError, ERROR_CODES, type ErrorCode } from './base/errors.js';
export type * from './base/model.js';
export type { Limits } from './base/limits.js';
export type { Database };

export interface OpenOptions {
  dataDir: string;
  /** The 256-bit master key as 64 hex characters. */
  encryptionKey?: string;
  /** Plaintext (checksummed) data directory: development only. */
  insecure?: boolean;
  limits?: Partial<Limits>;
  snapshotDir?: string;
}

/** Opens (creating if needed) a data directory in this process. */
export async function openDatabase(options: OpenOptions): Promise<Database> {
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
  const db = await Database.open({
    dataDir: options.dataDir,
    masterKey,
    limits: options.limits,
    snapshotDir: options.snapshotDir,
  });
  return db satisfies EngineApi;
}
