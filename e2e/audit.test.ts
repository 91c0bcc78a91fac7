import { chmodSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { beforeAll, describe, expect, it } from 'vitest';
import { MASTER, api, cleanEnv, run, serve, tempDir } from './harness.js';

/**
 * The keyed audit chain from outside: a real `svc serve` writes SVC_AUDIT_LOG across a restart, and the
 * real `svc admin verify-audit` checks it with the master key (docs/server.md, "Audit log").
 */
const dir = tempDir();
const auditPath = join(dir, 'audit.jsonl');
const OTHER_KEY = 'b2'.repeat(32);

async function verify(file: string, env: Record<string, string>, args: string[] = []): Promise<{ code: number | null; out: string; err: string }> {
  const p = run(['admin', 'verify-audit', file, ...args], cleanEnv(env), dir);
  const code = await p.exited;
  return { code, out: p.stdout(), err: p.stderr() };
}

async function session(writes: (call: ReturnType<typeof api>) => Promise<void>): Promise<string> {
  const server = await serve({ SVC_API_KEYS: 'root', SVC_ENCRYPTION_KEY: MASTER, SVC_DATA_DIR: join(dir, 'data'), SVC_AUDIT_LOG: auditPath }, { cwd: dir });
  await writes(api(server.base, 'root'));
  await server.stop();
  return server.stderr();
}

beforeAll(async () => {
  await session(async (call) => {
    expect((await call('POST', '/v1/collections', { name: 'docs', dim: 2, metric: 'l2' })).status).toBe(201);
    expect((await call('PUT', '/v1/collections/docs/points', { points: [{ id: 'a', vector: [1, 0] }] })).status).toBe(200);
  });
  // A restart continues the chain from the last line.
  const stderr = await session(async (call) => {
    expect((await call('DELETE', '/v1/collections/docs/points/a')).status).toBe(200);
    expect((await call('DELETE', '/v1/collections/nope')).status).toBe(200);
  });
  expect(stderr).not.toMatch(/new chain segment/);
}, 120_000);

describe('svc admin verify-audit on a log a real server wrote', () => {
  it('reports the line count and exit 0 with the master key, from the environment, a key file or the flag', async () => {
    const lines = readFileSync(auditPath, 'utf8').trimEnd().split('\n');
    expect(lines).toHaveLength(4);
    for (const l of lines) expect(Object.keys(JSON.parse(l))).toEqual(['ts', 'key', 'action', 'resource', 'outcome', 'status', 'request_id', 'remote', 'mac']);
    expect(readFileSync(auditPath, 'utf8')).not.toContain(MASTER);

    const byEnv = await verify(auditPath, { SVC_ENCRYPTION_KEY: MASTER });
    expect(byEnv).toMatchObject({ code: 0 });
    expect(byEnv.out).toMatch(/ok: 4 lines/);
    const keyFile = join(dir, 'master.key');
    writeFileSync(keyFile, `${MASTER}\n`);
    chmodSync(keyFile, 0o600);
    expect((await verify(auditPath, { SVC_MASTER_KEY_FILE: keyFile })).code).toBe(0);
    expect((await verify(auditPath, {}, ['--encryption-key', MASTER])).code).toBe(0);
  });

  it('refuses to check without a key, and a wrong key fails at line 1', async () => {
    const none = await verify(auditPath, {});
    expect(none.code).toBe(2);
    expect(none.err).toMatch(/master key/);
    const wrong = await verify(auditPath, { SVC_ENCRYPTION_KEY: OTHER_KEY });
    expect(wrong.code).toBe(1);
    expect(wrong.out).toMatch(/^broken at line 1:/);
    expect(wrong.out + wrong.err).not.toContain(OTHER_KEY);
  });

  it('finds an edit of the last line, and a deleted inner line, at their lines', async () => {
    const lines = readFileSync(auditPath, 'utf8').trimEnd().split('\n');
    const editedLast = join(dir, 'edited-last.jsonl');
    writeFileSync(editedLast, `${[...lines.slice(0, 3), lines[3].replace('"key":"env:0"', '"key":"someone"')].join('\n')}\n`);
    const e = await verify(editedLast, { SVC_ENCRYPTION_KEY: MASTER });
    expect(e.code).toBe(1);
    expect(e.out).toMatch(/^broken at line 4:/);
    const deleted = join(dir, 'deleted.jsonl');
    writeFileSync(deleted, `${[lines[0], lines[2], lines[3]].join('\n')}\n`);
    const d = await verify(deleted, { SVC_ENCRYPTION_KEY: MASTER });
    expect(d.code).toBe(1);
    expect(d.out).toMatch(/^broken at line 2:/);
  });

  it('a server restarted over a damaged tail warns, starts a new segment, and the verifier reports both', async () => {
    const lines = readFileSync(auditPath, 'utf8').trimEnd().split('\n');
    writeFileSync(auditPath, `${[...lines.slice(0, 3), lines[3].replace('"outcome":"ok"', '"outcome":"denied"')].join('\n')}\n`);
    const stderr = await session(async (call) => {
      expect((await call('DELETE', '/v1/collections/docs/points/b')).status).toBe(200);
    });
    expect(stderr).toMatch(/new chain segment/);
    expect(stderr).not.toContain(MASTER);
    const v = await verify(auditPath, { SVC_ENCRYPTION_KEY: MASTER });
    expect(v.code).toBe(1);
    expect(v.out).toMatch(/^broken at line 4:/);
    expect(v.out).toMatch(/new chain segment at line 5/);
  }, 60_000);
});
