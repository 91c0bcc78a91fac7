/**
 * Black-box harness: starts `node dist/roles/cli/main.js` as a real process (npm test builds first) and
 * talks to it over loopback. Imports no project code.
 */
import { execFileSync, spawn, type ChildProcess } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { createServer as createHttpServer, type IncomingMessage } from 'node:http';
import { createServer, type AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';

export const ROOT = resolve(import.meta.dirname, '..');
export const MAIN = join(ROOT, 'dist', 'roles', 'cli', 'main.js');
export const MASTER = 'a1'.repeat(32);

const made: string[] = [];
// Each test file runs in its own process: its temporary directories go when it exits.
process.on('exit', () => {
  for (const d of made) rmSync(d, { recursive: true, force: true });
});

export function tempDir(prefix = 'svc-e2e-'): string {
  const d = mkdtempSync(join(tmpdir(), prefix));
  made.push(d);
  return d;
}

export async function freePort(): Promise<number> {
  return new Promise((res, rej) => {
    const s = createServer();
    s.listen(0, '127.0.0.1', () => {
      const port = (s.address() as { port: number }).port;
      s.close(() => res(port));
    });
    s.on('error', rej);
  });
}

/** Only what the server needs: no inherited SVC_* from the developer's shell. */
export function cleanEnv(extra: Record<string, string>): Record<string, string> {
  // SVC_HTTP_LOOPS from the test run's own environment: `npm run test:node24` runs end-to-end suites
  // against servers with several request loops.
  const loops = process.env.SVC_HTTP_LOOPS;
  return { PATH: process.env.PATH ?? '', HOME: process.env.HOME ?? '/tmp', RUST_LOG: 'warn', ...(loops ? { SVC_HTTP_LOOPS: loops } : {}), ...extra };
}

export interface Proc {
  child: ChildProcess;
  stdout(): string;
  stderr(): string;
  exited: Promise<number | null>;
}

export function run(args: string[], env: Record<string, string>, cwd = ROOT): Proc {
  const child = spawn(process.execPath, [MAIN, ...args], { env, cwd, stdio: ['ignore', 'pipe', 'pipe'] });
  let out = '';
  let err = '';
  child.stdout!.on('data', (d: Buffer) => { out += d.toString(); });
  child.stderr!.on('data', (d: Buffer) => { err += d.toString(); });
  const exited = new Promise<number | null>((res) => child.on('exit', (code) => res(code)));
  return { child, stdout: () => out, stderr: () => err, exited };
}

export interface Server extends Proc {
  port: number;
  grpcPort: number;
  base: string;
  env: Record<string, string>;
  stop(signal?: NodeJS.Signals): Promise<number | null>;
}

/**
 * Starts `svc serve` on free loopback ports and waits until /readyz answers 200. A port found free can be
 * taken before the server binds it (another test's listener or outgoing connection); a start that fails
 * with EADDRINUSE is tried again on new ports, a few times.
 */
export async function serve(env: Record<string, string>, opts: { cwd?: string; scheme?: string; ready?: (base: string) => Promise<boolean> } = {}): Promise<Server> {
  for (let attempt = 1; ; attempt++) {
    try {
      return await serveOnce(env, opts);
    } catch (e) {
      if (!(e instanceof PortTaken) || attempt === 4) throw e;
    }
  }
}

class PortTaken extends Error {}

async function serveOnce(env: Record<string, string>, opts: { cwd?: string; scheme?: string; ready?: (base: string) => Promise<boolean> }): Promise<Server> {
  // Ports given in env (a restart on the same address) are the ones reported.
  const given = (v: string | undefined) => {
    const n = Number(/:(\d+)$/.exec(v ?? '')?.[1] ?? 0);
    return n > 0 ? n : undefined;
  };
  const port = given(env.SVC_REST_ADDR) ?? await freePort();
  const grpcPort = given(env.SVC_GRPC_ADDR) ?? await freePort();
  const fullEnv = cleanEnv({ SVC_REST_ADDR: `127.0.0.1:${port}`, SVC_GRPC_ADDR: `127.0.0.1:${grpcPort}`, ...env });
  const p = run(['serve'], fullEnv, opts.cwd);
  const base = `${opts.scheme ?? 'http'}://127.0.0.1:${port}`;
  let done = false;
  void p.exited.then(() => { done = true; });
  const probe = opts.ready ?? (async (b: string) => (await fetch(`${b}/readyz`)).status === 200);
  for (let i = 0; i < 300; i++) {
    if (done) {
      const message = `server exited early: ${p.stderr()}`;
      throw p.stderr().includes('EADDRINUSE') ? new PortTaken(message) : new Error(message);
    }
    if (await probe(base).catch(() => false)) break;
    if (i === 299) throw new Error(`server not ready: ${p.stderr()} ${p.stdout().slice(-4000)}`);
    await new Promise((r) => setTimeout(r, 100));
  }
  return {
    ...p, port, grpcPort, base, env: fullEnv,
    async stop(signal: NodeJS.Signals = 'SIGTERM') {
      if (!done) p.child.kill(signal);
      return p.exited;
    },
  };
}

export function api(base: string, key?: string) {
  return async (method: string, path: string, body?: unknown): Promise<{ status: number; json: any; headers: Headers }> => {
    const headers: Record<string, string> = {};
    if (key !== undefined) headers.authorization = `Bearer ${key}`;
    if (body !== undefined) headers['content-type'] = 'application/json';
    const r = await fetch(`${base}${path}`, { method, headers, body: body === undefined ? undefined : typeof body === 'string' ? body : JSON.stringify(body) });
    const text = await r.text();
    let json: any = null;
    try { json = JSON.parse(text); } catch { json = text; }
    return { status: r.status, json, headers: r.headers };
  };
}

/** A CA, a server certificate for 127.0.0.1 and localhost, a client certificate from the CA and one from a stranger. */
export function makeCerts(dir: string): void {
  const ssl = (...args: string[]) => execFileSync('openssl', args, { cwd: dir, stdio: 'pipe' });
  for (const ca of ['ca', 'other-ca']) {
    ssl('req', '-x509', '-newkey', 'rsa:2048', '-nodes', '-keyout', `${ca}.key`, '-out', `${ca}.pem`, '-days', '2', '-subj', `/CN=${ca}`);
  }
  writeFileSync(join(dir, 'san.ext'), 'subjectAltName=DNS:localhost,IP:127.0.0.1\n');
  const leaf = (name: string, ca: string, ext: boolean) => {
    ssl('req', '-newkey', 'rsa:2048', '-nodes', '-keyout', `${name}.key`, '-out', `${name}.csr`, '-subj', `/CN=${name}`);
    ssl('x509', '-req', '-in', `${name}.csr`, '-CA', `${ca}.pem`, '-CAkey', `${ca}.key`, '-CAcreateserial', '-out', `${name}.pem`, '-days', '2', ...(ext ? ['-extfile', 'san.ext'] : []));
  };
  leaf('server', 'ca', true);
  leaf('client', 'ca', false);
  leaf('stranger', 'other-ca', false);
}

/** A local HTTP stand-in that answers JSON (provider protocols and the like): `handle` gets the request and its body. */
export class JsonStandIn {
  port = 0;
  private readonly server = createHttpServer((req, res) => {
    let raw = '';
    req.on('data', (chunk: Buffer) => (raw += String(chunk)));
    req.on('end', () => void Promise.resolve(this.handle(req, raw)).then(([code, body]) => {
      res.writeHead(code, { 'content-type': 'application/json' });
      res.end(JSON.stringify(body));
    }));
  });

  constructor(private readonly handle: (req: IncomingMessage, raw: string) => [number, unknown] | Promise<[number, unknown]>) {}

  async start(): Promise<void> {
    await new Promise<void>((r) => this.server.listen(0, '127.0.0.1', r));
    this.port = (this.server.address() as AddressInfo).port;
  }

  close(): Promise<void> {
    return new Promise((r) => this.server.close(() => r()));
  }
}
