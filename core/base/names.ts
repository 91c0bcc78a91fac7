import { invalidArgument } from './errors.js';

/** CONTRACT.md section 1: collection and snapshot names (and never `..`). */
const NAME_RE = /^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$/;
/** The name rule as a JSON-schema pattern, for the OpenAPI document. */
export const NAME_PATTERN = NAME_RE.source;
/** CONTRACT.md section 1: a point id is a string of 1 to 256 characters. */
export const POINT_ID_MAX_LENGTH = 256;

export function checkName(name: unknown, what = 'collection name'): string {
  if (typeof name !== 'string' || !NAME_RE.test(name) || name.includes('..')) {
    throw invalidArgument(`${what} must match ^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$ without '..'`);
  }
  return name;
}

/** CONTRACT.md section 1: a point id is a string of 1 to 256 characters. */
export function checkPointId(id: unknown): string {
  if (typeof id !== 'string' || id.length < 1 || id.length > POINT_ID_MAX_LENGTH) {
    throw invalidArgument('point id must be a string of 1 to 256 characters');
  }
  // Ids are stored as UTF-8: a lone surrogate would come back as U+FFFD after a restart.
  if (/\p{Cs}/u.test(id)) throw invalidArgument('point id must be valid Unicode (it holds a lone surrogate)');
  return id;
}
