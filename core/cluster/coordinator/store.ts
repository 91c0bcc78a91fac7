import { createHash } from 'node:crypto';
import { SvcError } from '../../base/errors.js';
import { dirName, mkdirDurable, writeFileAtomic, type FileSystem, type PathLock } from '../../storage/fs.js';
import { normalizeShardUrl, SHARD_STATES, type ShardState } from '../routing/shard-map.js';
import { REPLICAS_MAX, SHARDS_MAX, type CoordinatorState, type MoveRecord, type ShardRecord } from './state.js';

/**
 * Where the coordinator keeps its state between runs (SVC_COORDINATOR_STATE): a JSON file replaced
 * atomically on every change (temp file, fsync, rename, fsync of the folder: storage/fs.ts
 * writeFileAtomic), so a crash leaves the old state or the new one, never a mix. One coordinator holds
 * the file at a time (a lock beside it), or two would issue the same ids.
 *
 * A file that does not read back as a valid state stops the start with a message naming the file and
 * the fault: starting empty instead would re-issue ids that shards already carry. The file ends with the
 * SHA-256 of the rest, so damage that still parses (a flipped digit of next_id would re-issue an id) is
 * caught too; an edit by hand must recompute it.
 */
export interface CoordinatorStore {
  /** The saved state, or null when there is none yet. */
  load(): Promise<CoordinatorState | null>;
  /** Durable when it resolves. */
  save(state: CoordinatorState): Promise<void>;
  close(): Promise<void>;
}

/** SVC_COORDINATOR_STATE unset: the state lives as long as the process. */
export class MemoryStore implements CoordinatorStore {
  private state: CoordinatorState | null = null;
  async load(): Promise<CoordinatorState | null> { return this.state; }
  async save(state: CoordinatorState): Promise<void> { this.state = state; }
  async close(): Promise<void> {}
}

/** The file's `format`; `format_version` grows when the layout changes. */
export const STATE_FORMAT = 'svc-coordinator-state';
export const STATE_FORMAT_VERSION = 1;
/** A state file is small (SHARDS_MAX shards of a few URLs each); anything far larger is not one. */
const STATE_FILE_BYTES_MAX = 16 << 20;

/** A state file that exists but is not a valid state. `internal`: nothing a client did, nothing to retry. */
export class CoordinatorStateCorruption extends SvcError {
  constructor(readonly file: string, what: string) {
    super('internal', `coordinator state file ${file} is not valid: ${what}. Nothing was changed. Restore it from a backup, or move it aside to start from SVC_CLUSTER_SHARDS (shard ids would then be issued again from 0)`, { file });
    this.name = 'CoordinatorStateCorruption';
  }
}

export class FileStore implements CoordinatorStore {
  private constructor(private readonly fs: FileSystem, readonly path: string, private readonly lock: PathLock) {}

  /** Takes the lock beside `path` (creating its folder if needed); refused with `unavailable` naming the holder. */
  static async open(fs: FileSystem, path: string): Promise<FileStore> {
    await mkdirDurable(fs, dirName(path));
    const r = await fs.lockExclusive(`${path}.lock`);
    if (!r.ok) {
      const who = /^\d+$/.test(r.holder) ? `process ${r.holder}` : 'another process';
      throw new SvcError('unavailable', `the coordinator state ${path} is in use by ${who}: one coordinator holds it at a time`, { reason: 'state_locked', holder: r.holder });
    }
    return new FileStore(fs, path, r.lock);
  }

  async load(): Promise<CoordinatorState | null> {
    const st = await this.fs.stat(this.path);
    if (st === null) return null;
    if (st.isDirectory) throw new CoordinatorStateCorruption(this.path, 'it is a directory');
    if (st.size > STATE_FILE_BYTES_MAX) throw new CoordinatorStateCorruption(this.path, `it is ${st.size} bytes, more than a state can be`);
    return decodeState(await this.fs.readFile(this.path), this.path);
  }

  async save(state: CoordinatorState): Promise<void> {
    await writeFileAtomic(this.fs, this.path, encodeState(state));
  }

  close(): Promise<void> {
    return this.lock.release();
  }
}

/** The text the checksum covers: the object without `sha256`, as this writer lays it out. */
const bodyText = (body: Record<string, unknown>): string => JSON.stringify(body, null, 2);
const sha256 = (text: string): string => createHash('sha256').update(text, 'utf8').digest('hex');

export function encodeState(s: CoordinatorState): Uint8Array {
  const body = {
    format: STATE_FORMAT,
    format_version: STATE_FORMAT_VERSION,
    version: s.version,
    next_id: s.nextId,
    last_scale_out_ms: s.lastScaleOutMs,
    shards: s.shards.map((x) => ({ id: x.id, url: x.url, replicas: x.replicas, state: x.state, ...(x.moved === true ? { moved: true } : {}) })),
    // Optional fields (format_version 1 still): a file written before rebalancing reads as no move.
    ...(s.move !== null ? { move: { ...s.move } } : {}),
    ...(s.nextMove > 0 ? { next_move: s.nextMove } : {}),
  };
  return new TextEncoder().encode(`${JSON.stringify({ ...body, sha256: sha256(bodyText(body)) }, null, 2)}\n`);
}

/** Reads a state back, checking every invariant the coordinator relies on; the first fault is named. */
export function decodeState(bytes: Uint8Array, file: string): CoordinatorState {
  const bad = (what: string): never => { throw new CoordinatorStateCorruption(file, what); };
  let v: unknown;
  try {
    v = JSON.parse(new TextDecoder('utf-8', { fatal: true }).decode(bytes));
  } catch (e) {
    return bad(`it is not UTF-8 JSON (${(e as Error).message.slice(0, 200)})`);
  }
  if (typeof v !== 'object' || v === null || Array.isArray(v)) return bad('it is not a JSON object');
  const { sha256: sum, ...o } = v as Record<string, unknown>;
  if (o.format !== STATE_FORMAT) return bad(`its format is not "${STATE_FORMAT}"`);
  if (typeof sum !== 'string' || sum !== sha256(bodyText(o))) {
    return bad('its sha256 does not match its content: the file was damaged, or edited by hand without recomputing the sum');
  }
  if (o.format_version !== STATE_FORMAT_VERSION) return bad(`its format_version is ${JSON.stringify(o.format_version)}; this svc reads ${STATE_FORMAT_VERSION}`);
  const int = (x: unknown, what: string): number => (Number.isSafeInteger(x) && (x as number) >= 0 ? (x as number) : bad(`${what} is not a non-negative integer`));
  const version = int(o.version, 'version');
  const nextId = int(o.next_id, 'next_id');
  const lastScaleOutMs = o.last_scale_out_ms === null ? null : int(o.last_scale_out_ms, 'last_scale_out_ms');
  if (!Array.isArray(o.shards)) return bad('shards is not a list');
  if (o.shards.length > SHARDS_MAX) return bad(`it lists ${o.shards.length} shards, more than ${SHARDS_MAX}`);
  const seenIds = new Set<number>();
  const seenUrls = new Set<string>();
  const shards = o.shards.map((x: unknown, i: number): ShardRecord => {
    const where = `shards[${i}]`;
    if (typeof x !== 'object' || x === null || Array.isArray(x)) return bad(`${where} is not an object`);
    const r = x as Record<string, unknown>;
    const id = int(r.id, `${where}.id`);
    if (id >= nextId) bad(`${where}.id ${id} is not below next_id ${nextId} (ids would be issued twice)`);
    if (seenIds.has(id)) bad(`shard id ${id} appears twice`);
    seenIds.add(id);
    if (!SHARD_STATES.includes(r.state as ShardState)) bad(`${where}.state is not one of ${SHARD_STATES.join(', ')}`);
    if (!Array.isArray(r.replicas) || r.replicas.length > REPLICAS_MAX) bad(`${where}.replicas is not a list of at most ${REPLICAS_MAX} URLs`);
    const urls = [r.url, ...(r.replicas as unknown[])].map((u, j) => {
      let n: string;
      try {
        n = normalizeShardUrl(u, j === 0 ? `${where}.url` : `${where}.replicas[${j - 1}]`);
      } catch (e) {
        return bad((e as Error).message);
      }
      if (n !== u) bad(`${where} holds ${JSON.stringify(u)}, which is not in canonical form (${n})`);
      if (seenUrls.has(n)) bad(`${n} appears twice in the map`);
      seenUrls.add(n);
      return n;
    });
    if (r.moved !== undefined && (r.moved !== true || r.state !== 'draining')) bad(`${where}.moved is set but the shard is not a draining one`);
    return { id, url: urls[0], replicas: urls.slice(1), state: r.state as ShardState, ...(r.moved === true ? { moved: true } : {}) };
  });
  if (version === 0 && shards.length > 0) bad('version is 0 but the map has shards');
  const nextMove = o.next_move === undefined ? 0 : int(o.next_move, 'next_move');
  let move: MoveRecord | null = null;
  if (o.move !== undefined) {
    const m = o.move as Record<string, unknown> | null;
    if (typeof m !== 'object' || m === null || typeof m.id !== 'string' || !/^m\d{1,15}$/.test(m.id)) return bad('move has no id like m<n>');
    const list = (x: unknown, what: string): number[] => (Array.isArray(x) && x.length <= SHARDS_MAX ? x.map((y, i) => int(y, `move.${what}[${i}]`)) : bad(`move.${what} is not a list of shard ids`));
    move = { id: m.id, targets: list(m.targets, 'targets'), sources: list(m.sources, 'sources'), joining: list(m.joining, 'joining'), draining: list(m.draining, 'draining') };
    if (move.targets.length === 0) bad('move.targets is empty');
    if (Number(m.id.slice(1)) >= nextMove) bad(`move.id ${m.id} is not below next_move ${nextMove}`);
  }
  return { version, nextId, shards, lastScaleOutMs, move, nextMove };
}
