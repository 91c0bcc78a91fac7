import { describe, expect, it } from 'vitest';
import { COMMAND_MODULES, loadAllCommands, loadCommand } from './command-modules.js';

describe('the command table', () => {
  it('names exactly the commands its modules register, each under its own name', async () => {
    const all = await loadAllCommands();
    expect(Object.keys(all).sort()).toEqual(Object.keys(COMMAND_MODULES).sort());
    for (const name of Object.keys(COMMAND_MODULES)) expect(await loadCommand(name)).toBe(all[name]);
  });
});
