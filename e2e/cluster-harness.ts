/**
 * Pieces the cluster tests share (replication now; routing and consensus later): a node launcher on top
 * of harness.ts's `serve`, a TCP fault proxy to put between two nodes, and the comparison of two nodes'
 * whole point sets. Imports no project code: everything goes over the wire.
 */
import { rmSync } from 'node:fs';
import { createConnection, createServer, type Server as NetServer, type Socket } from 'node:net';
import { api, freePort, MASTER, serve, type Server } from './harness.js';

export const KEY = 'cluster-admin-key';

/** A node on its own data directory and master key; `extra` adds SVC_* (a leader URL, say). */
export async function startNode(dataDir: string, extra: Record<string, string> = {}, masterKey = MASTER): Promise<Server> {
  return serve({ SVC_API_KEYS: KEY, SVC_ENCRYPTION_KEY: masterKey, SVC_DATA_DIR: dataDir, ...extra });
}

export function call(node: Server, key = KEY) {
  return api(node.base, key);
}

export interface PointRow { id: string; vector: number[]; payload: unknown }

/** Every point of a collection (fetch pages with vectors), sorted by id. */
export async function allPoints(node: Server, collection: string, key = KEY): Promise<PointRow[]> {
  const c = call(node, key);
  const out: PointRow[] = [];
  let cursor: string | null = null;
  do {
    const r: { status: number; json: any } = await c('POST', `/v1/collections/${collection}/points:fetch`, { limit: 1000, cursor, with_vector: true });
    if (r.status !== 200) throw new Error(`fetch ${collection} on ${node.base}: ${r.status} ${JSON.stringify(r.json)}`);
    out.push(...(r.json.points as PointRow[]));
    cursor = r.json.next_cursor;
  } while (cursor !== null);
  return out.sort((a, b) => (a.id < b.id ? -1 : a.id > b.id ? 1 : 0));
}

/** The names of a node's collections, sorted. */
export async function collectionNames(node: Server): Promise<string[]> {
  const r = await call(node)('GET', '/v1/collections');
  return (r.json.collections as { name: string }[]).map((c) => c.name).sort();
}

/** Polls until `check` holds (or throws after `ms`, with the last reason). */
export async function eventually(what: string, check: () => Promise<true | string>, ms = 30_000): Promise<void> {
  const until = Date.now() + ms;
  let last = '';
  for (;;) {
    const r = await check().catch((e: unknown) => String(e));
    if (r === true) return;
    last = r;
    if (Date.now() > until) throw new Error(`${what}: still not true after ${ms} ms: ${last}`);
    await new Promise((res) => setTimeout(res, 100));
  }
}

/** The replication part of /v1/stats. */
export async function replicationOf(node: Server): Promise<{ role: string; commit_seq?: number; applied_seq?: number | null; state?: string }> {
  const r = await call(node)('GET', '/v1/stats');
  if (r.status !== 200) throw new Error(`stats on ${node.base}: ${r.status} ${JSON.stringify(r.json)}`);
  return r.json.replication;
}

/** Until the follower has applied everything the leader has committed (both asked now). */
export async function caughtUp(leader: Server, follower: Server, ms = 30_000): Promise<void> {
  await eventually(`${follower.base} catches up with ${leader.base}`, async () => {
    const l = await replicationOf(leader);
    const f = await replicationOf(follower);
    return f.applied_seq === l.commit_seq ? true : `leader at ${l.commit_seq}, follower ${f.state} at ${f.applied_seq}`;
  }, ms);
}

/**
 * A TCP proxy on 127.0.0.1 to a target port, with faults: `cut()` closes every connection now,
 * `refuse(true)` closes new ones at once, `delayMs` holds each chunk in both directions, `drop(true)`
 * swallows bytes (a connection that hangs, until bytes flow again mid-frame), `hang()` stops every
 * connection made so far for good without closing it (reads nothing, forwards nothing: what a partition
 * or a peer gone from its address leaves a TCP connection as; new connections work). Bounded: every
 * socket it made goes at `close()`.
 *
 * With `mirrorRefusal`, a target that refuses a connection (its process is gone) makes the proxy stop
 * listening until the target listens again, so that the proxy's address refuses connections too, as a
 * dead member's does on a real network (a consensus member acts on that: docs/consensus.md, Failover).
 * `refuse(true)` is a cut link, not a dead process: it accepts and closes, as before.
 */
export class FaultProxy {
  port = 0;
  delayMs = 0;
  private refusing = false;
  private dropping = false;
  private closed = false;
  /** The target refused: not listening until it listens again (mirrorRefusal). */
  private down = false;
  private readonly sockets = new Set<Socket>();
  private server: NetServer;

  constructor(public targetPort: number, private readonly mirrorRefusal = false) {
    this.server = this.makeServer();
  }

  private makeServer(): NetServer {
    const server: NetServer = createServer((client) => {
      if (this.refusing) {
        client.destroy();
        return;
      }
      const upstream = createConnection({ host: '127.0.0.1', port: this.targetPort });
      for (const s of [client, upstream]) {
        this.sockets.add(s);
        s.on('close', () => this.sockets.delete(s));
        s.on('error', () => undefined);
      }
      upstream.on('error', (e: NodeJS.ErrnoException) => {
        // Only a refusal seen through the server listening now (not one of a connection made before a relisten).
        if (e.code === 'ECONNREFUSED' && this.mirrorRefusal && server === this.server) this.targetDown();
      });
      this.pipe(client, upstream);
      this.pipe(upstream, client);
      client.on('close', () => upstream.destroy());
      upstream.on('close', () => client.destroy());
    });
    return server;
  }

  /** Stops listening, then listens again on the same port once the target accepts a connection. */
  private targetDown(): void {
    if (this.down || this.closed) return;
    this.down = true;
    this.server.close();
    let wait = 10;
    const probe = (): void => {
      if (this.closed) return;
      const s = createConnection({ host: '127.0.0.1', port: this.targetPort });
      s.on('error', () => {
        // Quick at first (a restart), then once a second: a member never restarted costs little.
        wait = Math.min(1000, wait * 2);
        setTimeout(probe, wait).unref();
      });
      s.on('connect', () => {
        s.destroy();
        this.relisten(0);
      });
    };
    probe();
  }

  private relisten(attempt: number): void {
    if (this.closed) return;
    const server = this.makeServer();
    server.once('error', (e) => {
      // Its port briefly taken (no outgoing connection takes one below the ephemeral range): again, for a while.
      if (attempt === 200) throw new Error(`fault proxy: port ${this.port} stayed taken: ${String(e)}`);
      setTimeout(() => this.relisten(attempt + 1), 25).unref();
    });
    this.server = server;
    server.listen(this.port, '127.0.0.1', () => {
      if (this.closed) {
        server.close();
        return;
      }
      this.down = false;
    });
  }

  /**
   * Forwards `from`'s bytes to `to`, each chunk `delayMs` after it came and never before one that came
   * earlier: a delay lowered while chunks wait (a link made fast again) must not reorder the stream.
   */
  private pipe(from: Socket, to: Socket): void {
    const waiting: { due: number; chunk: Buffer }[] = [];
    let timer: NodeJS.Timeout | null = null;
    const drain = (): void => {
      timer = null;
      while (waiting.length > 0 && waiting[0].due <= Date.now()) {
        const { chunk } = waiting.shift()!;
        if (!to.destroyed) to.write(chunk);
      }
      if (waiting.length > 0) timer = setTimeout(drain, waiting[0].due - Date.now());
    };
    from.on('data', (chunk: Buffer) => {
      if (this.dropping) return;
      if (this.delayMs === 0 && waiting.length === 0) {
        to.write(chunk);
        return;
      }
      waiting.push({ due: Date.now() + this.delayMs, chunk });
      if (timer === null) timer = setTimeout(drain, waiting[0].due - Date.now());
    });
  }

  async start(): Promise<void> {
    if (this.mirrorRefusal) {
      // Below the ephemeral range (32768 and up on Linux): while the proxy does not listen, no outgoing
      // connection of another test can be given its port.
      // Each vitest worker its own range, so that no other test file's proxy takes this port while it is down.
      const pool = Number(process.env.VITEST_POOL_ID ?? 1) % 8;
      for (let attempt = 0; ; attempt++) {
        const port = 20_000 + pool * 1500 + Math.floor(Math.random() * 1500);
        const ok = await new Promise<boolean>((r) => {
          this.server.once('error', () => r(false));
          this.server.listen(port, '127.0.0.1', () => r(true));
        });
        if (ok) {
          this.port = port;
          return;
        }
        if (attempt === 50) throw new Error('no free port below the ephemeral range for a fault proxy');
        this.server = this.makeServer();
      }
    }
    await new Promise<void>((r) => this.server.listen(0, '127.0.0.1', r));
    this.port = (this.server.address() as { port: number }).port;
  }

  cut(): void {
    for (const s of this.sockets) s.destroy();
  }

  refuse(on: boolean): void {
    this.refusing = on;
  }

  drop(on: boolean): void {
    this.dropping = on;
  }

  hang(): void {
    for (const s of this.sockets) {
      s.removeAllListeners('data');
      s.pause();
    }
  }

  async close(): Promise<void> {
    this.closed = true;
    this.cut();
    if (!this.server.listening) return;
    await new Promise<void>((r) => this.server.close(() => r()));
  }
}

export const RAFT_SECRET = 'consensus-test-secret-0123456789abcdef';

/** One member of a consensus group: its server, and what restarts it on the same addresses and data. */
export interface RaftMember {
  id: string;
  dataDir: string;
  server: Server;
  env: Record<string, string>;
}

/**
 * A consensus group of `ids.length` members on 127.0.0.1 (issue 17). Each member dials each peer through
 * its own FaultProxy (`links.get('n1>n2')` carries n1's connection to n2), so a test can cut one
 * direction of one link, or isolate a member, without touching the processes. With `direct` they dial
 * each other's own ports instead (no proxies): a killed member's address then refuses
 * connections, as on a real network, where a proxy would accept them and close them.
 */
export async function startRaftGroup(
  ids: string[], dataDirOf: (id: string) => string, extra: Record<string, string> = {}, opts: { direct?: boolean } = {},
): Promise<{ members: RaftMember[]; links: Map<string, FaultProxy> }> {
  // The proxies listen first, so a port picked for a member afterwards cannot be one of theirs.
  const links = new Map<string, FaultProxy>();
  for (const a of opts.direct === true ? [] : ids) {
    for (const b of ids) {
      if (a === b) continue;
      const p = new FaultProxy(0, true);
      await p.start();
      links.set(`${a}>${b}`, p);
    }
  }
  // A member's consensus port is picked before it is bound, and is in every member's list: when another
  // process took one meanwhile (an outbound connection of a test running beside), the group starts over
  // on new ports and empty data directories.
  for (let attempt = 1; ; attempt++) {
    const raftPort = new Map<string, number>();
    for (const id of ids) raftPort.set(id, await freePort());
    for (const [name, p] of links) p.targetPort = raftPort.get(name.split('>')[1])!;
    const started = await Promise.allSettled(ids.map(async (id) => {
      const list = ids.map((o) => `${o}=127.0.0.1:${o === id || opts.direct === true ? raftPort.get(o) : links.get(`${id}>${o}`)!.port}`).join(',');
      const env = { SVC_RAFT_MEMBERS: list, SVC_RAFT_NODE_ID: id, SVC_RAFT_SECRET: RAFT_SECRET, ...extra };
      const server = await startNode(dataDirOf(id), env);
      return { id, dataDir: dataDirOf(id), server, env: server.env };
    }));
    const failed = started.filter((r): r is PromiseRejectedResult => r.status === 'rejected');
    if (failed.length === 0) return { members: started.map((r) => (r as PromiseFulfilledResult<RaftMember>).value), links };
    for (const r of started) if (r.status === 'fulfilled') await r.value.server.stop('SIGKILL');
    const portTaken = failed.every((r) => String((r.reason as Error)?.message).includes('EADDRINUSE'));
    if (!portTaken || attempt === 4) {
      for (const l of links.values()) await l.close();
      throw failed[0].reason;
    }
    for (const id of ids) rmSync(dataDirOf(id), { recursive: true, force: true });
  }
}

/** Starts a member again on its addresses, data directory and environment (after a kill or stop). */
export async function restartMember(m: RaftMember): Promise<void> {
  m.server = await serve(m.env);
}

/** GET /cluster/raft of a member. */
export async function raftView(m: RaftMember): Promise<{ id: string; role: string; term: number; leader_id: string | null; commit_index: number; applied_index: number; members: { id: string; url: string; command_version: number | null; snapshot_stream_version: number | null; advertised: boolean }[]; versions: { command_version: number; snapshot_stream_version: number; not_heard_from: string[] }; snapshot_index: number; log_first_index: number }> {
  const r = await call(m.server)('GET', '/cluster/raft');
  if (r.status !== 200) throw new Error(`GET /cluster/raft on ${m.id}: ${r.status} ${JSON.stringify(r.json)}`);
  return r.json;
}

/** The member every live member agrees leads (waits for one). */
export async function raftLeader(members: RaftMember[], ms = 20_000): Promise<RaftMember> {
  let found: RaftMember | null = null;
  await eventually('a consensus leader', async () => {
    const views = await Promise.all(members.map((m) => raftView(m).catch(() => null)));
    const leader = members.find((_, i) => views[i]?.role === 'leader');
    if (leader === undefined) return `roles: ${views.map((v) => v?.role ?? 'down').join(', ')}`;
    found = leader;
    return true;
  }, ms);
  return found!;
}
