/** Starts a real store_b (Chroma) server from its npm bindings in a child process on 127.0.0.1. */
import { spawn, type ChildProcess } from 'node:child_process';
import { createRequire } from 'node:module';
import { freePort } from './helpers.js';

export interface ChromaServer {
  url: string;
  port: number;
  stop(): Promise<void>;
}

export async function startChroma(dataDir: string): Promise<ChromaServer> {
  const bindings = createRequire(import.meta.url).resolve('chromadb-js-bindings-linux-x64-gnu');
  const port = await freePort();
  const script = `require(${JSON.stringify(bindings)}).cli(['chroma','run','--path',${JSON.stringify(dataDir)},'--host','127.0.0.1','--port','${port}'])`;
  const child: ChildProcess = spawn(process.execPath, ['-e', script], { stdio: ['ignore', 'ignore', 'pipe'] });
  let stderr = '';
  child.stderr!.on('data', (d: Buffer) => { stderr += d.toString(); });
  let exited = false;
  const gone = new Promise<void>((r) => child.on('exit', () => { exited = true; r(); }));
  const url = `http://127.0.0.1:${port}`;
  for (let i = 0; ; i++) {
    if (exited) throw new Error(`the Chroma server exited at start: ${stderr.slice(-2000)}`);
    const up = await fetch(`${url}/api/v2/heartbeat`).then((r) => r.ok, () => false);
    if (up) break;
    if (i > 300) {
      child.kill('SIGKILL');
      throw new Error(`the Chroma server did not answer on ${url} within 30 s: ${stderr.slice(-2000)}`);
    }
    await new Promise((r) => setTimeout(r, 100));
  }
  return {
    url,
    port,
    async stop() {
      if (!exited) child.kill('SIGTERM');
      const t = setTimeout(() => { if (!exited) child.kill('SIGKILL'); }, 5000);
      await gone;
      clearTimeout(t);
    },
  };
}
