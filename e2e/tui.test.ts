/**
 * `svc tui` in a real terminal: tmux runs the cockpit against a real `svc serve`; keys go in with
 * send-keys, the screen comes back with capture-pane. tmux must be installed (.ci/run installs it).
 */
import { execFileSync } from 'node:child_process';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { api, freePort, MAIN, MASTER, serve, tempDir, type Server } from './harness.js';

const SOCKET = `svc-tui-${process.pid}`;
const KEY = 'tui-root-key';
let server: Server;
let sessions = 0;

function tmux(...args: string[]): string {
  return execFileSync('tmux', ['-L', SOCKET, ...args], { encoding: 'utf8' });
}

function shellQuote(s: string): string {
  return `'${s.replaceAll("'", "'\\''")}'`;
}

/** Starts the cockpit in a fresh tmux session of this size; the shell line reports the exit code. */
function startCockpit(env: Record<string, string>, size: { cols: number; rows: number }, args: string[] = []): string {
  const name = `t${sessions++}`;
  const envArgs = Object.entries({ TERM: 'xterm-256color', PATH: process.env.PATH ?? '', ...env }).map(([k, v]) => shellQuote(`${k}=${v}`));
  const cmd = `env -i ${envArgs.join(' ')} ${shellQuote(process.execPath)} ${shellQuote(MAIN)} tui ${args.map(shellQuote).join(' ')}; echo "EXITED:$?"; sleep 60`;
  tmux('new-session', '-d', '-s', name, '-x', String(size.cols), '-y', String(size.rows), cmd);
  return name;
}

function screen(session: string): string {
  return tmux('capture-pane', '-p', '-t', session);
}

/** Waits (up to a generous bound, not a timing assertion) until the screen shows what is expected. */
async function waitFor(session: string, what: RegExp | string, timeoutMs = 20_000): Promise<string> {
  const deadline = Date.now() + timeoutMs;
  let last = '';
  while (Date.now() < deadline) {
    last = screen(session);
    if (typeof what === 'string' ? last.includes(what) : what.test(last)) return last;
    await new Promise((r) => setTimeout(r, 150));
  }
  throw new Error(`screen never showed ${String(what)}; last screen:\n${last}`);
}

function keys(session: string, ...k: string[]): void {
  tmux('send-keys', '-t', session, ...k);
}

function type(session: string, text: string): void {
  tmux('send-keys', '-t', session, '-l', text);
}

const films = Array.from({ length: 50 }, (_, i) => ({
  id: `film-${i}`,
  vector: [Math.cos(i), Math.sin(i), (i % 5) - 2, 1 + (i % 3)],
  payload: { title: `Film ${i}`, year: 1950 + i },
}));

beforeAll(async () => {
  try {
    execFileSync('tmux', ['-V'], { encoding: 'utf8' });
  } catch {
    throw new Error('tmux is not installed: these tests drive the cockpit in tmux. Install it (apt-get install tmux); .ci/run does.');
  }
  const dir = tempDir('svc-tui-');
  server = await serve({ SVC_API_KEYS: KEY, SVC_ENCRYPTION_KEY: MASTER, SVC_DATA_DIR: join(dir, 'data') }, { cwd: dir });
  const call = api(server.base, KEY);
  expect((await call('POST', '/v1/collections', { name: 'films', dim: 4, metric: 'cosine' })).status).toBe(201);
  expect((await call('POST', '/v1/collections', { name: 'empty', dim: 3, metric: 'l2', index: 'flat' })).status).toBe(201);
  expect((await call('PUT', '/v1/collections/films/points', { points: films })).status).toBe(200);
});

afterAll(async () => {
  try {
    tmux('kill-server');
  } catch {
    // no session left
  }
  await server?.stop();
});

describe('svc tui in a terminal', () => {
  it('lists collections with counts and index state, and request and error rates from /metrics', async () => {
    const s = startCockpit({ SVC_TUI_URL: server.base, SVC_API_KEY: KEY }, { cols: 110, rows: 30 });
    const shot = await waitFor(s, /requests \d+(\.\d+)?\/s {2}errors \d+(\.\d+)?\/s/);
    expect(shot).toContain(`svc cockpit [connected]  ${server.base}`);
    expect(shot).toMatch(/> empty\s+3 l2\s+0 {2}flat current/);
    expect(shot).toMatch(/ {2}films\s+4 cosine\s+50 {2}hnsw (current|stale)/);
    keys(s, 'q');
    await waitFor(s, 'EXITED:0');
  });

  it('runs a search from the query box and shows the hits, best first', async () => {
    const s = startCockpit({ SVC_TUI_URL: server.base, SVC_API_KEY: KEY }, { cols: 120, rows: 30 });
    await waitFor(s, 'films');
    keys(s, 'Down');
    keys(s, 's');
    await waitFor(s, 'collection: films');
    type(s, JSON.stringify(films[7].vector));
    keys(s, 'Enter');
    const shot = await waitFor(s, "Hits: 10 from 'films' (k 10, given vector, dim 4)");
    expect(shot).toMatch(/#0 film-7 {2}1\.0000 {2}\{"title":"Film 7","year":1957\}/);
    expect(shot).toMatch(/#9 film-\d+/);

    // Tab to the collection field, point it at a collection that does not exist: the server's answer shows.
    keys(s, 'Tab');
    for (let i = 0; i < 5; i++) keys(s, 'BSpace');
    type(s, 'nope');
    keys(s, 'Enter');
    await waitFor(s, /search failed: HTTP 404: not_found: collection 'nope' does not exist/);
    keys(s, 'C-c');
    await waitFor(s, 'EXITED:0');
  });

  it('searches with a random vector of the right dim', async () => {
    const s = startCockpit({ SVC_TUI_URL: server.base }, { cols: 100, rows: 30 }, ['--api-key', KEY]);
    await waitFor(s, 'films');
    keys(s, 'Down');
    keys(s, 'R');
    const shot = await waitFor(s, "Hits: 10 from 'films' (k 10, random vector, dim 4)");
    expect(shot.match(/#\d+ film-\d+/g)).toHaveLength(10);
    keys(s, 'q');
    await waitFor(s, 'EXITED:0');
  });

  it('degrades on a narrow terminal and says so when too small', async () => {
    const s = startCockpit({ SVC_TUI_URL: server.base, SVC_API_KEY: KEY }, { cols: 36, rows: 14 });
    const shot = await waitFor(s, /films 50 (current|stale)/);
    expect(shot).toContain('svc [connected]');
    for (const line of shot.split('\n')) expect(line.length).toBeLessThanOrEqual(36);
    tmux('resize-window', '-t', s, '-x', '18', '-y', '6');
    const small = await waitFor(s, 'too small: 18x6');
    expect(small).toContain('svc: connected');
    tmux('resize-window', '-t', s, '-x', '100', '-y', '20');
    await waitFor(s, 'svc cockpit [connected]');
    keys(s, 'q');
    await waitFor(s, 'EXITED:0');
  });

  it('says clearly when the key is refused or missing', async () => {
    const wrong = startCockpit({ SVC_TUI_URL: server.base, SVC_API_KEY: 'not-a-key' }, { cols: 140, rows: 20 });
    const shot = await waitFor(wrong, 'KEY REFUSED (401) for the key from SVC_API_KEY');
    expect(shot).toContain('[KEY REFUSED]');
    expect(shot).not.toContain('not-a-key');
    const none = startCockpit({ SVC_TUI_URL: server.base }, { cols: 120, rows: 20 });
    await waitFor(none, 'KEY REFUSED (401): no key given; set SVC_API_KEY or pass --api-key');
    keys(wrong, 'q');
    keys(none, 'q');
    await waitFor(none, 'EXITED:0');
  });

  it('says clearly when the server is unreachable', async () => {
    const port = await freePort();
    const s = startCockpit({ SVC_TUI_URL: `http://127.0.0.1:${port}`, SVC_API_KEY: KEY }, { cols: 120, rows: 20 });
    const shot = await waitFor(s, `SERVER UNREACHABLE at http://127.0.0.1:${port} (ECONNREFUSED); retrying every 2 s`);
    expect(shot).toContain('[UNREACHABLE]');
    keys(s, 'q');
    await waitFor(s, 'EXITED:0');
  });
});
