/**
 * What a process start loads (bench/startup.ts measures what it costs): `svc --version` and the module
 * of `svc serve` load none of the packages only other commands or roles use. Node's module hooks record
 * every module the ESM loader loads (a CommonJS package's entry included) while the built CLI runs.
 */
import { execFileSync } from 'node:child_process';
import { readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';
import { describe, expect, it } from 'vitest';
import { MAIN, ROOT, tempDir } from './harness.js';

function loaded(args: string[]): string[] {
  const dir = tempDir('svc-startup-modules-');
  writeFileSync(join(dir, 'hooks.mjs'), [
    "import { appendFileSync } from 'node:fs';",
    'export async function load(url, context, next) {',
    '  appendFileSync(process.env.LOADED_MODULES_LOG, `${url}\\n`);',
    '  return next(url, context);',
    '}',
  ].join('\n'));
  writeFileSync(join(dir, 'register.mjs'), "import { register } from 'node:module';\nregister('./hooks.mjs', import.meta.url);\n");
  const log = join(dir, 'loaded.txt');
  writeFileSync(log, '');
  execFileSync(process.execPath, ['--import', pathToFileURL(join(dir, 'register.mjs')).href, ...args], {
    cwd: ROOT, env: { PATH: process.env.PATH ?? '', LOADED_MODULES_LOG: log }, stdio: 'pipe',
  });
  return readFileSync(log, 'utf8').split('\n').filter((l) => l !== '');
}

/** Packages (and project folders) only other commands or roles use. */
const ELSEWHERE = [
  '/node_modules/@modelcontextprotocol/', '/node_modules/pg/', '/node_modules/@opentelemetry/', '/node_modules/undici/',
  '/dist/roles/mcp/', '/dist/roles/import/', '/dist/roles/tui/command.js', '/dist/roles/tui/app.js', '/dist/roles/router/', '/dist/roles/coordinator/',
];
const from = (urls: string[], parts: string[]): string[] => urls.filter((u) => parts.some((p) => u.includes(p)));

describe('a process start loads what it runs', () => {
  it('svc --version loads no server, no other command and no other role', () => {
    const urls = loaded([MAIN, '--version']);
    expect(urls.some((u) => u.endsWith('/dist/roles/cli/main.js'))).toBe(true);
    expect(from(urls, [...ELSEWHERE, '/node_modules/fastify/', '/node_modules/@grpc/', '/dist/roles/cli/serve.js'])).toEqual([]);
  });

  it('svc serve\'s module loads its server, and nothing only other commands, roles or OTLP export use', () => {
    const serve = pathToFileURL(join(ROOT, 'dist', 'roles', 'cli', 'serve.js')).href;
    const urls = loaded(['--input-type=module', '-e', `await import(${JSON.stringify(serve)})`]);
    expect(from(urls, ['/node_modules/fastify/', '/node_modules/@grpc/grpc-js/']).length).toBeGreaterThan(0);
    expect(from(urls, ELSEWHERE)).toEqual([]);
  });
});
