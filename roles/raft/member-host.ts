import { randomInt } from 'node:crypto';
import { join } from 'node:path';
import { SvcError } from '../../core/base/errors.js';
import { Prng } from '../../core/base/prng.js';
import { COMMAND_VERSION_MAX, commandVersion, decodeCommand, encodeCommand, isDeterministicRefusal } from '../../core/cluster/consensus/command.js';
import { WriteForwarder } from '../../core/cluster/consensus/forward.js';
import { ConsensusMember, type DurableRaftStorage } from '../../core/cluster/consensus/member.js';
import { EMPTY_SNAPSHOT, type Snapshot, type Transport } from '../../core/cluster/raft/index.js';
import { type ChunkSink, decodeImageRef, isStreamRequest, KEPT_IMAGE_MS, SNAPSHOT_STREAM_VERSION, SnapshotInbox, SnapshotStreams, STREAM_REQUEST } from '../../core/cluster/consensus/snapshot-stream.js';
import { ConsensusReplicationLog } from '../../core/cluster/consensus/replication-source.js';
import { GroupVersions, UNVERSIONED, type Advertised } from '../../core/cluster/consensus/versions.js';
import { notConfirmed, raftEngine, type RaftEngine } from '../../core/cluster/consensus/raft-engine.js';
import { deriveKey, parseMasterKeyHex } from '../../core/crypto/keys.js';
import { InsecureSealer, XChaChaSealer, type Sealer } from '../../core/crypto/sealer.js';
import type { Database } from '../../core/collection/database.js';
import type { EngineApi } from '../../core/service/api.js';
import { NodeFileSystem } from '../../core/storage/fs.js';
import { StorageCorruption } from '../../core/storage/errors.js';
import { RaftLog, type RaftLogOptions } from '../../core/storage/raft-log.js';
import { readSealedChunks, SealedChunkWriter } from '../../core/storage/sealed-chunks.js';
import type { RaftNetConfig } from './config.js';
import { REPLICATION_RETAIN_BYTES_DEFAULT } from '../config.js';
import type { ConsensusMetricsSource } from '../rest/metrics.js';
import { RaftTransport } from './transport.js';

/**
 * A consensus member in a server process (issue 17): the durable log in `<data dir>/raft/`, the
 * transport on SVC_RAFT_MEMBERS, the member's Ready loop on a timer, the database writing through it,
 * and the engine every transport serves (core/cluster/consensus/raft-engine.ts): the group's rules
 * around `nodeEngine`, the node's engine over `db` (core/engine/node.ts).
 */

/** `GET /cluster/raft` (CONTRACT section 11). */
export interface RaftView {
  id: string;
  role: 'leader' | 'follower' | 'candidate';
  term: number;
  leader_id: string | null;
  commit_index: number;
  applied_index: number;
  /**
   * Beyond the contract's `{id, url}`: the highest command and snapshot-stream versions each member
   * advertised to this one (this member's own for itself); null when not heard from since it started.
   * `advertised` is false for a member whose build sends no versions (taken as 1).
   */
  members: { id: string; url: string; command_version: number | null; snapshot_stream_version: number | null; advertised: boolean }[];
  /**
   * Beyond the contract: the group's effective versions as this member sees them (the lowest over every
   * member, one not heard from counted as 1): a leader proposes only commands within `command_version`.
   */
  versions: { command_version: number; snapshot_stream_version: number; not_heard_from: string[] };
  /** Beyond the contract: the last snapshot's index and the first entry the log still holds. */
  snapshot_index: number;
  log_first_index: number;
  /** A snapshot from the leader is being restored: reads here answer 503 `restoring` until it ends. */
  restoring: boolean;
  /**
   * After a start, the log's entries this member had committed before are being applied again (its
   * database may hold some of them already, and goes through older values meanwhile): reads here
   * answer 503 `replaying` until they are.
   */
  replaying: boolean;
}

export interface ConsensusHost {
  readonly engine: RaftEngine;
  /** A snapshot is being restored (or waits to be): reads that are not strong answer `unavailable` meanwhile. */
  readonly restoring: boolean;
  /** Applying again what it had committed before this start: reads that are not strong answer `unavailable` meanwhile. */
  readonly replaying: boolean;
  /** `fn` is called at once whenever `restoring` or `replaying` changes (a request loop's own searches follow it). */
  watchRestoring(fn: () => void): void;
  view(): RaftView;
  /** What the svc_raft_* series show. */
  metrics(): ConsensusMetricsSource;
}

/**
 * What a read replica's stream may keep of this member's log past where the member compacts it, in
 * entries (per SVC_RAFT_SNAPSHOT_ENTRIES) and bytes (SVC_REPLICATION_RETAIN_BYTES, at most
 * REPLICA_HOLD_BYTES_MAX: the log is in memory, and a node pod's memory is a few GiB): a replica further
 * behind starts over from a snapshot.
 */
const REPLICA_HOLD_ENTRIES_PER_SNAPSHOT = 4;
const REPLICA_HOLD_BYTES_MAX = 256 << 20;

/** An image streamed to this member, in `<data dir>/raft/image-<stream id>.img` until a newer snapshot replaces it. */
const IMAGE_SUFFIX = '.img';
/** The stream id an image file's name carries (`image-<id>.img`), or null for another file. */
const imageIdOf = (name: string): string | null =>
  (name.startsWith('image-') && name.endsWith(IMAGE_SUFFIX) ? name.slice('image-'.length, -IMAGE_SUFFIX.length) : null);

/**
 * What the operator does when a member's consensus log refuses to open (docs/consensus.md, "A damaged
 * consensus log"): the member starts again on an empty data directory and gets the group's data from
 * its leader, as a member whose disk was lost does.
 */
export function damagedLogFix(dataDir: string): string {
  return `stop this member, move its data directory ${dataDir} aside (keep it to diagnose) and start the member again with the same `
    + `SVC_RAFT_NODE_ID and SVC_RAFT_MEMBERS on an empty data directory at that path: it gets the group's data from the leader `
    + '(its log, or a snapshot of the database once the log is compacted). Do it only while the other members are up and hold a quorum, '
    + 'and one member at a time: wait until GET /cluster/raft on it shows applied_index caught up with the leader\'s commit_index before another. '
    + `Never empty only ${join(dataDir, 'raft')}: the database beside it would be ahead of an empty log (docs/consensus.md, "A damaged consensus log")`;
}

/**
 * The member's consensus log in `<dataDir>/raft/`. Damage before its last batch (a checksum or seal failing
 * inside a complete batch, a missing file, a gap) refuses to open as RaftLog.open decides, never cut: it
 * may be synced state, a vote or an entry this member acknowledged, and dropping that could lose an
 * acknowledged write or let two leaders win one term. The refusal (thrown and logged) says why, where,
 * and what the operator does (damagedLogFix).
 */
export async function openMemberLog(
  fs: NodeFileSystem, dataDir: string, opts: RaftLogOptions,
  log: (level: 'error', message: string, detail: Record<string, unknown>) => void,
): Promise<RaftLog> {
  try {
    return await RaftLog.open(fs, join(dataDir, 'raft'), opts);
  } catch (e) {
    if (!(e instanceof StorageCorruption)) throw e;
    const fix = damagedLogFix(dataDir);
    const why = `${e.what}; a consensus member's log is cut only after its last complete batch (a torn write), never here: this damage may be `
      + 'synced data (a vote, an entry this member acknowledged), and dropping it could lose an acknowledged write or let two leaders win one term';
    log('error', 'consensus: the log is damaged and this member cannot start', { file: e.file, offset: e.offset, damage: e.what, dataDir, fix });
    throw new StorageCorruption(e.file, e.offset, why, fix);
  }
}

/**
 * A snapshot's data as the database restores it: an image file streamed here, or (older logs) an image
 * in the log. A streamed image's chunks were authenticated as they arrived, so one that fails to read now
 * (damaged, cut, or gone) was damaged on this disk since: the member cannot restore it, and no newer
 * snapshot replaces it unless the leader sends one. The error and the log say so, and name the remedy
 * (damagedLogFix: an empty data directory, as for a damaged log).
 */
export async function* snapshotImage(
  fs: NodeFileSystem, imagePath: (id: string) => string, sealer: Sealer, s: Snapshot, dataDir: string,
  log: (level: 'error', message: string, detail: Record<string, unknown>) => void,
): AsyncGenerator<Uint8Array> {
  const ref = decodeImageRef(s.data);
  if (ref === null) {
    yield s.data;
    return;
  }
  const path = imagePath(ref.id);
  try {
    yield* readSealedChunks(fs, path, sealer, ref.id, ref.chunks);
  } catch (e) {
    const gone = (e as NodeJS.ErrnoException | null)?.code === 'ENOENT';
    if (!(e instanceof StorageCorruption) && !gone) throw e;
    const at = e instanceof StorageCorruption ? { file: e.file, offset: e.offset, what: e.what } : { file: path, offset: 0, what: 'the image file is missing' };
    const fix = damagedLogFix(dataDir);
    log('error', 'consensus: the snapshot image is damaged and this member cannot restore it', { file: at.file, offset: at.offset, damage: at.what, index: s.meta.index, dataDir, fix });
    throw new StorageCorruption(at.file, at.offset,
      `${at.what}; the image of the snapshot at index ${s.meta.index} was authenticated chunk by chunk as it arrived, so it was damaged on this disk since: `
      + 'this member cannot restore it, stays restoring (it answers no reads) and fails the restore at every start', fix);
  }
}

export async function startConsensusMember(
  rc: RaftNetConfig, db: Database, nodeEngine: EngineApi, dataDir: string, encryptionKey: string | null,
  log: (level: 'info' | 'warn' | 'error', message: string, detail?: Record<string, unknown>) => void,
  /**
   * `replicaHoldBytes`: what a read replica's stream may keep of the log past the member's compaction
   * (SVC_REPLICATION_RETAIN_BYTES). `versions`: what this member advertises instead of this build's
   * (tests stand in for an older build; null sends none).
   */
  testing: { replicaHoldBytes?: number; versions?: Advertised | null } = {},
): Promise<ConsensusHost> {
  const applied = await db.consensusApplied();
  const sealer = encryptionKey === null ? new InsecureSealer() : new XChaChaSealer(deriveKey(parseMasterKeyHex(encryptionKey), 'raft'));
  const fs = new NodeFileSystem();
  const raftDir = join(dataDir, 'raft');
  const raftLog = await openMemberLog(fs, dataDir, { sealer, log: (m, d) => log('warn', m, d) }, log);
  const imagePath = (id: string): string => join(raftDir, `image-${id}${IMAGE_SUFFIX}`);
  const imageOf = (s: Snapshot): AsyncIterable<Uint8Array> => snapshotImage(fs, imagePath, sealer, s, dataDir, log);
  /**
   * Image files no snapshot names any more, nor a stream being received, nor one kept from before this
   * start for its leader to resume (SnapshotInbox: until a probe or a chunk names another stream, or
   * KEPT_IMAGE_MS): removed.
   */
  const removeStaleImages = async (): Promise<void> => {
    const names = await fs.readdir(raftDir);
    // Taken after the listing: a stream begun since has no file in it.
    const persisted = raftLog.snapshot();
    const keep = inbox?.inUse(persisted.meta.index) ?? new Set<string>(keptAtStart);
    const ref = decodeImageRef(persisted.data);
    if (ref !== null) keep.add(ref.id);
    for (const name of names) {
      const id = imageIdOf(name);
      if (id !== null && !keep.has(id)) await fs.unlink(join(raftDir, name)).catch(() => undefined);
    }
  };
  let inbox: SnapshotInbox | null = null;
  // Image files the log does not name: streams this member was receiving when it stopped (killed, or
  // restarted). Their leader may still hold the stream and go on from the chunks the file holds.
  const startRef = decodeImageRef(raftLog.snapshot().data);
  const keptAtStart = (await fs.readdir(raftDir))
    .map(imageIdOf)
    .filter((id): id is string => id !== null && id !== startRef?.id);
  const snap = raftLog.snapshot();
  if (applied < snap.meta.index && snap.data.length === 0) {
    // A marker is recorded only at an index already durable in the database: this one is not.
    throw new SvcError('internal', `the consensus log was compacted through ${snap.meta.index} but this data directory applied only ${applied}: start this member on an empty data directory`);
  }
  if (applied < snap.meta.index) {
    // The last snapshot is newer than what this directory applied (a restore a crash cut short): the
    // member restores it first, beside its Ready loop (ConsensusMember), answering its peers meanwhile.
    log('info', 'consensus: the state will be restored from the log\'s snapshot', { index: snap.meta.index, applied });
  }
  await removeStaleImages();
  if (keptAtStart.length > 0) log('info', 'consensus: partial image files kept for their leader to resume', { streams: keptAtStart, keep_ms: KEPT_IMAGE_MS });
  const { timing } = rc;
  /** Entries the log keeps before a snapshot, for a member a little behind. */
  const retainEntries = Math.floor(timing.snapshotEntries / 4);
  const tickMs = Math.max(1, Math.floor(timing.heartbeatMs / 2));
  let forwarder: WriteForwarder | null = null;
  let member: ConsensusMember | null = null;
  let leasesEnded = 0;
  // What each member reads, from the handshakes (docs/consensus.md, Version skew).
  const own = testing.versions === undefined ? { command: COMMAND_VERSION_MAX, stream: SNAPSHOT_STREAM_VERSION } : testing.versions ?? UNVERSIONED;
  const versions = new GroupVersions(rc.id, rc.members.map((x) => x.id), own);
  const transport = new RaftTransport({
    id: rc.id, listen: rc.listen, peers: rc.members, secret: rc.secret, tls: rc.tls, insecure: rc.insecure,
    versions: testing.versions === undefined ? versions.own : testing.versions,
    onPeerVersions: (peer, v) => {
      const before = versions.of(peer);
      versions.heard(peer, v);
      const after = versions.of(peer);
      if (before?.command !== after?.command || before?.stream !== after?.stream) {
        log('info', 'consensus: a member\'s versions', { peer, command_version: after?.command, snapshot_stream_version: after?.stream, advertised: v !== null });
      }
    },
    onMessage: (m) => {
      if (m.type === 'snap') {
        // A snapshot's data on the wire is a stream's token: Raft gets it only with the image here whole.
        const data = inbox!.complete(m.from, m.snapshot.data, m.snapshot.meta.index);
        if (data === null) return;
        member?.receive({ ...m, snapshot: { meta: m.snapshot.meta, data } });
        return;
      }
      member?.receive(m);
    },
    onForward: (payload, from) => forwarder?.receive(payload, from),
    onSnapshotFrame: (kind, payload, from) => (kind === 'chunk' ? inbox!.onChunk(from, payload) : streams.onAck(from, payload)),
    // The leader's process is gone: campaign soon rather than after a whole election timeout.
    onPeerRefused: (peer) => {
      member?.leaderGone(peer);
    },
    onPeerLost: (peer) => {
      forwarder?.abandon(peer, 'went away');
      streams.peerLost(peer);
    },
    log: (m, d) => log('warn', m, d),
  });
  // Snapshots are markers (the database is durable on its own). Raft asks for one only to send it to a
  // member further behind than the log: it gets a request at the applied index, and the image is
  // streamed to that member from the database as it is read (core/cluster/consensus/snapshot-stream.ts).
  const lazySnapshot = (): Snapshot => {
    const s = raftLog.snapshot();
    // (member is null only while it is being made: raft's constructor reads the snapshot's index.)
    if (member === null || s.meta.index === 0) return s;
    // A database being restored is no image of any index: Raft asks again later.
    // Restoring, or replaying after a start: its state is not that of its applied index.
    if (member.restoring || member.replaying) return EMPTY_SNAPSHOT;
    const index = member.appliedIndex;
    const term = raftLog.term(index);
    return term === null ? EMPTY_SNAPSHOT : { meta: { index, term }, data: STREAM_REQUEST };
  };
  const streams = new SnapshotStreams({
    // Only records the member reads: a move that starts while the image is read ends the stream instead.
    image: (to) => db.consensusImage({ commandVersionMax: versions.of(to)?.command ?? 1 }),
    peerVersions: (peer) => versions.of(peer),
    imageCommandVersion: () => db.consensusImageVersion(),
    sendChunk: (to, payload) => transport.sendSnapshotFrame(to, 'chunk', payload),
    sendSnapshot: (m) => transport.send([m]),
    progress: (peer) => {
      const st = member?.status();
      const p = st?.role === 'leader' ? st.progress.find((x) => x.id === peer) : undefined;
      if (st === undefined || p === undefined) return null;
      return { match: p.match, caughtUp: p.state === 'replicate' && p.match >= st.lastIndex - retainEntries, lastIndex: st.lastIndex };
    },
    holdEntriesMax: Math.max(100_000, 10 * timing.snapshotEntries),
    log: (m, d) => log('warn', m, d),
  });
  const sinkOf = (w: SealedChunkWriter, id: string): ChunkSink => ({
    append: (c) => w.append(c),
    finish: async () => {
      await w.finish();
      await fs.fsyncDir(raftDir);
    },
    abort: async () => {
      await w.abort();
      await fs.unlink(imagePath(id)).catch(() => undefined);
    },
  });
  inbox = new SnapshotInbox({
    create: async (id) => {
      await removeStaleImages();
      return sinkOf(await SealedChunkWriter.create(fs, imagePath(id), sealer, id), id);
    },
    kept: {
      ids: keptAtStart,
      resume: async (id) => {
        const { writer, cutBytes } = await SealedChunkWriter.resume(fs, imagePath(id), sealer, id);
        // The file was synced by resume; its directory entry too, so what it holds outlives a power loss.
        try {
          await fs.fsyncDir(raftDir);
        } catch (e) {
          // Its handle closed before the inbox drops the file (else the unlinked file kept its space).
          await writer.abort().catch(() => undefined);
          throw e;
        }
        log('info', 'consensus: resuming an image stream after a restart', { stream: id, chunks_held: writer.chunks, bytes_cut: cutBytes });
        return { sink: sinkOf(writer, id), chunks: writer.chunks };
      },
      drop: (id) => fs.unlink(imagePath(id)),
    },
    sendAck: (to, payload) => void transport.sendSnapshotFrame(to, 'ack', payload),
    log: (m, d) => log('warn', m, d),
  }, streams.stats);
  /** Raft's messages: a snapshot request becomes a stream; the rest go as they are. */
  const memberTransport: Transport = {
    send: (messages) => {
      const rest = messages.filter((m) => !(m.type === 'snap' && isStreamRequest(m.snapshot.data)));
      for (const m of messages) if (m.type === 'snap' && isStreamRequest(m.snapshot.data)) streams.send(m);
      if (rest.length > 0) transport.send(rest);
    },
  };
  // Read replicas of this member (SVC_LEADER_URL naming it) follow the entries it applied.
  const replication = new ConsensusReplicationLog({
    entries: (lo, hi, max) => raftLog.entries(lo, hi, max),
    firstIndex: () => raftLog.firstIndex(),
    holdsCollection: (uid) => db.holdsCollection(uid),
  }, applied, { holdEntriesMax: REPLICA_HOLD_ENTRIES_PER_SNAPSHOT * timing.snapshotEntries, holdBytesMax: Math.min(testing.replicaHoldBytes ?? REPLICATION_RETAIN_BYTES_DEFAULT, REPLICA_HOLD_BYTES_MAX) });
  // A member that knows no leader (cut off from its group, or electing one) cannot vouch that what it
  // applied is current: its replicas hear no heartbeats meanwhile, and their lag grows.
  db.useConsensusLog(replication, () => member !== null && member.healthy && member.status().leaderId !== null);
  const storage: DurableRaftStorage = {
    hardState: () => raftLog.hardState(),
    entries: (lo, hi, max) => raftLog.entries(lo, hi, max),
    term: (i) => raftLog.term(i),
    firstIndex: () => raftLog.firstIndex(),
    lastIndex: () => raftLog.lastIndex(),
    snapshot: lazySnapshot,
    save: (u) => raftLog.save(u),
    createSnapshot: async (i, d) => {
      const made = await raftLog.createSnapshot(i, d);
      // The marker replaced a snapshot that named an image file: that file is not needed any more.
      await removeStaleImages();
      return made;
    },
    // A member being sent an image applies the log from the image's index on: keep it. So does a read
    // replica's stream, within its bounds (ConsensusReplicationLog.compactTo).
    compact: (i) => raftLog.compact(replication.compactTo(Math.min(i, streams.floor ?? i))),
  };
  // Files kept from before this start that no leader asked for are removed once their time is up.
  const keptTimer = keptAtStart.length === 0 ? null : setTimeout(() => {
    inbox?.expireKept();
    void removeStaleImages().catch(() => undefined);
  }, KEPT_IMAGE_MS + 1000);
  keptTimer?.unref();
  const electionTicks = Math.max(3, Math.round(timing.electionMs / tickMs));
  const restoringWatchers: (() => void)[] = [];
  member = new ConsensusMember({
    id: rc.id, members: rc.members.map((m) => m.id), storage, transport: memberTransport,
    prng: new Prng(randomInt(2 ** 31)),
    heartbeatTicks: 2, electionTicks,
    applied,
    // A member back with an empty data directory may have voted in the current term before it lost it:
    // it votes again only after two election timeouts (docs/consensus.md).
    raft: { amnesiaTicks: 2 * electionTicks },
    stateMachine: {
      apply: (e) => (e.data.length === 0 ? undefined : db.applyCommand(decodeCommand(e.data), e.index)),
      // Positions unsynced (the log is the durable record), made durable before a marker compacts the log.
      appliedThrough: (index) => {
        db.appliedThrough(index);
        // Settled in memory: read replicas' streams may send them.
        replication.appliedThrough(index);
      },
      syncApplied: () => db.syncApplied(),
      restore: async (s, signal) => {
        log('info', 'consensus: restoring a snapshot from the leader', { index: s.meta.index });
        replication.loseAll('this member is restoring a snapshot from its leader');
        // A close cuts it short (it runs again at the next start, as after a kill -9).
        await db.restoreConsensusImage(imageOf(s), s.meta.index, signal);
        replication.appliedThrough(s.meta.index);
        await removeStaleImages();
      },
    },
    refused: isDeterministicRefusal,
    onRestoring: () => { for (const w of restoringWatchers) w(); },
    // What it had committed before this start, which its database may hold in part (Database.syncApplied).
    replayThrough: Math.max(applied, raftLog.hardState().commit),
    compaction: { everyEntries: timing.snapshotEntries, retainEntries },
    log: (m, d) => log('error', m, d),
  });
  const m = member;
  db.useProposer({
    propose: (cmd) => {
      // A command some member would stop at is never proposed (the engine refuses move steps before they
      // start; this holds for any command, should one be reached another way).
      try {
        versions.requireCommand(commandVersion(cmd), `a ${cmd.op.t} command`);
      } catch (e) {
        return Promise.reject(e);
      }
      // Only a ready leader's (its term's first entry applied): a write decides what to propose from this
      // member's state, maybe after waiting (at a move's gate), and a leader elected meanwhile but not yet
      // ready may not hold what the leader between committed. raftEngine runs it again once ready.
      if (!m.leaderReady) {
        const leaderId = m.status().leaderId;
        return Promise.reject(new SvcError('unavailable', `this member is not the ready consensus leader (leader: ${leaderId ?? 'none known'})`, { reason: 'not_leader', leaderId }));
      }
      // A time, not an AbortSignal.timeout: the member checks it at each tick (a signal per write costs).
      return m.propose(encodeCommand(cmd), { timeoutMs: timing.writeTimeoutMs }).then((ack) => ack.result);
    },
    // A ReadIndex round, as a strong read's: a write answered without a proposal waits for it.
    confirm: () => m.readBarrier(AbortSignal.timeout(timing.writeTimeoutMs)).then(() => undefined, (e: unknown) => { throw notConfirmed(e); }),
  });
  let knownLeader: string | null = null;
  // Election timeouts are wall-clock times: a follower whose timer fired late (its event loop was busy
  // applying, or the machine loaded) counts the ticks it missed, so that a dead leader is replaced
  // within the election timeout, not a multiple of it. A missed tick costs it at most a pre-vote, which
  // members still hearing their leader ignore. A leader never catches up: its missed ticks only delay
  // a heartbeat, while catching them up could end its quorum check before the answers waiting in its
  // sockets were read, and make it step down for nothing.
  let tickedAt = performance.now();
  const timer = setInterval(() => {
    const now = performance.now();
    const missed = Math.floor((now - tickedAt) / tickMs);
    const due = m.status().role === 'leader' ? 1 : Math.max(1, Math.min(electionTicks, missed));
    // The remainder of a tick carries over; where ticks were dropped (a leader's, or past the cap), time starts afresh.
    tickedAt = due >= missed ? tickedAt + due * tickMs : now;
    for (let i = 0; i < due; i++) m.tick();
    if (m.leasesEndedEarly !== leasesEnded) {
      leasesEnded = m.leasesEndedEarly;
      log('info', 'consensus: the leader\'s address refuses connections and it missed a heartbeat; campaigning without waiting out the election timeout', { leader: knownLeader });
    }
    // A new leader: writes forwarded to the old one will not be answered by it in time, if ever.
    const leader = m.status().leaderId;
    if (leader !== knownLeader) {
      if (knownLeader !== null) forwarder?.abandon(knownLeader, 'stopped leading');
      knownLeader = leader;
    }
  }, tickMs);
  timer.unref();
  const engine = raftEngine({
    db: nodeEngine, lease: db, member: m, selfId: rc.id,
    forward: (to, w, signal) => forwarder!.request(to, w, signal),
    writeTimeoutMs: timing.writeTimeoutMs,
    readTimeoutMs: timing.writeTimeoutMs,
    requireCommandVersion: (version, what) => versions.requireCommand(version, what),
    close: async () => {
      clearInterval(timer);
      if (keptTimer !== null) clearTimeout(keptTimer);
      forwarder?.close();
      streams.close();
      replication.close();
      await transport.close();
      await m.close();
      await raftLog.close();
      await db.close();
    },
  });
  forwarder = new WriteForwarder({
    send: (to, payload) => transport.sendForward(to, payload),
    // A write waits for this member's own link to its leader when that link is reconnecting (it dialled
    // before the leader listened): the leader's heartbeats come on the leader's connection, not on it.
    whenConnected: (to, ready) => transport.whenConnected(to, ready),
    handle: (w) => engine.forwarded(w),
    appliedIndex: () => m.appliedIndex,
    log: (msg, d) => log('warn', msg, d),
  });
  try {
    await transport.start();
  } catch (e) {
    clearInterval(timer);
    if (keptTimer !== null) clearTimeout(keptTimer);
    await m.close();
    await raftLog.close();
    throw e;
  }
  log('info', 'consensus member started', { id: rc.id, members: rc.members.map((x) => x.id), applied, listen: `${rc.listen.host}:${rc.listen.port}` });
  const view = (): RaftView => {
    const s = m.status();
    const gv = versions.view();
    return {
      id: s.id,
      role: s.role === 'leader' ? 'leader' : s.role === 'follower' ? 'follower' : 'candidate',
      term: s.term,
      leader_id: s.leaderId,
      commit_index: s.commit,
      // What the database holds (a restore or a batch being applied counts only once it is done), not
      // how far Raft has handed entries out.
      applied_index: m.appliedIndex,
      members: rc.members.map((x) => {
        const v = gv.members.find((p) => p.id === x.id);
        return { id: x.id, url: `${x.host}:${x.port}`, command_version: v?.command ?? null, snapshot_stream_version: v?.stream ?? null, advertised: v?.advertised ?? false };
      }),
      versions: { command_version: gv.command, snapshot_stream_version: gv.stream, not_heard_from: [...gv.unknown] },
      snapshot_index: raftLog.snapshot().meta.index,
      log_first_index: raftLog.firstIndex(),
      restoring: m.restoring,
      replaying: m.replaying,
    };
  };
  return {
    engine,
    get restoring() { return m.restoring; },
    get replaying() { return m.replaying; },
    watchRestoring: (fn) => { restoringWatchers.push(fn); },
    view,
    metrics: () => {
      const v = view();
      return {
        leaderGone: m.leasesEndedEarly, role: v.role, term: v.term, commitIndex: v.commit_index, appliedIndex: v.applied_index, snapshotIndex: v.snapshot_index,
        transport: transport.stats, forward: forwarder!.stats, snapshots: streams.stats,
      };
    },
  };
}
