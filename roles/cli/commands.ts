import type { ParseArgsConfig } from 'node:util';

/**
 * The command registry of `svc`. Extension point: a command is one entry here, added by its own module
 * (registerCommand), and that module is named in ./command-modules.ts, which imports it when it is run.
 * A command's options are node:util parseArgs options; unknown flags are errors with a hint.
 */
export interface Command {
  summary: string;
  usage: string;
  options: NonNullable<ParseArgsConfig['options']>;
  /** Printed after the options by `svc <command> --help` (serve: the environment variables and defaults). */
  epilog?: () => string;
  /** Whether the command takes positional arguments (e.g. the FILE of verify-audit). */
  positionals?: boolean;
  run(args: { values: Record<string, string | boolean | (string | boolean)[] | undefined>; positionals: string[] }): Promise<number>;
}

export const COMMANDS: Record<string, Command> = {};

export function registerCommand(name: string, command: Command): void {
  COMMANDS[name] = command;
}
