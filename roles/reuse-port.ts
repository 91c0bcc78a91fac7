/**
 * Whether this runtime lets several listeners share one port (issue 20: several event loops per process,
 * each a worker thread listening on the same port, the kernel spreading connections among them).
 * `listen({ reusePort: true })` sets SO_REUSEPORT from Node 22.12 and 23.1 on, on Linux and a few BSDs.
 * Node 20 does not know the option and ignores it without a word: the first listener binds the port
 * alone and a second fails with EADDRINUSE. So this asks the kernel rather than a version table: it
 * binds two sockets with the option on one loopback port and reports whether the second one got it,
 * and if not, why (the reason is for the log line that explains a single event loop).
 */
import { createServer, type AddressInfo, type ListenOptions, type Server } from 'node:net';

export type ReusePortSupport = { readonly ok: true } | { readonly ok: false; readonly reason: string };

/**
 * Two binds and two closes on `host` (loopback by default). Never rejects: where the platform has no
 * SO_REUSEPORT that spreads load (macOS, Windows), Node 22.12+ refuses even the first listener with the
 * option (nodejs/node#61018), and that too is a no, with its reason.
 */
export async function probeReusePort(host = '127.0.0.1'): Promise<ReusePortSupport> {
  const first = createServer();
  const second = createServer();
  let step = 'a first listener with reusePort';
  try {
    await listen(first, host, 0);
    step = 'a second listener with reusePort on the same port';
    await listen(second, host, (first.address() as AddressInfo).port);
    return { ok: true };
  } catch (e) {
    const code = (e as NodeJS.ErrnoException).code ?? String(e);
    return { ok: false, reason: `Node.js ${process.version} on ${process.platform}: ${step} failed (${code})` };
  } finally {
    await Promise.all([close(first), close(second)]);
  }
}

function listen(server: Server, host: string, port: number): Promise<void> {
  return new Promise((resolve, reject) => {
    server.once('error', reject);
    // Typed in @types/node from 22.12 on; the project's types are Node 20's, hence the intersection.
    const options: ListenOptions & { reusePort: boolean } = { host, port, reusePort: true };
    server.listen(options, () => {
      server.off('error', reject);
      resolve();
    });
  });
}

function close(server: Server): Promise<void> {
  return new Promise((resolve) => (server.listening ? server.close(() => resolve()) : resolve()));
}
