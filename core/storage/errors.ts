import { SvcError } from '../base/errors.js';

/**
 * Damage inside committed data: the data directory refuses to open (or a read refuses to continue)
 * and says where. Code `internal`: nothing the caller did, and nothing to retry.
 */
export class StorageCorruption extends SvcError {
  readonly file: string;
  readonly offset: number;

  constructor(file: string, offset: number, what: string) {
    super('internal', `storage corruption in ${file} at offset ${offset}: ${what}`, { file, offset });
    this.name = 'StorageCorruption';
    this.file = file;
    this.offset = offset;
  }
}
