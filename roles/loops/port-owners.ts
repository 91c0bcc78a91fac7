import { readdirSync, readFileSync, readlinkSync } from 'node:fs';

/**
 * TCP listeners on `port` that another process holds, where they would share this process's listeners
 * on it (the same local address, or either a wildcard): their count, from /proc/net/tcp{,6} and this
 * process's own socket inodes. 0 where /proc cannot tell (not Linux).
 *
 * Why: request loops listen with SO_REUSEPORT, which lets any process of the same user join a port whose
 * listeners all set it, and the kernel then splits connections between them. The plain bind before
 * (loops.ts assertPortFree) refuses a port someone already holds, but two servers given the same port
 * can both pass it and then both join: seen in CI, where a member's REST port answered with another
 * server's gRPC. Checked after binding, by both: the later of the two sees the other, and refuses.
 */
export function otherListeners(port: number): number {
  if (process.platform !== 'linux') return 0;
  const tables: string[] = [];
  for (const file of ['/proc/net/tcp', '/proc/net/tcp6']) {
    try {
      tables.push(readFileSync(file, 'utf8'));
    } catch {
      // no IPv6, or no /proc
    }
  }
  return listenersSharing(tables, ownSocketInodes(), port);
}

/** The pure half of otherListeners: `tables` as /proc/net/tcp{,6} read, `ours` this process's socket inodes. */
export function listenersSharing(tables: readonly string[], ours: ReadonlySet<string>, port: number): number {
  let found = 0;
  for (const text of tables) {
    const listeners = text.split('\n').slice(1).map(parseLine).filter((l): l is Listener => l !== null && l.port === port);
    const mine = listeners.filter((l) => ours.has(l.inode)).map((l) => l.addr);
    for (const l of listeners) {
      if (ours.has(l.inode)) continue;
      if (mine.some((a) => a === l.addr || isWildcard(a) || isWildcard(l.addr))) found++;
    }
  }
  return found;
}

interface Listener { addr: string; port: number; inode: string }

/** A LISTEN line of /proc/net/tcp: `sl local_address rem_address st ... inode`. */
function parseLine(line: string): Listener | null {
  const cols = line.trim().split(/\s+/);
  if (cols.length < 10 || cols[3] !== '0A') return null;
  const [addr, portHex] = cols[1].split(':');
  if (addr === undefined || portHex === undefined) return null;
  return { addr, port: parseInt(portHex, 16), inode: cols[9] };
}

const isWildcard = (hexAddr: string): boolean => /^0+$/.test(hexAddr);

function ownSocketInodes(): Set<string> {
  const out = new Set<string>();
  let fds: string[];
  try {
    fds = readdirSync('/proc/self/fd');
  } catch {
    return out;
  }
  for (const fd of fds) {
    try {
      const m = /^socket:\[(\d+)\]$/.exec(readlinkSync(`/proc/self/fd/${fd}`));
      if (m !== null) out.add(m[1]);
    } catch {
      // closed meanwhile
    }
  }
  return out;
}
