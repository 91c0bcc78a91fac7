/**
 * Growable SharedArrayBuffers (ES2024; in V8 since Node 20, while this tree's TypeScript lib is ES2023):
 * shared memory that grows in place, never moved or detached, so a length-tracking typed array over it
 * follows every growth, on every thread that holds it. Address space for `maxBytes` is reserved at
 * creation; memory is committed as it grows.
 */
interface Growable {
  grow(bytes: number): void;
  readonly maxByteLength: number;
}

export function growableShared(bytes: number, maxBytes: number): SharedArrayBuffer {
  const Ctor = SharedArrayBuffer as unknown as new (n: number, o: { maxByteLength: number }) => SharedArrayBuffer;
  return new Ctor(bytes, { maxByteLength: maxBytes });
}

/** Grows `sab` to at least `need` bytes (doubling, up to its maximum); a RangeError past the maximum. */
export function growShared(sab: SharedArrayBuffer, need: number): void {
  if (need <= sab.byteLength) return;
  const g = sab as unknown as Growable;
  // Never less than asked: writes past a typed array's end would be dropped without a word.
  if (need > g.maxByteLength) throw new RangeError(`a shared buffer cannot grow to ${need} bytes (its maximum is ${g.maxByteLength})`);
  g.grow(Math.min(g.maxByteLength, Math.max(need, sab.byteLength * 2)));
}
