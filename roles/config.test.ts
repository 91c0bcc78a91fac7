import { chmodSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { availableParallelism } from 'node:os';
import { autoSearchWorkers, ConfigError, loadConfig } from './config.js';
import { DEFAULT_CONNECTION_LIMITS } from './connection-limits.js';

const KEY = 'ab'.repeat(32);
const base = { SVC_API_KEYS: 's1', SVC_ENCRYPTION_KEY: KEY };

const made: string[] = [];
afterAll(() => {
  for (const d of made) rmSync(d, { recursive: true, force: true });
});

function dir(toml?: string): string {
  const d = mkdtempSync(join(tmpdir(), 'svc-config-'));
  made.push(d);
  if (toml !== undefined) writeFileSync(join(d, 'svc.toml'), toml);
  return d;
}

function refusal(env: Record<string, string>, cwd = dir()): string {
  try {
    loadConfig(env, { cwd });
  } catch (e) {
    if (e instanceof ConfigError) return e.variable;
    throw e;
  }
  return 'accepted';
}

describe('config', () => {
  it('reads a read replica\'s leader: a gRPC URL, its key, and TLS files that go with https only', () => {
    const cwd = dir();
    for (const f of ['ca.pem', 'c.pem', 'c.key']) writeFileSync(join(cwd, f), 'x');
    expect(loadConfig(base, { cwd }).leader).toBeNull();
    const l = loadConfig({ ...base, SVC_LEADER_URL: 'http://leader:6334/', SVC_LEADER_API_KEY: 'lk' }, { cwd }).leader;
    expect(l).toEqual({ url: 'http://leader:6334', apiKey: 'lk', ca: null, clientCert: null, clientKey: null });
    const t = loadConfig({
      ...base, SVC_LEADER_URL: 'https://leader:6334', SVC_LEADER_API_KEY: 'lk', SVC_LEADER_CA: 'ca.pem', SVC_LEADER_CLIENT_CERT: 'c.pem', SVC_LEADER_CLIENT_KEY: 'c.key',
    }, { cwd }).leader;
    expect(t).toEqual({ url: 'https://leader:6334', apiKey: 'lk', ca: join(cwd, 'ca.pem'), clientCert: join(cwd, 'c.pem'), clientKey: join(cwd, 'c.key') });
    const refused: [Record<string, string>, string][] = [
      [{ SVC_LEADER_API_KEY: 'lk' }, 'SVC_LEADER_API_KEY'],
      [{ SVC_LEADER_URL: 'http://leader:6334' }, 'SVC_LEADER_API_KEY'],
      [{ SVC_LEADER_URL: 'leader:6334', SVC_LEADER_API_KEY: 'lk' }, 'SVC_LEADER_URL'],
      [{ SVC_LEADER_URL: 'http://leader', SVC_LEADER_API_KEY: 'lk' }, 'SVC_LEADER_URL'],
      [{ SVC_LEADER_URL: 'ftp://leader:1', SVC_LEADER_API_KEY: 'lk' }, 'SVC_LEADER_URL'],
      [{ SVC_LEADER_URL: 'http://leader:6334/x', SVC_LEADER_API_KEY: 'lk' }, 'SVC_LEADER_URL'],
      [{ SVC_LEADER_URL: 'http://leader:6334', SVC_LEADER_API_KEY: 'lk', SVC_LEADER_CA: 'ca.pem' }, 'SVC_LEADER_URL'],
      [{ SVC_LEADER_URL: 'https://leader:6334', SVC_LEADER_API_KEY: 'lk', SVC_LEADER_CLIENT_CERT: 'c.pem' }, 'SVC_LEADER_CLIENT_KEY'],
      [{ SVC_LEADER_URL: 'https://leader:6334', SVC_LEADER_API_KEY: 'lk', SVC_LEADER_CA: 'missing.pem' }, 'SVC_LEADER_CA'],
      [{ SVC_LEADER_CA: 'ca.pem' }, 'SVC_LEADER_CA'],
    ];
    for (const [env, variable] of refused) expect(refusal({ ...base, ...env }, cwd), JSON.stringify(env)).toBe(variable);
    // A credential in the URL is refused without being repeated; a key over plain http off the machine is a warning.
    let message = '';
    try {
      loadConfig({ ...base, SVC_LEADER_URL: 'http://admin:hunter2@leader:6334', SVC_LEADER_API_KEY: 'lk' }, { cwd });
    } catch (e) {
      message = (e as Error).message;
    }
    expect(message).toMatch(/user name or password/);
    expect(message).not.toContain('hunter2');
    expect(loadConfig({ ...base, SVC_LEADER_URL: 'http://leader:6334', SVC_LEADER_API_KEY: 'lk' }, { cwd }).warnings.join(' ')).toMatch(/unencrypted/);
    expect(loadConfig({ ...base, SVC_LEADER_URL: 'http://127.0.0.1:6334', SVC_LEADER_API_KEY: 'lk' }, { cwd }).warnings.join(' ')).not.toMatch(/unencrypted/);
  });

  it('defaults < svc.toml < environment, frozen', () => {
    const cwd = dir('rest_addr = "127.0.0.1:7000"\nmax_k = 50\nlog = "debug"\n[otlp]\nservice_name = "x"\n');
    const c = loadConfig(base, { cwd });
    expect(c.restAddr).toEqual({ host: '127.0.0.1', port: 7000 });
    expect(c.grpcAddr.port).toBe(6334);
    expect(c.limits.maxK).toBe(50);
    expect(c.logFilter).toBe('debug');
    expect(c.otlp.serviceName).toBe('x');
    const e = loadConfig({ ...base, SVC_REST_ADDR: '127.0.0.1:7001', SVC_MAX_K: '60' }, { cwd });
    expect([e.restAddr.port, e.limits.maxK]).toEqual([7001, 60]);
    expect(Object.isFrozen(e) && Object.isFrozen(e.limits) && Object.isFrozen(e.apiKeys[0])).toBe(true);
  });

  it('search workers: auto by default (cores - 1, at most 4, none on one core), a count, or a refusal', () => {
    expect([1, 2, 3, 4, 8, 64].map(autoSearchWorkers)).toEqual([0, 1, 2, 3, 4, 4]);
    expect(loadConfig(base, { cwd: dir() }).searchWorkers).toBe(autoSearchWorkers(availableParallelism()));
    expect(loadConfig({ ...base, SVC_SEARCH_WORKERS: 'auto' }, { cwd: dir() }).searchWorkers).toBe(autoSearchWorkers(availableParallelism()));
    expect(loadConfig({ ...base, SVC_SEARCH_WORKERS: '1' }, { cwd: dir() }).searchWorkers).toBe(1);
    expect(loadConfig({ ...base, SVC_SEARCH_WORKERS: '0' }, { cwd: dir() }).searchWorkers).toBe(0);
    expect(refusal({ ...base, SVC_SEARCH_WORKERS: '9' })).toBe('SVC_SEARCH_WORKERS');
    expect(refusal({ ...base, SVC_SEARCH_WORKERS: 'many' })).toBe('SVC_SEARCH_WORKERS');
    expect(loadConfig({ ...base }, { cwd: dir() }).buildWorkers).toBeNull();
    expect(loadConfig({ ...base, SVC_BUILD_WORKERS: 'auto' }, { cwd: dir() }).buildWorkers).toBeNull();
    expect(loadConfig({ ...base, SVC_BUILD_WORKERS: '12', SVC_SEARCH_WORKERS: '3' }, { cwd: dir() }).buildWorkers).toBe(12);
    expect(refusal({ ...base, SVC_BUILD_WORKERS: '0' })).toBe('SVC_BUILD_WORKERS');
    expect(refusal({ ...base, SVC_BUILD_WORKERS: '13', SVC_SEARCH_WORKERS: '3' })).toBe('SVC_BUILD_WORKERS');
  });

  it('replication retention: 1 GiB by default, bytes from the environment or svc.toml, validated', () => {
    expect(loadConfig(base, { cwd: dir() }).replicationRetainBytes).toBe(1024 ** 3);
    expect(loadConfig({ ...base, SVC_REPLICATION_RETAIN_BYTES: '1048576' }, { cwd: dir() }).replicationRetainBytes).toBe(1 << 20);
    expect(loadConfig({ ...base, SVC_REPLICATION_RETAIN_BYTES: '0' }, { cwd: dir() }).replicationRetainBytes).toBe(0);
    expect(loadConfig(base, { cwd: dir('replication_retain_bytes = "4096"\n') }).replicationRetainBytes).toBe(4096);
    expect(refusal({ ...base, SVC_REPLICATION_RETAIN_BYTES: '-1' })).toBe('SVC_REPLICATION_RETAIN_BYTES');
    expect(refusal({ ...base, SVC_REPLICATION_RETAIN_BYTES: '1GiB' })).toBe('SVC_REPLICATION_RETAIN_BYTES');
  });

  it('connection limits: defaults, svc.toml and environment in seconds, validated', () => {
    expect(loadConfig(base, { cwd: dir() }).connections).toEqual(DEFAULT_CONNECTION_LIMITS);
    const c = loadConfig({ ...base, SVC_MAX_CONNECTIONS: '50', SVC_REQUEST_TIMEOUT_SECS: '1.5', SVC_IDLE_TIMEOUT_SECS: '120' },
      { cwd: dir('grpc_max_connections = 20\nheaders_timeout_secs = 1\nkeepalive_timeout_secs = 2\nmax_connections = 7\n') }).connections;
    expect(c).toEqual({ restMaxConnections: 50, grpcMaxConnections: 20, headersTimeoutMs: 1000, requestTimeoutMs: 1500, keepAliveTimeoutMs: 2000, idleTimeoutMs: 120_000 });
    expect(Object.isFrozen(c)).toBe(true);
    expect(refusal({ ...base, SVC_MAX_CONNECTIONS: '0' })).toBe('SVC_MAX_CONNECTIONS');
    expect(refusal({ ...base, SVC_GRPC_MAX_CONNECTIONS: 'lots' })).toBe('SVC_GRPC_MAX_CONNECTIONS');
    expect(refusal({ ...base, SVC_REQUEST_TIMEOUT_SECS: '0' })).toBe('SVC_REQUEST_TIMEOUT_SECS');
    expect(refusal({ ...base, SVC_KEEPALIVE_TIMEOUT_SECS: '-1' })).toBe('SVC_KEEPALIVE_TIMEOUT_SECS');
    expect(refusal({ ...base, SVC_IDLE_TIMEOUT_SECS: '99999' })).toBe('SVC_IDLE_TIMEOUT_SECS');
    // The headers are part of the request: a headers timeout above the request timeout is refused.
    expect(refusal({ ...base, SVC_HEADERS_TIMEOUT_SECS: '40' })).toBe('SVC_HEADERS_TIMEOUT_SECS');
  });

  it('reads [[api_keys]], provider tables and names env keys env:<i>', () => {
    const cwd = dir(`
[[api_keys]]
name = "team-a-reader"
role = "read"
collections = ["team_a.*"]
key = "rk"
[[api_keys]]
name = "hashed"
role = "write"
collections = ["x"]
key_sha256 = "${'C'.repeat(64)}"
[embedding.docs]
provider = "fake"
dim = 8
`);
    const c = loadConfig({ ...base, SVC_API_KEYS: 'a, b' }, { cwd });
    expect(c.apiKeys.map((k) => [k.name, k.role, k.collections.join()])).toEqual([
      ['env:0', 'admin', '*'], ['env:1', 'admin', '*'], ['team-a-reader', 'read', 'team_a.*'], ['hashed', 'write', 'x'],
    ]);
    expect(c.apiKeys[3].sha256).toBe('c'.repeat(64));
    expect(c.embedding.docs).toEqual({ provider: 'fake', dim: 8 });
  });

  it('refuses each insecure configuration, naming the variable', () => {
    const d = dir();
    writeFileSync(join(d, 'cert.pem'), 'x');
    expect(refusal({ SVC_ENCRYPTION_KEY: KEY })).toBe('SVC_API_KEYS');
    expect(refusal({ SVC_API_KEYS: 's' })).toBe('SVC_ENCRYPTION_KEY');
    expect(refusal({ ...base, SVC_MASTER_KEY_FILE: '/nonexistent' })).toBe('SVC_ENCRYPTION_KEY');
    expect(refusal({ ...base, SVC_ENCRYPTION_KEY: 'abc' })).toBe('SVC_ENCRYPTION_KEY');
    expect(refusal({ ...base, SVC_REST_ADDR: '0.0.0.0:6333' })).toBe('SVC_REST_ADDR');
    expect(refusal({ ...base, SVC_TLS_CLIENT_CA: 'ca.pem' })).toBe('SVC_TLS_CLIENT_CA');
    expect(refusal({ ...base, SVC_TLS_CERT: 'cert.pem' }, d)).toBe('SVC_TLS_KEY');
    expect(refusal({ ...base, SVC_MAX_K: '0' })).toBe('SVC_MAX_K');
    expect(refusal({ ...base, SVC_CONFIG: 'missing.toml' })).toBe('SVC_CONFIG');
    expect(refusal(base, dir('nonsense_key = 1'))).toBe('nonsense_key');
  });

  it('SVC_INSECURE=true waives the refusals with a loud warning', () => {
    const c = loadConfig({ SVC_INSECURE: 'true', SVC_REST_ADDR: '0.0.0.0:1', SVC_TLS_CLIENT_CA: 'ca.pem' }, { cwd: dir() });
    expect(c.apiKeys).toEqual([]);
    expect(c.encryptionKey).toBeNull();
    expect(c.warnings.join('\n')).toMatch(/SVC_INSECURE=true/);
  });

  it('reads the master key file and warns when others may read it', () => {
    const d = dir();
    const f = join(d, 'master.key');
    writeFileSync(f, `${KEY}\n`);
    chmodSync(f, 0o644);
    const c = loadConfig({ SVC_API_KEYS: 's', SVC_MASTER_KEY_FILE: f }, { cwd: d });
    expect(c.encryptionKey).toBe(KEY);
    expect(c.warnings.some((w) => w.includes('chmod 600'))).toBe(true);
    chmodSync(f, 0o600);
    expect(loadConfig({ SVC_API_KEYS: 's', SVC_MASTER_KEY_FILE: f }, { cwd: d }).warnings).toEqual([]);
  });
});
