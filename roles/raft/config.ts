import { readFileSync } from 'node:fs';
import { ConfigError, isLoopback, parseAddr, parseNumber, type SvcConfig } from '../config.js';
import type { RaftPeer, RaftTransportTls } from './transport.js';

/** The least length of SVC_RAFT_SECRET: it is an HMAC key, so it should carry about 128 bits or more. */
export const RAFT_SECRET_CHARS_MIN = 32;

export interface RaftNetConfig {
  readonly id: string;
  readonly listen: { readonly host: string; readonly port: number };
  /** Every member, this one included (SVC_RAFT_MEMBERS in order). */
  readonly members: readonly RaftPeer[];
  readonly secret: Buffer | null;
  readonly tls: RaftTransportTls | null;
  readonly insecure: boolean;
  readonly warnings: readonly string[];
  readonly timing: RaftTiming;
}

/** The group's clocks (the same on every member): a heartbeat every heartbeatMs, elections after 1 to 2 electionMs. */
export interface RaftTiming {
  readonly heartbeatMs: number;
  readonly electionMs: number;
  /** How long a write may wait for a leader and a quorum before it is `unavailable`. */
  readonly writeTimeoutMs: number;
  /** Applied entries between two snapshots (each one bounds the log kept on disk and in memory). */
  readonly snapshotEntries: number;
}

export const RAFT_TIMING_DEFAULTS: RaftTiming = Object.freeze({ heartbeatMs: 100, electionMs: 1000, writeTimeoutMs: 10_000, snapshotEntries: 10_000 });

/**
 * SVC_RAFT_MEMBERS (`<id>=<addr>,...`, an address being `host:port`, `tcp://host:port` or
 * `http://host:port`: CONTRACT section 11), SVC_RAFT_NODE_ID and SVC_RAFT_SECRET, checked together with
 * TLS: null when this node is no consensus member. Peers must be able to authenticate each other (a
 * secret, or mutual TLS: SVC_TLS_CERT, SVC_TLS_KEY and SVC_TLS_CLIENT_CA), and a non-loopback consensus
 * address needs TLS; SVC_INSECURE=true waives both, with a warning.
 */
export function raftNetConfig(config: SvcConfig): RaftNetConfig | null {
  const raw = config.other.SVC_RAFT_MEMBERS;
  const secretText = config.other.SVC_RAFT_SECRET;
  if (raw === undefined) {
    if (config.other.SVC_RAFT_NODE_ID !== undefined || secretText !== undefined) {
      throw new ConfigError('SVC_RAFT_MEMBERS', 'is needed with SVC_RAFT_NODE_ID or SVC_RAFT_SECRET. Fix: list the group as <id>=<host:port>,...');
    }
    return null;
  }
  const members = parseRaftMembers(raw);
  const id = config.other.SVC_RAFT_NODE_ID;
  if (id === undefined) throw new ConfigError('SVC_RAFT_NODE_ID', 'is needed with SVC_RAFT_MEMBERS. Fix: set it to this node\'s id in that list');
  const self = members.find((m) => m.id === id);
  if (self === undefined) throw new ConfigError('SVC_RAFT_NODE_ID', `'${id}' is not in SVC_RAFT_MEMBERS (${members.map((m) => m.id).join(', ')})`);
  const warnings: string[] = [];
  if (secretText !== undefined && secretText.length < RAFT_SECRET_CHARS_MIN) {
    throw new ConfigError('SVC_RAFT_SECRET', `is shorter than ${RAFT_SECRET_CHARS_MIN} characters. Fix: the same long random value on every member (for example \`openssl rand -hex 32\`)`);
  }
  // The CA members' certificates chain to: SVC_RAFT_TLS_CA for the consensus connections alone (REST and
  // gRPC then need no client certificate), else SVC_TLS_CLIENT_CA (mutual TLS on every listener).
  const raftCa = config.other.SVC_RAFT_TLS_CA;
  if (raftCa !== undefined && config.tls === null) {
    throw new ConfigError('SVC_RAFT_TLS_CA', 'verifies the members\' certificates, so it needs TLS. Fix: also set SVC_TLS_CERT and SVC_TLS_KEY, or unset SVC_RAFT_TLS_CA');
  }
  const caFile = raftCa ?? config.tls?.clientCa ?? null;
  const tls = config.tls === null ? null : { cert: readFileSync(config.tls.cert), key: readFileSync(config.tls.key), ca: caFile === null ? null : readFileSync(caFile) };
  if (secretText === undefined && tls?.ca == null) {
    if (!config.insecure) {
      throw new ConfigError('SVC_RAFT_SECRET', 'consensus members must authenticate each other. Fix: set SVC_RAFT_SECRET (the same on every member, at least 32 characters) or mutual TLS (SVC_TLS_CERT, SVC_TLS_KEY and SVC_TLS_CLIENT_CA); SVC_INSECURE=true waives this');
    }
    warnings.push('consensus members do not authenticate each other: no SVC_RAFT_SECRET and no mutual TLS (SVC_INSECURE=true)');
  }
  if (!isLoopback(self.host) && tls === null) {
    if (!config.insecure) {
      throw new ConfigError('SVC_RAFT_MEMBERS', `this member's consensus address ${self.host}:${self.port} is not loopback and there is no TLS. Fix: set SVC_TLS_CERT and SVC_TLS_KEY, or use 127.0.0.1; SVC_INSECURE=true waives this`);
    }
    warnings.push(`the consensus address ${self.host}:${self.port} is not loopback and speaks plain text (SVC_INSECURE=true)`);
  }
  return {
    id, listen: { host: self.host, port: self.port }, members, tls, insecure: config.insecure, warnings, timing: raftTiming(config),
    secret: secretText === undefined ? null : Buffer.from(secretText, 'utf8'),
  };
}

export function parseRaftMembers(raw: string): RaftPeer[] {
  const v = 'SVC_RAFT_MEMBERS';
  const out: RaftPeer[] = [];
  for (const part of raw.split(',').map((p) => p.trim())) {
    const eq = part.indexOf('=');
    if (eq <= 0) throw new ConfigError(v, `"${part}" is not <id>=<host:port>. Fix: for example n1=10.0.0.1:7000,n2=10.0.0.2:7000,n3=10.0.0.3:7000`);
    const id = part.slice(0, eq);
    const addr = part.slice(eq + 1).replace(/^(tcp|http):\/\//, '').replace(/\/$/, '');
    if (out.some((m) => m.id === id)) throw new ConfigError(v, `member '${id}' is listed twice`);
    out.push({ id, ...parseAddr(v, addr) });
  }
  return out;
}

function raftTiming(config: SvcConfig): RaftTiming {
  const int = (name: string, dflt: number, lo: number, hi: number): number => {
    const raw = config.other[name];
    if (raw === undefined) return dflt;
    const n = parseNumber(name, raw);
    if (!Number.isInteger(n) || n < lo || n > hi) throw new ConfigError(name, `"${raw}" is not a whole number from ${lo} to ${hi}`);
    return n;
  };
  const d = RAFT_TIMING_DEFAULTS;
  const heartbeatMs = int('SVC_RAFT_HEARTBEAT_MS', d.heartbeatMs, 5, 10_000);
  const electionMs = int('SVC_RAFT_ELECTION_MS', d.electionMs, 20, 120_000);
  if (electionMs < 3 * heartbeatMs) {
    throw new ConfigError('SVC_RAFT_ELECTION_MS', `${electionMs} ms is less than three heartbeats (${heartbeatMs} ms each): a healthy leader would be voted out. Fix: about ten heartbeats`);
  }
  const writeSecs = config.other.SVC_RAFT_WRITE_TIMEOUT_SECS === undefined ? d.writeTimeoutMs / 1000 : parseNumber('SVC_RAFT_WRITE_TIMEOUT_SECS', config.other.SVC_RAFT_WRITE_TIMEOUT_SECS);
  if (!(writeSecs >= 0.01 && writeSecs <= 600)) throw new ConfigError('SVC_RAFT_WRITE_TIMEOUT_SECS', 'is not a number of seconds from 0.01 to 600');
  return { heartbeatMs, electionMs, writeTimeoutMs: Math.round(writeSecs * 1000), snapshotEntries: int('SVC_RAFT_SNAPSHOT_ENTRIES', d.snapshotEntries, 8, 100_000_000) };
}
