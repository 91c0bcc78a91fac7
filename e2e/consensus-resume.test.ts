import { readdirSync, rmSync, statSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { allPoints, call, eventually, raftLeader, raftView, restartMember, startRaftGroup, type RaftMember } from './cluster-harness.js';
import { tempDir } from './harness.js';

/**
 * A member catching up by a database image whose connection from the leader is cut mid-stream (issue 17,
 * snapshot stream version 2), or which is SIGKILLed mid-stream and started again on its data directory:
 * the leader keeps the stream, and when the member is back it goes on from the first chunk the member
 * does not hold instead of from the beginning. The member ends with the leader's exact points, and the
 * leader's metrics show one stream sent, resumed, not failed.
 */
const root = tempDir('svc-consensus-resume-');
afterAll(() => rmSync(root, { recursive: true, force: true }));

const TIMING = { SVC_RAFT_HEARTBEAT_MS: '50', SVC_RAFT_ELECTION_MS: '1000', SVC_RAFT_WRITE_TIMEOUT_SECS: '10', SVC_RAFT_SNAPSHOT_ENTRIES: '40' };
const COLL = 'blobs';
const MIB = 1 << 20;

const metric = (text: string, series: string): number => {
  const m = new RegExp(`^${series.replace(/[{}"=]/g, (c) => `\\${c}`)} (\\d+)`, 'm').exec(text);
  if (m === null) throw new Error(`no ${series} in the metrics`);
  return Number(m[1]);
};
const metricsOf = async (m: RaftMember): Promise<string> => (await fetch(`${m.server.base}/metrics`)).text();

/** The largest image file in a member's raft folder (bytes written so far), 0 when none. */
function imageBytes(m: RaftMember): number {
  let max = 0;
  for (const n of readdirSync(join(m.dataDir, 'raft'))) {
    if (!n.startsWith('image-')) continue;
    try {
      max = Math.max(max, statSync(join(m.dataDir, 'raft', n)).size);
    } catch {
      // removed meanwhile
    }
  }
  return max;
}

async function upsert(m: RaftMember, points: unknown[]): Promise<void> {
  for (let t = 0; ; t++) {
    const r = await call(m.server)('PUT', `/v1/collections/${COLL}/points`, { points });
    if (r.status === 200) return;
    if (r.status !== 503 || t === 20) throw new Error(`upsert: ${r.status} ${JSON.stringify(r.json)}`);
    await new Promise((res) => setTimeout(res, 200));
  }
}

/**
 * Three members; one of them, not the leader, applies about 22 MiB of points (an image of some 22 chunks
 * of 1 MiB), is SIGKILLed, and falls behind the leader's log (compacted past it). It is not started again.
 */
async function memberBehind(dir: string) {
  const { members, links } = await startRaftGroup(['s1', 's2', 's3'], (id) => join(dir, id), TIMING);
  const leader = await raftLeader(members);
  const [member] = members.filter((m) => m !== leader);
  expect((await call(leader.server)('POST', '/v1/collections', { name: COLL, dim: 4, metric: 'cosine' })).status).toBe(201);
  const blob = 'x'.repeat(45_000);
  for (let b = 0; b < 24; b++) {
    await upsert(leader, Array.from({ length: 20 }, (_, k) => ({ id: `b${b * 20 + k}`, vector: [1, b, k, 1], payload: { b, k, blob } })));
  }
  const lv = await raftView(leader);
  await eventually('the member applied everything', async () => ((await raftView(member)).applied_index >= lv.commit_index ? true : 'not yet'));
  // The member goes; past SVC_RAFT_SNAPSHOT_ENTRIES writes later, the log it would need is compacted.
  await member.server.stop('SIGKILL');
  for (let b = 0; b < 60; b++) await upsert(leader, [{ id: `s${b}`, vector: [b, 1, 0, 1], payload: { b } }]);
  // Compacted once the marker's sync of the database (beside the writes, 22 MiB of payloads) is done.
  await eventually('the leader compacted its log past the member', async () => {
    const first = (await raftView(leader)).log_first_index;
    return first > lv.commit_index ? true : `log_first_index ${first}, the member applied ${lv.commit_index}`;
  });
  return { members, links, leader, member };
}

/** Waits until the member's image file holds `bytes`. */
async function imageAtLeast(member: RaftMember, bytes: number): Promise<void> {
  const deadline = Date.now() + 60_000;
  while (imageBytes(member) < bytes) {
    if (Date.now() > deadline) throw new Error(`the image stream did not get past ${bytes} bytes: ${imageBytes(member)} bytes`);
    await new Promise((res) => setTimeout(res, 5));
  }
}

/** Slow links both ways (the image's chunks, and the member's acknowledgements): the stream takes a few windows of 8 chunks. */
function slowLinks(links: Awaited<ReturnType<typeof memberBehind>>['links'], leaderId: string, memberId: string) {
  const down = links.get(`${leaderId}>${memberId}`)!;
  const up = links.get(`${memberId}>${leaderId}`)!;
  down.delayMs = 150;
  up.delayMs = 400;
  return { down, up, fast: () => { down.delayMs = 0; up.delayMs = 0; } };
}

/** The member ends with exactly the leader's points. */
async function holdsLeadersPoints(leader: { server: Parameters<typeof allPoints>[0] }, member: { server: Parameters<typeof allPoints>[0] }): Promise<void> {
  const want = await allPoints(leader.server, COLL);
  expect(want.length).toBe(24 * 20 + 60);
  await eventually('the member holds the leader\'s exact points', async () => {
    const got = await allPoints(member.server, COLL);
    return JSON.stringify(got) === JSON.stringify(want) ? true : `${got.length} of ${want.length} points`;
  }, 60_000);
}

describe('a snapshot stream cut mid-way', () => {
  it('resumes from the first chunk the member does not hold, and the member ends with the leader\'s exact points', async () => {
    const { members, links, leader, member } = await memberBehind(join(root, 'cut'));
    try {
      // Slow links, so the stream can be cut in the middle with chunks on the wire.
      const { down, fast } = slowLinks(links, leader.id, member.id);
      await restartMember(member);
      await imageAtLeast(member, 10 * MIB);
      // From now on what the leader sends the member is lost: the next window's chunks, once the
      // acknowledgements of this one reach the leader (400 ms on), are on the wire when it is cut.
      down.drop(true);
      await new Promise((res) => setTimeout(res, 700));
      const before = await metricsOf(leader);
      expect(metric(before, 'svc_raft_snapshot_streams_total{outcome="sent"}')).toBe(0);
      down.cut();
      down.drop(false);
      fast();
      await holdsLeadersPoints(leader, member);

      // One stream, sent whole, resumed after the cut: none failed since, and only a window's chunks went again.
      const after = await metricsOf(leader);
      expect(metric(after, 'svc_raft_snapshot_streams_total{outcome="sent"}')).toBe(1);
      expect(metric(after, 'svc_raft_snapshot_stream_resumes_total')).toBeGreaterThanOrEqual(1);
      expect(metric(after, 'svc_raft_snapshot_chunks_resent_total')).toBeGreaterThanOrEqual(1);
      // At most a window (8 chunks) per resume: the cut may break the stream more than once.
      expect(metric(after, 'svc_raft_snapshot_chunks_resent_total')).toBeLessThanOrEqual(8 * metric(after, 'svc_raft_snapshot_stream_resumes_total'));
      expect(metric(after, 'svc_raft_snapshot_streams_total{outcome="failed"}')).toBe(metric(before, 'svc_raft_snapshot_streams_total{outcome="failed"}'));
      expect(metric(after, 'svc_raft_snapshot_bytes_sent_total')).toBeGreaterThan(20 * MIB);
      expect(metric(await metricsOf(member), 'svc_raft_snapshot_streams_total{outcome="received"}')).toBe(1);
      for (const l of links.values()) await l.close();
    } finally {
      await Promise.all(members.map((m) => m.server.stop('SIGKILL')));
    }
  }, 180_000);

  it('a connection that hangs mid-stream (no FIN, no RST) is found by its pings, dialled again, and the stream goes on from where the member is', async () => {
    const { members, links, leader, member } = await memberBehind(join(root, 'hang'));
    try {
      const { down, fast } = slowLinks(links, leader.id, member.id);
      await restartMember(member);
      await imageAtLeast(member, 10 * MIB);
      // (fast() below reorders nothing: the proxy keeps each direction's bytes in order as it speeds up.)
      // The leader's connection to the member freezes both ways and stays open, as a partition leaves it:
      // TCP alone would retransmit into it for minutes, and every chunk and probe would sit there.
      down.hang();
      fast();
      await holdsLeadersPoints(leader, member);
      const after = await metricsOf(leader);
      expect(metric(after, 'svc_raft_hung_connections_total')).toBeGreaterThanOrEqual(1);
      expect(metric(after, 'svc_raft_snapshot_streams_total{outcome="sent"}')).toBe(1);
      expect(metric(after, 'svc_raft_snapshot_streams_total{outcome="failed"}')).toBe(0);
      expect(metric(after, 'svc_raft_snapshot_stream_resumes_total')).toBeGreaterThanOrEqual(1);
      for (const l of links.values()) await l.close();
    } finally {
      await Promise.all(members.map((m) => m.server.stop('SIGKILL')));
    }
  }, 180_000);

  it('a member SIGKILLed mid-stream and started again on its data directory goes on with the stream from its partial file', async () => {
    const { members, links, leader, member } = await memberBehind(join(root, 'kill'));
    try {
      // Slow links, so the member can be killed with part of the image in its file.
      const { fast } = slowLinks(links, leader.id, member.id);
      await restartMember(member);
      await imageAtLeast(member, 8 * MIB);
      await member.server.stop('SIGKILL');
      const before = await metricsOf(leader);
      expect(metric(before, 'svc_raft_snapshot_streams_total{outcome="sent"}')).toBe(0);
      fast();
      // Within the leader's keep bound (RESUME_KEEP_MS, 30 s from the break): its stream waits for the member.
      // (Its consensus lines at info: the one saying it resumes.)
      member.env = { ...member.env, RUST_LOG: 'warn,svc::raft=info' };
      await restartMember(member);
      await holdsLeadersPoints(leader, member);

      // One stream, resumed from the partial file: none failed (a new stream from chunk 0 would follow a failed one).
      const after = await metricsOf(leader);
      expect(metric(after, 'svc_raft_snapshot_streams_total{outcome="sent"}')).toBe(1);
      expect(metric(after, 'svc_raft_snapshot_streams_total{outcome="failed"}')).toBe(metric(before, 'svc_raft_snapshot_streams_total{outcome="failed"}'));
      expect(metric(after, 'svc_raft_snapshot_stream_resumes_total')).toBeGreaterThanOrEqual(1);
      expect(metric(after, 'svc_raft_snapshot_chunks_resent_total')).toBeLessThanOrEqual(8 * metric(after, 'svc_raft_snapshot_stream_resumes_total'));
      expect(metric(await metricsOf(member), 'svc_raft_snapshot_streams_total{outcome="received"}')).toBe(1);
      expect(member.server.stderr()).toMatch(/resuming an image stream after a restart/);
      for (const l of links.values()) await l.close();
    } finally {
      await Promise.all(members.map((m) => m.server.stop('SIGKILL')));
    }
  }, 180_000);
});
