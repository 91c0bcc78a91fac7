import { assert } from '../base/assert.js';
import { Prng } from '../base/prng.js';
import { MemoryStorage, RaftNode, formatMessage, type Entry, type HardState, type Message, type NodeId, type Ready, type Snapshot } from '../cluster/raft/index.js';
import { InvariantViolation, RaftChecker } from './raft-sim-checker.js';
import { SyncFileRaftStorage } from './raft-file-storage.js';
import { InsecureSealer } from '../crypto/sealer.js';

/**
 * A deterministic simulation of one Raft group, in the manner of TigerBeetle's VOPR: one seed chooses
 * the group size and a fault profile, then drives every tick, message, crash and client request. After
 * every event the checker verifies Raft's safety properties; at the end the network heals, every member
 * restarts, and every acknowledged write must be applied by every member. A failure names the seed;
 * `npm run sim:raft -- --seed N --trace` replays it event by event.
 *
 * The host here does what a real one must, in Ready order: install a snapshot, append entries, persist
 * the hard state, and only then send messages and apply. Its disk is the member's MemoryStorage: what a
 * Ready had not finished persisting when the member crashed is lost (a torn persist keeps a prefix).
 * With `filesDir` its disk is instead the durable consensus log (core/storage/raft-log-core.ts) on real
 * files: a torn persist cuts the Ready's one write at a seeded byte offset, and a restart recovers the
 * member from its files alone.
 *
 * The state machine is durable on its own, lagging, as a member's database is (issue 17: it applies
 * without an fsync of its own): it syncs now and then, and always before its log records a snapshot (a
 * member's own snapshot is a marker there: the log must never drop what the state machine would need
 * again). A crash keeps what it synced plus a seeded prefix of the rest, and a position (the last one
 * it kept) at or before the entries kept; the member restarts at that position and applies the log
 * after it again, entries it still holds included (they must be the same: state machine safety). The
 * unsynced rest may also come back garbled (pages lost out of order, torn sectors): the state machine's
 * recovery cuts at the first damaged entry, which lies past its durable part and may lie before entries
 * that survived, and before the position it wrote last (its WAL in a consensus member: wal.ts).
 */

/** Simulated time: a member ticks every TICK_UNITS units (unless its clock skips); messages take 1+ units. */
const TICK_UNITS = 10;
const ELECTION_TICKS = 10;
const HEARTBEAT_TICKS = 1;
const MAX_WRITES = 150;
const MAX_PENDING_READS = 64;
const LONG_DELAY_UNITS = 40 * TICK_UNITS;

export interface FaultProfile {
  readonly members: number;
  /** Per message. */
  readonly lossP: number;
  readonly dupP: number;
  /** Ordinary delay is 1..maxDelayUnits: reordering among messages in flight. */
  readonly maxDelayUnits: number;
  /** Per message: delayed up to 40 ticks, so it arrives terms later. */
  readonly longDelayP: number;
  /** Per unit: a new cut (a split, an isolated member or a one-way link); cuts add up until a heal. */
  readonly partitionP: number;
  readonly healP: number;
  /** Per unit and live member. */
  readonly crashP: number;
  /** Per Ready: the member crashes in the middle of persisting it. */
  readonly tornP: number;
  /** Per unit: a member snapshots its state machine and compacts its log. */
  readonly compactP: number;
  /** Per tick: a slow clock misses it. */
  readonly tickSkipP: number;
  readonly proposeP: number;
  readonly readP: number;
  /** Raft's flow control: 1 entry per message lets old-term entries travel without the new no-op (figure 8). */
  readonly maxEntriesPerMsg: number;
  readonly maxInflightMsgs: number;
  /**
   * Safety must not rest on these (they serve liveness): without CheckQuorum a cut-off leader lingers,
   * which is what a ReadIndex that skipped its heartbeat round would be caught by.
   */
  readonly preVote: boolean;
  readonly checkQuorum: boolean;
  /**
   * Per member and unit: its state machine turns slow (a snapshot being restored, a backlog of applies)
   * for a while: committed entries wait in its log and it starts no campaign (RaftNode.holdApply,
   * holdCampaign), while it persists, votes and answers as before.
   */
  readonly slowApplyP: number;
  /**
   * Per crash and surviving member: its host sees the crashed member's address refuse connections a
   * little later and tells Raft (RaftNode.leaderGone: a follower of it campaigns soon).
   */
  readonly goneHintP: number;
  /** Per unit: a member is told a live member is gone (a wrong hint); safety and liveness must not care. */
  readonly wrongGoneP: number;
}

const pick = <T>(prng: Prng, choices: readonly T[]): T => choices[prng.int(choices.length)];

export function faultProfile(prng: Prng): FaultProfile {
  return {
    members: pick(prng, [3, 5]),
    lossP: pick(prng, [0, 0.01, 0.05, 0.2]),
    dupP: pick(prng, [0, 0.02, 0.1]),
    maxDelayUnits: pick(prng, [2, 10, 30]),
    longDelayP: pick(prng, [0, 0.01, 0.05]),
    partitionP: pick(prng, [0, 0.001, 0.005]),
    healP: pick(prng, [0.002, 0.01]),
    crashP: pick(prng, [0, 0.0003, 0.001]),
    tornP: pick(prng, [0, 0.01, 0.05]),
    compactP: pick(prng, [0, 0.01, 0.05]),
    tickSkipP: pick(prng, [0, 0.1, 0.3]),
    proposeP: pick(prng, [0.02, 0.1]),
    readP: pick(prng, [0, 0.02]),
    maxEntriesPerMsg: pick(prng, [1, 8, 64]),
    maxInflightMsgs: pick(prng, [1, 4, 16]),
    preVote: pick(prng, [true, true, false]),
    checkQuorum: pick(prng, [true, true, false]),
    slowApplyP: pick(prng, [0, 0.0005, 0.002]),
    goneHintP: pick(prng, [0, 0.5, 1]),
    wrongGoneP: pick(prng, [0, 0, 0.0005, 0.005]),
  };
}

export interface RaftSimOptions {
  /** Units of faults before the heal (default 4000, about 400 ticks). */
  chaosUnits?: number;
  /**
   * Liveness after the heal (default 4000): the group must converge, and may go at most this many units
   * without progress (a member's commit, applied or last index changing; a new term alone is none: a
   * member cut off campaigns for ever) and at most eight times as many in all. A profile of one entry
   * per message and one message in flight catches a member up by one entry per round trip: a hundred
   * entries behind over links of up to 30 units each way take longer than 4,000 units, and are progress
   * all the while, not a stalled group.
   */
  healUnits?: number;
  /** Receives one line per event (messages, crashes, roles, writes): for replaying one seed. */
  trace?: (line: string) => void;
  /** Members keep their log in real files under this directory (one folder each) instead of memory. */
  filesDir?: string;
  /** A member whose links stay cut after the heal (a group that cannot converge: the liveness check's own test). */
  cutAfterHeal?: string;
}

export interface RaftSimStats {
  seed: number;
  members: number;
  units: number;
  leaders: number;
  maxTerm: number;
  writes: number;
  acked: number;
  overwritten: number;
  reads: number;
  readsAnswered: number;
  crashes: number;
  tornPersists: number;
  compactions: number;
  snapshotsInstalled: number;
  sent: number;
  lost: number;
  duplicated: number;
  partitions: number;
  slowApplies: number;
  /** leaderGone hints given (after crashes, and wrong ones) that changed a member's state. */
  goneHints: number;
  /** Entries applied again after a restart that the state machine had kept past its position. */
  reapplied: number;
  /** Crashes whose state machine's unsynced tail came back garbled and was cut at the damage. */
  garbledTails: number;
}

export class RaftSimFailure extends Error {
  constructor(readonly seed: number, readonly unit: number, readonly reason: unknown) {
    const why = reason instanceof Error ? reason.message : String(reason);
    super(`raft simulation seed ${seed} failed at unit ${unit}: ${why}\n  replay: npm run sim:raft -- --seed ${seed} --trace`);
    this.name = 'RaftSimFailure';
  }
}

interface PendingWrite {
  readonly id: number;
  readonly index: number;
  readonly term: number;
}

/** One member and what survives its crashes (storage) and what does not (the rest). */
class Host {
  node: RaftNode | null = null;
  storage: MemoryStorage | SyncFileRaftStorage;
  /** The state machine: the data of entries 1..applied (more after a restart, until they are applied again). */
  values: number[] = [];
  /** The state machine's durable position: every entry through it survives a crash. */
  smDurable = 0;
  /** What the state machine kept at its last crash (entries 1..length) and the position it kept. */
  smKept: number[] = [];
  smPosition = 0;
  /** The last entry the state machine applied since its start. */
  smApplied = 0;
  /** The hard state as of the last fsynced Ready (one that moves only the commit index is not fsynced). */
  syncedHard: HardState | null = null;
  /** Indexes of the snapshots this member recorded itself (markers: its state machine must hold them). */
  readonly markers = new Set<number>();
  restartAt = 0;
  /** Until when its state machine is slow (0: it is not). */
  slowUntil = 0;
  role = 'follower';
  /** Writes this member accepted as leader, by index, until it applies that index. */
  readonly writes = new Map<number, PendingWrite>();
  /** Reads asked of this member: ctx -> highest acknowledged write index when asked. */
  readonly reads = new Map<string, number>();
  constructor(readonly id: NodeId, readonly phase: number, readonly dir: string | null) {
    this.storage = dir === null ? new MemoryStorage() : SyncFileRaftStorage.open(dir, SIM_SEALER);
  }
}

/** The files of the simulation are checksummed and bound to their position, not encrypted: speed. */
const SIM_SEALER = new InsecureSealer();

export function runRaftSim(seed: number, options: RaftSimOptions = {}): RaftSimStats {
  return new RaftSim(seed, options).run();
}

export class RaftSim {
  readonly profile: FaultProfile;
  private readonly prng: Prng;
  /**
   * Whether a host sends and applies a Ready that only moves the commit index before its write lands: a
   * stream of its own, so that a seed's other choices stay as they were before this choice existed (up
   * to the first such Ready a crash tears: its sends and applies then come before the tear's choices).
   */
  private readonly lazyPrng: Prng;
  private readonly ids: NodeId[];
  private readonly hosts: Host[];
  private readonly checker = new RaftChecker();
  private readonly inFlight: (Message[] | undefined)[] = [];
  /** leaderGone hints by the unit they reach a member's host: [member, the peer said to be gone]. */
  private readonly hints: ([NodeId, NodeId][] | undefined)[] = [];
  private readonly blocked = new Set<string>();
  private readonly chaosUnits: number;
  private readonly healUnits: number;
  private readonly cutAfterHeal: string | null;
  private readonly trace: ((line: string) => void) | undefined;
  private now = 0;
  private faults = true;
  private nextWrite = 1;
  private nextRead = 1;
  private readonly stats: RaftSimStats;

  constructor(readonly seed: number, options: RaftSimOptions = {}) {
    this.prng = new Prng(seed);
    this.lazyPrng = new Prng(seed ^ 0x5bd1e995);
    this.profile = faultProfile(this.prng);
    this.ids = Array.from({ length: this.profile.members }, (_, k) => `n${k + 1}`);
    const dir = options.filesDir;
    this.hosts = this.ids.map((id) => new Host(id, this.prng.int(TICK_UNITS), dir === undefined ? null : `${dir}/${id}`));
    this.chaosUnits = options.chaosUnits ?? 4000;
    this.healUnits = options.healUnits ?? 4000;
    this.cutAfterHeal = options.cutAfterHeal ?? null;
    this.trace = options.trace;
    this.stats = {
      seed, members: this.ids.length, units: 0, leaders: 0, maxTerm: 0, writes: 0, acked: 0, overwritten: 0, reads: 0,
      readsAnswered: 0, crashes: 0, tornPersists: 0, compactions: 0, snapshotsInstalled: 0, sent: 0, lost: 0, duplicated: 0, partitions: 0, slowApplies: 0, goneHints: 0, reapplied: 0, garbledTails: 0,
    };
  }

  run(): RaftSimStats {
    try {
      this.log(`profile ${JSON.stringify(this.profile)}`);
      for (const h of this.hosts) this.restart(h);
      for (; this.now < this.chaosUnits; this.now++) this.unit();
      this.heal();
      const end = this.chaosUnits + 8 * this.healUnits;
      let seen = this.progress();
      let since = this.now;
      for (; !this.converged(); this.now++) {
        if (this.now - since > this.healUnits) throw new Error(`liveness: the healed group made no progress in ${this.healUnits} units (${this.describe()})`);
        if (this.now >= end) throw new Error(`liveness: the healed group did not converge in ${end - this.chaosUnits} units (${this.describe()})`);
        this.unit();
        const p = this.progress();
        if (p !== seen) {
          seen = p;
          since = this.now;
        }
      }
      this.checker.durable(this.hosts);
    } catch (e) {
      throw new RaftSimFailure(this.seed, this.now, e);
    } finally {
      for (const h of this.hosts) if (h.storage instanceof SyncFileRaftStorage) h.storage.close();
    }
    this.stats.units = this.now;
    this.stats.leaders = this.checker.leaders();
    this.stats.acked = this.checker.acked.length;
    return this.stats;
  }

  private unit(): void {
    if (this.faults) this.injectFaults();
    this.clients();
    this.ticks();
    this.deliver();
  }

  // ---- time and network ----

  private ticks(): void {
    for (const h of this.hosts) {
      if (!h.node || (this.now + h.phase) % TICK_UNITS !== 0) continue;
      if (this.faults && this.chance(this.profile.tickSkipP)) continue;
      h.node.tick();
      this.after(h);
    }
  }

  private deliver(): void {
    const hints = this.hints[this.now];
    if (hints !== undefined) {
      this.hints[this.now] = undefined;
      for (const [to, peer] of hints) this.hint(to, peer);
    }
    const batch = this.inFlight[this.now];
    if (!batch) return;
    this.inFlight[this.now] = undefined;
    shuffle(this.prng, batch);
    for (const m of batch) {
      const h = this.host(m.to);
      if (this.blocked.has(`${m.from}>${m.to}`) || !h.node) {
        this.stats.lost++;
        continue;
      }
      this.log(`  ${formatMessage(m)}`);
      h.node.step(m);
      this.after(h);
    }
  }

  private send(m: Message): void {
    this.stats.sent++;
    if (this.faults && this.chance(this.profile.lossP)) {
      this.stats.lost++;
      return;
    }
    Object.freeze(m);
    this.schedule(m);
    if (this.faults && this.chance(this.profile.dupP)) {
      this.stats.duplicated++;
      this.schedule(m);
    }
  }

  private schedule(m: Message): void {
    const long = this.faults && this.chance(this.profile.longDelayP);
    const at = this.now + 1 + this.prng.int(long ? LONG_DELAY_UNITS : this.profile.maxDelayUnits);
    (this.inFlight[at] ??= []).push(m);
  }

  // ---- faults ----

  private injectFaults(): void {
    const p = this.profile;
    if (this.chance(p.partitionP)) this.partition();
    else if (this.blocked.size > 0 && this.chance(p.healP)) this.healLinks();
    for (const h of this.hosts) {
      if (h.node && this.chance(p.crashP)) this.crash(h, 'crash');
      else if (!h.node && this.now >= h.restartAt) this.restart(h);
      else if (h.node && h.slowUntil > 0 && this.now >= h.slowUntil) this.slowApply(h, false);
      else if (h.node && h.slowUntil === 0 && this.chance(p.slowApplyP)) this.slowApply(h, true);
    }
    if (p.wrongGoneP > 0 && this.chance(p.wrongGoneP)) {
      const to = this.ids[this.prng.int(this.ids.length)];
      const peer = this.ids[this.prng.int(this.ids.length)];
      if (peer !== to) this.hint(to, peer);
    }
    if (this.chance(p.compactP)) this.compact(this.hosts[this.prng.int(this.hosts.length)]);
  }

  private partition(): void {
    this.stats.partitions++;
    const kind = this.prng.int(3);
    if (kind === 2) {
      const a = this.prng.int(this.ids.length);
      const b = (a + 1 + this.prng.int(this.ids.length - 1)) % this.ids.length;
      this.blocked.add(`${this.ids[a]}>${this.ids[b]}`);
      this.log(`cut ${this.ids[a]} -> ${this.ids[b]}`);
      return;
    }
    const order = shuffle(this.prng, [...this.ids]);
    const side = order.slice(0, kind === 0 ? 1 : 1 + this.prng.int(this.ids.length - 1));
    for (const a of side) {
      for (const b of this.ids) {
        if (side.includes(b)) continue;
        this.blocked.add(`${a}>${b}`);
        this.blocked.add(`${b}>${a}`);
      }
    }
    this.log(`partition [${side.join(' ')}] from the rest`);
  }

  private healLinks(): void {
    this.blocked.clear();
    this.log('links heal');
  }

  private crash(h: Host, why: string): void {
    this.stats.crashes++;
    // The state machine keeps its durable part and a prefix of the rest; its kept position lies between.
    // What the state machine applied: a Ready's entries applied before a crash tore its write are, though
    // the node was never told (advance).
    const applied = h.node ? Math.max(h.node.status().applied, h.smApplied) : h.smPosition;
    let kept = h.smDurable + this.prng.int(h.values.length - h.smDurable + 1);
    // Or garbage past the durable part: recovery cuts at the first damaged entry, whatever follows it.
    if (kept > h.smDurable && this.chance(0.25)) {
      const damaged = h.smDurable + 1 + this.prng.int(kept - h.smDurable);
      this.stats.garbledTails++;
      this.log(`${h.id}'s state machine tail is garbled at entry ${damaged} (kept ${kept}): cut there`);
      kept = damaged - 1;
    }
    h.smKept = h.values.slice(0, kept);
    h.smPosition = h.smDurable + this.prng.int(Math.min(kept, applied) - h.smDurable + 1);
    // A hard state that only moved the commit index was written without an fsync: it may be lost.
    if (h.storage instanceof MemoryStorage && h.syncedHard !== null && this.chance(0.5)) h.storage.setHardState(h.syncedHard);
    h.node = null;
    h.slowUntil = 0;
    h.role = 'down';
    h.writes.clear();
    h.reads.clear();
    h.restartAt = this.now + TICK_UNITS * (5 + this.prng.int(60));
    this.log(`${h.id} ${why}`);
    // Its address refuses connections now: survivors' hosts notice when they next dial it.
    for (const g of this.hosts) {
      if (g !== h && g.node && this.profile.goneHintP > 0 && this.chance(this.profile.goneHintP)) {
        const at = this.now + 1 + this.prng.int(2 * TICK_UNITS);
        (this.hints[at] ??= []).push([g.id, h.id]);
      }
    }
  }

  /** A member starts from what its disk holds: hard state, entries and snapshot. */
  private restart(h: Host): void {
    if (h.storage instanceof SyncFileRaftStorage) {
      h.storage.close();
      h.storage = SyncFileRaftStorage.open(h.dir!, SIM_SEALER);
    }
    const snap = h.storage.snapshot();
    let applied: number;
    if (h.smPosition >= snap.meta.index) {
      // From the state machine's own position (its kept tail past it is applied again).
      h.values = h.smKept;
      applied = h.smPosition;
    } else {
      // A snapshot installed from a leader whose restore the crash cut short: restored again. Never a
      // member's own marker: it recorded one only once its state machine held the index durably.
      if (h.markers.has(snap.meta.index)) throw new InvariantViolation('compaction', `${h.id}'s log dropped entries through its marker ${snap.meta.index}, but its state machine kept only ${h.smPosition}`);
      h.values = decodeValues(snap);
      applied = snap.meta.index;
    }
    h.smDurable = applied;
    h.smPosition = applied;
    h.smApplied = applied;
    h.role = 'follower';
    h.node = new RaftNode({
      id: h.id, members: this.ids, storage: h.storage, prng: new Prng(this.prng.nextU32()),
      electionTicks: ELECTION_TICKS, heartbeatTicks: HEARTBEAT_TICKS, applied,
      maxEntriesPerMsg: this.profile.maxEntriesPerMsg, maxInflightMsgs: this.profile.maxInflightMsgs,
      preVote: this.profile.preVote, checkQuorum: this.profile.checkQuorum,
    });
    this.log(`${h.id} starts: ${JSON.stringify(h.storage.hardState())} log ${h.storage.firstIndex()}..${h.storage.lastIndex()}`);
  }

  /** Snapshot the state machine at (about) the applied index and drop the log before (about) it. */
  private compact(h: Host): void {
    if (!h.node) return;
    const snapIndex = h.storage.snapshot().meta.index;
    const applied = h.node.status().applied;
    if (applied <= snapIndex) return;
    const index = applied - this.prng.int(Math.min(3, applied - snapIndex));
    // The state machine's position is made durable first (ConsensusMember: StateMachine.syncApplied).
    h.smDurable = Math.max(h.smDurable, applied);
    h.markers.add(index);
    h.storage.createSnapshot(index, encodeValues(h.values.slice(0, index)));
    h.storage.compact(Math.max(h.storage.firstIndex() - 1, index - this.prng.int(4)));
    this.stats.compactions++;
  }

  /** The member's state machine turns slow (committed entries held, no campaigns) or recovers. */
  private slowApply(h: Host, slow: boolean): void {
    if (slow) this.stats.slowApplies++;
    h.slowUntil = slow ? this.now + TICK_UNITS * (5 + this.prng.int(60)) : 0;
    h.node!.holdApply(slow);
    h.node!.holdCampaign(slow);
    this.log(`${h.id} ${slow ? 'applies slowly: holds committed entries and campaigns' : 'applies again'}`);
  }

  private heal(): void {
    this.faults = false;
    this.healLinks();
    const cut = this.cutAfterHeal;
    if (cut !== null) {
      for (const other of this.ids) if (other !== cut) this.blocked.add(`${cut}>${other}`).add(`${other}>${cut}`);
    }
    for (const h of this.hosts) if (h.node && h.slowUntil > 0) this.slowApply(h, false);
    for (const h of this.hosts) if (!h.node) this.restart(h);
    this.log('heal: no more faults; everyone is up');
  }

  // ---- clients ----

  private clients(): void {
    if (this.faults && this.nextWrite <= MAX_WRITES && this.chance(this.profile.proposeP)) this.propose();
    if (this.faults && this.chance(this.profile.readP)) this.read();
  }

  /** A client writes to a random live member and follows one redirect to the leader it names. */
  private propose(): void {
    let h = this.randomLive();
    if (!h?.node) return;
    const id = this.nextWrite++;
    this.stats.writes++;
    let r = h.node.propose(encodeId(id));
    if (!r.ok && r.reason === 'not_leader' && r.leaderId !== null) {
      const leader = this.host(r.leaderId);
      if (leader.node) {
        h = leader;
        r = leader.node.propose(encodeId(id));
      }
    }
    if (!r.ok) return;
    h.writes.set(r.index, { id, index: r.index, term: r.term });
    this.log(`${h.id} accepts write ${id} at ${r.index}/${r.term}`);
    this.after(h);
  }

  private read(): void {
    const h = this.randomLive();
    if (!h?.node || h.reads.size >= MAX_PENDING_READS) return;
    const ctx = `r${this.nextRead++}`;
    this.stats.reads++;
    if (!h.node.readIndex(ctx).ok) return;
    h.reads.set(ctx, this.checker.maxAckedIndex);
    this.after(h);
  }

  // ---- the host's Ready loop ----

  /** `to`'s host saw `peer`'s address refuse a connection (right, or wrong: `peer` may be up again). */
  private hint(to: NodeId, peer: NodeId): void {
    const h = this.host(to);
    if (!h.node || !h.node.leaderGone(peer)) return;
    this.stats.goneHints++;
    this.log(`${to} is told ${peer} is gone`);
    this.after(h);
  }

  private after(h: Host): void {
    this.handleReady(h);
    if (h.node) this.observe(h, h.node);
  }

  private handleReady(h: Host): void {
    for (let rounds = 0; h.node?.hasReady(); rounds++) {
      assert(rounds < 100, 'a member keeps producing Ready without input');
      const node = h.node;
      const rd = node.ready();
      // A Ready without mustSync (at most the commit index moved) may send and apply before its write
      // lands, as the member host does; a crash may then take the write (the torn case).
      const lazy = !rd.mustSync && this.lazyPrng.next() < 0.5;
      // A leader's appends may go before its own disk holds them (a crash right after is the torn case).
      const early = rd.sendBeforePersist && this.chance(0.5);
      if (early) for (const m of rd.messages) this.send(m);
      const torn = this.faults && this.chance(this.profile.tornP);
      if (lazy && !early) for (const m of rd.messages) this.send(m);
      if (lazy) this.apply(h, rd);
      if (torn) {
        this.persistTorn(h, rd);
        return;
      }
      this.persist(h, rd);
      if (!early && !lazy) for (const m of rd.messages) this.send(m);
      if (!lazy) this.apply(h, rd);
      node.advance(rd);
    }
  }

  private persist(h: Host, rd: Ready): void {
    const s = h.storage;
    if (s instanceof SyncFileRaftStorage) {
      // One write for the whole Ready, as a real host does.
      if (rd.snapshot) this.installSnapshot(h, rd.snapshot);
      this.noteEntries(h, rd.entries, rd.snapshot);
      s.save(rd);
      return;
    }
    if (rd.snapshot) {
      this.installSnapshot(h, rd.snapshot);
      s.applySnapshot(rd.snapshot);
    }
    this.appendEntries(h, rd.entries);
    if (rd.hardState) s.setHardState(rd.hardState);
    if (rd.mustSync) h.syncedHard = s.hardState();
  }

  private installSnapshot(h: Host, snap: Snapshot): void {
    const values = decodeValues(snap);
    this.checker.snapshotInstalled(h.id, values);
    h.values = values;
    // A restore ends durable (Database.restoreConsensusImage's last record is fsynced).
    h.smDurable = snap.meta.index;
    h.smApplied = Math.max(h.smApplied, snap.meta.index);
    for (const index of h.writes.keys()) if (index <= snap.meta.index) h.writes.delete(index); // outcome unknown to it
    this.stats.snapshotsInstalled++;
    this.log(`${h.id} installs snapshot ${snap.meta.index}/${snap.meta.term}`);
  }

  private appendEntries(h: Host, entries: readonly Entry[]): void {
    const s = h.storage;
    assert(s instanceof MemoryStorage, 'only the memory disk appends entry by entry');
    this.noteEntries(h, entries, null);
    s.append(entries);
  }

  /** Tells the checker what the member persists (log matching), before it does. */
  private noteEntries(h: Host, entries: readonly Entry[], snap: Snapshot | null): void {
    if (entries.length === 0) return;
    const before = entries[0].index - 1;
    const prevTerm = snap !== null && snap.meta.index === before ? snap.meta.term : h.storage.term(before);
    assert(prevTerm !== null, `${h.id} appends at ${entries[0].index} with no entry before it`);
    this.checker.persisted(h.id, entries.map((e) => ({ index: e.index, term: e.term, data: decodeId(e.data) })), prevTerm);
  }

  /** The member dies while persisting: a prefix of the work reaches the disk, nothing is sent or applied. */
  private persistTorn(h: Host, rd: Ready): void {
    this.stats.tornPersists++;
    const s = h.storage;
    if (s instanceof SyncFileRaftStorage) {
      // Whatever prefix survives, every entry in it was meant for this log: check them all.
      if (rd.snapshot) this.checker.snapshotInstalled(h.id, decodeValues(rd.snapshot));
      this.noteEntries(h, rd.entries, rd.snapshot);
      this.crash(h, `crashes persisting (${s.saveTorn(rd, this.prng)})`);
      return;
    }
    const snapshotKept = rd.snapshot === null || this.chance(0.5);
    if (rd.snapshot && snapshotKept) s.applySnapshot(rd.snapshot);
    const kept = snapshotKept ? this.prng.int(rd.entries.length + 1) : 0;
    this.appendEntries(h, rd.entries.slice(0, kept));
    if (snapshotKept && kept === rd.entries.length && rd.hardState && this.chance(0.5)) s.setHardState(rd.hardState);
    this.crash(h, `crashes persisting (kept ${kept} of ${rd.entries.length} entries)`);
  }

  private apply(h: Host, rd: Ready): void {
    for (const e of rd.committedEntries) {
      const data = decodeId(e.data);
      this.checker.appliedEntry(h.id, e.index, e.term, data);
      if (e.index <= h.values.length) {
        // Kept past its position at a crash: applied again, which must change nothing.
        assert(h.values[e.index - 1] === data, `${h.id} applies ${data} at ${e.index} again, but its state machine kept ${h.values[e.index - 1]} there`);
        this.stats.reapplied++;
      } else {
        assert(e.index === h.values.length + 1, `${h.id} applies ${e.index} after ${h.values.length}`);
        h.values.push(data);
      }
      const w = h.writes.get(e.index);
      if (!w) continue;
      h.writes.delete(e.index);
      if (w.term !== e.term) {
        this.stats.overwritten++;
        continue;
      }
      this.checker.ack({ ...w, member: h.id }, data);
      this.log(`${h.id} acknowledges write ${w.id} at ${w.index}/${w.term}`);
    }
    // Now and then the state machine syncs (a database's checkpoint, a create): durable through here.
    const last = rd.committedEntries[rd.committedEntries.length - 1];
    if (last !== undefined) h.smApplied = Math.max(h.smApplied, last.index);
    if (last !== undefined && this.chance(0.1)) h.smDurable = Math.max(h.smDurable, last.index);
    for (const rs of rd.readStates) {
      const ackedBefore = h.reads.get(rs.ctx);
      if (ackedBefore === undefined) continue; // a duplicated answer
      h.reads.delete(rs.ctx);
      this.checker.readAnswered(h.id, rs.ctx, rs.index, ackedBefore);
      this.stats.readsAnswered++;
    }
  }

  private observe(h: Host, node: RaftNode): void {
    const st = node.status();
    this.stats.maxTerm = Math.max(this.stats.maxTerm, st.term);
    if (st.role !== h.role) {
      h.role = st.role;
      this.log(`${h.id} is ${st.role} in term ${st.term} (log ${st.firstIndex}..${st.lastIndex}, commit ${st.commit})`);
    }
    if (st.role !== 'leader') return;
    const termAt = (i: number): number | null => node.entryTerm(i);
    if (this.checker.leader(st.term, st.id)) this.checker.newLeader(st.term, st.id, termAt);
    this.checker.leaderCommitted(st.term, st.id, st.commit, termAt);
  }

  // ---- the end ----

  /** One leader whose log is all committed in its term, and every member applied all of it. */
  private converged(): boolean {
    const leader = this.hosts.find((h) => h.node?.status().role === 'leader')?.node;
    if (!leader) return false;
    const ls = leader.status();
    if (ls.commit !== ls.lastIndex || leader.entryTerm(ls.commit) !== ls.term) return false;
    return this.hosts.every((h) => {
      const st = h.node?.status();
      return st !== undefined && st.applied === ls.commit && st.lastIndex === ls.lastIndex;
    });
  }

  /** What changes while a healed group converges: each member's commit, applied and last index. */
  private progress(): string {
    return this.hosts.map((h) => {
      const st = h.node?.status();
      return st ? `${st.commit}/${st.applied}/${st.lastIndex}` : '-';
    }).join(' ');
  }

  private describe(): string {
    return this.hosts
      .map((h) => {
        const st = h.node?.status();
        return st ? `${h.id} ${st.role} t${st.term} commit ${st.commit} applied ${st.applied} last ${st.lastIndex}` : `${h.id} down`;
      })
      .join('; ');
  }

  // ---- helpers ----

  private chance(p: number): boolean {
    return p > 0 && this.prng.next() < p;
  }

  private host(id: NodeId): Host {
    const h = this.hosts.find((x) => x.id === id);
    assert(h !== undefined, `no member ${id}`);
    return h;
  }

  private randomLive(): Host | undefined {
    const live = this.hosts.filter((h) => h.node);
    return live.length > 0 ? live[this.prng.int(live.length)] : undefined;
  }

  private log(line: string): void {
    this.trace?.(`${this.now} ${line}`);
  }
}

function shuffle<T>(prng: Prng, items: T[]): T[] {
  for (let i = items.length - 1; i > 0; i--) {
    const j = prng.int(i + 1);
    [items[i], items[j]] = [items[j], items[i]];
  }
  return items;
}

/** A write's data is its id, 4 bytes little-endian; a leader's no-op is empty (id 0). */
function encodeId(id: number): Uint8Array {
  const b = new Uint8Array(4);
  new DataView(b.buffer).setUint32(0, id, true);
  return b;
}

function decodeId(data: Uint8Array): number {
  return data.byteLength === 0 ? 0 : new DataView(data.buffer, data.byteOffset, 4).getUint32(0, true);
}

function encodeValues(values: readonly number[]): Uint8Array {
  return new Uint8Array(Uint32Array.from(values).buffer);
}

function decodeValues(snap: Snapshot): number[] {
  const d = snap.data;
  assert(d.byteLength === snap.meta.index * 4, `snapshot at ${snap.meta.index} holds ${d.byteLength / 4} values`);
  return Array.from(new Uint32Array(d.buffer.slice(d.byteOffset, d.byteOffset + d.byteLength)));
}
