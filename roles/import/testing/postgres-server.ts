/**
 * A throw-away PostgreSQL server for tests: initdb + pg_ctl into a temporary directory, listening on
 * 127.0.0.1 on a free port with password (scram) authentication. As root the binaries run as the
 * `postgres` user (the server refuses to run as root). Missing binaries fail loudly: .ci/run installs them.
 */
import { execFileSync } from 'node:child_process';
import { chownSync, existsSync, mkdtempSync, readdirSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir, userInfo } from 'node:os';
import { join } from 'node:path';
import { freePort } from './helpers.js';

export interface PgServer {
  port: number;
  user: string;
  password: string;
  url(database?: string): string;
  stop(): Promise<void>;
}

function binDir(): string {
  const candidates = ['/usr/lib/postgresql'].filter(existsSync)
    .flatMap((d) => readdirSync(d).sort((a, b) => Number(b) - Number(a)).map((v) => join(d, v, 'bin')));
  for (const c of candidates) if (existsSync(join(c, 'pg_ctl'))) return c;
  try {
    return execFileSync('pg_config', ['--bindir'], { encoding: 'utf8' }).trim();
  } catch {
    throw new Error('PostgreSQL server binaries (initdb, pg_ctl) not found: install the `postgresql` package (apt-get install postgresql); .ci/run does');
  }
}

export async function startPostgres(): Promise<PgServer> {
  const bin = binDir();
  const asRoot = userInfo().uid === 0;
  const run = (cmd: string, args: string[]): string => {
    const [file, argv] = asRoot ? ['runuser', ['-u', 'postgres', '--', join(bin, cmd), ...args]] : [join(bin, cmd), args];
    return execFileSync(file, argv, { encoding: 'utf8', stdio: ['ignore', 'pipe', 'pipe'] });
  };
  const dir = mkdtempSync(join(tmpdir(), 'svc-pg-'));
  const password = 'pw-for-tests';
  const pwfile = join(dir, 'pwfile');
  writeFileSync(pwfile, `${password}\n`);
  if (asRoot) {
    const ids = execFileSync('id', ['-u', 'postgres'], { encoding: 'utf8' }).trim();
    const gid = execFileSync('id', ['-g', 'postgres'], { encoding: 'utf8' }).trim();
    chownSync(dir, Number(ids), Number(gid));
    chownSync(pwfile, Number(ids), Number(gid));
  }
  const data = join(dir, 'data');
  const user = 'postgres';
  run('initdb', ['-D', data, '-U', user, '--auth=scram-sha-256', `--pwfile=${pwfile}`, '--no-sync', '-E', 'UTF8']);
  const port = await freePort();
  run('pg_ctl', ['-D', data, '-l', join(dir, 'log'), '-w', '-t', '60', '-o', `-p ${port} -k ${dir} -c listen_addresses=127.0.0.1 -c fsync=off`, 'start']);
  return {
    port,
    user,
    password,
    url: (database = 'postgres') => `postgres://${user}:${password}@127.0.0.1:${port}/${database}`,
    async stop() {
      try {
        run('pg_ctl', ['-D', data, '-m', 'fast', '-w', 'stop']);
      } finally {
        rmSync(dir, { recursive: true, force: true });
      }
    },
  };
}
