/** `svc tui`: the terminal cockpit against SVC_TUI_URL with the key from --api-key or SVC_API_KEY. */
import { registerCommand } from '../cli/commands.js';
import { runCockpit } from './app.js';
import { CockpitClient } from './client.js';
import { initialState } from './view.js';
import { DEFAULT_TUI_URL } from './defaults.js';

registerCommand('tui', {
  summary: 'terminal cockpit: collections, request and error rates, a search box (SVC_TUI_URL, SVC_API_KEY)',
  usage: [
    'svc tui [--api-key KEY] [--url URL]',
    '',
    `  --url      server address (default SVC_TUI_URL, else ${DEFAULT_TUI_URL})`,
    '  --api-key  bearer key (default SVC_API_KEY; none when the server runs with SVC_INSECURE=true)',
    '',
    'Keys: Up/Down select a collection, s open the search box (Tab switches collection/vector, an empty',
    'vector searches with a random vector of the right dim, Enter runs, Esc goes back), R search the',
    'selected collection with a random vector, r refresh, q quit.',
  ].join('\n'),
  options: {
    'api-key': { type: 'string' },
    url: { type: 'string' },
  },
  async run({ values }) {
    const url = (values.url as string | undefined) ?? (process.env.SVC_TUI_URL || DEFAULT_TUI_URL);
    try {
      const u = new URL(url);
      if (u.protocol !== 'http:' && u.protocol !== 'https:') throw new Error('not http');
    } catch {
      process.stderr.write(`svc tui: '${url}' is not an http:// or https:// URL (SVC_TUI_URL or --url)\n`);
      return 2;
    }
    const flagKey = values['api-key'] as string | undefined;
    const envKey = process.env.SVC_API_KEY || undefined;
    const key = flagKey ?? envKey;
    const keySource = flagKey !== undefined ? '--api-key' : envKey !== undefined ? 'SVC_API_KEY' : 'none';
    if (!process.stdin.isTTY || !process.stdout.isTTY) {
      process.stderr.write('svc tui: needs an interactive terminal (stdin and stdout must be a TTY)\n');
      return 2;
    }
    return runCockpit(new CockpitClient(url, key), initialState(url, keySource), { input: process.stdin, output: process.stdout });
  },
});
