import { randomInt } from 'node:crypto';
import { join } from 'node:path';
import { SvcError } from '../../core/base/errors.js';
import { Prng } from '../../core/base/prng.js';
import { decodeCommand, encodeCommand } from '../../core/cluster/consensus/command.js';
import { WriteForwarder } from '../../core/cluster/consensus/forward.js';
import { ConsensusMember } from '../../core/cluster/consensus/member.js';
import { raftEngine, type RaftEngine } from '../../core/cluster/consensus/raft-engine.js';
import { deriveKey, parseMasterKeyHex } from '../../core/crypto/keys.js';
import { InsecureSealer, XChaChaSealer } from '../../core/crypto/sealer.js';
import type { Database } from '../../core/embedded.js';
import { NodeFileSystem } from '../../core/storage/fs.js';
import { RaftLog } from '../../core/storage/raft-log.js';
import type { RaftNetConfig } from './config.js';
import type { ConsensusMetricsSource } from '../rest/metrics.js';
import { RaftTransport } from './transport.js';

/**
 * A consensus member in a server process (issue 17): the durable log in `<data dir>/raft/`, the
 * transport on SVC_RAFT_MEMBERS, the member's Ready loop on a timer, the database writing through it,
 * and the engine every transport serves (core/cluster/consensus/raft-engine.ts).
 */

/** `GET /cluster/raft` (CONTRACT section 11). */
export interface RaftView {
  id: string;
  role: 'leader' | 'follower' | 'candidate';
  term: number;
  leader_id: string | null;
  commit_index: number;
  applied_index: number;
  members: { id: string; url: string }[];
  /** Beyond the contract: the last snapshot's index and the first entry the log still holds. */
  snapshot_index: number;
  log_first_index: number;
}

export interface ConsensusHost {
  readonly engine: RaftEngine;
  view(): RaftView;
  /** What the svc_raft_* series show. */
  metrics(): ConsensusMetricsSource;
}

/** Codes a command's apply refuses with on every member alike (Database.applyCommand): the write's answer. */
const DETERMINISTIC = new Set(['already_exists', 'not_found', 'invalid_argument']);

export async function startConsensusMember(
  rc: RaftNetConfig, db: Database, dataDir: string, encryptionKey: string | null,
  log: (level: 'info' | 'warn' | 'error', message: string, detail?: Record<string, unknown>) => void,
): Promise<ConsensusHost> {
  let applied = await db.consensusApplied();
  const sealer = encryptionKey === null ? new InsecureSealer() : new XChaChaSealer(deriveKey(parseMasterKeyHex(encryptionKey), 'raft'));
  const raftLog = await RaftLog.open(new NodeFileSystem(), join(dataDir, 'raft'), { sealer, log: (m, d) => log('warn', m, d) });
  const snap = raftLog.snapshot();
  if (applied < snap.meta.index) {
    // The last snapshot is newer than what this directory applied (a restore a crash cut short).
    log('info', 'consensus: restoring the state from the log\'s snapshot', { index: snap.meta.index, applied });
    await db.restoreConsensusImage(snap.data, snap.meta.index);
    applied = snap.meta.index;
  }
  const { timing } = rc;
  const tickMs = Math.max(1, Math.floor(timing.heartbeatMs / 2));
  let forwarder: WriteForwarder | null = null;
  let member: ConsensusMember | null = null;
  const transport = new RaftTransport({
    id: rc.id, listen: rc.listen, peers: rc.members, secret: rc.secret, tls: rc.tls, insecure: rc.insecure,
    onMessage: (m) => member?.receive(m),
    onForward: (payload, from) => forwarder?.receive(payload, from),
    log: (m, d) => log('warn', m, d),
  });
  member = new ConsensusMember({
    id: rc.id, members: rc.members.map((m) => m.id), storage: raftLog, transport,
    prng: new Prng(randomInt(2 ** 31)),
    heartbeatTicks: 2, electionTicks: Math.max(3, Math.round(timing.electionMs / tickMs)),
    applied,
    // A member back with an empty data directory may have voted in the current term before it lost it:
    // it votes again only after two election timeouts (docs/consensus.md).
    raft: { amnesiaTicks: 2 * Math.max(3, Math.round(timing.electionMs / tickMs)) },
    stateMachine: {
      apply: (e) => (e.data.length === 0 ? undefined : db.applyCommand(decodeCommand(e.data), e.index)),
      appliedThrough: (index) => db.appliedThrough(index),
      restore: (s) => db.restoreConsensusImage(s.data, s.meta.index),
    },
    refused: (e) => e instanceof SvcError && DETERMINISTIC.has(e.code),
    compaction: { everyEntries: timing.snapshotEntries, retainEntries: Math.floor(timing.snapshotEntries / 4), image: () => db.consensusImage() },
    log: (m, d) => log('error', m, d),
  });
  const m = member;
  db.useProposer({
    propose: (cmd) => m.propose(encodeCommand(cmd), AbortSignal.timeout(timing.writeTimeoutMs)).then((ack) => ack.result),
  });
  const timer = setInterval(() => m.tick(), tickMs);
  timer.unref();
  const engine = raftEngine({
    db, member: m, selfId: rc.id,
    forward: (to, w, signal) => forwarder!.request(to, w, signal),
    writeTimeoutMs: timing.writeTimeoutMs,
    readTimeoutMs: timing.writeTimeoutMs,
    close: async () => {
      clearInterval(timer);
      forwarder?.close();
      await transport.close();
      await m.close();
      await raftLog.close();
      await db.close();
    },
  });
  forwarder = new WriteForwarder({
    send: (to, payload) => transport.sendForward(to, payload),
    handle: (w) => engine.forwarded(w),
    appliedIndex: () => m.appliedIndex,
    log: (msg, d) => log('warn', msg, d),
  });
  try {
    await transport.start();
  } catch (e) {
    clearInterval(timer);
    await m.close();
    await raftLog.close();
    throw e;
  }
  log('info', 'consensus member started', { id: rc.id, members: rc.members.map((x) => x.id), applied, listen: `${rc.listen.host}:${rc.listen.port}` });
  const view = (): RaftView => {
    const s = m.status();
    return {
      id: s.id,
      role: s.role === 'leader' ? 'leader' : s.role === 'follower' ? 'follower' : 'candidate',
      term: s.term,
      leader_id: s.leaderId,
      commit_index: s.commit,
      applied_index: s.applied,
      members: rc.members.map((x) => ({ id: x.id, url: `${x.host}:${x.port}` })),
      snapshot_index: raftLog.snapshot().meta.index,
      log_first_index: raftLog.firstIndex(),
    };
  };
  return {
    engine,
    view,
    metrics: () => {
      const v = view();
      return {
        role: v.role, term: v.term, commitIndex: v.commit_index, appliedIndex: v.applied_index, snapshotIndex: v.snapshot_index,
        transport: transport.stats, forward: forwarder!.stats,
      };
    },
  };
}
