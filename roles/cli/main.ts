#!/usr/bin/env node
import { readFileSync } from 'node:fs';
import { parseArgs } from 'node:util';
import { COMMAND_MODULES, loadAllCommands, loadCommand } from './command-modules.js';
import type { Command } from './commands.js';
// Extension point: a command's module calls registerCommand from ./commands.js, and is named in
// ./command-modules.ts, which imports only the module of the command run.

function version(): string {
  const pkg = JSON.parse(readFileSync(new URL('../../../package.json', import.meta.url), 'utf8')) as { version: string };
  return pkg.version;
}

async function help(commands: Record<string, Command>): Promise<string> {
  // The reference tables (and the modules they describe) load only for --help.
  const { variablesSummary } = await import('../reference/markdown.js');
  const width = Math.max(...Object.keys(commands).map((n) => n.length));
  const lines = Object.entries(commands).sort(([a], [b]) => a.localeCompare(b))
    .map(([name, c]) => `  svc ${name.padEnd(width)}  ${c.summary}`);
  return ['svc: a vector database (REST, HTTP/2, gRPC, MCP) over one encrypted data directory', '', 'Usage:', ...lines,
    '  svc --version', '  svc --help', '', 'svc <command> --help shows the options of a command.', '', variablesSummary()].join('\n');
}

function commandHelp(name: string, c: Command): string {
  const opts = Object.entries(c.options).map(([o, d]) => `  --${o}${d.type === 'string' ? ' VALUE' : ''}`);
  return [`${c.summary}`, '', `Usage: ${c.usage}`, ...(opts.length ? ['', 'Options:', ...opts] : []), '  --help', '', ...(c.epilog ? [c.epilog()] : [])].join('\n');
}

/** Finds the longest command name the arguments start with (`admin verify-audit` before `admin`). */
function resolveCommand(argv: string[]): { name: string; rest: string[] } | null {
  for (let n = Math.min(2, argv.length); n >= 1; n--) {
    const name = argv.slice(0, n).join(' ');
    if (Object.hasOwn(COMMAND_MODULES, name)) return { name, rest: argv.slice(n) };
  }
  return null;
}

async function main(argv: string[]): Promise<number> {
  if (argv.length === 0 || argv[0] === '--help' || argv[0] === '-h' || argv[0] === 'help') {
    process.stdout.write(await help(await loadAllCommands()));
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
  const command = await loadCommand(found.name);
  let parsed: ReturnType<typeof parseArgs>;
  try {
    parsed = parseArgs({ args: found.rest, options: { ...command.options, help: { type: 'boolean', short: 'h' } }, allowPositionals: command.positionals ?? false, strict: true });
  } catch (e) {
    process.stderr.write(`svc ${found.name}: ${(e as Error).message}\nHint: run svc ${found.name} --help to see its options.\n`);
    return 2;
  }
  if (parsed.values.help) {
    process.stdout.write(commandHelp(found.name, command));
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
