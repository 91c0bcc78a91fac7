// A shard as a consensus group (issue 17), as real processes on 127.0.0.1 with the default timing
// (100 ms heartbeat, 1 s election, 10 s write timeout): three `svc serve` members against one plain
// `svc serve`, on this machine.
// 1. Quorum write throughput: acknowledged single-point upserts/s (dim 16, unique ids) from 1, 8 and 64
//    concurrent HTTP clients (undici, keep-alive, one connection each) through the leader, and through
//    a follower (which forwards to the leader) at 64, against the single node in the same round; the
//    two arms of a round run back to back in alternating order and the ratio is taken within the round.
// 2. Failover: the leader is SIGKILLed while two clients write continuously through the two followers,
//    each retrying on 503 and connection errors after 10 ms. Client A waits for every answer (as a plain
//    client does); client B gives up on a request after CLIENT_TIMEOUT_MS and sends the next. For each
//    kill: the time until a write *sent after the kill* is acknowledged, per client, and until a
//    survivor reports itself leader. The killed member restarts on its data directory, and the next
//    kill waits until the group is whole again (one leader every member names, every member applied
//    through the leader's commit index). At the end every member is asked for all its points:
//    every acknowledged upsert must be on every member.
// 3. Catch-up by snapshot: a second group (SVC_RAFT_SNAPSHOT_ENTRIES=50, so its log is compacted) is
//    filled with --catchup-mb MiB of vectors (dim 256, bulk upserts); a follower is SIGKILLed, its data
//    directory wiped, and it restarts while a client writes single points through the leader. Measured:
//    the time until it has applied through the leader's commit index, the image bytes streamed, the
//    leader's peak RSS growth (an image is never whole in memory), and the client's write latency
//    while the image streams. At the end the member holds exactly the leader's points. Then the double
//    fault: the same follower wiped again, and the leader SIGKILLed while it restores the image; a
//    client writing through the third member says how soon writes are acknowledged again (the restoring
//    member's vote elects the third) and how many were while it still restored.
//    Then the leader is SIGSTOPped --pauses times instead (SIGCONT once a survivor leads): a hung process
//    is noticed by the election timeout alone, where a killed one's refused address is noticed at once.
// Run: npm run bench:raft [-- --quick] [--kills 50] [--pauses 20] [--secs 5] [--rounds 3] [--no-pin] [--catchup-mb 160]
//      [--only throughput|failover|catchup] [--replica]
// --replica: a read replica follows member n1 through the SIGKILLs (n1 is killed whenever it leads); at
// the end it has caught up with n1 and holds every acknowledged write (read_replica in the results).
// Pinning (Linux, 2+ cores, unless --no-pin): for the throughput arms, the server written to (the
// leader, or the single node) and this load generator share core 0, the followers have core 1, as if
// they were other machines (through a follower: that follower stays on core 1 with the other, the leader
// on core 0); the arms are then run again unpinned (every process on every core) in the
// full mode. The failover phase runs unpinned.
import { execFileSync } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { cpus, tmpdir } from 'node:os';
import { join } from 'node:path';
import { Agent, request } from 'undici';
import { freePort } from '../roles/testing/free-port.js';
import { cpuPressure, cpuSample } from './lib/proc-cpu.js';
import { BENCH_API_KEY, startSvc, type SvcServer } from './lib/server-proc.js';
import { percentile, round } from './lib/stats.js';

const quick = process.argv.includes('--quick');
const arg = (name: string, fallback: number): number => {
  const i = process.argv.indexOf(`--${name}`);
  return i < 0 ? fallback : Number(process.argv[i + 1]);
};
const KILLS = arg('kills', quick ? 3 : 50);
/** Leaders SIGSTOPped after the kills: failover by the election timeout alone. */
const PAUSES = arg('pauses', quick ? 2 : 20);
const SECS = arg('secs', quick ? 1 : 5);
const ROUNDS = arg('rounds', quick ? 1 : 3);
const PIN = !process.argv.includes('--no-pin') && process.platform === 'linux' && cpus().length >= 2;
/** --replica: a read replica follows member n1 through the kills (killed and restarted with the others). */
const REPLICA = process.argv.includes('--replica');
const onlyAt = process.argv.indexOf('--only');
/** --only throughput|failover|catchup: one part (a diagnosis); the results files are written only for all. */
const ONLY = onlyAt < 0 ? null : process.argv[onlyAt + 1];
const CONCURRENCY = [1, 8, 64];
/** More than one 64 MiB transport frame in the full run: the image must stream. */
const CATCHUP_MB = arg('catchup-mb', quick ? 16 : 160);
const DIM = 16;
const RETRY_MS = 10;
const CLIENT_TIMEOUT_MS = 1000;
/** A write no client should wait longer for (the server's own write timeout is 10 s). */
const CLIENT_GIVE_UP_MS = 30_000;
const POLL_MS = 20;
const SECRET = 'bench-raft-secret-0123456789abcdef0123';
const IDS = ['n1', 'n2', 'n3'];

const sorted = (xs: number[]): number[] => [...xs].sort((a, b) => a - b);
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
const vector = (i: number): number[] => Array.from({ length: DIM }, (_, k) => Math.sin(i * 0.7 + k));
const headers = { authorization: `Bearer ${BENCH_API_KEY}`, 'content-type': 'application/json' };

/** All threads of `pid` (and those it starts later) on `cpus` (taskset syntax). */
function pin(pid: number, cpuList: string): void {
  execFileSync('taskset', ['-apc', cpuList, String(pid)], { stdio: 'ignore' });
}
const ALL_CPUS = `0-${cpus().length - 1}`;


interface RaftView { id: string; role: string; term: number; leader_id: string | null; commit_index: number; applied_index: number }
interface Member { id: string; env: Record<string, string>; server: SvcServer | null }

const view = (m: Member): Promise<RaftView> => m.server!.call<RaftView>('GET', '/cluster/raft');

async function until<T>(what: string, check: () => Promise<T | null>, ms = 60_000): Promise<T> {
  const t0 = performance.now();
  for (;;) {
    const r = await check().catch(() => null);
    if (r !== null) return r;
    if (performance.now() - t0 > ms) throw new Error(`${what}: not within ${ms} ms`);
    await sleep(POLL_MS);
  }
}

/**
 * The leader once every member names it and has applied through the commit index the leader reported
 * one poll earlier (under a steady write load a follower learns a commit index a message after the
 * leader: it never catches the commit index of the same instant).
 */
async function whole(members: Member[], ms = 120_000): Promise<Member> {
  let target: { id: string; commit: number } | null = null;
  return until('the group is whole', async () => {
    const vs = await Promise.all(members.map(view));
    const leaders = vs.filter((v) => v.role === 'leader');
    if (leaders.length !== 1 || vs.some((v) => v.leader_id !== leaders[0].id)) {
      target = null;
      return null;
    }
    const prev: { id: string; commit: number } | null = target;
    target = { id: leaders[0].id, commit: leaders[0].commit_index };
    if (prev === null || prev.id !== leaders[0].id || vs.some((v) => v.applied_index < prev.commit)) return null;
    return members.find((m) => m.id === leaders[0].id)!;
  }, ms);
}

/**
 * Creates collection `name` through the group's leader. A group just formed can still change leader
 * (a 503: the entry never committed); the create is then asked again of the leader after it, with
 * `exist_ok` in case an earlier try committed after all.
 */
async function createColl(members: Member[], name: string, dim: number): Promise<Member> {
  for (let tries = 1; ; tries++) {
    const leader = await whole(members);
    try {
      await leader.server!.call('POST', '/v1/collections', { name, dim, metric: 'cosine', exist_ok: true });
      return leader;
    } catch (e) {
      // Only a refusal for want of a leader is asked again, a few times; anything else is the bench's error.
      if (tries >= 5 || !/: 503 /.test(String(e))) throw e;
    }
  }
}

/** One upsert of point `id`; the status (0: no answer: a connection error or this client's timeout). */
async function upsert(agent: Agent, base: string, coll: string, id: number, timeoutMs = CLIENT_GIVE_UP_MS): Promise<number> {
  try {
    const r = await request(`${base}/v1/collections/${coll}/points`, {
      method: 'PUT', dispatcher: agent, headers, signal: AbortSignal.timeout(timeoutMs),
      body: JSON.stringify({ points: [{ id: `p${id}`, vector: vector(id) }] }),
    });
    await r.body.dump();
    return r.statusCode;
  } catch {
    return 0;
  }
}

// ---- 1. throughput ----

let nextId = 0;
interface Rate { perS: number; cpuUsPerWrite: (number | null)[]; cores: (number | null)[] }
/** Acknowledged upserts/s from `c` clients for SECS seconds, and the CPU each of `pids` spent per acknowledged write. */
async function rate(base: string, coll: string, c: number, pids: number[]): Promise<Rate> {
  const agent = new Agent({ connections: c, pipelining: 1, keepAliveTimeout: 60_000 });
  // Warm the connections (and the server's paths) for a moment, untimed.
  const warmEnd = performance.now() + 300;
  await Promise.all(Array.from({ length: c }, async () => {
    while (performance.now() < warmEnd) await upsert(agent, base, coll, nextId++);
  }));
  const end = performance.now() + SECS * 1000;
  let acked = 0;
  let failed = 0;
  const cpu0 = pids.map(cpuSample);
  const t0 = performance.now();
  await Promise.all(Array.from({ length: c }, async () => {
    while (performance.now() < end) {
      if ((await upsert(agent, base, coll, nextId++)) === 200) acked++;
      else failed++;
    }
  }));
  const secs = (performance.now() - t0) / 1000;
  const cpu1 = pids.map(cpuSample);
  await agent.close();
  if (failed > 0) console.warn(`  ${failed} writes failed at ${c} clients on ${base}`);
  const used = pids.map((_, i) => (cpu0[i] === null || cpu1[i] === null ? null : cpu1[i]!.process - cpu0[i]!.process));
  return {
    perS: acked / secs,
    cpuUsPerWrite: used.map((u) => (u === null ? null : Math.round((u * 1e6) / acked))),
    cores: used.map((u) => (u === null ? null : round(u / secs, 2))),
  };
}

interface Arm {
  clients: number; via: 'leader' | 'follower'; raft_per_s: number[]; single_per_s: number[]; ratio: number[];
  /** CPU per acknowledged write, µs, by process: the member written to, the other two, the single node, this load generator. */
  cpu_us_per_write: { written: (number | null)[]; others: (number | null)[]; single: (number | null)[]; client_raft: (number | null)[]; client_single: (number | null)[] };
  /** Cores each kept busy on average. */
  cores: { written: (number | null)[]; others: (number | null)[]; single: (number | null)[] };
}

async function throughput(single: SvcServer, members: Member[], pinned: boolean): Promise<Record<string, unknown>> {
  const leader = await whole(members);
  const follower = members.find((m) => m !== leader)!;
  if (pinned) {
    pin(process.pid, '0');
    pin(single.pid, '0');
    pin(leader.server!.pid, '0');
    for (const m of members) if (m !== leader) pin(m.server!.pid, '1');
  }
  const arms: Arm[] = [...CONCURRENCY.map((c) => ({ clients: c, via: 'leader' as const })), { clients: 64, via: 'follower' as const }]
    .map((a) => ({
      ...a, raft_per_s: [], single_per_s: [], ratio: [],
      cpu_us_per_write: { written: [], others: [], single: [], client_raft: [], client_single: [] }, cores: { written: [], others: [], single: [] },
    }));
  const psi: (number | null)[] = [];
  const sum = (xs: (number | null)[]) => (xs.some((x) => x === null) ? null : round((xs as number[]).reduce((x, y) => x + y, 0), 2));
  for (let r = 0; r < ROUNDS; r++) {
    for (const a of arms) {
      const target = a.via === 'leader' ? leader : follower;
      const others = members.filter((m) => m !== target);
      const runRaft = () => rate(target.server!.rest, 'tput', a.clients, [target.server!.pid, ...others.map((m) => m.server!.pid), process.pid]);
      const runSingle = () => rate(single.rest, 'tput', a.clients, [single.pid, process.pid]);
      // Alternate which arm goes first, round by round and arm by arm.
      const raftFirst = (r + arms.indexOf(a)) % 2 === 0;
      let x: Rate;
      let y: Rate;
      if (raftFirst) {
        x = await runRaft();
        y = await runSingle();
      } else {
        y = await runSingle();
        x = await runRaft();
      }
      a.raft_per_s.push(Math.round(x.perS));
      a.single_per_s.push(Math.round(y.perS));
      a.ratio.push(round(x.perS / y.perS, 3));
      a.cpu_us_per_write.written.push(x.cpuUsPerWrite[0]);
      a.cpu_us_per_write.others.push(sum(x.cpuUsPerWrite.slice(1, 3)));
      a.cpu_us_per_write.client_raft.push(x.cpuUsPerWrite[3]);
      a.cpu_us_per_write.single.push(y.cpuUsPerWrite[0]);
      a.cpu_us_per_write.client_single.push(y.cpuUsPerWrite[1]);
      a.cores.written.push(x.cores[0]);
      a.cores.others.push(sum(x.cores.slice(1, 3)));
      a.cores.single.push(y.cores[0]);
      psi.push(cpuPressure());
      console.log(`  ${pinned ? 'pinned' : 'unpinned'} round ${r + 1}: ${a.clients} clients via the ${a.via}: raft ${Math.round(x.perS)}/s, single ${Math.round(y.perS)}/s, ratio ${(x.perS / y.perS).toFixed(2)}; CPU µs/write: ${a.via} ${x.cpuUsPerWrite[0]}, other members ${sum(x.cpuUsPerWrite.slice(1, 3))}, single ${y.cpuUsPerWrite[0]}; cores: ${x.cores[0]}, ${sum(x.cores.slice(1, 3))}, ${y.cores[0]}`);
    }
  }
  for (const pid of [process.pid, single.pid, ...members.map((m) => m.server!.pid)]) if (pinned) pin(pid, ALL_CPUS);
  const median = (xs: number[]) => percentile(sorted(xs), 50);
  return {
    pinned,
    layout: pinned ? 'core 0: this load generator and the server written to (raft leader, or the single node); core 1: the two followers' : 'every process on every core',
    leader: leader.id,
    follower: follower.id,
    cpu_pressure_some_avg10: psi,
    arms: arms.map((a) => ({ ...a, raft_median_per_s: median(a.raft_per_s), single_median_per_s: median(a.single_per_s), ratio_median: median(a.ratio) })),
  };
}

// ---- 2. failover ----

interface Client {
  name: string;
  timeoutMs: number;
  target: Member;
  acked: number[];
  /** performance.now() of each acknowledgement, with when the write was sent. */
  acks: { sent: number; at: number }[];
  errors: Map<number, number>;
  running: boolean;
  loop: Promise<void>;
}

function writer(name: string, timeoutMs: number, target: Member, coll: string): Client {
  const c: Client = { name, timeoutMs, target, acked: [], acks: [], errors: new Map(), running: true, loop: Promise.resolve() };
  const agent = new Agent({ connections: 1, pipelining: 1, keepAliveTimeout: 60_000 });
  c.loop = (async () => {
    while (c.running) {
      const id = nextId++;
      const sent = performance.now();
      const status = await upsert(agent, c.target.server!.rest, coll, id, timeoutMs);
      if (status === 200) {
        c.acked.push(id);
        c.acks.push({ sent, at: performance.now() });
        // Keep only the recent history: failover reads the acks after the last kill.
        if (c.acks.length > 10_000) c.acks.splice(0, 5_000);
      } else {
        c.errors.set(status, (c.errors.get(status) ?? 0) + 1);
        await sleep(RETRY_MS);
      }
    }
    await agent.close();
  })();
  return c;
}

/** ms from `t` to the first acknowledgement of a write sent at or after `t`. */
const firstAckAfter = (c: Client, t: number): number | null => {
  const a = c.acks.find((x) => x.sent >= t);
  return a === undefined ? null : a.at - t;
};

async function allIds(s: SvcServer): Promise<Set<string>> {
  const ids = new Set<string>();
  let cursor: string | null = null;
  do {
    const r: { points: { id: string }[]; next_cursor: string | null } = await s.call('POST', '/v1/collections/failover/points:fetch', { limit: 1000, cursor });
    for (const p of r.points) ids.add(p.id);
    cursor = r.next_cursor;
  } while (cursor !== null);
  return ids;
}

async function failover(members: Member[], start: (m: Member) => Promise<void>, mode: 'kill' | 'pause', count: number): Promise<Record<string, unknown>> {
  let leader = await createColl(members, 'failover', DIM);
  const followers = () => members.filter((m) => m !== leader);
  // A read replica of n1 (its gRPC address is fixed across restarts), through the SIGKILLs only.
  const followed = members[0];
  const replica = REPLICA && mode === 'kill' ? await startSvc({ SVC_LEADER_URL: `http://${followed.env.SVC_GRPC_ADDR}`, SVC_LEADER_API_KEY: BENCH_API_KEY }) : null;
  const a = writer('A (waits for every answer)', CLIENT_GIVE_UP_MS, followers()[0], 'failover');
  const b = writer(`B (gives up on a request after ${CLIENT_TIMEOUT_MS} ms)`, CLIENT_TIMEOUT_MS, followers()[1], 'failover');
  const kills: Record<string, unknown>[] = [];
  try {
    for (let k = 0; k < count; k++) {
      leader = await whole(members);
      [a.target, b.target] = followers();
      // Writes go on for a random moment, so the kill lands anywhere in the heartbeat's period.
      await sleep(300 + Math.random() * 1000);
      const victim = leader;
      const survivors = followers();
      const killedAt = performance.now();
      // SIGKILL: the process is gone (its address refuses connections); SIGSTOP: it hangs, and only the
      // election timeout replaces it (docs/consensus.md, Failover).
      process.kill(victim.server!.pid, mode === 'kill' ? 'SIGKILL' : 'SIGSTOP');
      // A survivor reports itself leader (polled every POLL_MS).
      const elected = await until('a survivor is elected', async () => {
        const vs = await Promise.all(survivors.map((m) => view(m).catch(() => null)));
        const v = vs.find((x) => x?.role === 'leader');
        return v === undefined ? null : { ms: performance.now() - killedAt, id: v!.id, term: v!.term };
      });
      // The killed member restarts on its data directory once a survivor leads (so it takes no part in
      // the election measured), while the clients may still be waiting.
      // Its stop() would wait for an exit already seen: it closes the clients in the background. A
      // paused member is let go on instead (it steps down at the new term).
      const restartAt = performance.now();
      let restarted: Promise<number>;
      if (mode === 'kill') {
        void victim.server!.stop();
        restarted = start(victim).then(() => performance.now() - restartAt);
      } else {
        process.kill(victim.server!.pid, 'SIGCONT');
        restarted = Promise.resolve(0);
      }
      restarted.catch(() => undefined); // awaited below; a failed start must not end the run unhandled
      const [ackA, ackB] = await until('both clients write again', async () => {
        const x = firstAckAfter(a, killedAt);
        const y = firstAckAfter(b, killedAt);
        return x !== null && y !== null ? [x, y] : null;
      }, 60_000);
      const readyMs = await restarted;
      await whole(members);
      const wholeMs = performance.now() - restartAt;
      const row = { kill: k + 1, killed: victim.id, elected_ms: Math.round(elected.ms), new_leader: elected.id, term: elected.term, client_a_ms: Math.round(ackA), client_b_ms: Math.round(ackB), restart_ready_ms: Math.round(readyMs), whole_again_ms: Math.round(wholeMs) };
      kills.push(row);
      console.log(`  ${mode} ${k + 1}/${count}: ${JSON.stringify(row)}`);
    }
  } finally {
    a.running = false;
    b.running = false;
    await Promise.all([a.loop, b.loop]);
  }
  // Every acknowledged write on every member.
  await whole(members);
  const acked = [...a.acked, ...b.acked].map((i) => `p${i}`);
  const lost: Record<string, number> = {};
  for (const m of members) {
    const held = await allIds(m.server!);
    lost[m.id] = acked.filter((id) => !held.has(id)).length;
  }
  // The replica: caught up with the member it follows, every acknowledged write on it too.
  let onReplica: Record<string, unknown> | null = null;
  if (replica !== null) {
    try {
      type Stats = { replication: { commit_seq?: number; applied_seq?: number | null; state?: string } };
      const caughtAt = performance.now();
      await until('the replica catches up with n1', async () => {
        const [l, f] = await Promise.all([followed.server!.call<Stats>('GET', '/v1/stats'), replica.call<Stats>('GET', '/v1/stats')]);
        return f.replication.state === 'streaming' && f.replication.applied_seq === l.replication.commit_seq ? true : null;
      }, 120_000);
      const held = await allIds(replica);
      const metrics = await (await fetch(`${replica.rest}/metrics`)).text();
      const counter = (name: string): number => Number(metrics.split('\n').find((x) => x.startsWith(`${name} `))?.split(' ')[1] ?? NaN);
      onReplica = {
        follows: followed.id,
        acknowledged_lost: acked.filter((id) => !held.has(id)).length,
        caught_up_after_ms: Math.round(performance.now() - caughtAt),
        bootstraps: counter('svc_replication_bootstraps_total'),
        reconnects: counter('svc_replication_reconnects_total'),
      };
    } finally {
      await replica.stop();
    }
  }
  const stats = (xs: number[]) => {
    const s = sorted(xs);
    return { p50: Math.round(percentile(s, 50)), p99: Math.round(percentile(s, 99)), max: Math.round(s[s.length - 1]), mean: Math.round(s.reduce((x, y) => x + y, 0) / s.length) };
  };
  const col = (key: string) => kills.map((r) => r[key] as number);
  return {
    fault: mode === 'kill' ? 'SIGKILL (then a restart)' : 'SIGSTOP (then SIGCONT once a survivor leads)',
    kills: kills.length,
    client_retry_ms: RETRY_MS,
    client_b_timeout_ms: CLIENT_TIMEOUT_MS,
    to_next_ack_ms: { client_a: stats(col('client_a_ms')), client_b: stats(col('client_b_ms')) },
    to_elected_ms: stats(col('elected_ms')),
    restart_ready_ms: stats(col('restart_ready_ms')),
    whole_again_ms: stats(col('whole_again_ms')),
    acknowledged_writes: acked.length,
    acknowledged_lost_per_member: lost,
    ...(onReplica === null ? {} : { read_replica: onReplica }),
    client_errors: Object.fromEntries([a, b].map((c) => [c.name, Object.fromEntries([...c.errors].map(([s, n]) => [s === 0 ? 'no answer' : String(s), n]))])),
    per_kill: kills,
  };
}

// ---- the run ----

// ---- 3. catch-up by snapshot ----

const CATCHUP_DIM = 256;

async function metric(m: Member, name: string, label = ''): Promise<number> {
  const text = await (await fetch(`${m.server!.rest}/metrics`)).text();
  const line = text.split('\n').find((l) => l.startsWith(`${name}${label} `));
  return line === undefined ? 0 : Number(line.split(' ')[1]);
}

function rssKb(pid: number): number {
  try {
    const status = execFileSync('cat', [`/proc/${pid}/status`], { encoding: 'utf8' });
    return Number(/VmRSS:\s+(\d+)/.exec(status)?.[1] ?? 0);
  } catch {
    return 0;
  }
}

async function catchup(work: string, mb: number): Promise<Record<string, unknown>> {
  const ids = IDS.map((id) => `c${id}`);
  const ports = await Promise.all(ids.map(() => freePort()));
  const list = ids.map((id, i) => `${id}=127.0.0.1:${ports[i]}`).join(',');
  const group: Member[] = ids.map((id) => ({
    id, server: null,
    env: { SVC_RAFT_MEMBERS: list, SVC_RAFT_NODE_ID: id, SVC_RAFT_SECRET: SECRET, SVC_DATA_DIR: join(work, id), SVC_RAFT_SNAPSHOT_ENTRIES: '50' },
  }));
  const start = async (m: Member, readyMs?: number): Promise<void> => { m.server = await startSvc(m.env, readyMs); };
  try {
    await Promise.all(group.map((m) => start(m)));
    await createColl(group, 'img', CATCHUP_DIM);
    // The writes made while the member catches up: single points, the bench's own dim.
    let leader = await createColl(group, 'live', DIM);
    const points = mb * 1024 * 1024 / (CATCHUP_DIM * 4);
    const batch = 2000;
    const tFill = performance.now();
    const v = new Float32Array(CATCHUP_DIM);
    for (let at = 0; at < points; at += batch) {
      const pts = [];
      for (let i = at; i < Math.min(points, at + batch); i++) {
        for (let k = 0; k < CATCHUP_DIM; k++) v[k] = Math.sin(i * 0.37 + k * 1.3);
        pts.push({ id: `b${i}`, vector_b64: Buffer.from(v.buffer).toString('base64'), payload: { i } });
      }
      await leader.server!.call('POST', '/v1/collections/img/points:bulk', { points: pts });
    }
    const fillS = (performance.now() - tFill) / 1000;
    leader = await whole(group);
    const follower = group.find((m) => m !== leader)!;
    await wipe(follower);
    const sentBefore = await metric(leader, 'svc_raft_snapshot_bytes_sent_total');
    const rssBefore = rssKb(leader.server!.pid);
    let rssPeak = rssBefore;
    const writer = steadyWriter(leader, 0);
    const tRestart = performance.now();
    await start(follower);
    const readyS = (performance.now() - tRestart) / 1000;
    const sampler = setInterval(() => { rssPeak = Math.max(rssPeak, rssKb(leader.server!.pid)); }, 100);
    await until('the wiped member caught up', async () => {
      const [lv, fv] = await Promise.all([view(leader), view(follower)]);
      return fv.applied_index >= lv.commit_index && fv.leader_id === leader.id ? true : null;
    }, 900_000);
    const caughtUpS = (performance.now() - tRestart) / 1000;
    clearInterval(sampler);
    await writer.stop();
    const lat = writer.acks.map((a) => a.ms);
    const bytes = (await metric(leader, 'svc_raft_snapshot_bytes_sent_total')) - sentBefore;
    // The writes have stopped: once every member has applied through the commit index, counts compare.
    await whole(group);
    const count = async (m: Member): Promise<number> => {
      let n = 0;
      for (const c of ['img', 'live']) n += (await m.server!.call<{ count: number }>('POST', `/v1/collections/${c}/points:count`, {})).count;
      return n;
    };
    const [lc, fc] = [await count(leader), await count(follower)];
    const s = sorted(lat);
    const streams = { sent: await metric(leader, 'svc_raft_snapshot_streams_total', '{outcome="sent"}'), failed: await metric(leader, 'svc_raft_snapshot_streams_total', '{outcome="failed"}') };
    // (It restarts the leader: its counters are read above.)
    const double = await doubleFault(group, start, count);
    return {
      mib: mb, points, fill_secs: round(fillS, 1),
      restart_ready_secs: round(readyS, 2), caught_up_secs: round(caughtUpS, 2),
      image_bytes_streamed: bytes, image_mib_per_s: round(bytes / (1 << 20) / (caughtUpS - readyS), 1),
      streams,
      leader_rss_growth_mib: round((rssPeak - rssBefore) / 1024, 1),
      writes_during: { acknowledged: lat.length, p50_ms: round(percentile(s, 50), 1), p99_ms: round(percentile(s, 99), 1), max_ms: round(s[s.length - 1] ?? 0, 1) },
      points_leader: lc, points_member: fc, equal: lc === fc,
      double_fault: double,
    };
  } finally {
    await Promise.all(group.map(async (m) => { await m.server?.stop(); m.server = null; }));
  }
}

/** The member SIGKILLed, and its data directory removed: it has lost its disk. */
async function wipe(m: Member): Promise<void> {
  process.kill(m.server!.pid, 'SIGKILL');
  await sleep(200);
  m.server = null;
  rmSync(m.env.SVC_DATA_DIR, { recursive: true, force: true });
}

/** One client upserting single points (ids from `firstId`) through `via` until stopped: when each acknowledged one was sent, and its latency. */
function steadyWriter(via: Member, firstId: number): { acks: { sent: number; ms: number }[]; stop(): Promise<void> } {
  const agent = new Agent({ connections: 1 });
  const acks: { sent: number; ms: number }[] = [];
  let writing = true;
  let id = firstId;
  const done = (async () => {
    while (writing) {
      const t = performance.now();
      const status = await upsert(agent, via.server!.rest, 'live', id++);
      if (status === 200) acks.push({ sent: t, ms: performance.now() - t });
      else await sleep(RETRY_MS);
    }
  })();
  return { acks, stop: async () => { writing = false; await done; await agent.close(); } };
}

/**
 * The double fault: a follower wiped again and restored from the leader's image, and while it restores
 * the leader is SIGKILLed. The third member needs the restoring one's vote to lead; a client writes
 * through that third member all along. How long until a write is acknowledged again, whether writes
 * were acknowledged while the member still restored, and every member's points equal at the end.
 */
async function doubleFault(group: Member[], start: (m: Member, readyMs?: number) => Promise<void>, count: (m: Member) => Promise<number>): Promise<Record<string, unknown>> {
  const leader = await whole(group);
  const [restoring, third] = group.filter((m) => m !== leader);
  await wipe(restoring);
  const writer = steadyWriter(third, 1_000_000);
  await start(restoring);
  const restoringView = (): Promise<{ restoring?: boolean }> => restoring.server!.call('GET', '/cluster/raft');
  const seen = await until('the member restores', async () => ((await restoringView()).restoring === true ? true : null), 300_000).catch(() => false);
  const tKill = performance.now();
  process.kill(leader.server!.pid, 'SIGKILL');
  leader.server = null;
  const restoredAt = await until('the restore ends', async () => ((await restoringView()).restoring !== true ? performance.now() : null), 900_000);
  // A write sent after the kill (one in flight at the kill may be answered by the old leader's commit).
  const next = await until('a write sent after the kill acknowledged', async () => {
    const a = writer.acks.find((x) => x.sent > tKill);
    return a === undefined ? null : a.sent + a.ms;
  }, 120_000);
  const rest = [restoring, third];
  await until('the restored member caught up', async () => {
    const vs = await Promise.all(rest.map(view));
    const l = vs.find((v) => v.role === 'leader');
    return l !== undefined && vs.every((v) => v.applied_index >= l.commit_index) ? true : null;
  }, 900_000);
  await writer.stop();
  const acks = writer.acks;
  // Far behind the log by now, it may be caught up by an image too: not ready (503) until it is restored.
  await start(leader, 900_000);
  await whole(group);
  const counts = await Promise.all(group.map(count));
  return {
    member_seen_restoring_when_leader_killed: seen,
    next_ack_after_kill_secs: round((next - tKill) / 1000, 2),
    restore_went_on_after_kill_secs: round((restoredAt - tKill) / 1000, 2),
    // Sent after the kill, acknowledged before the restore ended.
    writes_acked_while_restoring: acks.filter((a) => a.sent > tKill && a.sent + a.ms < restoredAt).length,
    writes_acked: acks.length,
    points_per_member: counts, equal: counts.every((c) => c === counts[0]),
  };
}

function table(out: Record<string, any>): string {
  const lines = [`# Consensus group (issue 17): ${out.mode} run, ${out.machine.cpu} x ${out.machine.cores}, ${out.date}`, '',
    `Single-point upserts (dim ${DIM}), acknowledged per second; ${SECS} s per arm, ${ROUNDS} round(s), medians. Raft: 3 members, default timing.`, ''];
  for (const t of out.throughput) {
    lines.push(`**${t.layout}**`, '', '| clients | through | raft /s | single node /s | raft / single |', '|---|---|---|---|---|');
    for (const a of t.arms) lines.push(`| ${a.clients} | ${a.via} | ${a.raft_median_per_s} | ${a.single_median_per_s} | ${a.ratio_median.toFixed(2)} |`);
    lines.push('');
  }
  const f = out.failover;
  lines.push(`Failover: the leader SIGKILLed ${f.kills} times, clients writing through the followers (retry after ${RETRY_MS} ms).`, '',
    '| from the kill to | p50 ms | p99 ms | max ms |', '|---|---|---|---|');
  const row = (name: string, s: { p50: number; p99: number; max: number }) => lines.push(`| ${name} | ${s.p50} | ${s.p99} | ${s.max} |`);
  row('a survivor is leader', f.to_elected_ms);
  row('next ack, client A (waits for every answer)', f.to_next_ack_ms.client_a);
  row(`next ack, client B (${CLIENT_TIMEOUT_MS} ms request timeout)`, f.to_next_ack_ms.client_b);
  row('the killed member restarted (ready)', f.restart_ready_ms);
  row('the group whole again', f.whole_again_ms);
  lines.push('', `Acknowledged writes: ${f.acknowledged_writes}; lost, per member: ${JSON.stringify(f.acknowledged_lost_per_member)}.`, '');
  const p = out.failover_paused;
  if (p !== null) {
    lines.push(`Failover by the election timeout alone: the leader SIGSTOPped ${p.kills} times (SIGCONT once a survivor leads).`, '',
      '| from the pause to | p50 ms | p99 ms | max ms |', '|---|---|---|---|');
    row('a survivor is leader', p.to_elected_ms);
    row('next ack, client A', p.to_next_ack_ms.client_a);
    row('next ack, client B', p.to_next_ack_ms.client_b);
    lines.push('', `Acknowledged writes: ${p.acknowledged_writes}; lost, per member: ${JSON.stringify(p.acknowledged_lost_per_member)}.`, '');
  }
  const c = out.catchup;
  lines.push(`Catch-up by snapshot: ${c.mib} MiB of vectors (${c.points} points, dim ${CATCHUP_DIM}); a follower wiped and restarted while a client writes through the leader.`, '',
    '| caught up s | image MiB streamed | MiB/s | streams sent / failed | leader RSS growth MiB | writes meanwhile p50 / p99 / max ms | points equal |', '|---|---|---|---|---|---|---|',
    `| ${c.caught_up_secs} | ${round(c.image_bytes_streamed / (1 << 20), 1)} | ${c.image_mib_per_s} | ${c.streams.sent} / ${c.streams.failed} | ${c.leader_rss_growth_mib} | ${c.writes_during.p50_ms} / ${c.writes_during.p99_ms} / ${c.writes_during.max_ms} | ${c.equal} |`, '');
  const d = c.double_fault;
  lines.push('Double fault: the follower wiped and restored again, and the leader SIGKILLed while it restores; a client writes through the third member.', '',
    '| seen restoring at the kill | next ack after the kill s | restore went on after the kill s | writes acked while it restored | points equal on all three |', '|---|---|---|---|---|',
    `| ${d.member_seen_restoring_when_leader_killed} | ${d.next_ack_after_kill_secs} | ${d.restore_went_on_after_kill_secs} | ${d.writes_acked_while_restoring} | ${d.equal} |`, '');
  return lines.join('\n');
}

const work = mkdtempSync(join(tmpdir(), 'svc-bench-raft-'));
const raftPorts = await Promise.all(IDS.map(() => freePort()));
const memberList = IDS.map((id, i) => `${id}=127.0.0.1:${raftPorts[i]}`).join(',');
const members: Member[] = IDS.map((id) => ({
  id, server: null,
  env: { SVC_RAFT_MEMBERS: memberList, SVC_RAFT_NODE_ID: id, SVC_RAFT_SECRET: SECRET, SVC_DATA_DIR: join(work, id) },
}));
if (REPLICA) members[0].env.SVC_GRPC_ADDR = `127.0.0.1:${await freePort()}`;
const start = async (m: Member): Promise<void> => { m.server = await startSvc(m.env); };
let single: SvcServer | null = null;
const t0 = performance.now();
try {
  [single] = await Promise.all([startSvc(), ...members.map(start)]);
  await createColl(members, 'tput', DIM);
  await single.call('POST', '/v1/collections', { name: 'tput', dim: DIM, metric: 'cosine' });
  console.log('throughput');
  const tput = [];
  if (ONLY === null || ONLY === 'throughput') {
    if (PIN) tput.push(await throughput(single, members, true));
    if (!PIN || !quick) tput.push(await throughput(single, members, false));
  }
  await single.stop();
  single = null;
  if (ONLY === null || ONLY === 'failover') console.log('failover');
  const fo = ONLY === null || ONLY === 'failover' ? await failover(members, start, 'kill', KILLS) : null;
  const paused = (ONLY === null || ONLY === 'failover') && PAUSES > 0 ? await failover(members, start, 'pause', PAUSES) : null;
  await Promise.all(members.map(async (m) => { await m.server?.stop(); m.server = null; }));
  if (ONLY === null || ONLY === 'catchup') console.log('catch-up by snapshot');
  const cu = ONLY === null || ONLY === 'catchup' ? await catchup(work, CATCHUP_MB) : null;
  const out = {
    bench: 'raft', mode: quick ? 'quick' : 'full', date: new Date().toISOString(),
    machine: { cpu: cpus()[0].model, cores: cpus().length, node: process.version },
    timing: { heartbeat_ms: 100, election_ms: 1000, write_timeout_secs: 10, note: 'the defaults (no SVC_RAFT_* timing variables set)' },
    dim: DIM, secs_per_arm: SECS, rounds: ROUNDS,
    throughput: tput,
    failover: fo,
    failover_paused: paused,
    catchup: cu,
    run_secs: Math.round((performance.now() - t0) / 1000),
  };
  console.log(JSON.stringify({ ...out, failover: { ...fo, per_kill: undefined }, failover_paused: { ...paused, per_kill: undefined } }, null, 2));
  const name = quick ? 'raft-quick' : 'raft';
  if (ONLY === null) writeFileSync(join(import.meta.dirname, 'results', `${name}.json`), `${JSON.stringify(out, null, 2)}\n`);
  if (ONLY === null) writeFileSync(join(import.meta.dirname, 'results', `${name}.md`), table(out));
} finally {
  await single?.stop();
  await Promise.all(members.map((m) => m.server?.stop()));
  rmSync(work, { recursive: true, force: true });
}
