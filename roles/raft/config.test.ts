import { describe, expect, it } from 'vitest';
import { loadConfig } from '../config.js';
import { parseRaftMembers, raftNetConfig } from './config.js';

const base = { SVC_API_KEYS: 'k'.repeat(24), SVC_ENCRYPTION_KEY: 'ab'.repeat(32) };
const SECRET = 's'.repeat(32);
const cfg = (env: Record<string, string>) => raftNetConfig(loadConfig({ ...base, ...env }, { defaultFile: null }));

describe('SVC_RAFT_* configuration', () => {
  it('parses the members in the forms CONTRACT section 11 allows', () => {
    expect(parseRaftMembers('n1=127.0.0.1:7001, n2=tcp://127.0.0.1:7002,n3=http://[::1]:7003/')).toEqual([
      { id: 'n1', host: '127.0.0.1', port: 7001 }, { id: 'n2', host: '127.0.0.1', port: 7002 }, { id: 'n3', host: '::1', port: 7003 },
    ]);
    expect(() => parseRaftMembers('n1=127.0.0.1:7001,n1=127.0.0.1:7002')).toThrow(/twice/);
    expect(() => parseRaftMembers('127.0.0.1:7001')).toThrow(/<id>=<host:port>/);
  });

  it('is null for a node outside consensus, and refuses half a configuration', () => {
    expect(cfg({})).toBeNull();
    expect(() => cfg({ SVC_RAFT_NODE_ID: 'n1' })).toThrow(/SVC_RAFT_MEMBERS/);
    expect(() => cfg({ SVC_RAFT_MEMBERS: 'n1=127.0.0.1:7001' })).toThrow(/SVC_RAFT_NODE_ID/);
    expect(() => cfg({ SVC_RAFT_MEMBERS: 'n1=127.0.0.1:7001', SVC_RAFT_NODE_ID: 'n9', SVC_RAFT_SECRET: SECRET })).toThrow(/not in SVC_RAFT_MEMBERS/);
  });

  it('needs a long secret or mutual TLS, and TLS for a non-loopback address, unless insecure', () => {
    const members = 'n1=127.0.0.1:7001,n2=127.0.0.1:7002';
    expect(() => cfg({ SVC_RAFT_MEMBERS: members, SVC_RAFT_NODE_ID: 'n1' })).toThrow(/authenticate each other/);
    expect(() => cfg({ SVC_RAFT_MEMBERS: members, SVC_RAFT_NODE_ID: 'n1', SVC_RAFT_SECRET: 'short' })).toThrow(/shorter than 32/);
    const ok = cfg({ SVC_RAFT_MEMBERS: members, SVC_RAFT_NODE_ID: 'n2', SVC_RAFT_SECRET: SECRET })!;
    expect(ok.listen).toEqual({ host: '127.0.0.1', port: 7002 });
    expect(ok.secret?.toString()).toBe(SECRET);
    const wide = { SVC_RAFT_MEMBERS: 'n1=10.1.2.3:7001,n2=10.1.2.4:7001', SVC_RAFT_NODE_ID: 'n1', SVC_RAFT_SECRET: SECRET };
    expect(() => cfg(wide)).toThrow(/not loopback and there is no TLS/);
    const insecure = cfg({ ...wide, SVC_INSECURE: 'true', SVC_RAFT_SECRET: '' })!;
    expect(insecure.warnings.join('\n')).toMatch(/not loopback/);
    expect(insecure.warnings.join('\n')).toMatch(/do not authenticate/);
  });

  it('checks the timing and refuses SVC_RAFT_TLS_CA without TLS', () => {
    const m = { SVC_RAFT_MEMBERS: 'n1=127.0.0.1:7001', SVC_RAFT_NODE_ID: 'n1', SVC_RAFT_SECRET: SECRET };
    expect(cfg(m)!.timing).toEqual({ heartbeatMs: 100, electionMs: 1000, writeTimeoutMs: 10_000, snapshotEntries: 10_000 });
    expect(cfg({ ...m, SVC_RAFT_HEARTBEAT_MS: '50', SVC_RAFT_ELECTION_MS: '500', SVC_RAFT_WRITE_TIMEOUT_SECS: '2.5' })!.timing)
      .toMatchObject({ heartbeatMs: 50, electionMs: 500, writeTimeoutMs: 2500 });
    expect(() => cfg({ ...m, SVC_RAFT_ELECTION_MS: '200' })).toThrow(/three heartbeats/);
    expect(() => cfg({ ...m, SVC_RAFT_SNAPSHOT_ENTRIES: '2' })).toThrow(/whole number from 8/);
    expect(() => cfg({ ...m, SVC_RAFT_TLS_CA: '/x/ca.pem' })).toThrow(/needs TLS/);
  });
});
