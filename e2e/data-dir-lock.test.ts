import { spawn } from 'node:child_process';
import { createHash } from 'node:crypto';
import { readdirSync, readFileSync, statSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { MASTER, ROOT, api, cleanEnv, run, serve, tempDir, type Server } from './harness.js';

let holder: Server | undefined;
afterAll(async () => { await holder?.stop('SIGKILL'); });

/** Every file of a data directory but its lock, with a hash of its bytes: what a second open must not change. */
function fingerprint(dir: string): Record<string, string> {
  const out: Record<string, string> = {};
  const walk = (d: string) => {
    for (const name of readdirSync(d)) {
      const p = join(d, name);
      if (statSync(p).isDirectory()) walk(p);
      else if (name !== 'svc.lock') out[p.slice(dir.length)] = createHash('sha256').update(readFileSync(p)).digest('hex');
    }
  };
  walk(dir);
  return out;
}

/** An embedded open from another Node process, as a user's script would do it with the package. */
function embeddedOpen(dataDir: string): Promise<{ code: number | null; out: string }> {
  const script = `import { openDatabase } from ${JSON.stringify(join(ROOT, 'dist', 'core', 'embedded.js'))};
try {
  const db = await openDatabase({ dataDir: ${JSON.stringify(dataDir)}, encryptionKey: ${JSON.stringify(MASTER)} });
  const { collections } = await db.listCollections();
  await db.close();
  console.log(JSON.stringify({ opened: true, names: collections.map((c) => c.name) }));
} catch (e) {
  console.log(JSON.stringify({ opened: false, code: e.code, message: e.message }));
}`;
  return new Promise((resolve) => {
    const child = spawn(process.execPath, ['--input-type=module', '-e', script], { env: cleanEnv({}), stdio: ['ignore', 'pipe', 'pipe'] });
    let out = '';
    child.stdout.on('data', (d: Buffer) => { out += d.toString(); });
    child.on('exit', (code) => resolve({ code, out }));
  });
}

describe('one process per data directory', () => {
  it('refuses every second open while a server holds the directory, changes nothing, and opens after kill -9', async () => {
    const dir = tempDir();
    const dataDir = join(dir, 'data');
    const env = { SVC_API_KEYS: 'k', SVC_ENCRYPTION_KEY: MASTER, SVC_DATA_DIR: dataDir };
    holder = await serve(env);
    const call = api(holder.base, 'k');
    expect((await call('POST', '/v1/collections', { name: 'c', dim: 2, metric: 'l2' })).status).toBe(201);
    const points = Array.from({ length: 50 }, (_, i) => ({ id: `p${i}`, vector: [i, 1], payload: { i } }));
    expect((await call('PUT', '/v1/collections/c/points', { points })).status).toBe(200);
    const pid = String(holder.child.pid);
    const before = fingerprint(dataDir);
    expect(Object.keys(before)).toContain('/svc.meta');

    const inUse = new RegExp(`in use by process ${pid}\\b`);
    const second = run(['serve'], cleanEnv({ ...env, SVC_REST_ADDR: '127.0.0.1:0', SVC_GRPC_ADDR: '127.0.0.1:0' }));
    expect(await second.exited).not.toBe(0);
    expect(second.stderr()).toMatch(inUse);
    expect(second.stderr()).toContain('unavailable');

    const mcp = run(['mcp', '--data-dir', dataDir], cleanEnv({ SVC_ENCRYPTION_KEY: MASTER, SVC_API_KEYS: 'k', SVC_API_KEY: 'k' }));
    expect(await mcp.exited).not.toBe(0);
    expect(mcp.stderr()).toMatch(inUse);

    const input = join(dir, 'more.jsonl');
    writeFileSync(input, '{"id": "x", "vector": [9, 9], "payload": {}}\n');
    const imp = run(['admin', 'import', '--source', 'store_a', '--input', input, '--collection', 'c', '--data-dir', dataDir],
      cleanEnv({ SVC_ENCRYPTION_KEY: MASTER }));
    expect(await imp.exited).not.toBe(0);
    expect(imp.stderr()).toMatch(inUse);

    const embedded = await embeddedOpen(dataDir);
    const refused = JSON.parse(embedded.out) as { opened: boolean; code: string; message: string };
    expect(refused).toMatchObject({ opened: false, code: 'unavailable' });
    expect(refused.message).toMatch(inUse);

    // Nothing the refused opens did reached the directory, and the holder still serves every point.
    expect(fingerprint(dataDir)).toEqual(before);
    expect((await call('GET', '/v1/collections/c')).json.count).toBe(50);

    // A holder killed without any clean-up leaves no lock behind: the next open simply works.
    holder.child.kill('SIGKILL');
    await holder.exited;
    holder = undefined;
    const after = await embeddedOpen(dataDir);
    expect(JSON.parse(after.out)).toEqual({ opened: true, names: ['c'] });
    holder = await serve(env);
    expect((await api(holder.base, 'k')('GET', '/v1/collections/c')).json.count).toBe(50);
  });
});
