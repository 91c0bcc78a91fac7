import { hkdfSync, randomBytes } from 'node:crypto';
import { invalidArgument } from '../base/errors.js';
import { XChaChaSealer, type Sealer } from './sealer.js';

export const MASTER_KEY_BYTES = 32;
export const DATA_KEY_BYTES = 32;

/** Parses the 64-hex-character master key. The message never echoes the key, not even a part of it. */
export function parseMasterKeyHex(hex: string): Uint8Array {
  if (typeof hex !== 'string') throw invalidArgument('the master key must be a string of 64 hex characters');
  const trimmed = hex.trim();
  if (trimmed.length !== 64) {
    throw invalidArgument(`the master key must be exactly 64 hex characters (256 bits); got ${trimmed.length} characters`);
  }
  if (!/^[0-9a-fA-F]{64}$/.test(trimmed)) throw invalidArgument('the master key must be 64 hex characters: only 0-9 and a-f are allowed');
  return new Uint8Array(Buffer.from(trimmed, 'hex'));
}

/** A fresh random 256-bit data-encryption key (node:crypto, never the seeded PRNG). */
export function randomDataKey(): Uint8Array {
  return new Uint8Array(randomBytes(DATA_KEY_BYTES));
}

/** Purposes of keys derived from the master key, so one key never serves two roles. */
export type MasterKeyPurpose = 'wrap' | 'manifest' | 'wal-db' | 'meta' | 'audit' | 'raft';

export function deriveKey(masterKey: Uint8Array, purpose: MasterKeyPurpose): Uint8Array {
  return new Uint8Array(hkdfSync('sha256', masterKey, Buffer.from('svc data directory'), Buffer.from(`svc/${purpose}/v1`), 32));
}

function wrapAad(uid: string): Uint8Array {
  return Buffer.from(`svc/wrapped-data-key/v1/${uid}`);
}

/** Seals a data key under the master key with AAD binding the collection uid. */
export function wrapDataKey(masterKey: Uint8Array, dataKey: Uint8Array, uid: string): Uint8Array {
  return wrapSealer(masterKey).seal(dataKey, wrapAad(uid));
}

/** Throws SealOpenError when the wrapped key was damaged, belongs to another uid or another master key. */
export function unwrapDataKey(masterKey: Uint8Array, wrapped: Uint8Array, uid: string): Uint8Array {
  return new Uint8Array(wrapSealer(masterKey).open(wrapped, wrapAad(uid)));
}

function wrapSealer(masterKey: Uint8Array): Sealer {
  return new XChaChaSealer(deriveKey(masterKey, 'wrap'));
}
