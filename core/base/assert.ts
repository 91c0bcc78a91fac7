/** An assertion guards an invariant: its failure is a bug in svc, never a user error. */
export class AssertionError extends Error {
  constructor(message: string) {
    super(`assertion failed: ${message}`);
    this.name = 'AssertionError';
  }
}

export function assert(condition: unknown, message: string): asserts condition {
  if (!condition) throw new AssertionError(message);
}

export function unreachable(value: never, what = 'value'): never {
  throw new AssertionError(`unreachable ${what}: ${String(value)}`);
}
