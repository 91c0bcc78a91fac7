#!/usr/bin/env node
import { readFileSync } from 'node:fs';
import { parseArgs } from 'node:util';
import { variablesSummary } from '../reference/markdown.js';
import { COMMANDS } from './commands.js';
import './serve.js';
import './demo.js';
import './verify-audit.js';
import '../import/command.js';
import '../tui/command.js';
import '../mcp/command.js';
// Extension point: `svc mcp`, `svc tui` and `svc admin import` register themselves the same way
// (import their module here; each calls registerCommand from ./commands.js).

function version(): string {
  const pkg = JSON.parse(readFileSync(new URL('../../../package.json', import.meta.url), 'utf8')) as { version: string };
  return pkg.version;
}

function help(): string {
  const width = Math.max(...Object.keys(COMMANDS).map((n) => n.length));
  const lines = Object.entries(COMMANDS).sort(([a], [b]) => a.localeCompare(b))
    .map(([name, c]) => `  svc ${name.padEnd(width)}  ${c.summary}`);
  return ['svc: a vector database (REST, HTTP/2, gRPC, MCP) over one encrypted data directory', '', 'Usage:', ...lines,
    '  svc --version', '  svc --help', '', 'svc <command> --help shows the options of a command.', '', variablesSummary()].join('\n');
}

function commandHelp(name: string): string {
  const c = COMMANDS[name];
  const opts = Object.entries(c.options).map(([o, d]) => `  --${o}${d.type === 'string' ? ' VALUE' : ''}`);
  return [`${c.summary}`, '', `Usage: ${c.usage}`, ...(opts.length ? ['', 'Options:', ...opts] : []), '  --help', '', ...(c.epilog ? [c.epilog()] : [])].join('\n');
}

/** Finds the longest command name the arguments start with (`admin verify-audit` before `admin`). */
function resolveCommand(argv: string[]): { name: string; rest: string[] } | null {
  for (let n = Math.min(2, argv.length); n >= 1; n--) {
    const name = argv.slice(0, n).join(' ');
    if (COMMANDS[name]) return { name, rest: argv.slice(n) };
  }
  return null;
}

async function main(argv: string[]): Promise<number> {
  if (argv.length === 0 || argv[0] === '--help' || argv[0] === '-h' || argv[0] === 'help') {
    process.stdout.write(help());
    return argv.length === 0 ? 2 : 0;
  }
  if (argv[0] === '--version' || argv[0] === '-V') {
    process.stdout.write(`svc ${version()}\n`);
    return 0;
  }
  const found = resolveCommand(argv);
  if (found === null) {
    process.stderr.write(`svc: unknown command "${argv.filter((a) => !a.startsWith('-')).slice(0, 2).join(' ')}". Run svc --help to see the commands.\n`);
    return 2;
  }
  const command = COMMANDS[found.name];
  let parsed: ReturnType<typeof parseArgs>;
  try {
    parsed = parseArgs({ args: found.rest, options: { ...command.options, help: { type: 'boolean', short: 'h' } }, allowPositionals: command.positionals ?? false, strict: true });
  } catch (e) {
    process.stderr.write(`svc ${found.name}: ${(e as Error).message}\nHint: run svc ${found.name} --help to see its options.\n`);
    return 2;
  }
  if (parsed.values.help) {
    process.stdout.write(commandHelp(found.name));
    return 0;
  }
  return command.run({ values: parsed.values, positionals: parsed.positionals });
}

main(process.argv.slice(2)).then((code) => {
  if (code >= 0) process.exitCode = code;
}, (e: unknown) => {
  process.stderr.write(`svc: ${(e as Error).stack ?? String(e)}\n`);
  process.exitCode = 1;
});
