import { randomBytes } from 'node:crypto';
import { existsSync, mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { homedir, platform } from 'node:os';
import { join } from 'node:path';
import { Prng } from '../../core/base/prng.js';
import type { CallContext } from '../../core/service/api.js';
import { createLogs } from '../log.js';
import { registerCommand } from './commands.js';
import { closeOnSignals, configOrRefusal, startServer, type RunningServer } from './serve.js';

/** The platform data directory: $XDG_DATA_HOME/svc/demo, ~/Library/Application Support/svc/demo, %LOCALAPPDATA%\svc\demo. */
export function defaultDemoDir(env: NodeJS.ProcessEnv): string {
  if (env.SVC_DEMO_DIR) return env.SVC_DEMO_DIR;
  if (platform() === 'darwin') return join(homedir(), 'Library', 'Application Support', 'svc', 'demo');
  if (platform() === 'win32') return join(env.LOCALAPPDATA ?? join(homedir(), 'AppData', 'Local'), 'svc', 'demo');
  return join(env.XDG_DATA_HOME || join(homedir(), '.local', 'share'), 'svc', 'demo');
}

/** A secret kept in a 0600 file, created on first run. */
function secretFile(path: string, make: () => string): string {
  if (!existsSync(path)) writeFileSync(path, `${make()}\n`, { mode: 0o600, flag: 'wx' });
  return readFileSync(path, 'utf8').trim();
}

const DEMO = 'demo';
const DIM = 8;
const CATEGORIES = ['news', 'sports', 'science', 'music'];

async function loadDemoCollection(server: RunningServer): Promise<void> {
  const ctx: CallContext = { principal: { keyName: 'demo-loader', role: 'admin', collections: ['*'] }, requestId: 'demo-load', transport: 'embedded' };
  const existing = await server.service.listCollections(ctx);
  if (existing.collections.some((c) => c.name === DEMO)) return;
  await server.service.createCollection(ctx, {
    name: DEMO, dim: DIM, metric: 'cosine',
    filterable: [{ path: 'category', field_type: 'keyword' }, { path: 'year', field_type: 'numeric' }],
  });
  const prng = new Prng(42);
  const points = Array.from({ length: 300 }, (_, i) => ({
    id: `doc-${i}`,
    vector: Array.from({ length: DIM }, () => Number(prng.gaussian().toFixed(4))),
    payload: { title: `Demo document ${i}`, category: CATEGORIES[i % CATEGORIES.length], year: 2000 + (i % 25) },
  }));
  await server.service.upsert(ctx, DEMO, { points });
}

registerCommand('demo', {
  summary: 'zero-configuration start: a local data directory, a generated key, a demo collection, a server on loopback',
  usage: 'svc demo   (SVC_DEMO_DIR overrides the data directory)',
  options: {},
  async run() {
    const dir = defaultDemoDir(process.env);
    mkdirSync(dir, { recursive: true, mode: 0o700 });
    const env: NodeJS.ProcessEnv = { ...process.env, SVC_DATA_DIR: process.env.SVC_DATA_DIR ?? join(dir, 'data') };
    if (!env.SVC_ENCRYPTION_KEY && !env.SVC_MASTER_KEY_FILE && env.SVC_INSECURE !== 'true') {
      const keyFile = join(dir, 'master.key');
      secretFile(keyFile, () => randomBytes(32).toString('hex'));
      env.SVC_MASTER_KEY_FILE = keyFile;
    }
    if (!env.SVC_API_KEYS) env.SVC_API_KEYS = secretFile(join(dir, 'api.key'), () => `svc_${randomBytes(24).toString('hex')}`);
    const apiKey = env.SVC_API_KEYS.split(',')[0].trim();
    const config = configOrRefusal(env, null);
    if (config === null) return 2;
    const logs = createLogs(config.logFilter);
    let server: RunningServer;
    try {
      const starting = startServer(config, logs, { fallbackToFreePort: true });
      closeOnSignals(starting, logs);
      server = await starting;
      await loadDemoCollection(server);
    } catch (e) {
      logs.target('svc').error({ err: (e as Error).message }, 'svc demo failed to start');
      return 1;
    }
    const scheme = config.tls ? 'https' : 'http';
    const base = `${scheme}://${config.restAddr.host.includes(':') ? `[${config.restAddr.host}]` : config.restAddr.host}:${server.restPort}`;
    const q = JSON.stringify({ vector: [0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8], k: 3, filter: { eq: { field: 'category', value: 'science' } } });
    process.stdout.write([
      '',
      `svc demo is running on ${base} (gRPC on port ${server.grpcPort ?? 'none'})`,
      `data directory: ${config.dataDir}`,
      `API key (admin, stored in ${join(dir, 'api.key')}): ${apiKey}`,
      '',
      'Try a query:',
      `  curl -s -X POST ${base}/v1/collections/${DEMO}/query -H 'authorization: Bearer ${apiKey}' -H 'content-type: application/json' -d '${q}'`,
      '',
      'Stop with Ctrl-C.',
      '',
    ].join('\n'));
    return -1;
  },
});
