/**
 * The README's examples, run as written (issue 21): the embedded example in a project that depends on
 * svc (as `npm install ../svc` leaves it), `svc serve` with keys kept in files (and again after a
 * restart), the curl calls against it, and the `svc mcp` command an MCP client starts. Only the port is
 * changed, to a free one. Needs the build (npm test builds first), openssl and curl. Imports no project code.
 */
import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import { mkdirSync, symlinkSync } from 'node:fs';
import { join } from 'node:path';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StdioClientTransport } from '@modelcontextprotocol/sdk/client/stdio.js';
import { afterAll, describe, expect, it } from 'vitest';
import { markedBlocks, svcOnPath } from './doc-blocks.js';
import { ROOT, freePort, tempDir } from './harness.js';

const blocks = markedBlocks('README.md', 'readme.test.ts');
const project = tempDir('svc-readme-');
mkdirSync(join(project, 'node_modules'));
symlinkSync(ROOT, join(project, 'node_modules', 'svc'));
const env = { PATH: svcOnPath(project), HOME: project, RUST_LOG: 'warn' };

function sh(code: string, extra: Record<string, string> = {}): { status: number | null; stdout: string; stderr: string } {
  const r = spawnSync('bash', ['-c', `set -euo pipefail\n${code}`], { cwd: project, env: { ...env, ...extra }, encoding: 'utf8', timeout: 60_000 });
  return { status: r.status, stdout: r.stdout, stderr: r.stderr };
}

const running: ChildProcess[] = [];
afterAll(() => {
  for (const c of running) if (c.exitCode === null) process.kill(-c.pid!, 'SIGKILL');
});

/** Starts a long-running line of the README in its own process group; resolves once /readyz answers. */
async function background(line: string, port: number, grpcPort: number): Promise<{ stop(): Promise<void>; log(): string }> {
  const child = spawn('bash', ['-c', line], {
    cwd: project, detached: true, stdio: ['ignore', 'pipe', 'pipe'],
    env: { ...env, SVC_REST_ADDR: `127.0.0.1:${port}`, SVC_GRPC_ADDR: `127.0.0.1:${grpcPort}` },
  });
  running.push(child);
  let log = '';
  child.stdout!.on('data', (d: Buffer) => { log += d.toString(); });
  child.stderr!.on('data', (d: Buffer) => { log += d.toString(); });
  const exited = new Promise<void>((res) => child.on('exit', () => res()));
  for (let i = 0; ; i++) {
    if (child.exitCode !== null) throw new Error(`exited early: ${log}`);
    if ((await fetch(`http://127.0.0.1:${port}/readyz`).then((r) => r.status, () => 0)) === 200) break;
    if (i > 300) throw new Error(`not ready: ${log}`);
    await new Promise((r) => setTimeout(r, 100));
  }
  return { stop: async () => { process.kill(-child.pid!, 'SIGTERM'); await exited; }, log: () => log };
}

describe('README examples, as written', () => {
  it('marks the five blocks this test runs', () => {
    expect(blocks.map((b) => b.lang)).toEqual(['sh', 'js', 'sh', 'sh', 'sh']);
  });

  it('the embedded example runs in a project that depends on svc, again and again', () => {
    const [keySetup, example] = blocks;
    expect(sh(keySetup.code).status).toBe(0);
    expect(sh(`cat > example.mjs <<'SVC_EXAMPLE'\n${example.code}\nSVC_EXAMPLE`).status).toBe(0);
    for (let run = 0; run < 2; run++) {
      const r = sh('node example.mjs');
      expect(r.stderr).toBe('');
      expect(r.status).toBe(0);
      expect(r.stdout).toMatch(/\[\s*\{\s*id: 'a',\s*rank: 0,\s*score: 0\.995\d*,\s*payload: \{ lang: 'en' \}\s*\}\s*\]/);
    }
  }, 60_000);

  it('svc serve with the keys in files answers the curl calls, and again after a restart', async () => {
    const [, , server, calls] = blocks;
    const [once, serveLine] = server.code.split('\n');
    expect(serveLine).toContain('svc serve');
    expect(sh(once).status).toBe(0);
    const port = await freePort();
    const grpcPort = await freePort();
    const first = await background(serveLine, port, grpcPort);
    const r = sh(calls.code.replaceAll('localhost:6333', `127.0.0.1:${port}`));
    expect(r.status, r.stderr).toBe(0);
    const answer = JSON.parse(r.stdout.slice(r.stdout.lastIndexOf('{"hits"')));
    expect(answer.hits).toEqual([{ id: 'a', rank: 0, score: expect.closeTo(0.995, 3), payload: { lang: 'en' } }]);
    await first.stop();

    const second = await background(serveLine, port, grpcPort);
    // The same calls again: the collection is still there (its create is refused), its point found.
    const again = sh(calls.code.replaceAll('localhost:6333', `127.0.0.1:${port}`));
    expect(again.status, again.stderr).toBe(0);
    expect(again.stdout).toContain('"code":"already_exists"');
    expect(JSON.parse(again.stdout.slice(again.stdout.lastIndexOf('{"hits"'))).hits[0]).toMatchObject({ id: 'a', payload: { lang: 'en' } });
    await second.stop();
  }, 90_000);

  it('the svc mcp command serves the same data to an MCP client', async () => {
    const mcpLine = blocks[4].code;
    const transport = new StdioClientTransport({ command: 'bash', args: ['-c', mcpLine], cwd: project, env, stderr: 'pipe' });
    const client = new Client({ name: 'readme', version: '1.0.0' });
    await client.connect(transport);
    try {
      const listed = (await client.callTool({ name: 'list_collections', arguments: {} })) as { structuredContent: any };
      expect(listed.structuredContent.collections.map((c: { name: string }) => c.name)).toEqual(['docs']);
      const found = (await client.callTool({ name: 'search', arguments: { collection: 'docs', vector: [1, 0.1, 0], k: 5 } })) as { structuredContent: any };
      expect(found.structuredContent.hits[0]).toMatchObject({ id: 'a', rank: 0 });
    } finally {
      await client.close();
    }
  }, 60_000);
});
