import { describe, expect, it } from 'vitest';
import { normalizeShardUrl, parseReplicaList, parseShardMap, parseUrlList, routedShards } from './shard-map.js';

const refused = (fn: () => unknown): string => {
  try {
    fn();
    return 'accepted';
  } catch (e) {
    return (e as { code: string }).code;
  }
};

describe('shard URLs', () => {
  it('have one canonical form: scheme and host in lower case, no default port, no trailing slash', () => {
    expect(normalizeShardUrl('HTTP://Shard-1.Example:6333/')).toBe('http://shard-1.example:6333');
    expect(normalizeShardUrl('http://s:80')).toBe('http://s');
    expect(normalizeShardUrl('https://s:443/')).toBe('https://s');
    expect(normalizeShardUrl('http://[::1]:6333')).toBe('http://[::1]:6333');
    expect(normalizeShardUrl('http://127.0.0.1:6333')).toBe('http://127.0.0.1:6333');
  });

  it('refuse anything but a REST base URL, never echoing a credential', () => {
    for (const bad of ['', 'host:6333', 'ftp://h:1', 'http://h:1/v1', 'http://h:1?x=1', 'http://h:1#f', 'http://h:1/?', 'file:///etc/passwd', 'x'.repeat(3000), 7, null]) {
      expect(refused(() => normalizeShardUrl(bad)), String(bad).slice(0, 30)).toBe('invalid_argument');
    }
    try {
      normalizeShardUrl('http://admin:hunter2@h:1');
    } catch (e) {
      expect((e as Error).message).not.toContain('hunter2');
    }
  });

  it('lists: bracketed or not, blanks ignored, repeats refused; replicas by shard index', () => {
    expect(parseUrlList('[http://a:1, http://B:2/]', 'X')).toEqual(['http://a:1', 'http://b:2']);
    expect(parseUrlList('http://a:1,http://b:2', 'X')).toEqual(['http://a:1', 'http://b:2']);
    expect(parseUrlList(' [ ] ', 'X')).toEqual([]);
    expect(refused(() => parseUrlList('[http://a:1,http://A:1/]', 'X'))).toBe('invalid_argument');
    expect(refused(() => parseUrlList('[http://a:1', 'X'))).toBe('invalid_argument');
    expect(refused(() => parseUrlList('http://a:1,,http://b:1', 'X'))).toBe('invalid_argument');
    expect(parseReplicaList('0=http://r0:1, 1=http://r1:1,0=http://r0b:1', 2, 'R')).toEqual(new Map([[0, ['http://r0:1', 'http://r0b:1']], [1, ['http://r1:1']]]));
    expect(refused(() => parseReplicaList('2=http://r:1', 2, 'R'))).toBe('invalid_argument');
    expect(refused(() => parseReplicaList('0=http://r:1,0=http://R:1', 2, 'R'))).toBe('invalid_argument');
  });
});

describe('a map from the coordinator', () => {
  const good = {
    version: 7, standby: ['http://spare:6333'],
    shards: [
      { id: 2, url: 'http://S2:6333/', replicas: [], state: 'joining', points: null },
      { id: 0, url: 'http://s0:6333', replicas: ['http://r0:6333'], state: 'active', points: 10 },
      { id: 1, url: 'http://s1:6333', replicas: [], state: 'draining', points: 4 },
    ],
  };

  it('is read in canonical form, and routed by its active and draining shards in id order', () => {
    const m = parseShardMap(good);
    expect(m.shards.map((s) => s.url)).toEqual(['http://s2:6333', 'http://s0:6333', 'http://s1:6333']);
    expect(routedShards(m).map((s) => s.id)).toEqual([0, 1]);
  });

  it('is refused whole when it is not one', () => {
    const broken: unknown[] = [
      null, {}, { ...good, version: -1 }, { ...good, shards: 'x' },
      { ...good, shards: [...good.shards, { id: 0, url: 'http://s9:6333', state: 'active' }] },
      { ...good, shards: [...good.shards, { id: 9, url: 'http://s0:6333', state: 'active' }] },
      { ...good, shards: [{ id: 3, url: 'http://s3:6333', state: 'gone' }] },
      { ...good, shards: [{ id: 3, url: 'http://s3:6333/path', state: 'active' }] },
    ];
    for (const b of broken) expect(refused(() => parseShardMap(b)), JSON.stringify(b)).toBe('invalid_argument');
  });
});
