import { InsecureSealer, XChaChaSealer, type Sealer } from '../crypto/sealer.js';
import { randomDataKey } from '../crypto/keys.js';
import type { Keyring } from '../storage/wal.js';

/** A keyring for tests: named keys that can be added and removed (removal = crypto-shredding). */
export class TestKeyring implements Keyring {
  private readonly sealers = new Map<string, Sealer>();

  constructor(keyIds: string[] = ['db', 'c1', 'c2'], encrypted = true) {
    for (const k of keyIds) this.sealers.set(k, encrypted ? new XChaChaSealer(randomDataKey()) : new InsecureSealer());
  }

  sealerFor(keyId: string): Sealer | undefined {
    return this.sealers.get(keyId);
  }

  drop(keyId: string): void {
    this.sealers.delete(keyId);
  }
}
