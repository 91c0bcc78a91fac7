import type { Sealer } from '../crypto/sealer.js';
import { StorageCorruption } from './errors.js';
import { FILE_HEADER_BYTES, FORMAT_VERSION, aad, fileHeader } from './format.js';
import { writeFileAtomic, type FileSystem } from './fs.js';

/**
 * The manifest: which collections exist, their wrapped data keys, segment lists and checkpoint seqs.
 * Sealed with a master-derived key, replaced atomically (temp, fsync, rename, fsync dir).
 */
export interface SegmentRef {
  id: number;
  bytes: number;
  records: number;
}

export interface CollectionEntry {
  uid: string;
  name: string;
  /** Opaque JSON from the collection layer. */
  params: object;
  /** base64 of the data key sealed under the master key; null in insecure mode. */
  wrapped_key: string | null;
  segments: SegmentRef[];
  next_segment_id: number;
  /** WAL records of this collection at or below this seq are in its segments. */
  checkpoint_seq: number;
  /**
   * The seq of its create: this node's own, or on a follower its leader's (the age that tells two
   * incarnations of one name apart). Absent in manifests written before it was kept.
   */
  created_seq?: number;
}

export interface Manifest {
  manifest_version: number;
  format_version: number;
  collections: CollectionEntry[];
  /**
   * A follower's applied leader seq as of this manifest (absent on a leader): kept here because the WAL
   * record that said it goes once every collection's checkpoint is past it.
   */
  replica_position?: number;
  /**
   * The leader history `replica_position` counts in ('' while a bootstrap runs). Absent before it was
   * kept, and on a leader: then no position holds and the follower asks for a snapshot.
   */
  replica_history?: string;
  /**
   * This directory's own history: the lineage of its log's seqs, which its followers' positions count in.
   * Random at init; a snapshot gets a new one (a directory restored from it writes its own seqs on from
   * the snapshot's, which are not the original's after that point). Absent before it was kept.
   */
  history?: string;
  /**
   * This node's rebalance move as a source (core/collection/move.ts), with each collection's cursor by
   * uid, as of WAL seq `seq`: replay takes the move records after it. Absent when none ever ran.
   */
  move?: {
    move: string; self: number; targets: number[]; finished: boolean; cursors: Record<string, string>; seq: number;
    /** By uid, ids handed out that no commit's cursor has passed (DataDir MoveProgress.out); absent when none. */
    out?: Record<string, string[]>;
  };
}

const MAGIC = Buffer.from('SVCMAN\0\x01', 'latin1');
const HEADER_BYTES = FILE_HEADER_BYTES;
const manifestAad = () => aad('manifest', []);

const header = (): Buffer => fileHeader(MAGIC);

export function encodeManifest(m: Manifest, sealer: Sealer): Uint8Array {
  return Buffer.concat([header(), sealer.seal(Buffer.from(JSON.stringify(m)), manifestAad())]);
}

export async function loadManifest(fs: FileSystem, path: string, sealer: Sealer): Promise<Manifest> {
  const bytes = Buffer.from(await fs.readFile(path));
  if (bytes.length < HEADER_BYTES || !bytes.subarray(0, HEADER_BYTES).equals(header())) {
    throw new StorageCorruption(path, 0, 'bad manifest header');
  }
  let plain: Uint8Array;
  try {
    plain = sealer.open(bytes.subarray(HEADER_BYTES), manifestAad());
  } catch {
    throw new StorageCorruption(path, HEADER_BYTES, 'manifest failed authentication');
  }
  const m = JSON.parse(Buffer.from(plain).toString('utf8')) as Manifest;
  if (m.format_version !== FORMAT_VERSION) throw new StorageCorruption(path, HEADER_BYTES, `unsupported format version ${m.format_version}`);
  return m;
}

/** Returns the file's size in bytes. */
export async function saveManifest(fs: FileSystem, path: string, sealer: Sealer, m: Manifest): Promise<number> {
  const bytes = encodeManifest(m, sealer);
  await writeFileAtomic(fs, path, bytes);
  return bytes.length;
}
