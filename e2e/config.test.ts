import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { MASTER, cleanEnv, freePort, run, serve, tempDir, type Server } from './harness.js';

const servers: Server[] = [];
afterAll(async () => { await Promise.all(servers.map((s) => s.stop())); });

async function refusal(env: Record<string, string>, cwd?: string): Promise<{ code: number | null; stderr: string }> {
  const p = run(['serve'], cleanEnv({ SVC_DATA_DIR: join(tempDir(), 'data'), ...env }), cwd ?? tempDir());
  const code = await p.exited;
  return { code, stderr: p.stderr() };
}

describe('startup configuration (real process)', () => {
  const ok = { SVC_API_KEYS: 'k', SVC_ENCRYPTION_KEY: MASTER };
  const d = tempDir();
  writeFileSync(join(d, 'cert.pem'), 'x');

  it.each([
    ['no API key', { SVC_ENCRYPTION_KEY: MASTER }, 'SVC_API_KEYS'],
    ['no master key', { SVC_API_KEYS: 'k' }, 'SVC_ENCRYPTION_KEY'],
    ['both master key sources', { ...ok, SVC_MASTER_KEY_FILE: join(d, 'cert.pem') }, 'SVC_MASTER_KEY_FILE'],
    ['a master key that is not 64 hex', { ...ok, SVC_ENCRYPTION_KEY: 'abcd' }, '64 hex'],
    ['a non-loopback bind without TLS', { ...ok, SVC_REST_ADDR: '0.0.0.0:1' }, 'SVC_REST_ADDR'],
    ['a client CA without TLS', { ...ok, SVC_TLS_CLIENT_CA: join(d, 'cert.pem') }, 'SVC_TLS_CLIENT_CA'],
    ['a certificate without its key', { ...ok, SVC_TLS_CERT: join(d, 'cert.pem') }, 'SVC_TLS_KEY'],
  ])('refuses %s, naming the variable', async (_what, env, needle) => {
    const r = await refusal(env as Record<string, string>);
    expect(r.code).toBe(2);
    expect(r.stderr).toContain(needle);
    expect(r.stderr).toMatch(/Fix:|fix/i);
  });

  it('SVC_INSECURE=true waives the refusals and warns loudly', async () => {
    const s = await serve({ SVC_INSECURE: 'true', SVC_DATA_DIR: join(tempDir(), 'data'), RUST_LOG: 'warn' });
    servers.push(s);
    expect(s.stderr()).toContain('SVC_INSECURE=true');
    expect((await fetch(`${s.base}/v1/collections`)).status).toBe(200);
  });

  it('environment beats svc.toml, which beats the defaults', async () => {
    const cwd = tempDir();
    const tomlPort = await freePort();
    writeFileSync(join(cwd, 'svc.toml'), `rest_addr = "127.0.0.1:${tomlPort}"\nmax_k = 5\n[[api_keys]]\nname = "file-key"\nrole = "read"\ncollections = ["*"]\nkey = "from-file"\n`);
    // The file's port is used when the environment leaves it out.
    const grpcPort = await freePort();
    const p = run(['serve'], cleanEnv({ SVC_ENCRYPTION_KEY: MASTER, SVC_GRPC_ADDR: `127.0.0.1:${grpcPort}`, SVC_DATA_DIR: join(cwd, 'data') }), cwd);
    let status = 0;
    for (let i = 0; i < 100 && status !== 200; i++) {
      status = await fetch(`http://127.0.0.1:${tomlPort}/readyz`).then((r) => r.status, () => 0);
      if (status !== 200) await new Promise((r) => setTimeout(r, 100));
    }
    expect(status).toBe(200);
    const list = await fetch(`http://127.0.0.1:${tomlPort}/v1/collections`, { headers: { authorization: 'Bearer from-file' } });
    expect(list.status).toBe(200);
    p.child.kill('SIGTERM');
    expect(await p.exited).toBe(0);
    // The environment overrides the file's limit and adds its own key.
    const s = await serve({ SVC_ENCRYPTION_KEY: MASTER, SVC_API_KEYS: 'env-key', SVC_MAX_K: '7', SVC_DATA_DIR: join(cwd, 'data2') }, { cwd });
    servers.push(s);
    const h = { authorization: 'Bearer env-key', 'content-type': 'application/json' };
    await fetch(`${s.base}/v1/collections`, { method: 'POST', headers: h, body: JSON.stringify({ name: 'c', dim: 2, metric: 'l2' }) });
    const q = async (k: number) => (await fetch(`${s.base}/v1/collections/c/query`, { method: 'POST', headers: h, body: JSON.stringify({ vector: [1, 2], k }) })).json();
    expect((await q(8)).error).toMatchObject({ code: 'limit_exceeded' });
    expect((await q(8)).error.message).toContain('SVC_MAX_K');
    expect((await q(6)).hits).toEqual([]);
  });
});
