import { SvcError } from '../../base/errors.js';
import type { NodeId } from '../raft/index.js';

/**
 * Version skew inside a consensus group (issue 17), as etcd's cluster version and CockroachDB's version
 * gates: each member advertises the highest command version (command.ts) and snapshot-stream version
 * (snapshot-stream.ts) it reads, in the transport's handshake (core/cluster/raft-wire/handshake.ts); the
 * group's effective version is the lowest over its configured members, and a leader proposes a command
 * only when it is within it. A member of an older build would otherwise stop at the entry (an unknown
 * version is refused, never guessed at), and with two of three stopped the group has no quorum.
 *
 * - A peer whose handshake carries no versions (a build before this one) counts as version 1 of both:
 *   what every build reads.
 * - A configured member this one has not heard from since it started counts as unknown, and unknown
 *   blocks every version above 1: it may be of an older build, and would stop at the entry when it
 *   comes back. Version 1 (point writes, creates, drops) is never blocked.
 * - What a member last advertised stands until its next handshake (a restart with another build
 *   reconnects, and its new handshake replaces it before it is sent anything more).
 */

export interface Advertised {
  /** The highest command version the member reads (it reads every one below too). */
  readonly command: number;
  /** The highest snapshot-stream version it reads. */
  readonly stream: number;
}

/** What a peer that sends no versions is taken to read: version 1 of each, which every build reads. */
export const UNVERSIONED: Advertised = Object.freeze({ command: 1, stream: 1 });

export interface PeerVersion {
  readonly id: NodeId;
  /** null: not heard from since this member started. */
  readonly command: number | null;
  readonly stream: number | null;
  /** Whether its handshake carried versions (false: an older build, taken as version 1). */
  readonly advertised: boolean;
}

export interface GroupVersionView {
  /** This member's own, then each peer's. */
  readonly members: readonly PeerVersion[];
  /** The lowest over every configured member, an unknown one counted as 1: what a leader may propose. */
  readonly command: number;
  readonly stream: number;
  /** Members not heard from since this one started (they hold the effective version at 1). */
  readonly unknown: readonly NodeId[];
}

export class GroupVersions {
  private readonly peers = new Map<NodeId, { command: number; stream: number; advertised: boolean } | null>();

  constructor(private readonly self: NodeId, members: readonly NodeId[], readonly own: Advertised) {
    for (const id of members) if (id !== self) this.peers.set(id, null);
  }

  /** A peer's handshake completed: what it advertised, or null when it sent nothing (an older build). */
  heard(peer: NodeId, advertised: Advertised | null): void {
    if (!this.peers.has(peer)) return;
    const a = advertised ?? UNVERSIONED;
    this.peers.set(peer, { command: a.command, stream: a.stream, advertised: advertised !== null });
  }

  /** What `peer` reads: UNVERSIONED-like 1s when it never said, null when not heard from at all. */
  of(peer: NodeId): Advertised | null {
    const p = this.peers.get(peer);
    return p == null ? null : { command: p.command, stream: p.stream };
  }

  view(): GroupVersionView {
    const members: PeerVersion[] = [{ id: this.self, command: this.own.command, stream: this.own.stream, advertised: true }];
    const unknown: NodeId[] = [];
    let command = this.own.command;
    let stream = this.own.stream;
    for (const [id, p] of this.peers) {
      members.push({ id, command: p?.command ?? null, stream: p?.stream ?? null, advertised: p?.advertised ?? false });
      if (p === null) unknown.push(id);
      command = Math.min(command, p?.command ?? 1);
      stream = Math.min(stream, p?.stream ?? 1);
    }
    return { members, command, stream, unknown };
  }

  /**
   * Throws `unavailable` (nothing proposed) when `version` is above the group's effective command
   * version, naming the members on an older build and those not heard from. `what` names the operation.
   */
  requireCommand(version: number, what: string): void {
    if (version <= 1) return;
    const older: { id: NodeId; command_version: number }[] = [];
    const unknown: NodeId[] = [];
    if (this.own.command < version) older.push({ id: this.self, command_version: this.own.command });
    for (const [id, p] of this.peers) {
      if (p === null) unknown.push(id);
      else if (p.command < version) older.push({ id, command_version: p.command });
    }
    if (older.length === 0 && unknown.length === 0) return;
    const parts: string[] = [];
    if (older.length > 0) parts.push(`on an older build: ${older.map((o) => `${o.id} (reads up to version ${o.command_version})`).join(', ')}`);
    if (unknown.length > 0) parts.push(`not heard from since this member started: ${unknown.join(', ')}`);
    throw new SvcError(
      'unavailable',
      `${what} needs consensus command version ${version} on every member of this group, and members are ${parts.join('; ')}. Nothing was proposed. Fix: upgrade (or start) those members, then retry`,
      { reason: 'version_skew', required_command_version: version, older_members: older, unknown_members: unknown },
    );
  }
}
