/**
 * The ceiling of one Node.js event loop serving JSON over HTTP/1.1 on this machine: a bare node:http
 * server that reads each POST body, JSON-parses it and answers ten fixed hits, with no search, no auth
 * and no framework. Under the same h2load as svc, it shows how much of svc's REST time is the HTTP
 * and JSON a Node.js server cannot avoid, and so what the server comparison could reach at best.
 */
import { spawn } from 'node:child_process';
import { freePort } from '../../roles/testing/free-port.js';

const SCRIPT = `
import { createServer } from 'node:http';
const hits = Array.from({ length: 10 }, (_, i) => ({ id: String(i), score: i / 10 }));
const server = createServer((req, res) => {
  const chunks = [];
  req.on('data', (c) => chunks.push(c));
  req.on('end', () => {
    const body = JSON.parse(Buffer.concat(chunks).toString('utf8'));
    const out = JSON.stringify({ hits: body.k === undefined ? [] : hits });
    res.writeHead(200, { 'content-type': 'application/json', 'content-length': Buffer.byteLength(out) });
    res.end(out);
  });
});
server.keepAliveTimeout = 60_000;
server.listen(Number(process.env.PORT), '127.0.0.1', () => console.log('listening'));
`;

export interface NodeFloor {
  pid: number;
  url: string;
  stop(): Promise<void>;
}

export async function startNodeFloor(): Promise<NodeFloor> {
  const port = await freePort();
  const child = spawn(process.execPath, ['--input-type=module', '-e', SCRIPT], { env: { PATH: process.env.PATH, PORT: String(port) }, stdio: ['ignore', 'pipe', 'pipe'] });
  await new Promise<void>((resolve, reject) => {
    let err = '';
    child.stderr.on('data', (b: Buffer) => { err += b.toString(); });
    child.stdout.once('data', () => resolve());
    child.once('exit', (code) => reject(new Error(`the node:http floor server exited (${code}): ${err.slice(-300)}`)));
  });
  return {
    pid: child.pid!,
    url: `http://127.0.0.1:${port}`,
    async stop() {
      if (child.exitCode !== null) return;
      const gone = new Promise((r) => child.once('exit', r));
      child.kill('SIGKILL');
      await gone;
    },
  };
}
