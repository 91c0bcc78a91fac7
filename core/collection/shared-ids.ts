import { growShared, growableShared } from '../base/growable.js';

/**
 * A collection's point ids to their slots, in shared memory (issue 20): a request loop finds a point by id
 * itself (`GET .../points/{id}`) instead of asking the engine thread. One writer (the engine thread), any
 * number of readers on other threads.
 *
 * An open-addressing table of two int32 words per entry: the id's hash (FNV-1a over its UTF-8 bytes) and
 * its slot + 1 (0: empty; -1: an entry whose point went, reusable). The id itself is the slot's id record
 * (SharedRecords), which a lookup compares byte for byte. A reader reads without locks: every probe is
 * bounded, and its caller keeps the answer only if no write of the collection began meanwhile
 * (shared-reads.ts).
 */

/** What another thread needs to read a SharedIds. */
export interface SharedIdsHandle {
  /** [0]: the table's entries (a power of two); [1]: entries in use, gone ones included. */
  readonly header: SharedArrayBuffer;
  readonly table: SharedArrayBuffer;
}

const TABLE_MIN = 64;
/** The table may reach 2 GiB (2^28 entries: 2^27 ids at its load bound of a half); reserved address space. */
const MAX_BYTES = 2 ** 31;
const GONE = -1;

export function idHash(bytes: Uint8Array): number {
  let h = 0x811c9dc5;
  for (let i = 0; i < bytes.length; i++) h = Math.imul(h ^ bytes[i], 0x01000193);
  return h | 0;
}

const equalBytes = (a: Uint8Array, b: Uint8Array): boolean => {
  if (a.length !== b.length) return false;
  for (let i = 0; i < a.length; i++) if (a[i] !== b[i]) return false;
  return true;
};

export class SharedIds {
  readonly h: SharedIdsHandle;
  private readonly header: Int32Array;
  private readonly table: Int32Array;

  /** `idOf(slot)`: the slot's id record (null: none), which lookups compare. */
  constructor(private readonly idOf: (slot: number) => Uint8Array | null, h?: SharedIdsHandle) {
    this.h = h ?? { header: new SharedArrayBuffer(8), table: growableShared(TABLE_MIN * 8, MAX_BYTES) };
    this.header = new Int32Array(this.h.header);
    this.table = new Int32Array(this.h.table);
    if (h === undefined) this.header[0] = TABLE_MIN;
  }

  /** The slot of the point whose id is `id` (its UTF-8 bytes), or -1. */
  find(id: Uint8Array): number {
    const hash = idHash(id);
    const e = this.entryOf(id, hash);
    return e < 0 ? -1 : this.slotAt;
  }

  /** The slot `entryOf` compared its id record at (the word read once, not again after the compare). */
  private slotAt = -1;

  /** The entry (its first word) holding `id`, or -1; bounded however the table changes under it. */
  private entryOf(id: Uint8Array, hash: number): number {
    const cap = this.header[0];
    const t = this.table;
    if (cap <= 0 || (cap & (cap - 1)) !== 0 || cap * 2 > t.length) return -1;
    const mask = cap - 1;
    for (let i = hash & mask, n = 0; n < cap; i = (i + 1) & mask, n++) {
      const at = t[i * 2 + 1];
      if (at === 0) return -1;
      if (at > 0 && t[i * 2] === hash) {
        const rec = this.idOf(at - 1);
        if (rec !== null && equalBytes(rec, id)) {
          this.slotAt = at - 1;
          return i * 2;
        }
      }
    }
    return -1;
  }

  /** Writer: `id` is at `slot` from now on (an update moves it from its old slot). */
  set(id: Uint8Array, slot: number): void {
    const hash = idHash(id);
    const e = this.entryOf(id, hash);
    if (e >= 0) {
      this.table[e + 1] = slot + 1;
      return;
    }
    if ((this.header[1] + 1) * 2 > this.header[0]) this.rehash();
    const mask = this.header[0] - 1;
    let i = hash & mask;
    // The first empty or gone entry of the probe: the id is nowhere along it (checked above).
    while (this.table[i * 2 + 1] > 0) i = (i + 1) & mask;
    if (this.table[i * 2 + 1] === 0) this.header[1]++;
    this.table[i * 2] = hash;
    this.table[i * 2 + 1] = slot + 1;
  }

  /** Writer: the point at `slot` (whose id is `id`) went, unless its id has moved to another slot since. */
  remove(id: Uint8Array, slot: number): void {
    const e = this.entryOf(id, idHash(id));
    if (e >= 0 && this.table[e + 1] === slot + 1) this.table[e + 1] = GONE;
  }

  /** The table rebuilt with room for twice the ids it holds (gone entries dropped). */
  private rehash(): void {
    const cap = this.header[0];
    const old = this.table.slice(0, cap * 2);
    let live = 0;
    for (let i = 0; i < cap; i++) if (old[i * 2 + 1] > 0) live++;
    // Room for twice as many (a load of a quarter), or as much as the buffer takes.
    let next = TABLE_MIN;
    while (next < 4 * (live + 1) && next * 8 * 2 <= MAX_BYTES) next *= 2;
    const fresh = new Int32Array(next * 2);
    const mask = next - 1;
    for (let i = 0; i < cap; i++) {
      if (old[i * 2 + 1] <= 0) continue;
      let j = old[i * 2] & mask;
      while (fresh[j * 2 + 1] !== 0) j = (j + 1) & mask;
      fresh[j * 2] = old[i * 2];
      fresh[j * 2 + 1] = old[i * 2 + 1];
    }
    growShared(this.h.table, fresh.byteLength);
    this.table.set(fresh);
    this.table.fill(0, fresh.length);
    this.header[0] = next;
    this.header[1] = live;
  }
}
