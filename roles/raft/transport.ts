import * as net from 'node:net';
import * as tls from 'node:tls';
import { SvcError } from '../../core/base/errors.js';
import type { Message, MessageHandler, NodeId, Transport } from '../../core/cluster/raft/index.js';
import { decodeMessages, encodeMessages, encodedMessageBytes, WireError, WIRE_BATCH_MESSAGES_MAX } from '../../core/cluster/raft-wire/codec.js';
import { encodeFrame, FrameDecoder, FrameType, HANDSHAKE_FRAME_BYTES_MAX, RAFT_FRAME_BYTES_MAX, type Frame } from '../../core/cluster/raft-wire/frame.js';
import {
  authKey, decodeChallenge, decodeHello, decodeProof, encodeChallenge, encodeHello, nonceLinkVersion, nonceVersions, proof, proofMatches, versionedNonce, type NonceVersions,
} from '../../core/cluster/raft-wire/handshake.js';
import { isLoopback } from '../config.js';

/**
 * The consensus transport on node:net (issue 17): one outbound connection per peer, dialled by this
 * member, carrying its messages to that peer; inbound connections carry the peers' messages here.
 *
 * - Frames: `length u32 | type u8 | payload`, at most `frameBytesMax` (RAFT_FRAME_BYTES_MAX, 64 MiB);
 *   messages in the versioned binary encoding of core/cluster/raft-wire/codec.ts.
 * - Batching and pipelining: whatever is queued for a peer goes out as one frame of up to
 *   `batchBytesMax`, without waiting for answers (Raft's inflight window paces appends). When the socket
 *   stops draining (the peer reads slowly or not at all), messages wait in a per-peer queue bounded by
 *   count and bytes; past it they are dropped and counted (`dropped.queueFull`), and Raft sends again.
 *   While a peer is in reconnect backoff its messages are dropped (`dropped.notConnected`).
 * - Reconnect with full-jitter exponential backoff (`backoffBaseMs` doubling up to `backoffMaxMs`); a
 *   caller waiting for the connection (`whenConnected`: a forwarded write) cuts one back-off short. A
 *   connection that lasted a second or more is dialled again at once when it ends: if the dial is
 *   refused, nothing listens at the peer's address any more, and the host is told (`onPeerRefused`:
 *   its process is gone, so a member following it campaigns without waiting out its election timeout).
 * - Authentication, both ways: mutual TLS when `tls` has a CA (SVC_TLS_CERT, SVC_TLS_KEY, and
 *   SVC_RAFT_TLS_CA or SVC_TLS_CLIENT_CA), each side's certificate valid for that member's address in
 *   SVC_RAFT_MEMBERS by Node's host name check (tls.checkServerIdentity: a wildcard SAN stands for exactly
 *   one leftmost label, so one `*.<headless service>.<ns>.svc.<domain>` certificate serves every member of
 *   a StatefulSet); and the HMAC challenge-response of raft-wire/handshake.ts whenever a cluster
 *   secret is set (SVC_RAFT_SECRET), which also binds both member ids. The secret is never sent or logged.
 * - A non-loopback listen address needs TLS unless `insecure` (SVC_INSECURE=true), as for REST and gRPC.
 * - Versions: each side's handshake nonce says the highest command and snapshot-stream versions its
 *   build reads (`versions`; raft-wire/handshake.ts); once a handshake is authenticated, what the peer
 *   said (null: nothing, an older build) goes to `onPeerVersions`, from either direction.
 * - A malformed or oversize frame, a failed handshake, a message naming other members: the connection
 *   is closed and the reason counted (`rejected`); nothing a peer sends can throw out of this class.
 * - A connection that hangs (the peer's machine gone, or the peer moved to another address, without a
 *   FIN or RST; a partition): TCP would keep it open, retransmitting into the void, for up to about 15
 *   minutes (Linux's tcp_retries2), and every message to the peer would sit in it. So the dialer sends a
 *   `ping` frame every `pingIntervalMs`, and the peer sends a `pong` on the same connection whenever
 *   bytes have arrived on it, at most one per `pingIntervalMs / 2`: a pong says "your
 *   bytes are arriving", not "your ping came", so a slow link draining a backlog (a snapshot window, a
 *   large forward: a ping queued behind them would come late) keeps showing progress, and an idle one
 *   has its pings. A connection with no pong and nothing drained for `linkDeadMs` is closed
 *   (`deadLinks`) and dialled again, as any lost connection is: the peer's address is resolved anew, and
 *   what waited on the link (a snapshot stream: it resumes) sees a break. A ping tick that comes late
 *   (this member's own event loop stalled, and timers run before the sockets are read) gives the peer a
 *   fresh interval rather than a verdict. gRPC's keepalive and etcd's stream read timeouts do the same
 *   job. Both ways only with a peer whose handshake said it speaks link version 1 (in its nonce): an
 *   older build would close the connection at the unknown frame.
 */

const INBOUND_KEEPALIVE_MS = 10_000;
/** The transport link version this build speaks: 1 pings the peers it dials, and tells those that dial it with pongs that their bytes arrive. */
export const LINK_VERSION = 1;
const EMPTY = Buffer.alloc(0);
/** A connection that lasted this long is dialled again at once when it ends (PeerLink.lost). */
const REDIAL_AT_ONCE_AFTER_MS = 1000;

export interface RaftPeer {
  readonly id: NodeId;
  readonly host: string;
  readonly port: number;
}

export interface RaftTransportTls {
  /** PEM contents. */
  readonly cert: string | Buffer;
  readonly key: string | Buffer;
  /** The CA members' certificates chain to; with it, both sides require and verify a certificate. */
  readonly ca: string | Buffer | null;
}

export interface RaftTransportLimits {
  readonly frameBytesMax: number;
  /** A frame of messages closes at this many bytes (a single larger message still goes, alone). */
  readonly batchBytesMax: number;
  readonly queueMessagesMax: number;
  readonly queueBytesMax: number;
  readonly handshakeTimeoutMs: number;
  readonly inboundConnectionsMax: number;
  readonly backoffBaseMs: number;
  readonly backoffMaxMs: number;
  /** How often a dialer asks a peer that answers pings whether the connection still reaches it. */
  readonly pingIntervalMs: number;
  /** A connection with no pong and nothing drained for this long hangs: it is closed and dialled again. */
  readonly linkDeadMs: number;
}

export const RAFT_TRANSPORT_LIMITS: RaftTransportLimits = Object.freeze({
  frameBytesMax: RAFT_FRAME_BYTES_MAX,
  batchBytesMax: 1 << 20,
  queueMessagesMax: 4096,
  queueBytesMax: 64 << 20,
  handshakeTimeoutMs: 5000,
  inboundConnectionsMax: 64,
  backoffBaseMs: 50,
  backoffMaxMs: 2000,
  pingIntervalMs: 1000,
  // Ten pings: well past a busy peer's pause (a loaded event loop, a stop of a second or two), well
  // short of TCP's own give-up.
  linkDeadMs: 10_000,
});

export interface RaftTransportOptions {
  readonly id: NodeId;
  /** This member's own entry of SVC_RAFT_MEMBERS (port 0 picks one: tests). */
  readonly listen: { readonly host: string; readonly port: number };
  readonly peers: readonly RaftPeer[];
  readonly secret: Uint8Array | null;
  readonly tls: RaftTransportTls | null;
  readonly insecure: boolean;
  readonly onMessage: MessageHandler;
  /** What this member advertises in its handshakes; null advertises nothing, as older builds (tests). Default null. */
  readonly versions?: NonceVersions | null;
  /** A peer's handshake was authenticated: the versions it advertised, or null when it sent none. */
  readonly onPeerVersions?: (peer: NodeId, versions: NonceVersions | null) => void;
  /** This member's connection to a peer closed (the peer went away, or the link broke). */
  readonly onPeerLost?: (peer: NodeId) => void;
  /**
   * Dialling a peer was refused (ECONNREFUSED): nothing listens at its address, so its process is gone
   * (killed, crashed, shut down) or not started yet. Silence, a cut link or a timeout never say this.
   */
  readonly onPeerRefused?: (peer: NodeId) => void;
  /** A forward frame from an authenticated peer (roles/raft/forward.ts); none: such frames are refused. */
  readonly onForward?: (payload: Buffer, from: NodeId) => void;
  /** A snapshot stream's chunk or acknowledgement from an authenticated peer; none: such frames are refused. */
  readonly onSnapshotFrame?: (kind: 'chunk' | 'ack', payload: Buffer, from: NodeId) => void;
  readonly log?: (message: string, detail?: Record<string, unknown>) => void;
  readonly limits?: Partial<RaftTransportLimits>;
  /** [0, 1): the backoff's jitter. */
  readonly random?: () => number;
  /** How a peer's host name resolves when dialing it: dns.lookup unless given (tests map cluster DNS names to loopback). */
  readonly lookup?: net.LookupFunction;
}

export interface RaftTransportStats {
  messagesSent: number;
  messagesReceived: number;
  framesSent: number;
  bytesSent: number;
  handshakes: number;
  reconnects: number;
  /** Dials a peer's address refused (onPeerRefused). */
  refusedDials: number;
  /** Connections closed because they hung: no pong and nothing drained for linkDeadMs. */
  deadLinks: number;
  dropped: { queueFull: number; notConnected: number; tooLarge: number; unknownPeer: number };
  rejected: { malformed: number; oversize: number; auth: number; misaddressed: number; handshakeTimeout: number; tooManyConnections: number; tls: number };
}

type RejectReason = keyof RaftTransportStats['rejected'];

class Rejected extends Error {
  constructor(readonly reason: RejectReason, message: string) {
    super(message);
  }
}

export class RaftTransport implements Transport {
  readonly stats: RaftTransportStats = {
    messagesSent: 0, messagesReceived: 0, framesSent: 0, bytesSent: 0, handshakes: 0, reconnects: 0, refusedDials: 0, deadLinks: 0,
    dropped: { queueFull: 0, notConnected: 0, tooLarge: 0, unknownPeer: 0 },
    rejected: { malformed: 0, oversize: 0, auth: 0, misaddressed: 0, handshakeTimeout: 0, tooManyConnections: 0, tls: 0 },
  };
  private readonly limits: RaftTransportLimits;
  private readonly key: Buffer | null;
  private readonly links = new Map<NodeId, PeerLink>();
  private readonly inbound = new Set<net.Socket>();
  /** The authenticated inbound connection of each peer: a peer dials us once, so a newer one replaces it. */
  private readonly inboundByPeer = new Map<NodeId, net.Socket>();
  private server: net.Server | null = null;
  private closed = false;

  constructor(readonly options: RaftTransportOptions) {
    this.limits = { ...RAFT_TRANSPORT_LIMITS, ...options.limits };
    const { pingIntervalMs, linkDeadMs } = this.limits;
    if (!(pingIntervalMs >= 1 && linkDeadMs >= 2 * pingIntervalMs)) {
      throw new SvcError('invalid_argument', `the transport's linkDeadMs (${linkDeadMs}) must be at least twice its pingIntervalMs (${pingIntervalMs}), which is at least 1`);
    }
    if (!isLoopback(options.listen.host) && options.tls === null && !options.insecure) {
      throw new SvcError('invalid_argument', `the consensus address ${options.listen.host}:${options.listen.port} is not loopback and has no TLS. Fix: set SVC_TLS_CERT and SVC_TLS_KEY, or use 127.0.0.1; SVC_INSECURE=true waives this`);
    }
    if (options.secret === null && options.tls?.ca == null && !options.insecure) {
      throw new SvcError('invalid_argument', 'consensus peers must authenticate each other. Fix: set SVC_RAFT_SECRET (at least 32 characters, the same on every member) or mutual TLS (SVC_TLS_CERT, SVC_TLS_KEY and SVC_TLS_CLIENT_CA); SVC_INSECURE=true waives this');
    }
    this.key = options.secret === null ? null : authKey(options.secret);
    for (const p of options.peers) if (p.id !== options.id) this.links.set(p.id, new PeerLink(this, p));
  }

  /** Listens on the member's address and dials every peer; resolves with the bound port. */
  async start(): Promise<number> {
    const onSocket = (s: net.Socket): void => this.accept(s);
    const t = this.options.tls;
    const server = t === null
      ? net.createServer(onSocket)
      : tls.createServer({ cert: t.cert, key: t.key, ca: t.ca ?? undefined, requestCert: t.ca !== null, rejectUnauthorized: t.ca !== null }, onSocket);
    server.on('tlsClientError', () => void this.stats.rejected.tls++);
    server.on('error', (e) => this.log('raft transport: listener error', { error: String(e) }));
    this.server = server;
    await new Promise<void>((resolve, reject) => {
      server.once('error', reject);
      server.listen(this.options.listen.port, this.options.listen.host, () => {
        server.off('error', reject);
        resolve();
      });
    });
    for (const l of this.links.values()) l.connect();
    return (server.address() as net.AddressInfo).port;
  }

  /** Queues every message, then writes each touched peer's queue as few frames: one Ready, one batch. */
  send(messages: readonly Message[]): void {
    const touched = new Set<PeerLink>();
    for (const m of messages) {
      const link = this.links.get(m.to);
      if (link === undefined) this.stats.dropped.unknownPeer++;
      else if (link.enqueue(m)) touched.add(link);
    }
    for (const link of touched) link.flush();
  }

  /**
   * One forward frame to a peer, on this member's connection to it, now: false (nothing sent) when that
   * connection is not up or the payload is larger than a frame may be. Not queued and never retried:
   * the caller answers its client (unavailable) instead.
   */
  sendForward(to: NodeId, payload: Uint8Array): boolean {
    const link = this.links.get(to);
    if (link === undefined || payload.length + 64 > this.limits.frameBytesMax) return false;
    return link.writeFrame(encodeFrame(FrameType.forward, payload));
  }

  /**
   * Calls `ready` once this member's connection to `to` is up (soon after this call when it is up
   * already); returns what cancels the wait. A link in its reconnect back-off dials at once, cutting the
   * back-off short, at most once per back-off: a caller waits on it (a write to forward to a leader
   * this member just heard from, which is alive), and a peer that is down is dialled at most twice as
   * often. Nothing is called after close; an unknown peer is never connected.
   */
  whenConnected(to: NodeId, ready: () => void): () => void {
    const link = this.links.get(to);
    if (link === undefined || this.closed) return () => undefined;
    return link.whenReady(ready);
  }

  /**
   * One frame of a snapshot stream to a peer, now, on this member's connection to it: false when that
   * connection is not up. The stream paces itself by its acknowledgements (snapshot-stream.ts).
   */
  sendSnapshotFrame(to: NodeId, kind: 'chunk' | 'ack', payload: Uint8Array): boolean {
    const link = this.links.get(to);
    if (link === undefined || payload.length + 64 > this.limits.frameBytesMax) return false;
    return link.writeFrame(encodeFrame(kind === 'chunk' ? FrameType.snapshotChunk : FrameType.snapshotAck, payload));
  }

  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    for (const l of this.links.values()) l.close();
    for (const s of this.inbound) s.destroy();
    const server = this.server;
    if (server !== null) await new Promise<void>((resolve) => server.close(() => resolve()));
  }

  get isClosed(): boolean {
    return this.closed;
  }

  // ---- shared with PeerLink ----

  get lim(): RaftTransportLimits {
    return this.limits;
  }

  get authKey(): Buffer | null {
    return this.key;
  }

  peerLost(peer: NodeId): void {
    try {
      this.options.onPeerLost?.(peer);
    } catch (e) {
      this.log('raft transport: the peer-lost handler threw', { error: String(e), peer });
    }
  }

  peerRefused(peer: NodeId): void {
    this.stats.refusedDials++;
    try {
      this.options.onPeerRefused?.(peer);
    } catch (e) {
      this.log('raft transport: the peer-refused handler threw', { error: String(e), peer });
    }
  }

  /** Whether this member's nonces say it speaks link version 1 (only with versions: a build before either said neither). */
  get advertisesLink(): boolean {
    return (this.options.versions ?? null) !== null;
  }

  /** A fresh nonce carrying this member's versions (and the link version: with versions only, as a build before links had none). */
  nonce(): Buffer {
    return versionedNonce(this.options.versions ?? null, LINK_VERSION);
  }

  peerVersions(peer: NodeId, nonce: Uint8Array): void {
    try {
      this.options.onPeerVersions?.(peer, nonceVersions(nonce));
    } catch (e) {
      this.log('raft transport: the peer-versions handler threw', { error: String(e), peer });
    }
  }

  random(): number {
    return (this.options.random ?? Math.random)();
  }

  log(message: string, detail?: Record<string, unknown>): void {
    this.options.log?.(message, detail);
  }

  reject(reason: RejectReason, socket: net.Socket, why: string, peer: string | null): void {
    this.stats.rejected[reason]++;
    this.log('raft transport: connection closed', { reason, why, peer, remote: `${socket.remoteAddress}:${socket.remotePort}` });
    socket.destroy();
  }

  // ---- inbound ----

  private accept(socket: net.Socket): void {
    if (this.closed) {
      socket.destroy();
      return;
    }
    if (this.inbound.size >= this.limits.inboundConnectionsMax) {
      this.reject('tooManyConnections', socket, `more than ${this.limits.inboundConnectionsMax} inbound connections`, null);
      return;
    }
    this.inbound.add(socket);
    socket.setNoDelay(true);
    // A peer lost without a FIN (a partition) leaves a half-open socket: keepalive finds it eventually,
    // and the peer's next handshake replaces it at once (below).
    socket.setKeepAlive(true, INBOUND_KEEPALIVE_MS);
    // Until the peer has proved itself it may not make this member buffer more than a handshake.
    const decoder = new FrameDecoder(Math.min(HANDSHAKE_FRAME_BYTES_MAX, this.limits.frameBytesMax));
    let state: 'hello' | 'proof' | 'ready' = 'hello';
    let peer: string | null = null;
    let expected: Buffer | null = null;
    let helloNonce: Uint8Array | null = null;
    /** Whether the dialer reads pongs (its hello's link version), and when this side last sent one. */
    let pongs = false;
    let pongAt = -Infinity;
    const timer = setTimeout(() => this.reject('handshakeTimeout', socket, 'no handshake in time', peer), this.limits.handshakeTimeoutMs);
    socket.on('close', () => {
      clearTimeout(timer);
      this.inbound.delete(socket);
      if (peer !== null && this.inboundByPeer.get(peer) === socket) this.inboundByPeer.delete(peer);
    });
    socket.on('error', () => undefined);
    const onFrame = (f: Frame): void => {
      if (state === 'ready') {
        if (f.type === FrameType.ping) {
          if (f.payload.length !== 0) throw new WireError('a ping with a payload');
          return;
        }
        if (f.type === FrameType.forward && this.options.onForward !== undefined) {
          this.options.onForward(f.payload, peer!);
          return;
        }
        const onSnap = this.options.onSnapshotFrame;
        if ((f.type === FrameType.snapshotChunk || f.type === FrameType.snapshotAck) && onSnap !== undefined) {
          onSnap(f.type === FrameType.snapshotChunk ? 'chunk' : 'ack', f.payload, peer!);
          return;
        }
        if (f.type !== FrameType.messages) throw new WireError(`frame type ${f.type} after the handshake`);
        this.deliver(decodeMessages(f.payload), peer!);
      } else if (state === 'hello') {
        if (f.type !== FrameType.hello) throw new WireError(`frame type ${f.type} before hello`);
        const hello = decodeHello(f.payload);
        peer = hello.from;
        if (hello.to !== this.options.id || !this.links.has(hello.from)) {
          throw new Rejected('auth', `hello from '${hello.from}' to '${hello.to}': not a peer of '${this.options.id}'`);
        }
        this.checkPeerCertificate(socket, hello.from);
        const nonce = this.nonce();
        helloNonce = hello.nonce;
        // Both sides speak link version 1: the dialer said so in its hello, this side in its challenge.
        pongs = this.advertisesLink && nonceLinkVersion(hello.nonce) >= 1;
        expected = proof(this.key, 'dialer', hello.from, hello.to, hello.nonce, nonce);
        socket.write(encodeFrame(FrameType.challenge, encodeChallenge(nonce, proof(this.key, 'acceptor', hello.from, hello.to, hello.nonce, nonce))));
        state = 'proof';
      } else {
        if (f.type !== FrameType.proof) throw new WireError(`frame type ${f.type} before the proof`);
        if (!proofMatches(expected!, decodeProof(f.payload))) throw new Rejected('auth', 'the dialer\'s proof does not match (a different cluster secret?)');
        clearTimeout(timer);
        decoder.setFrameBytesMax(this.limits.frameBytesMax);
        state = 'ready';
        const older = this.inboundByPeer.get(peer!);
        this.inboundByPeer.set(peer!, socket);
        older?.destroy();
        this.peerVersions(peer!, helloNonce!);
      }
    };
    socket.on('data', (chunk: Buffer) => {
      try {
        for (const f of decoder.push(chunk)) {
          if (socket.destroyed) return;
          onFrame(f);
        }
      } catch (e) {
        this.refuse(e, socket, peer);
        return;
      }
      // Bytes arrived: say so, at most twice a ping interval (see the file's comment), never into a
      // connection whose dialer stopped reading.
      if (pongs && state === 'ready' && !socket.destroyed && !socket.writableNeedDrain) {
        const now = performance.now();
        if (now - pongAt >= this.limits.pingIntervalMs / 2) {
          pongAt = now;
          socket.write(encodeFrame(FrameType.pong, EMPTY));
        }
      }
    });
  }

  /**
   * Under mutual TLS the certificate must be valid for the address the claimed member has in
   * SVC_RAFT_MEMBERS, as the dialer checks the acceptor's: a certificate of the cluster CA cannot pose
   * as another member. (The secret's proofs bind the ids on their own.)
   */
  private checkPeerCertificate(socket: net.Socket, id: NodeId): void {
    if (!(socket instanceof tls.TLSSocket) || this.options.tls?.ca == null) return;
    const host = this.links.get(id)!.host;
    const err = tls.checkServerIdentity(host, socket.getPeerCertificate());
    if (err !== undefined) throw new Rejected('auth', `the certificate presented for '${id}' is not valid for its address ${host}: ${err.message}`);
  }

  /** Closes a connection for what it sent; anything not a wire or auth failure is a bug, logged loudly. */
  refuse(e: unknown, socket: net.Socket, peer: string | null): void {
    if (e instanceof Rejected) this.reject(e.reason, socket, e.message, peer);
    else if (e instanceof WireError) this.reject(e.kind, socket, e.message, peer);
    else {
      this.log('raft transport: unexpected error on a connection (a bug)', { error: e instanceof Error ? e.stack : String(e), peer });
      this.reject('malformed', socket, String(e), peer);
    }
  }

  private deliver(messages: Message[], peer: string): void {
    for (const m of messages) {
      if (m.from !== peer || m.to !== this.options.id) throw new Rejected('misaddressed', `a message ${m.from}->${m.to} on ${peer}'s connection`);
    }
    for (const m of messages) {
      this.stats.messagesReceived++;
      try {
        this.options.onMessage(m, peer);
      } catch (e) {
        // The host's failure, not the peer's: keep the connection, say it loudly.
        this.log('raft transport: the message handler threw', { error: e instanceof Error ? e.stack : String(e), from: peer, type: m.type });
      }
    }
  }
}

/** This member's outbound connection to one peer, with its queue, handshake and reconnect backoff. */
class PeerLink {
  private socket: net.Socket | null = null;
  private state: 'connecting' | 'ready' | 'backoff' | 'closed' = 'backoff';
  private queue: Message[] = [];
  private queueBytes = 0;
  private attempts = 0;
  private timer: NodeJS.Timeout | null = null;
  private waitingDrain = false;
  /** Callers waiting for the connection (whenConnected): called once it is ready, dropped at close. */
  private readonly waiters = new Set<() => void>();
  /** Whether a waiter may cut the current back-off short (once per back-off, see whenConnected). */
  private mayHurry = true;
  /** When the connection last became ready (performance.now()). */
  private readyAt = -Infinity;
  /** Whether the peer called answers pings (its challenge's link version); pings go only then. */
  private pinging = false;
  private pingTimer: NodeJS.Timeout | null = null;
  /** When the connection last showed it reaches the peer: ready, a pong, a drain (performance.now()). */
  private aliveAt = -Infinity;
  /** When the ping timer last ran (a late tick means this member's loop stalled, not the link). */
  private tickAt = -Infinity;

  constructor(private readonly t: RaftTransport, private readonly peer: RaftPeer) {}

  get host(): string {
    return this.peer.host;
  }

  /** Queues `m` unless it must be dropped (counted); the caller flushes. */
  enqueue(m: Message): boolean {
    const s = this.t.stats;
    if (this.state === 'backoff' || this.state === 'closed') {
      s.dropped.notConnected++;
      return false;
    }
    const bytes = encodedMessageBytes(m);
    const lim = this.t.lim;
    if (bytes + 64 > lim.frameBytesMax) {
      s.dropped.tooLarge++;
      this.t.log('raft transport: a message is larger than a frame may be', { to: this.peer.id, type: m.type, bytes, frameBytesMax: lim.frameBytesMax });
      return false;
    }
    if (this.queue.length >= lim.queueMessagesMax || this.queueBytes + bytes > lim.queueBytesMax) {
      s.dropped.queueFull++;
      return false;
    }
    this.queue.push(m);
    this.queueBytes += bytes;
    return true;
  }

  connect(): void {
    if (this.state === 'closed' || this.t.isClosed) return;
    this.state = 'connecting';
    const { host, port } = this.peer;
    const o = this.t.options;
    const lookup = o.lookup === undefined ? {} : { lookup: o.lookup };
    const socket = o.tls === null
      ? net.connect({ host, port, ...lookup })
      : tls.connect({ host, port, ...lookup, cert: o.tls.cert, key: o.tls.key, ca: o.tls.ca ?? undefined, rejectUnauthorized: o.tls.ca !== null, servername: net.isIP(host) ? undefined : host });
    this.socket = socket;
    socket.setNoDelay(true);
    // The peer called only ever sends its challenge.
    const decoder = new FrameDecoder(HANDSHAKE_FRAME_BYTES_MAX);
    const nonceA = this.t.nonce();
    const handshakeTimer = setTimeout(() => this.t.reject('handshakeTimeout', socket, 'no handshake in time', this.peer.id), this.t.lim.handshakeTimeoutMs);
    socket.once(o.tls === null ? 'connect' : 'secureConnect', () => {
      socket.write(encodeFrame(FrameType.hello, encodeHello({ from: o.id, to: this.peer.id, nonce: nonceA })));
    });
    socket.on('data', (chunk: Buffer) => {
      try {
        for (const f of decoder.push(chunk)) {
          // Read whether or not this side pings: its hello said it reads pongs.
          if (f.type === FrameType.pong && this.state === 'ready' && f.payload.length === 0) {
            this.aliveAt = performance.now();
            continue;
          }
          if (this.state !== 'connecting' || f.type !== FrameType.challenge) throw new WireError(`frame type ${f.type} from the peer called`);
          const c = decodeChallenge(f.payload);
          const key = this.t.authKey;
          if (!proofMatches(proof(key, 'acceptor', o.id, this.peer.id, nonceA, c.nonce), c.proof)) {
            throw new Rejected('auth', `'${this.peer.id}' did not prove the cluster secret`);
          }
          socket.write(encodeFrame(FrameType.proof, proof(key, 'dialer', o.id, this.peer.id, nonceA, c.nonce)));
          clearTimeout(handshakeTimer);
          this.t.peerVersions(this.peer.id, c.nonce);
          this.pinging = nonceLinkVersion(c.nonce) >= 1;
          this.ready();
        }
      } catch (e) {
        this.t.refuse(e, socket, this.peer.id);
      }
    });
    socket.on('drain', () => {
      this.aliveAt = performance.now();
      this.waitingDrain = false;
      this.flush();
    });
    socket.on('error', (e: NodeJS.ErrnoException) => {
      if (e.code === 'ECONNREFUSED' && this.socket === socket) this.t.peerRefused(this.peer.id);
      if (e.code === 'ERR_SSL_TLSV1_ALERT_UNKNOWN_CA' || e.code?.startsWith('ERR_TLS') || e.code?.includes('CERT')) this.t.stats.rejected.tls++;
    });
    socket.on('close', () => {
      clearTimeout(handshakeTimer);
      if (this.socket === socket) this.lost();
    });
  }

  /** Calls `ready` once the connection is up; returns what cancels the wait. */
  whenReady(ready: () => void): () => void {
    if (this.state === 'closed') return () => undefined;
    const w = (): void => ready();
    this.waiters.add(w);
    if (this.state === 'ready') {
      queueMicrotask(() => {
        if (this.waiters.delete(w) && this.state === 'ready') w();
      });
    } else if (this.state === 'backoff' && this.timer !== null && this.mayHurry) {
      // Someone waits: dial now rather than at the end of the back-off, once (the next back-off runs whole).
      clearTimeout(this.timer);
      this.timer = null;
      this.mayHurry = false;
      this.t.stats.reconnects++;
      this.connect();
    }
    return () => void this.waiters.delete(w);
  }

  private ready(): void {
    this.state = 'ready';
    this.readyAt = performance.now();
    this.aliveAt = this.readyAt;
    this.tickAt = this.readyAt;
    this.attempts = 0;
    this.mayHurry = true;
    this.t.stats.handshakes++;
    if (this.pinging) {
      const socket = this.socket!;
      this.pingTimer = setInterval(() => this.ping(socket), this.t.lim.pingIntervalMs);
      this.pingTimer.unref();
    }
    this.flush();
    // A waiter's send may end the connection: those not called yet wait on for the next one.
    for (const w of [...this.waiters]) {
      if (this.state !== 'ready') break;
      this.waiters.delete(w);
      try {
        w();
      } catch (e) {
        this.t.log('raft transport: a connection waiter threw (a bug)', { error: e instanceof Error ? e.stack : String(e), peer: this.peer.id });
      }
    }
  }

  /**
   * Every pingIntervalMs while the connection is up: closes it when it has shown nothing for linkDeadMs
   * (it hangs: see the file's comment), else asks again. The close is a lost connection like any other.
   */
  private ping(socket: net.Socket): void {
    if (this.socket !== socket || this.state !== 'ready') return;
    const now = performance.now();
    const interval = this.t.lim.pingIntervalMs;
    // Late: this loop was busy, and pongs that came meanwhile are not read yet (timers run first).
    if (now - this.tickAt > 2 * interval) this.aliveAt = Math.max(this.aliveAt, now - interval);
    this.tickAt = now;
    const silentMs = now - this.aliveAt;
    if (silentMs >= this.t.lim.linkDeadMs) {
      this.t.stats.deadLinks++;
      this.t.log('raft transport: a connection to a peer hangs (no answer to pings); dialling again', { peer: this.peer.id, silent_ms: Math.round(silentMs) });
      socket.destroy();
      return;
    }
    if (!socket.write(encodeFrame(FrameType.ping, EMPTY))) this.waitingDrain = true;
  }

  private stopPings(): void {
    if (this.pingTimer !== null) clearInterval(this.pingTimer);
    this.pingTimer = null;
  }

  /** The connection ended: drop what waited for it and dial again after a jittered backoff. */
  private lost(): void {
    this.stopPings();
    this.socket = null;
    const wasReady = this.state === 'ready';
    if (wasReady) this.t.peerLost(this.peer.id);
    this.waitingDrain = false;
    this.t.stats.dropped.notConnected += this.queue.length;
    this.queue = [];
    this.queueBytes = 0;
    if (this.state === 'closed') return;
    this.state = 'backoff';
    const lim = this.t.lim;
    const ceiling = Math.min(lim.backoffMaxMs, lim.backoffBaseMs * 2 ** Math.min(this.attempts, 20));
    this.attempts++;
    // A connection that had lasted ends: dial again at once, so a peer whose process is gone is known
    // to be (a refusal) within a round trip, by every member at about the same time. One that ended
    // soon after it was made waits out a back-off as any failed dial does: no reconnect loop.
    const lasted = wasReady && performance.now() - this.readyAt >= REDIAL_AT_ONCE_AFTER_MS;
    this.timer = setTimeout(() => {
      this.timer = null;
      this.mayHurry = true;
      this.t.stats.reconnects++;
      this.connect();
    }, lasted ? 0 : Math.floor(this.t.random() * ceiling));
  }

  /**
   * Writes queued messages in frames of up to batchBytesMax until the socket asks to wait. While the
   * socket asks to wait (the peer reads slowly), new messages gather in the queue for a bigger next frame.
   */
  flush(): void {
    const socket = this.socket;
    if (this.state !== 'ready' || socket === null || this.waitingDrain || socket.writableNeedDrain) return;
    const lim = this.t.lim;
    while (this.queue.length > 0) {
      let n = 0;
      let bytes = 0;
      while (n < this.queue.length && n < WIRE_BATCH_MESSAGES_MAX) {
        const b = encodedMessageBytes(this.queue[n]);
        if (n > 0 && bytes + b > lim.batchBytesMax) break;
        bytes += b;
        n++;
      }
      const batch = this.queue.splice(0, n);
      this.queueBytes -= bytes;
      const frame = encodeFrame(FrameType.messages, encodeMessages(batch));
      const s = this.t.stats;
      s.messagesSent += batch.length;
      s.framesSent++;
      s.bytesSent += frame.length;
      if (!socket.write(frame)) {
        this.waitingDrain = true;
        return;
      }
    }
  }

  /** A frame outside the message queue (a forward), written now if the connection is up. */
  writeFrame(frame: Buffer): boolean {
    const socket = this.socket;
    if (this.state !== 'ready' || socket === null) return false;
    const s = this.t.stats;
    s.framesSent++;
    s.bytesSent += frame.length;
    if (!socket.write(frame)) this.waitingDrain = true;
    return true;
  }

  close(): void {
    this.state = 'closed';
    this.stopPings();
    this.waiters.clear();
    if (this.timer !== null) clearTimeout(this.timer);
    this.socket?.destroy();
  }
}
