import { spawnSync } from 'node:child_process';
import { readdirSync, readFileSync, statSync } from 'node:fs';
import { availableParallelism } from 'node:os';
import { join, resolve } from 'node:path';
import { describe, expect, it } from 'vitest';
import { ERROR_CODES } from '../../core/base/errors.js';
import { DEFAULT_LIMITS } from '../../core/base/limits.js';
import { HTTP_STATUS } from '../../core/service/http-status.js';
import { autoSearchWorkers, loadConfig, REPLICATION_RETAIN_BYTES_DEFAULT, SCALAR_VARS } from '../config.js';
import { DEFAULT_CONNECTION_LIMITS } from '../connection-limits.js';
import { REST_ROUTES } from '../rest/routes.js';
import { OPEN_ROUTES } from '../rest/openapi.js';
import { CONFIG_VARIABLES, SERVE_VARIABLES } from './config-variables.js';
import { REFERENCE_FILES, referenceMarkdown, variablesHelp } from './markdown.js';

const ROOT = resolve(import.meta.dirname, '..', '..');
const read = (file: string) => readFileSync(join(ROOT, 'docs', 'reference', file), 'utf8');
const documented = new Map(CONFIG_VARIABLES.map((v) => [v.name, v]));

function sources(dir: string): string[] {
  return readdirSync(dir).flatMap((e) => {
    const p = join(dir, e);
    return statSync(p).isDirectory() ? sources(p) : p.endsWith('.ts') ? [p] : [];
  });
}
/** Every SVC_* name in the code (a name ending in `_` is a prefix in a message: `SVC_MAX_*`). */
const VAR = /\bSVC_[A-Z0-9_]*[A-Z0-9]\b(?!\*)/g;
const codeText = [...sources(join(ROOT, 'core')), ...sources(join(ROOT, 'roles'))]
  .filter((p) => !p.includes(`${join('roles', 'reference')}`))
  .map((p) => readFileSync(p, 'utf8')).join('\n');

describe('docs/reference is generated and up to date', () => {
  for (const file of REFERENCE_FILES) {
    it(`docs/reference/${file} equals its source (else: npm run docs:reference)`, () => {
      expect(read(file), `docs/reference/${file} is stale: run npm run docs:reference`).toBe(referenceMarkdown(file));
    });
  }
});

describe('config.md: every variable svc reads, with its default', () => {
  it('lists every variable roles/config.ts reads, and every SVC_* name in the code', () => {
    const configTs = readFileSync(join(ROOT, 'roles', 'config.ts'), 'utf8');
    const fromConfig = new Set([...SCALAR_VARS, ...(configTs.match(VAR) ?? [])]);
    expect(fromConfig.has('SVC_CONFIG') && fromConfig.has('SVC_MAX_K') && fromConfig.has('SVC_LEADER_URL')).toBe(true);
    const missing = [...new Set([...fromConfig, ...(codeText.match(VAR) ?? [])])].filter((v) => !documented.has(v));
    expect(missing, 'add them to roles/reference/config-variables.ts').toEqual([]);
  });

  it('lists each once, and none that the code never reads', () => {
    expect(documented.size).toBe(CONFIG_VARIABLES.length);
    const inCode = new Set(codeText.match(VAR) ?? []);
    expect(CONFIG_VARIABLES.filter((v) => !inCode.has(v.name) && !(SCALAR_VARS as readonly string[]).includes(v.name)).map((v) => v.name)).toEqual([]);
  });

  it('its defaults are what loadConfig does with the variable unset', () => {
    const cwd = '/srv/here';
    const c = loadConfig({ SVC_INSECURE: 'true' }, { cwd, defaultFile: null });
    const d = (name: string) => documented.get(name)!.default;
    expect(`${c.restAddr.host}:${c.restAddr.port}`).toBe(d('SVC_REST_ADDR'));
    expect(`${c.grpcAddr.host}:${c.grpcAddr.port}`).toBe(d('SVC_GRPC_ADDR'));
    expect(c.dataDir).toBe(resolve(cwd, d('SVC_DATA_DIR')));
    expect(c.logFilter).toBe(d('RUST_LOG'));
    expect(c.otlp).toEqual({ endpoint: null, serviceName: d('SVC_OTLP_SERVICE_NAME'), timeoutSecs: Number(d('SVC_OTLP_TIMEOUT_SECS')) });
    expect(c.rateLimit).toEqual({ requestsPerSecond: Number(d('SVC_RATE_LIMIT_REQUESTS_PER_SECOND')), burst: Number(d('SVC_RATE_LIMIT_BURST')) });
    expect(c.replicationRetainBytes).toBe(Number(d('SVC_REPLICATION_RETAIN_BYTES')));
    expect(REPLICATION_RETAIN_BYTES_DEFAULT).toBe(Number(d('SVC_REPLICATION_RETAIN_BYTES')));
    expect(d('SVC_SEARCH_WORKERS')).toBe('auto');
    expect(c.searchWorkers).toBe(autoSearchWorkers(availableParallelism()));
    expect(c.limits).toEqual(DEFAULT_LIMITS);
    expect(c.connections).toEqual(DEFAULT_CONNECTION_LIMITS);
    expect(c.snapshotDir).toBeNull();
    for (const v of ['SVC_AUDIT_LOG', 'SVC_OTLP_ENDPOINT', 'SVC_LEADER_URL', 'SVC_TLS_CERT', 'SVC_API_KEYS', 'SVC_ENCRYPTION_KEY']) expect(d(v)).toBe('none');
    expect(c.auditLog).toBeNull();
    expect(c.leader).toBeNull();
    expect(c.tls).toBeNull();
    // SVC_INSECURE defaults to false: without it, no key is a refusal.
    expect(d('SVC_INSECURE')).toBe('false');
    expect(() => loadConfig({}, { cwd, defaultFile: null })).toThrow(/SVC_API_KEYS/);
  });

  it('svc serve --help lists every variable of the server with its default; svc --help every default', () => {
    const help = variablesHelp();
    for (const v of SERVE_VARIABLES) expect(help).toContain(`${v.name}`);
    for (const v of SERVE_VARIABLES) expect(help).toContain(`[default: ${v.default}]`);
    const run = (...args: string[]) => spawnSync(process.execPath, ['--import', 'tsx', join(ROOT, 'roles', 'cli', 'main.ts'), ...args], { encoding: 'utf8', env: { PATH: process.env.PATH } });
    const serve = run('serve', '--help');
    expect(serve.status).toBe(0);
    expect(serve.stdout).toContain(help);
    const top = run('--help');
    expect(top.status).toBe(0);
    for (const v of SERVE_VARIABLES) expect(top.stdout).toMatch(new RegExp(`\\n  ${v.name} +${v.default.replace(/[.*+?^${}()|[\]\\]/g, '\\$&')}\\n`));
  }, 30_000);
});

describe('errors.md and rest.md cover their tables', () => {
  it('errors.md has one row per code, with its HTTP and gRPC status', () => {
    const rows = read('errors.md').split('\n').filter((l) => l.startsWith('| `'));
    expect(rows.map((r) => /^\| `(\w+)`/.exec(r)![1])).toEqual([...ERROR_CODES]);
    for (const r of rows) {
      const [, code, http, grpc] = /^\| `(\w+)` \| (\d+) \| ([A-Z_]+) \|/.exec(r)!;
      expect(Number(http)).toBe(HTTP_STATUS[code as keyof typeof HTTP_STATUS]);
      expect(grpc).toMatch(/^[A-Z_]+$/);
    }
  });

  it('rest.md has a section per route of the table, and the open routes', () => {
    const text = read('rest.md');
    for (const r of [...REST_ROUTES, ...OPEN_ROUTES]) expect(text).toContain(`\n## ${r.method} ${r.template}\n`);
  });
});
