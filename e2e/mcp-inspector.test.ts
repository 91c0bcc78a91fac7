/**
 * `svc mcp` driven by the MCP Inspector's CLI mode (a second, independent client). The Inspector exits 0
 * even when a tool reports an error, so the test reads what it prints. Imports no project code.
 */
import { execFile } from 'node:child_process';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { describe, expect, it } from 'vitest';
import { MAIN, MASTER, ROOT, cleanEnv, tempDir } from './harness.js';

const run = promisify(execFile);
// A devDependency (@modelcontextprotocol/inspector 0.15), so the test needs no download at run time.
const INSPECTOR = join(ROOT, 'node_modules', '.bin', 'mcp-inspector');

async function inspector(dataDir: string, args: string[]): Promise<any> {
  const env = cleanEnv({ SVC_API_KEYS: 'inspector-key', SVC_API_KEY: 'inspector-key', SVC_ENCRYPTION_KEY: MASTER });
  const { stdout } = await run(INSPECTOR, ['--cli', process.execPath, MAIN, 'mcp', '--data-dir', dataDir, ...args],
    { env, cwd: ROOT, timeout: 170_000, maxBuffer: 16 << 20 });
  return JSON.parse(stdout);
}

describe('svc mcp under the MCP Inspector CLI', () => {
  it('lists the tools, runs a call, and reports a tool error with its code', { timeout: 180_000 }, async () => {
    const dir = join(tempDir(), 'data');
    const list = await inspector(dir, ['--method', 'tools/list']);
    expect(list.tools.map((t: { name: string }) => t.name)).toEqual(expect.arrayContaining(['search', 'upsert', 'snapshot', 'database_stats']));

    const created = await inspector(dir, ['--method', 'tools/call', '--tool-name', 'create_collection',
      '--tool-arg', 'name=web', '--tool-arg', 'dim=2', '--tool-arg', 'metric=l2']);
    expect(created.isError).toBeFalsy();
    expect(created.structuredContent).toMatchObject({ name: 'web', dim: 2, metric: 'l2', count: 0 });

    const tooMany = await inspector(dir, ['--method', 'tools/call', '--tool-name', 'search',
      '--tool-arg', 'collection=web', '--tool-arg', 'vector=[1,2]', '--tool-arg', 'k=20000']);
    expect(tooMany.isError).toBe(true);
    expect(tooMany.structuredContent.error.code).toBe('limit_exceeded');
    expect(tooMany.structuredContent.error.message).toMatch(/SVC_MAX_K/);
  });
});
