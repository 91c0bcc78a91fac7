/**
 * docs/grpc.md's example, run as written against `svc demo` (issue 21: it used `npx buf`, which finds no
 * buf here, and a 3-number vector for the demo's 8 dimensions). Only the gRPC port is changed, to the one
 * the demo serves on. buf is a devDependency shipped as a Linux x64 binary: elsewhere the test is
 * skipped. Imports no project code.
 */
import { spawnSync } from 'node:child_process';
import { existsSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { markedBlocks } from './doc-blocks.js';
import { ROOT, cleanEnv, freePort, run, tempDir, type Proc } from './harness.js';

const BUF = join(ROOT, 'node_modules', '@bufbuild', 'buf-linux-x64', 'bin', 'buf');
let demo: Proc | null = null;
afterAll(async () => {
  demo?.child.kill('SIGTERM');
  await demo?.exited;
});

describe('docs/grpc.md', () => {
  it.skipIf(!existsSync(BUF))('the buf curl example answers three science documents from svc demo', async () => {
    const [block] = markedBlocks('docs/grpc.md', 'docs-grpc.test.ts');
    expect(block.lang).toBe('sh');
    const demoDir = tempDir('svc-grpc-doc-');
    const grpcPort = await freePort();
    demo = run(['demo'], cleanEnv({ SVC_DEMO_DIR: demoDir, SVC_REST_ADDR: `127.0.0.1:${await freePort()}`, SVC_GRPC_ADDR: `127.0.0.1:${grpcPort}` }));
    for (let i = 0; !demo.stdout().includes('svc demo is running'); i++) {
      if (i > 300) throw new Error(`svc demo did not start: ${demo.stderr()}`);
      await new Promise((r) => setTimeout(r, 100));
    }
    const r = spawnSync('bash', ['-c', `set -euo pipefail\n${block.code.replaceAll('127.0.0.1:6334', `127.0.0.1:${grpcPort}`)}`], {
      cwd: ROOT, encoding: 'utf8', timeout: 60_000, env: cleanEnv({ SVC_DEMO_DIR: demoDir }),
    });
    expect(r.status, r.stderr).toBe(0);
    const hits = (JSON.parse(r.stdout) as { hits: { id: string; payload: { category: string } }[] }).hits;
    expect(hits).toHaveLength(3);
    for (const h of hits) expect(h.payload.category).toBe('science');
  }, 60_000);
});
