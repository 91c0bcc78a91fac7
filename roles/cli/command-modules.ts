import { COMMANDS, type Command } from './commands.js';

/**
 * Where each command of `svc` lives. Its module registers it (registerCommand) when imported, and only
 * the module of the command asked for is imported: `svc serve` loads no MCP SDK, PostgreSQL client or
 * terminal UI, and each process start is that much shorter. `svc --help` lists them all, so it imports
 * every one. A new command is one line here (its module calls registerCommand with the same name).
 */
export const COMMAND_MODULES: Readonly<Record<string, () => Promise<unknown>>> = {
  serve: () => import('./serve.js'),
  demo: () => import('./demo.js'),
  'admin verify-audit': () => import('./verify-audit.js'),
  'admin import': () => import('../import/command.js'),
  tui: () => import('../tui/command.js'),
  mcp: () => import('../mcp/command.js'),
};

/** The command named, once its module has registered it. */
export async function loadCommand(name: string): Promise<Command> {
  await COMMAND_MODULES[name]();
  const c = COMMANDS[name];
  if (c === undefined) throw new Error(`the module of "${name}" registers no command of that name`);
  return c;
}

/** Every command (for the list in `svc --help`). */
export async function loadAllCommands(): Promise<Record<string, Command>> {
  await Promise.all(Object.values(COMMAND_MODULES).map((load) => load()));
  return COMMANDS;
}
