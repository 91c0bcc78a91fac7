import { mkdtempSync, readdirSync, readFileSync, rmSync, statSync, truncateSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { Prng } from '../../base/prng.js';
import { XChaChaSealer } from '../../crypto/sealer.js';
import { NodeFileSystem } from '../../storage/fs.js';
import { readSealedChunks, SealedChunkWriter } from '../../storage/sealed-chunks.js';
import type { SnapshotMessage } from '../raft/index.js';
import {
  CHUNK_BYTES, decodeImageRef, KEPT_IMAGE_MS, SNAPSHOT_STREAM_VERSION, streamVersionFor, isStreamRequest, SnapshotInbox, SnapshotStreams, STREAM_REQUEST, WINDOW_CHUNKS, type ChunkSink, type SnapshotStreamsOptions,
} from './snapshot-stream.js';

/**
 * The image stream between a leader and a member behind its log: chunks paced by acknowledgements,
 * the `snap` message only after the last one, and a member that hands Raft a reference only to an
 * image it holds whole.
 */

const request = (to: string, index = 7): SnapshotMessage => ({ type: 'snap', from: 'n1', to, term: 3, snapshot: { meta: { index, term: 2 }, data: STREAM_REQUEST } });

/** Image bytes in pieces of varied sizes (as a database yields records). */
function imageOf(bytes: number, seed: number): { whole: Buffer; pieces: () => AsyncGenerator<Uint8Array> } {
  const rnd = new Prng(seed);
  const whole = Buffer.alloc(bytes);
  for (let i = 0; i < bytes; i++) whole[i] = Math.floor(rnd.next() * 256);
  const cuts: number[] = [0];
  while (cuts[cuts.length - 1] < bytes) cuts.push(Math.min(bytes, cuts[cuts.length - 1] + 1 + Math.floor(rnd.next() * 300_000)));
  return {
    whole,
    pieces: async function* () {
      for (let i = 1; i < cuts.length; i++) yield whole.subarray(cuts[i - 1], cuts[i]);
    },
  };
}

interface Wire {
  streams: SnapshotStreams;
  inbox: SnapshotInbox;
  files: Map<string, Buffer[]>;
  delivered: SnapshotMessage[];
  /** Chunk frames in flight to the member, not yet delivered. */
  inFlight: Buffer[];
  maxUnacked: number;
  deliverAll(): void;
  /** Whether the leader's connection to the member is up (sendChunk answers false when not), and the member's to the leader (acks). */
  up: boolean;
  acksUp: boolean;
  /** The seq of every chunk frame sent (not probes), in order; and the probes sent. */
  sentSeqs: number[];
  probes: number;
  /** A new SnapshotInbox in place of the member's (a member restarted). */
  restartMember(): void;
  /** An ack frame from the member, on its connection to the leader (lost while `acksUp` is false). */
  ack(payload: Uint8Array): void;
}

/** A chunk frame's seq (after the 16-byte stream id), and whether it is a probe (flag 2, no bytes). */
const seqOf = (f: Buffer): number => f.readUInt32LE(16);
const isProbe = (f: Uint8Array): boolean => f.length === 21 && f[20] === 2;

/** A leader n1 and a member n2; chunks are held until `deliverAll` (or dropped by the test). */
function wire(image: () => AsyncIterable<Uint8Array>, opts: Pick<SnapshotStreamsOptions, 'ackTimeoutMs' | 'progress' | 'holdEntriesMax' | 'now' | 'peerVersions' | 'imageCommandVersion' | 'log' | 'resumeKeepMs' | 'probeMs'> = {}): Wire {
  const files = new Map<string, Buffer[]>();
  const delivered: SnapshotMessage[] = [];
  const w = { files, delivered, inFlight: [] as Buffer[], maxUnacked: 0, up: true, acksUp: true, sentSeqs: [] as number[], probes: 0 } as Wire;
  /** The highest seq each stream (by id) had acknowledged: unacknowledged chunks are those sent past it. */
  const ackedOf = new Map<string, number>();
  w.streams = new SnapshotStreams({
    image,
    sendChunk: (_to, payload) => {
      if (!w.up) return false;
      w.inFlight.push(Buffer.from(payload));
      if (isProbe(payload)) {
        w.probes++;
      } else {
        const f = Buffer.from(payload);
        w.sentSeqs.push(seqOf(f));
        w.maxUnacked = Math.max(w.maxUnacked, seqOf(f) - (ackedOf.get(f.toString('hex', 0, 16)) ?? -1));
      }
      queueMicrotask(() => w.deliverAll());
      return true;
    },
    sendSnapshot: (m) => {
      const data = w.inbox.complete('n1', m.snapshot.data, m.snapshot.meta.index);
      if (data !== null) delivered.push({ ...m, snapshot: { meta: m.snapshot.meta, data } });
    },
    ...opts,
  });
  w.restartMember = () => {
    w.inbox = new SnapshotInbox({
      create: (id) => {
        const chunks: Buffer[] = [];
        files.set(id, chunks);
        const sink: ChunkSink = {
          append: async (c) => {
            await new Promise((r) => setTimeout(r, 1)); // a disk
            chunks.push(Buffer.from(c));
          },
          finish: async () => undefined,
          abort: async () => void files.delete(id),
        };
        return Promise.resolve(sink);
      },
      sendAck: (_to, payload) => w.ack(payload),
    }, w.streams.stats);
  };
  w.ack = (payload) => {
    if (!w.acksUp) return;
    const a = Buffer.from(payload);
    if (seqOf(a) !== 0xffff_ffff) ackedOf.set(a.toString('hex', 0, 16), Math.max(ackedOf.get(a.toString('hex', 0, 16)) ?? -1, seqOf(a)));
    w.streams.onAck('n2', Buffer.from(payload));
  };
  w.restartMember();
  w.deliverAll = () => {
    for (const f of w.inFlight.splice(0)) w.inbox.onChunk('n1', f);
  };
  return w;
}

const dirs: string[] = [];
afterEach(() => {
  for (const d of dirs.splice(0)) rmSync(d, { recursive: true, force: true });
});

interface DiskMember {
  dir: string;
  path(id: string): string;
  /** Chunks appended to files by the member, over its restarts. */
  appended: number;
  /** A new process on the same directory: the image files found there are kept for their leader (KeptImages). */
  start(): void;
  /** SIGKILL: from now on nothing of this process is written or acknowledged. */
  kill(): void;
  /** The chunks of stream `id`'s file, read back as a restore reads them. */
  chunks(id: string, count: number): Promise<Buffer[]>;
  /** The image files in its directory. */
  images(): string[];
}

/**
 * The member of `w` on files, as roles/raft/member-host.ts keeps images: `image-<id>.img` in a directory,
 * written by SealedChunkWriter, and on a restart the files found there kept and reopened with
 * SealedChunkWriter.resume.
 */
function diskMember(w: Wire): DiskMember {
  const dir = mkdtempSync(join(tmpdir(), 'svc-stream-'));
  dirs.push(dir);
  const fs = new NodeFileSystem();
  const sealer = new XChaChaSealer(new Uint8Array(32).fill(9));
  const path = (id: string): string => join(dir, `image-${id}.img`);
  let gen = 0;
  let writers: SealedChunkWriter[] = [];
  const never = (): Promise<void> => new Promise<void>(() => undefined);
  const m: DiskMember = {
    dir, path, appended: 0,
    start: () => {
      const g = ++gen;
      const sinkOf = (wr: SealedChunkWriter, id: string): ChunkSink => {
        writers.push(wr);
        return {
          append: async (c) => {
            if (g !== gen) return never();
            await wr.append(c);
            m.appended++;
          },
          finish: async () => (g !== gen ? never() : wr.finish()),
          abort: async () => {
            if (g !== gen) return;
            await wr.abort();
            await fs.unlink(path(id)).catch(() => undefined);
          },
        };
      };
      w.inbox = new SnapshotInbox({
        create: async (id) => sinkOf(await SealedChunkWriter.create(fs, path(id), sealer, id), id),
        kept: {
          ids: m.images().map((n) => n.slice('image-'.length, -'.img'.length)),
          resume: async (id) => {
            const { writer } = await SealedChunkWriter.resume(fs, path(id), sealer, id);
            return { sink: sinkOf(writer, id), chunks: writer.chunks };
          },
          drop: (id) => fs.unlink(path(id)),
        },
        sendAck: (_to, payload) => {
          if (g === gen) w.ack(payload);
        },
      }, w.streams.stats);
    },
    kill: () => {
      gen++;
      for (const wr of writers.splice(0)) void wr.abort();
    },
    chunks: async (id, count) => {
      const out: Buffer[] = [];
      for await (const c of readSealedChunks(fs, path(id), sealer, id, count)) out.push(Buffer.from(c));
      return out;
    },
    images: () => readdirSync(dir).filter((n) => n.startsWith('image-')),
  };
  writers = [];
  m.start();
  return m;
}

const until = async (cond: () => boolean, ms = 10_000): Promise<void> => {
  const end = Date.now() + ms;
  while (!cond()) {
    if (Date.now() > end) throw new Error('timed out');
    await new Promise((r) => setTimeout(r, 2));
  }
};

describe('snapshot streams', () => {
  it('streams only in a version the member reads, and only an image whose commands it reads; otherwise starts nothing and says so once', async () => {
    const lines: { message: string; detail?: Record<string, unknown> }[] = [];
    let peer: { stream: number; command: number } | null = { stream: 0, command: 3 };
    let imageVersion = 1;
    const img = imageOf(CHUNK_BYTES + 10, 9);
    const w = wire(img.pieces, { peerVersions: () => peer, imageCommandVersion: () => imageVersion, log: (message, detail) => lines.push({ message, detail }) });
    // A member advertising only a stream version older than any this build sends (a fake peer).
    w.streams.send(request('n2'));
    w.streams.send(request('n2'));
    await new Promise((r) => setTimeout(r, 20));
    expect(w.inFlight.length + w.delivered.length).toBe(0);
    expect(w.streams.floor).toBeNull();
    expect(w.streams.stats).toMatchObject({ refused: 2, sent: 0, failed: 0 });
    expect(lines).toHaveLength(1);
    expect(lines[0].message).toMatch(/no snapshot stream/);
    expect(lines[0].detail).toMatchObject({ to: 'n2', reason: expect.stringMatching(/reads snapshot-stream versions up to 0/) });
    // A member that reads the stream but not the image's commands (a move's batches handed out: version 3).
    peer = { stream: 1, command: 2 };
    imageVersion = 3;
    w.streams.send(request('n2'));
    expect(w.streams.stats.refused).toBe(3);
    expect(lines[1].detail).toMatchObject({ reason: expect.stringMatching(/commands of version 3.*reads up to 2/) });
    // Not heard from at all: unknown is refused too.
    peer = null;
    w.streams.send(request('n2'));
    expect(w.streams.stats.refused).toBe(4);
    // A member of a newer build (it reads more than this one sends): streamed in this build's version.
    peer = { stream: 9, command: 9 };
    w.streams.send(request('n2'));
    await until(() => w.delivered.length === 1);
    expect(Buffer.concat(w.files.get(decodeImageRef(w.delivered[0].snapshot.data)!.id)!).equals(img.whole)).toBe(true);
    expect(streamVersionFor(9)).toBe(SNAPSHOT_STREAM_VERSION);
    expect(streamVersionFor(0)).toBeNull();
  });

  it('sends an image of many chunks with a bounded window; the member gets a reference to the whole image only after the last chunk', async () => {
    const img = imageOf(5 * CHUNK_BYTES + 12_345, 1);
    const w = wire(img.pieces);
    w.streams.send(request('n2'));
    expect(w.streams.floor).toBe(7);
    // A second ask while one runs starts nothing.
    w.streams.send(request('n2', 9));
    await until(() => w.delivered.length === 1);
    const ref = decodeImageRef(w.delivered[0].snapshot.data)!;
    expect(ref.chunks).toBe(6);
    expect(w.delivered[0].snapshot.meta).toEqual({ index: 7, term: 2 });
    expect(Buffer.concat(w.files.get(ref.id)!).equals(img.whole)).toBe(true);
    expect(w.maxUnacked).toBeLessThanOrEqual(WINDOW_CHUNKS);
    // Its file stays in use until Raft has persisted a snapshot at least as new (this one, or a later one).
    expect(w.inbox.inUse(6).has(ref.id)).toBe(true);
    expect(w.inbox.inUse(7).has(ref.id)).toBe(false);
    expect(w.streams.stats).toMatchObject({ sent: 1, bytesSent: img.whole.length, received: 1, failed: 0 });
    // No leader's view of the member's progress: nothing holds the log once the stream is done.
    expect(w.streams.floor).toBeNull();
  });

  it('keeps the log after the image for a member until it holds more than the image and is within reach, then lets it go', async () => {
    let now = 1_000_000;
    let progress: { match: number; caughtUp: boolean; lastIndex: number } | null = { match: 0, caughtUp: false, lastIndex: 50 };
    const w = wire(imageOf(2 * CHUNK_BYTES, 4).pieces, { progress: () => progress, now: () => now, holdEntriesMax: 1000 });
    w.streams.send(request('n2', 40));
    await until(() => w.delivered.length === 1);
    expect(w.streams.floor).toBe(40);
    // Raft asks again at once (a probe rejected before the member stepped the image's snap): no second stream.
    w.streams.send(request('n2', 41));
    await new Promise((r) => setTimeout(r, 50));
    expect(w.inFlight.length + w.delivered.length).toBe(1);
    expect(w.streams.stats.sent).toBe(1);
    // It acknowledged the image before restoring it: near the log's end, but the hold stays.
    progress = { match: 40, caughtUp: true, lastIndex: 60 };
    expect(w.streams.floor).toBe(40);
    // It applies on from the image: what it holds bounds the compaction; a connection blip changes nothing.
    progress = { match: 55, caughtUp: false, lastIndex: 900 };
    expect(w.streams.floor).toBe(55);
    w.streams.peerLost('n2');
    expect(w.streams.floor).toBe(55);
    // Past the image and within reach: let go.
    progress = { match: 90, caughtUp: true, lastIndex: 95 };
    expect(w.streams.floor).toBeNull();
    // A hold that would keep more than holdEntriesMax entries ends, and one whose leader stopped leading.
    now += 10_001;
    progress = { match: 0, caughtUp: false, lastIndex: 100 };
    w.streams.send(request('n2', 95));
    await until(() => w.delivered.length === 2);
    expect(w.streams.floor).toBe(95);
    progress = { match: 95, caughtUp: false, lastIndex: 95 + 1001 };
    expect(w.streams.floor).toBeNull();
    now += 10_001;
    progress = { match: 0, caughtUp: false, lastIndex: 100 };
    w.streams.send(request('n2', 96));
    await until(() => w.delivered.length === 3);
    progress = null;
    expect(w.streams.floor).toBeNull();
  });

  it('sends nothing once this member stopped leading, or to a member that holds the index already', async () => {
    let progress: { match: number; caughtUp: boolean; lastIndex: number } | null = null;
    const w = wire(imageOf(2 * CHUNK_BYTES, 5).pieces, { progress: () => progress });
    w.streams.send(request('n2', 40));
    await until(() => w.streams.stats.failed === 1);
    progress = { match: 40, caughtUp: false, lastIndex: 45 };
    w.streams.send(request('n2', 40));
    await until(() => w.streams.stats.failed === 2);
    expect(w.delivered).toEqual([]);
    expect(w.files.size).toBe(0);
  });

  it('a lost chunk ends the stream (the member drops what follows, the leader times out) and the next one starts over', async () => {
    const img = imageOf(3 * CHUNK_BYTES, 2);
    const w = wire(img.pieces, { ackTimeoutMs: 200 });
    let lost = false;
    const deliver = w.deliverAll;
    w.deliverAll = () => {
      // The frame of chunk 1 (its seq after the 16-byte stream id) is lost, once.
      w.inFlight = w.inFlight.filter((f) => lost || f.readUInt32LE(16) !== 1 || !(lost = true));
      deliver();
    };
    w.streams.send(request('n2'));
    await until(() => w.streams.stats.failed === 1);
    expect(w.delivered).toEqual([]);
    w.deliverAll = deliver;
    w.streams.send(request('n2', 8));
    await until(() => w.delivered.length === 1);
    const ref = decodeImageRef(w.delivered[0].snapshot.data)!;
    expect(Buffer.concat(w.files.get(ref.id)!).equals(img.whole)).toBe(true);
    // The first stream's partial file was removed when the second began.
    expect(w.files.size).toBe(1);
  });

  it('a member reading only stream version 1 gets a plain restart: a broken connection ends the stream at once, no probe, and the next starts from chunk 0', async () => {
    const img = imageOf(4 * CHUNK_BYTES, 3);
    const w = wire(img.pieces, { peerVersions: () => ({ stream: 1, command: 3 }), probeMs: 10 });
    const deliver = w.deliverAll;
    w.deliverAll = () => undefined; // nothing arrives, nothing is acknowledged
    w.streams.send(request('n2'));
    await until(() => w.inFlight.length > 0);
    w.inFlight = [];
    w.streams.peerLost('n2');
    await until(() => w.streams.stats.failed === 1, 2000);
    expect(w.streams.floor).toBeNull();
    expect(w.probes).toBe(0);
    w.deliverAll = deliver;
    w.streams.send(request('n2', 8));
    await until(() => w.delivered.length === 1);
    expect(Buffer.concat(w.files.get(decodeImageRef(w.delivered[0].snapshot.data)!.id)!).equals(img.whole)).toBe(true);
    expect(w.sentSeqs.filter((q) => q === 0)).toHaveLength(2);
    expect(w.streams.stats).toMatchObject({ sent: 1, failed: 1, resumed: 0, chunksResent: 0 });
    expect(w.files.size).toBe(1);
  });

  /**
   * Version 2: the leader's connection is cut once `cutAt + lostAfter` chunks are sent and chunks from
   * `cutAt` on are still on the wire (lost with it); it comes back after `downMs`.
   */
  async function cutOnce(img: ReturnType<typeof imageOf>, cutAt: number, lostAfter: number, downMs: number, opts: Pick<SnapshotStreamsOptions, 'resumeKeepMs' | 'probeMs'>) {
    const w = wire(img.pieces, opts);
    const deliver = w.deliverAll;
    const lost: number[] = [];
    let cut = false;
    w.deliverAll = () => {
      if (cut) return deliver();
      // Chunks before `cutAt` arrive; later ones wait on the wire until the cut drops them.
      w.inFlight = w.inFlight.filter((f) => (seqOf(f) < cutAt && !isProbe(f) ? (w.inbox.onChunk('n1', f), false) : true));
      if (!w.inFlight.some((f) => seqOf(f) === cutAt + lostAfter)) return;
      cut = true;
      lost.push(...w.inFlight.map(seqOf));
      w.inFlight = [];
      w.up = false;
      w.streams.peerLost('n2');
      // Raft asks again meanwhile: one stream per member, nothing new starts.
      w.streams.send(request('n2', 9));
      setTimeout(() => { w.up = true; }, downMs);
    };
    w.streams.send(request('n2'));
    return { w, lost, cutDone: () => cut };
  }

  it('a stream whose connection broke goes on from the first chunk the member does not hold: only those are sent again, and the image is byte-identical to an uninterrupted one', async () => {
    const img = imageOf(12 * CHUNK_BYTES + 777, 11);
    // The same image, uninterrupted.
    const plain = wire(img.pieces);
    plain.streams.send(request('n2'));
    await until(() => plain.delivered.length === 1);
    const plainFile = Buffer.concat(plain.files.get(decodeImageRef(plain.delivered[0].snapshot.data)!.id)!);

    const { w, lost } = await cutOnce(img, 5, 3, 200, { probeMs: 10 });
    await until(() => w.delivered.length === 1);
    const ref = decodeImageRef(w.delivered[0].snapshot.data)!;
    expect(ref.chunks).toBe(13);
    expect(Buffer.concat(w.files.get(ref.id)!).equals(plainFile)).toBe(true);
    expect(plainFile.equals(img.whole)).toBe(true);
    // Chunks 5..8 were on the wire at the cut: those, and only those, went twice; 0..4 once.
    expect(lost).toEqual([5, 6, 7, 8]);
    const times = (q: number): number => w.sentSeqs.filter((x) => x === q).length;
    for (let q = 0; q < 13; q++) expect(times(q), `chunk ${q}`).toBe(lost.includes(q) ? 2 : 1);
    expect(w.streams.stats).toMatchObject({ sent: 1, failed: 0, resumed: 1, chunksResent: 4, received: 1, dropped: 0 });
    expect(w.probes).toBeGreaterThanOrEqual(1);
    // One stream all along (Raft's ask during the cut started none), with the window bounded.
    expect(w.files.size).toBe(1);
    expect(w.maxUnacked).toBeLessThanOrEqual(WINDOW_CHUNKS);
    expect(w.streams.floor).toBeNull();
  });

  it('a stream whose connection stays broken longer than the keep bound ends, and the next one starts over from chunk 0', async () => {
    const img = imageOf(6 * CHUNK_BYTES, 12);
    const { w, cutDone } = await cutOnce(img, 2, 1, 400, { probeMs: 10, resumeKeepMs: 100 });
    await until(() => w.streams.stats.failed === 1, 3000);
    expect(cutDone()).toBe(true);
    expect(w.streams.stats.resumed).toBe(0);
    expect(w.streams.floor).toBeNull();
    expect(w.delivered).toEqual([]);
    await until(() => w.up, 3000);
    w.streams.send(request('n2', 8));
    await until(() => w.delivered.length === 1);
    const ref = decodeImageRef(w.delivered[0].snapshot.data)!;
    expect(Buffer.concat(w.files.get(ref.id)!).equals(img.whole)).toBe(true);
    // Chunk 0 twice (one per stream); the first stream's partial file went when the second began.
    expect(w.sentSeqs.filter((q) => q === 0)).toHaveLength(2);
    expect(w.files.size).toBe(1);
    expect(w.streams.stats).toMatchObject({ sent: 1, failed: 1, resumed: 0 });
  });

  it('a member restarted mid-stream without its partial file (its disk lost) holds nothing of it: it says so to the probe, and the leader starts over', async () => {
    const img = imageOf(5 * CHUNK_BYTES, 13);
    const { w, cutDone } = await cutOnce(img, 2, 1, 50, { probeMs: 10 });
    await until(cutDone);
    w.restartMember();
    await until(() => w.streams.stats.failed === 1, 3000);
    expect(w.streams.stats.resumed).toBe(0);
    w.streams.send(request('n2', 8));
    await until(() => w.delivered.length === 1);
    expect(Buffer.concat(w.files.get(decodeImageRef(w.delivered[0].snapshot.data)!.id)!).equals(img.whole)).toBe(true);
  });

  /** Chunk by chunk the same bytes (toEqual on MiB buffers is far too slow). */
  const same = (a: Buffer[], b: Buffer[]): boolean => a.length === b.length && a.every((c, i) => c.equals(b[i]));

  /** The byte offsets where each whole record of a sealed-chunk file ends. */
  const recordEnds = (path: string): number[] => {
    const b = readFileSync(path);
    const ends: number[] = [];
    for (let at = 0; at + 4 <= b.length && at + 4 + b.readUInt32LE(at) <= b.length; at += 4 + b.readUInt32LE(at)) ends.push(at + 4 + b.readUInt32LE(at));
    return ends;
  };

  /**
   * A member on files SIGKILLed mid-stream: chunks 0..held-1 reached its file, it acknowledged through
   * `acked` only (its later acks lost), and the chunks sent after `held` were lost on the wire with the
   * connection. `damage` runs on its directory, then it starts again on it.
   */
  async function killMidStream(img: ReturnType<typeof imageOf>, held: number, acked: number, damage?: (m: DiskMember, id: string) => void) {
    const w = wire(img.pieces, { probeMs: 10 });
    const m = diskMember(w);
    let killed = false;
    const deliver = w.deliverAll;
    w.deliverAll = () => {
      if (!killed) w.inFlight = w.inFlight.filter((f) => isProbe(f) || seqOf(f) < held);
      deliver();
    };
    const ack = w.ack;
    w.ack = (p) => {
      if (killed || Buffer.from(p).readUInt32LE(16) <= acked) ack(p);
    };
    w.streams.send(request('n2'));
    // The leader sent a whole window past what was acknowledged, and the member wrote what reached it.
    await until(() => m.appended === held && w.sentSeqs.length === acked + 1 + WINDOW_CHUNKS);
    const [name] = m.images();
    const id = name.slice('image-'.length, -'.img'.length);
    m.kill();
    killed = true;
    w.up = false;
    w.streams.peerLost('n2');
    damage?.(m, id);
    m.start();
    w.up = true;
    return { w, m, id };
  }

  /** The same image streamed uninterrupted to a member on files: its chunks, and its file's size. */
  async function uninterrupted(img: ReturnType<typeof imageOf>): Promise<{ chunks: Buffer[]; bytes: number }> {
    const w = wire(img.pieces);
    const m = diskMember(w);
    w.streams.send(request('n2'));
    await until(() => w.delivered.length === 1);
    const ref = decodeImageRef(w.delivered[0].snapshot.data)!;
    return { chunks: await m.chunks(ref.id, ref.chunks), bytes: statSync(m.path(ref.id)).size };
  }

  it('a member SIGKILLed mid-stream and started again on its directory goes on with the stream: only the chunks its file lacks are sent again, and the image is the one an uninterrupted stream gives', async () => {
    const img = imageOf(12 * CHUNK_BYTES + 777, 21);
    const plain = await uninterrupted(img);
    expect(plain.chunks).toHaveLength(13);
    expect(Buffer.concat(plain.chunks).equals(img.whole)).toBe(true);

    const { w, m, id } = await killMidStream(img, 6, 1);
    await until(() => w.delivered.length === 1);
    const ref = decodeImageRef(w.delivered[0].snapshot.data)!;
    // The same stream (one read), completed in the file the killed process began.
    expect(ref).toEqual({ id, chunks: 13 });
    expect(m.images()).toEqual([`image-${id}.img`]);
    expect(same(await m.chunks(id, 13), plain.chunks)).toBe(true);
    expect(statSync(m.path(id)).size).toBe(plain.bytes);
    // Chunks 0..5 were in its file: sent once. 6..9 (sent, lost with the connection): twice. The rest once.
    const times = (q: number): number => w.sentSeqs.filter((x) => x === q).length;
    for (let q = 0; q < 13; q++) expect(times(q), `chunk ${q}`).toBe(q >= 6 && q <= 9 ? 2 : 1);
    // Written once each: 6 before the kill, 7 after it.
    expect(m.appended).toBe(13);
    expect(w.streams.stats).toMatchObject({ sent: 1, failed: 0, resumed: 1, chunksResent: 4, received: 1 });
    expect(w.streams.floor).toBeNull();
  });

  for (const [what, damage] of [
    ['cut in the middle of its last chunk', (path: string, ends: number[]) => truncateSync(path, ends[4] + 1000)],
    ['with its last chunk garbled', (path: string, ends: number[]) => {
      const b = readFileSync(path);
      b[ends[4] + 500] ^= 0x40;
      writeFileSync(path, b);
    }],
  ] as const) {
    it(`a restarted member whose partial file was left ${what} goes on from its last whole chunk`, async () => {
      const img = imageOf(12 * CHUNK_BYTES + 777, 22);
      const plain = await uninterrupted(img);
      const { w, m, id } = await killMidStream(img, 6, 1, (mm, i) => {
        const ends = recordEnds(mm.path(i));
        expect(ends).toHaveLength(6);
        damage(mm.path(i), ends);
      });
      await until(() => w.delivered.length === 1);
      expect(decodeImageRef(w.delivered[0].snapshot.data)).toEqual({ id, chunks: 13 });
      expect(same(await m.chunks(id, 13), plain.chunks)).toBe(true);
      expect(statSync(m.path(id)).size).toBe(plain.bytes);
      // It held 0..4: chunk 5 (damaged) and 6..9 (lost on the wire) went again.
      const times = (q: number): number => w.sentSeqs.filter((x) => x === q).length;
      for (let q = 0; q < 13; q++) expect(times(q), `chunk ${q}`).toBe(q >= 5 && q <= 9 ? 2 : 1);
      expect(w.streams.stats).toMatchObject({ sent: 1, failed: 0, resumed: 1, chunksResent: 5 });
    });
  }

  it('a restarted member that lost chunks it had acknowledged (a power loss) holds fewer than the leader keeps: the stream ends, and the next one starts over in a new file', async () => {
    const img = imageOf(16 * CHUNK_BYTES + 777, 23);
    // All six chunks acknowledged; the power loss leaves three in the file.
    const { w, m, id } = await killMidStream(img, 6, 5, (mm, i) => truncateSync(mm.path(i), recordEnds(mm.path(i))[2]));
    await until(() => w.streams.stats.failed === 1, 3000);
    expect(w.delivered).toEqual([]);
    // Nothing of that stream went again: the leader no longer kept chunks 3..5.
    expect(w.sentSeqs).toEqual(Array.from({ length: 14 }, (_, q) => q));
    expect(w.streams.stats).toMatchObject({ resumed: 0, chunksResent: 0 });
    expect(m.appended).toBe(6);
    w.streams.send(request('n2', 8));
    await until(() => w.delivered.length === 1);
    const ref = decodeImageRef(w.delivered[0].snapshot.data)!;
    expect(ref.id).not.toBe(id);
    expect(Buffer.concat(await m.chunks(ref.id, ref.chunks)).equals(img.whole)).toBe(true);
    // The first stream's file went when the second began: one read per file, nothing written into the old one.
    await until(() => m.images().length === 1);
    expect(m.images()).toEqual([`image-${ref.id}.img`]);
    expect(m.appended).toBe(6 + 17);
    expect(w.streams.stats).toMatchObject({ sent: 1, failed: 1, resumed: 0 });
  });

  it('a restarted member keeps the files it found only for their stream: let go at a probe or a chunk of another stream, and after KEPT_IMAGE_MS', async () => {
    const stats = { sent: 0, bytesSent: 0, failed: 0, received: 0, dropped: 0, refused: 0, resumed: 0, chunksResent: 0 };
    const A = 'aa'.repeat(16);
    const B = 'bb'.repeat(16);
    const C = 'cc'.repeat(16);
    const frame = (id: string, seq: number, flag: number): Buffer => {
      const b = Buffer.alloc(21 + (flag === 2 ? 0 : 3));
      Buffer.from(id, 'hex').copy(b);
      b.writeUInt32LE(seq, 16);
      b[20] = flag;
      return b;
    };
    const token = (id: string, chunks: number): Buffer => Buffer.concat([Buffer.from('svc-stm1', 'latin1'), Buffer.from(id, 'hex'), Buffer.from(Uint32Array.of(chunks).buffer)]);
    function member(ids: string[], held: number | Error = 4) {
      let now = 1000;
      const log = { resumed: [] as string[], dropped: [] as string[], created: [] as string[], finished: 0, aborted: 0, acks: [] as { id: string; seq: number }[] };
      const sink: ChunkSink = { append: async () => undefined, finish: async () => void log.finished++, abort: async () => void log.aborted++ };
      const inbox = new SnapshotInbox({
        create: async (id) => {
          log.created.push(id);
          return sink;
        },
        kept: {
          ids,
          resume: async (id) => {
            log.resumed.push(id);
            if (held instanceof Error) throw held;
            return { sink, chunks: held };
          },
          drop: async (id) => void log.dropped.push(id),
        },
        sendAck: (_to, p) => void log.acks.push({ id: Buffer.from(p).toString('hex', 0, 16), seq: Buffer.from(p).readUInt32LE(16) }),
        now: () => now,
      }, stats);
      return { inbox, log, advance: (ms: number) => { now += ms; } };
    }

    // A probe for a kept stream reopens its file (the other kept file goes) and is answered with its last whole chunk.
    const a = member([A, B]);
    expect(a.inbox.inUse(0)).toEqual(new Set([A, B]));
    // A chunk of a kept stream before any probe: dropped, and no file made for it.
    a.inbox.onChunk('n1', frame(A, 6, 0));
    expect(a.log.created).toEqual([]);
    a.inbox.onChunk('n1', frame(A, 9, 2));
    await until(() => a.log.acks.length === 1);
    expect(a.log).toMatchObject({ resumed: [A], dropped: [B], acks: [{ id: A, seq: 3 }] });
    expect(a.inbox.inUse(0)).toEqual(new Set([A]));
    // It held every chunk (it had written the last one when killed): the leader's token is taken, the file closed.
    expect(a.inbox.complete('n1', token(A, 5), 9)).toBeNull();
    expect(decodeImageRef(a.inbox.complete('n1', token(A, 4), 9)!)).toEqual({ id: A, chunks: 4 });
    await until(() => a.log.finished === 1);

    // A probe for another stream, or another stream's first chunk: the kept files go, none is reopened.
    const b = member([A]);
    b.inbox.onChunk('n1', frame(C, 0, 2));
    await until(() => b.log.acks.length === 1);
    expect(b.log).toMatchObject({ resumed: [], dropped: [A], acks: [{ id: C, seq: 0xffff_ffff }] });
    b.inbox.onChunk('n1', frame(A, 3, 2));
    await until(() => b.log.acks.length === 2);
    expect(b.log.acks[1]).toEqual({ id: A, seq: 0xffff_ffff });
    const c = member([A]);
    c.inbox.onChunk('n1', frame(C, 0, 0));
    expect(c.log).toMatchObject({ dropped: [A], created: [C] });
    expect(c.inbox.inUse(0)).toEqual(new Set([C]));

    // Asked for by no leader within KEPT_IMAGE_MS: let go.
    const d = member([A]);
    d.advance(KEPT_IMAGE_MS - 1);
    expect(d.inbox.inUse(0)).toEqual(new Set([A]));
    d.advance(1);
    expect(d.inbox.inUse(0)).toEqual(new Set());
    expect(d.log.dropped).toEqual([A]);
    d.inbox.onChunk('n1', frame(A, 3, 2));
    await until(() => d.log.acks.length === 1);
    expect(d.log).toMatchObject({ resumed: [], acks: [{ id: A, seq: 0xffff_ffff }] });
    // The host's timer lets them go whatever the clock reads (a wall clock stepped back).
    const g = member([A, B]);
    g.advance(-60_000);
    g.inbox.expireKept();
    expect(g.inbox.inUse(0)).toEqual(new Set());
    expect(g.log.dropped).toEqual([A, B]);

    // A kept file holding no whole chunk: nothing held, the file removed.
    const e = member([A], 0);
    e.inbox.onChunk('n1', frame(A, 0, 2));
    await until(() => e.log.acks.length === 1);
    expect(e.log).toMatchObject({ resumed: [A], aborted: 1, acks: [{ id: A, seq: 0xffff_ffff }] });
    expect(e.inbox.inUse(0)).toEqual(new Set());
    // One that fails to open (gone, unreadable): nothing held, the file removed; the stream's chunks are then dropped.
    const f = member([A], new Error('ENOENT'));
    f.inbox.onChunk('n1', frame(A, 0, 2));
    await until(() => f.log.acks.length === 1);
    expect(f.log).toMatchObject({ resumed: [A], dropped: [A], acks: [{ id: A, seq: 0xffff_ffff }] });
    f.inbox.onChunk('n1', frame(A, 4, 0));
    expect(f.log.created).toEqual([]);
    expect(f.inbox.inUse(0)).toEqual(new Set());
  });

  it('acknowledgements lost on the member\'s own connection: the leader asks a quiet member where it is and goes on', async () => {
    const img = imageOf(6 * CHUNK_BYTES, 14);
    const w = wire(img.pieces, { probeMs: 20 });
    let dropped = false;
    const deliver = w.deliverAll;
    w.deliverAll = () => {
      // The member's connection breaks while chunk 2 is written: its acks go nowhere until the leader has asked.
      if (!dropped && w.inFlight.some((f) => seqOf(f) === 2)) {
        dropped = true;
        w.acksUp = false;
      }
      deliver();
    };
    w.streams.send(request('n2'));
    await until(() => w.probes >= 1);
    w.acksUp = true;
    await until(() => w.delivered.length === 1);
    expect(Buffer.concat(w.files.get(decodeImageRef(w.delivered[0].snapshot.data)!.id)!).equals(img.whole)).toBe(true);
    expect(w.probes).toBeGreaterThanOrEqual(1);
    // Nothing sent twice: the leader's connection never broke.
    expect(new Set(w.sentSeqs).size).toBe(w.sentSeqs.length);
    expect(w.streams.stats).toMatchObject({ failed: 0, resumed: 0, chunksResent: 0 });
  });

  it('a member whose disk stalls is asked once per probe interval, not in a loop, and the stream ends at the acknowledgement timeout', async () => {
    const img = imageOf(4 * CHUNK_BYTES, 16);
    const w = wire(img.pieces, { probeMs: 20, ackTimeoutMs: 400 });
    const deliver = w.deliverAll;
    // Chunks after 0 never arrive (to the leader, as a stalled disk looks): the member answers each probe at once with chunk 0.
    w.deliverAll = () => {
      w.inFlight = w.inFlight.filter((f) => isProbe(f) || seqOf(f) === 0);
      deliver();
    };
    const t0 = Date.now();
    w.streams.send(request('n2'));
    await until(() => w.streams.stats.failed === 1, 5000);
    expect(Date.now() - t0).toBeGreaterThanOrEqual(380);
    expect(w.probes).toBeGreaterThanOrEqual(5);
    expect(w.probes).toBeLessThanOrEqual(Math.ceil((Date.now() - t0) / 20) + 2);
    expect(w.streams.stats.resumed).toBe(0);
  });

  it('refuses what names another stream: a chunk or probe of another id, an ack of another id, a token of another stream; a chunk sent twice is not written twice', async () => {
    const stats = { sent: 0, bytesSent: 0, failed: 0, received: 0, dropped: 0, refused: 0, resumed: 0, chunksResent: 0 };
    const written: Buffer[] = [];
    const acks: { id: string; seq: number }[] = [];
    const sink: ChunkSink = { append: async (c) => void written.push(Buffer.from(c)), finish: async () => undefined, abort: async () => undefined };
    const inbox = new SnapshotInbox({ create: async () => sink, sendAck: (_to, p) => void acks.push({ id: Buffer.from(p).toString('hex', 0, 16), seq: Buffer.from(p).readUInt32LE(16) }) }, stats);
    const frame = (idByte: number, seq: number, flag: number, body = ''): Buffer => {
      const b = Buffer.alloc(21 + body.length);
      b.fill(idByte, 0, 16);
      b.writeUInt32LE(seq, 16);
      b[20] = flag;
      b.write(body, 21, 'latin1');
      return b;
    };
    const A = 'aa'.repeat(16);
    const B = 'bb'.repeat(16);
    for (let q = 0; q < 3; q++) inbox.onChunk('n1', frame(0xaa, q, 0, `a${q}`));
    // Another stream's chunk in the middle of A: dropped, A untouched.
    inbox.onChunk('n1', frame(0xbb, 3, 0, 'b3'));
    expect(stats.dropped).toBe(1);
    // A's chunk 1 again (a resuming leader's): not written twice, answered with where it is.
    inbox.onChunk('n1', frame(0xaa, 1, 0, 'a1'));
    // Probes: A's is answered with its last chunk written, B's with "nothing held".
    inbox.onChunk('n1', frame(0xaa, 3, 2));
    inbox.onChunk('n1', frame(0xbb, 3, 2));
    await until(() => acks.length === 6);
    expect(acks).toContainEqual({ id: B, seq: 0xffff_ffff });
    expect(acks.filter((a) => a.id === A).map((a) => a.seq)).toEqual([0, 1, 2, 2, 2]);
    inbox.onChunk('n1', frame(0xaa, 3, 1, 'a3'));
    await until(() => acks.length === 7);
    expect(written.map((b) => b.toString('latin1'))).toEqual(['a0', 'a1', 'a2', 'a3']);
    // A token naming B (or A with another count) is refused; A's own is taken.
    const token = (id: string, chunks: number): Buffer => Buffer.concat([Buffer.from('svc-stm1', 'latin1'), Buffer.from(id, 'hex'), Buffer.from(Uint32Array.of(chunks).buffer)]);
    expect(inbox.complete('n1', token(B, 4), 5)).toBeNull();
    expect(inbox.complete('n1', token(A, 3), 5)).toBeNull();
    expect(decodeImageRef(inbox.complete('n1', token(A, 4), 5)!)).toEqual({ id: A, chunks: 4 });
    // A probe with bytes after it is malformed.
    inbox.onChunk('n1', Buffer.concat([frame(0xaa, 0, 2), Buffer.from('x')]));
    expect(stats.dropped).toBe(4);

    // The leader: an ack naming another stream, or a chunk not sent, is dropped.
    const img = imageOf(3 * CHUNK_BYTES, 15);
    const w = wire(img.pieces);
    w.deliverAll = () => undefined;
    w.streams.send(request('n2'));
    await until(() => w.inFlight.length > 0);
    const dropped = w.streams.stats.dropped;
    const ack = (id: Buffer, seq: number): Buffer => Buffer.concat([id, Buffer.from(Uint32Array.of(seq).buffer)]);
    w.streams.onAck('n2', ack(Buffer.alloc(16, 0xcc), 0));
    w.streams.onAck('n2', ack(w.inFlight[0].subarray(0, 16), 50));
    expect(w.streams.stats.dropped).toBe(dropped + 2);
    w.streams.close();
    await until(() => w.streams.stats.failed === 1);
  });

  it('a member lets go of a stream its leader stopped sending (its file is removed)', async () => {
    let now = 1000;
    let aborted = 0;
    const stats = { sent: 0, bytesSent: 0, failed: 0, received: 0, dropped: 0, refused: 0, resumed: 0, chunksResent: 0 };
    const sink: ChunkSink = { append: async () => undefined, finish: async () => undefined, abort: async () => void aborted++ };
    const inbox = new SnapshotInbox({ create: async () => sink, sendAck: () => undefined, now: () => now }, stats);
    const chunk = Buffer.alloc(16 + 5 + 3);
    chunk.fill(7, 0, 16);
    inbox.onChunk('n1', chunk);
    expect(inbox.inUse(0).size).toBe(1);
    now += 30_000;
    expect(inbox.inUse(0).size).toBe(1);
    now += 40_000;
    expect(inbox.inUse(0).size).toBe(0);
    await until(() => aborted === 1);
  });

  it('the member refuses a snap naming a stream it does not hold whole, and anything malformed', () => {
    const stats = { sent: 0, bytesSent: 0, failed: 0, received: 0, dropped: 0 };
    const inbox = new SnapshotInbox({ create: () => Promise.reject(new Error('unused')), sendAck: () => undefined }, stats);
    expect(inbox.complete('n1', STREAM_REQUEST, 5)).toBeNull();
    expect(inbox.complete('n1', new Uint8Array(28), 5)).toBeNull();
    inbox.onChunk('n1', Buffer.alloc(3));
    expect(stats.dropped).toBe(3);
    expect(isStreamRequest(STREAM_REQUEST)).toBe(true);
    expect(decodeImageRef(STREAM_REQUEST)).toBeNull();
  });
});
