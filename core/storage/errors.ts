import { SvcError } from '../base/errors.js';

/**
 * Damage inside committed data: the data directory refuses to open (or a read refuses to continue)
 * and says where. Code `internal`: nothing the caller did, and nothing to retry.
 */
export class StorageCorruption extends SvcError {
  readonly file: string;
  readonly offset: number;
  /** What is wrong there, without the file and offset. */
  readonly what: string;

  /** `fix`: what the operator does about it, where the caller knows (appended as `Fix: ...`). */
  constructor(file: string, offset: number, what: string, fix?: string) {
    super('internal', `storage corruption in ${file} at offset ${offset}: ${what}${fix === undefined ? '' : `. Fix: ${fix}`}`, { file, offset });
    this.name = 'StorageCorruption';
    this.file = file;
    this.offset = offset;
    this.what = what;
  }
}
