import { spawn } from 'node:child_process';
import { createServer, type Server } from 'node:net';
import { describe, expect, it } from 'vitest';
import { listenersSharing, otherListeners } from './port-owners.js';
import { probeReusePort } from '../reuse-port.js';

const HEAD = '  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode';
/** A /proc/net/tcp line: local address (hex, as the kernel writes it), port, state, inode. */
const line = (addr: string, port: number, st: string, inode: number) =>
  `   0: ${addr}:${port.toString(16).toUpperCase().padStart(4, '0')} 00000000:0000 ${st} 00000000:00000000 00:00000000 00000000  1000        0 ${inode} 1 0000000000000000 100 0 0 10 0`;

describe('listeners another process holds on our port (SO_REUSEPORT would share it)', () => {
  it('counts a foreign listener on the same address or a wildcard, never ours, another port, another address or a connection', () => {
    const table = [HEAD,
      line('0100007F', 7000, '0A', 11), // ours, 127.0.0.1
      line('0100007F', 7000, '0A', 12), // ours too (a second loop)
      line('0100007F', 7000, '0A', 21), // another process, same address: shared
      line('00000000', 7000, '0A', 22), // another process, 0.0.0.0: shared
      line('0200007F', 7000, '0A', 23), // 127.0.0.2: its own address, not shared
      line('0100007F', 7001, '0A', 24), // another port
      line('0100007F', 7000, '01', 25), // an established connection, not a listener
    ].join('\n');
    expect(listenersSharing([table], new Set(['11', '12']), 7000)).toBe(2);
    expect(listenersSharing([table], new Set(['11', '12']), 7001)).toBe(0); // we hold none there
    expect(listenersSharing([table], new Set(['11', '12', '21']), 7000)).toBe(1);
    // Ours on the wildcard: any other address of the port is shared with it.
    expect(listenersSharing([table], new Set(['11', '12', '21', '22']), 7000)).toBe(1);
    expect(listenersSharing([HEAD, 'garbage', ''], new Set(['11']), 7000)).toBe(0);
  });

  it('sees none besides our own listener on a port only we hold', async () => {
    const s = createServer();
    await new Promise<void>((r) => s.listen(0, '127.0.0.1', r));
    const port = (s.address() as { port: number }).port;
    expect(otherListeners(port)).toBe(0);
    await new Promise((r) => s.close(r));
  });
});

const support = await probeReusePort('127.0.0.1');

describe.runIf(support.ok && process.platform === 'linux')(`a port shared through SO_REUSEPORT on Node ${process.versions.node}`, () => {
  it('is seen: another process that joined our port is counted, and no longer once it is gone', async () => {
    const s: Server = createServer();
    await new Promise<void>((r) => s.listen({ host: '127.0.0.1', port: 0, reusePort: true } as never, r));
    const port = (s.address() as { port: number }).port;
    expect(otherListeners(port)).toBe(0);
    // Another Node process joins the port (as a second svc given the same port would).
    const child = spawn(process.execPath, ['-e', `require('node:net').createServer().listen({ host: '127.0.0.1', port: ${port}, reusePort: true }, () => console.log('up'))`], { stdio: ['ignore', 'pipe', 'inherit'] });
    await new Promise<void>((r) => child.stdout!.once('data', () => r()));
    expect(otherListeners(port)).toBe(1);
    child.kill('SIGKILL');
    await new Promise((r) => child.once('exit', r));
    expect(otherListeners(port)).toBe(0);
    await new Promise((r) => s.close(r));
  });
});
