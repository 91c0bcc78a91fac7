import { describe, expect, it } from 'vitest';
import { SvcError } from '../../base/errors.js';
import { COMMAND_VERSION_MAX, COMMAND_VERSION_MOVE_OUT, commandVersion } from './command.js';
import { GroupVersions } from './versions.js';

/**
 * The group's effective version (etcd's cluster version): the lowest command version over every
 * configured member, a member that sends none counted as 1, one never heard from blocking anything above 1.
 */

const own = { command: COMMAND_VERSION_MAX, stream: 1 };

function refusal(f: () => void): SvcError {
  try {
    f();
  } catch (e) {
    return e as SvcError;
  }
  throw new Error('expected a refusal');
}

describe('GroupVersions', () => {
  it('allows a move\'s commands only once every member advertised a version that reads them', () => {
    const g = new GroupVersions('n1', ['n1', 'n2', 'n3'], own);
    g.heard('n2', { command: COMMAND_VERSION_MAX, stream: 1 });
    // n3 not heard from: unknown blocks the new commands, never the plain ones.
    expect(() => g.requireCommand(1, 'a write')).not.toThrow();
    const e = refusal(() => g.requireCommand(COMMAND_VERSION_MOVE_OUT, 'a move batch'));
    expect(e).toBeInstanceOf(SvcError);
    expect(e.code).toBe('unavailable');
    expect(e.message).toContain('not heard from since this member started: n3');
    expect(e.detail).toMatchObject({ reason: 'version_skew', required_command_version: 3, older_members: [], unknown_members: ['n3'] });
    expect(g.view()).toMatchObject({ command: 1, unknown: ['n3'] });

    // n3 is an older build: it sends no versions, so it counts as version 1 and is named.
    g.heard('n3', null);
    const older = refusal(() => g.requireCommand(COMMAND_VERSION_MOVE_OUT, 'a move batch'));
    expect(older.message).toContain('on an older build: n3 (reads up to version 1)');
    expect(older.detail).toMatchObject({ older_members: [{ id: 'n3', command_version: 1 }], unknown_members: [] });
    expect(g.view().members).toContainEqual({ id: 'n3', command: 1, stream: 1, advertised: false });

    // A build that reads moves but not a batch handed out (version 2): the commit passes, the batch does not.
    g.heard('n3', { command: 2, stream: 1 });
    expect(() => g.requireCommand(2, 'a move commit')).not.toThrow();
    expect(() => g.requireCommand(3, 'a move batch')).toThrow(/n3 \(reads up to version 2\)/);

    // Upgraded: its new handshake replaces what it said before.
    g.heard('n3', { command: COMMAND_VERSION_MAX, stream: 1 });
    expect(() => g.requireCommand(COMMAND_VERSION_MOVE_OUT, 'a move batch')).not.toThrow();
    expect(g.view()).toMatchObject({ command: COMMAND_VERSION_MAX, stream: 1, unknown: [] });
  });

  it('ignores members outside the configuration and takes the lowest stream version', () => {
    const g = new GroupVersions('a', ['a', 'b'], own);
    g.heard('zz', { command: 0, stream: 0 });
    g.heard('b', { command: 9, stream: 0 });
    expect(g.of('zz')).toBeNull();
    expect(g.of('b')).toEqual({ command: 9, stream: 0 });
    expect(g.view()).toMatchObject({ command: COMMAND_VERSION_MAX, stream: 0 });
  });

  it('a move batch is a version-3 command, a write version 1', () => {
    expect(commandVersion({ uid: '', bulk: false, op: { t: 'move_out', move: 'm', uid: 'u', ids: ['a'] } })).toBe(COMMAND_VERSION_MOVE_OUT);
    expect(commandVersion({ uid: 'u', bulk: false, op: { t: 'delete', ids: ['a'] } })).toBe(1);
  });
});
