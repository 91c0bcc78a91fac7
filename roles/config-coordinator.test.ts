import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { ConfigError, loadConfig } from './config.js';

const base = { SVC_API_KEYS: 's1', SVC_ENCRYPTION_KEY: 'ab'.repeat(32) };
const cwd = mkdtempSync(join(tmpdir(), 'svc-config-coord-'));
afterAll(() => rmSync(cwd, { recursive: true, force: true }));

function refusal(env: Record<string, string>): string {
  try {
    loadConfig({ ...base, ...env }, { cwd, defaultFile: null });
  } catch (e) {
    if (e instanceof ConfigError) return e.variable;
    throw e;
  }
  return 'accepted';
}

describe('config: the coordinator', () => {
  it('is off unless SVC_COORDINATOR=true; its own variables are refused elsewhere', () => {
    expect(loadConfig(base, { cwd, defaultFile: null }).coordinator).toBeNull();
    expect(refusal({ SVC_COORDINATOR_STATE: 's.json' })).toBe('SVC_COORDINATOR_STATE');
    expect(refusal({ SVC_AUTOSCALE_ENABLED: 'true' })).toBe('SVC_AUTOSCALE_ENABLED');
    // A router reads SVC_CLUSTER_SHARDS without being a coordinator.
    expect(refusal({ SVC_CLUSTER_SHARDS: '[http://a:1]' })).toBe('accepted');
  });

  it('reads the seed map, the state file, the shard key and autoscaling, with the defaults the spec leaves open', () => {
    const c = loadConfig({
      ...base, SVC_COORDINATOR: 'true', SVC_CLUSTER_SHARDS: '[http://S1:6333/, http://s2:6333]', SVC_CLUSTER_REPLICAS: '1=http://r2:6333,1=http://r2b:6333',
      SVC_COORDINATOR_STATE: 'state/coord.json', SVC_CLUSTER_SHARD_KEY: 'sk', SVC_AUTOSCALE_ENABLED: 'true',
      SVC_AUTOSCALE_HIGH_WATER_POINTS: '1000000', SVC_AUTOSCALE_STANDBY_URLS: 'http://sb1:6333,http://sb2:6333',
    }, { cwd, defaultFile: null });
    expect(c.coordinator).toEqual({
      stateFile: join(cwd, 'state/coord.json'), seedShards: ['http://s1:6333', 'http://s2:6333'], seedReplicas: [[], ['http://r2:6333', 'http://r2b:6333']], shardKey: 'sk',
      autoscale: { enabled: true, highWaterPoints: 1_000_000, standbyUrls: ['http://sb1:6333', 'http://sb2:6333'], intervalMs: 30_000, cooldownMs: 300_000, maxShards: null },
      rebalanceBatchPoints: 1000, routerRefreshMs: 5_000,
    });
    expect(Object.isFrozen(c.coordinator!.autoscale.standbyUrls)).toBe(true);
    const short = loadConfig({ ...base, SVC_COORDINATOR: 'true', SVC_AUTOSCALE_INTERVAL_SECS: '0.2', SVC_AUTOSCALE_COOLDOWN_SECS: '0', SVC_AUTOSCALE_MAX_SHARDS: '4' }, { cwd, defaultFile: null });
    expect(short.coordinator!.autoscale).toMatchObject({ intervalMs: 200, cooldownMs: 0, maxShards: 4, enabled: false, highWaterPoints: 0 });
    const rebalance = loadConfig({ ...base, SVC_COORDINATOR: 'true', SVC_REBALANCE_BATCH_POINTS: '25', SVC_CLUSTER_MAP_REFRESH_SECS: '0.5' }, { cwd, defaultFile: null });
    expect(rebalance.coordinator).toMatchObject({ rebalanceBatchPoints: 25, routerRefreshMs: 500 });
    expect(() => loadConfig({ ...base, SVC_COORDINATOR: 'true', SVC_REBALANCE_BATCH_POINTS: '20000' }, { cwd, defaultFile: null })).toThrow(/SVC_REBALANCE_BATCH_POINTS/);
  });

  it('warns where the setting cannot do what it says', () => {
    const w = loadConfig({ ...base, SVC_COORDINATOR: 'true', SVC_AUTOSCALE_ENABLED: 'true' }, { cwd, defaultFile: null }).warnings.join('\n');
    expect(w).toContain('SVC_COORDINATOR_STATE is unset');
    expect(w).toContain('SVC_CLUSTER_SHARD_KEY is unset');
    expect(w).toContain('SVC_AUTOSCALE_HIGH_WATER_POINTS=0');
    expect(w).toContain('SVC_AUTOSCALE_STANDBY_URLS is empty');
  });

  it('refuses what it cannot use, naming the variable', () => {
    const on = { SVC_COORDINATOR: 'true' };
    const refused: [Record<string, string>, string][] = [
      [{ SVC_COORDINATOR: 'maybe' }, 'SVC_COORDINATOR'],
      [{ ...on, SVC_LEADER_URL: 'http://l:6334', SVC_LEADER_API_KEY: 'k' }, 'SVC_COORDINATOR'],
      [{ ...on, SVC_CLUSTER_SHARDS: '[http://a:1' }, 'SVC_CLUSTER_SHARDS'],
      [{ ...on, SVC_CLUSTER_SHARDS: '[http://a:1/v1]' }, 'SVC_CLUSTER_SHARDS'],
      [{ ...on, SVC_CLUSTER_SHARDS: '[http://a:1,http://A:1]' }, 'SVC_CLUSTER_SHARDS'],
      [{ ...on, SVC_CLUSTER_SHARDS: '[http://a:1]', SVC_CLUSTER_REPLICAS: '1=http://r:1' }, 'SVC_CLUSTER_REPLICAS'],
      [{ ...on, SVC_CLUSTER_SHARDS: '[http://a:1]', SVC_CLUSTER_REPLICAS: 'http://r:1' }, 'SVC_CLUSTER_REPLICAS'],
      [{ ...on, SVC_CLUSTER_SHARDS: '[http://a:1]', SVC_AUTOSCALE_STANDBY_URLS: 'http://a:1' }, 'SVC_AUTOSCALE_STANDBY_URLS'],
      [{ ...on, SVC_AUTOSCALE_STANDBY_URLS: 'ftp://x:1' }, 'SVC_AUTOSCALE_STANDBY_URLS'],
      [{ ...on, SVC_AUTOSCALE_HIGH_WATER_POINTS: '-1' }, 'SVC_AUTOSCALE_HIGH_WATER_POINTS'],
      [{ ...on, SVC_AUTOSCALE_HIGH_WATER_POINTS: '1.5' }, 'SVC_AUTOSCALE_HIGH_WATER_POINTS'],
      [{ ...on, SVC_AUTOSCALE_INTERVAL_SECS: '0' }, 'SVC_AUTOSCALE_INTERVAL_SECS'],
      [{ ...on, SVC_AUTOSCALE_COOLDOWN_SECS: 'soon' }, 'SVC_AUTOSCALE_COOLDOWN_SECS'],
      [{ ...on, SVC_AUTOSCALE_MAX_SHARDS: '0' }, 'SVC_AUTOSCALE_MAX_SHARDS'],
    ];
    for (const [env, variable] of refused) expect(refusal(env), JSON.stringify(env)).toBe(variable);
  });
});

describe('config: the router', () => {
  it('is a router with SVC_CLUSTER_SHARDS or SVC_COORDINATOR_URL, unless it is the coordinator', () => {
    expect(loadConfig(base, { cwd, defaultFile: null }).router).toBeNull();
    const c = loadConfig({ ...base, SVC_CLUSTER_SHARDS: '[http://S1:6333/, http://s2:6333]', SVC_CLUSTER_SHARD_KEY: 'sk' }, { cwd, defaultFile: null });
    expect(c.router).toEqual({
      shards: ['http://s1:6333', 'http://s2:6333'], shardKey: 'sk', coordinatorUrl: null, timeoutMs: 10_000, mapRefreshMs: 5_000,
      replicas: [[], []], replicaMaxLagMs: 5_000,
    });
    const withReplicas = loadConfig({
      ...base, SVC_CLUSTER_SHARDS: '[http://s1:6333,http://s2:6333]', SVC_CLUSTER_REPLICAS: '1=http://R2:6333/,1=http://r2b:6333,0=http://r1:6333',
      SVC_CLUSTER_REPLICA_MAX_LAG_SECS: '0.5',
    }, { cwd, defaultFile: null });
    expect(withReplicas.router).toMatchObject({ replicas: [['http://r1:6333'], ['http://r2:6333', 'http://r2b:6333']], replicaMaxLagMs: 500 });
    expect(withReplicas.warnings.some((w) => w.includes('SVC_CLUSTER_REPLICAS'))).toBe(false);
    const only = loadConfig({
      ...base, SVC_COORDINATOR_URL: 'http://Coord:7000/', SVC_CLUSTER_TIMEOUT_SECS: '0.5', SVC_CLUSTER_MAP_REFRESH_SECS: '2',
    }, { cwd, defaultFile: null });
    expect(only.router).toEqual({
      shards: [], shardKey: null, coordinatorUrl: 'http://coord:7000', timeoutMs: 500, mapRefreshMs: 2_000, replicas: [], replicaMaxLagMs: 5_000,
    });
    expect(only.warnings.some((w) => w.includes('SVC_CLUSTER_SHARD_KEY is unset'))).toBe(true);
    expect(loadConfig({ ...base, SVC_COORDINATOR: 'true', SVC_CLUSTER_SHARDS: '[http://a:1]' }, { cwd, defaultFile: null }).router).toBeNull();
  });

  it('refuses what a router cannot be', () => {
    expect(refusal({ SVC_CLUSTER_SHARDS: '[http://a:1,http://a:1]' })).toBe('SVC_CLUSTER_SHARDS');
    expect(refusal({ SVC_CLUSTER_SHARDS: '[http://a:1/v1]' })).toBe('SVC_CLUSTER_SHARDS');
    expect(refusal({ SVC_COORDINATOR_URL: 'coord:7000' })).toBe('SVC_COORDINATOR_URL');
    expect(refusal({ SVC_CLUSTER_SHARDS: '[http://a:1]', SVC_CLUSTER_TIMEOUT_SECS: '0' })).toBe('SVC_CLUSTER_TIMEOUT_SECS');
    expect(refusal({ SVC_CLUSTER_SHARDS: '[http://a:1]', SVC_LEADER_URL: 'http://l:6334', SVC_LEADER_API_KEY: 'k' })).toBe('SVC_CLUSTER_SHARDS');
    expect(refusal({ SVC_CLUSTER_SHARDS: '[http://a:1]', SVC_CLUSTER_REPLICAS: '1=http://r:1' })).toBe('SVC_CLUSTER_REPLICAS');
    expect(refusal({ SVC_CLUSTER_SHARDS: '[http://a:1,http://b:1]', SVC_CLUSTER_REPLICAS: '0=http://b:1' })).toBe('SVC_CLUSTER_REPLICAS');
    expect(refusal({ SVC_CLUSTER_SHARDS: '[http://a:1]', SVC_CLUSTER_REPLICA_MAX_LAG_SECS: '-1' })).toBe('SVC_CLUSTER_REPLICA_MAX_LAG_SECS');
  });
});
