import { Prng } from '../base/prng.js';
import {
  MemoryStorage, RaftNode, formatEntries, formatMessage, type Message, type NodeId, type RaftOptions, type Ready,
} from '../cluster/raft/index.js';

/**
 * A small language for readable Raft scenarios, after etcd's testdata transcripts: each block is a
 * command, `----`, and the output it must print. Members' Ready batches are handled only by `process`
 * and messages move only by `deliver`, so a transcript says exactly which message reaches whom when.
 *
 *   members n1 n2 n3 [max-entries=N] [prevote=false] [checkquorum=false]   a fresh group, empty logs
 *   log n2 terms=1,1,4 [term=T] [vote=ID] [commit=C]    replace n2's disk with this log, restart it
 *   campaign n1 | tick n1 [n2 ...] [count] | propose n1 text | read n1 ctx
 *   process [ids]      handle Ready: persist, queue messages, apply; prints what each Ready held
 *   deliver [ids]      deliver the queued messages to these members (default all); prints each one
 *   stabilize [ids]    process and deliver among these members until nothing moves
 *   elect n1           campaign, process and deliver until n1 leads (again if a round fails); n1's
 *                      first Ready as leader is left for the next command
 *   drop [ids]         the network loses the messages queued for these members (default all)
 *   partition a b | c d e    drop messages between the groups; `heal` restores every link
 *   crash n1 | restart n1    what n1 had not persisted is lost; it restarts from its disk
 *   compact n1 index         snapshot n1's state machine at index and drop its log before it
 *   gone n2 n3 : n1          n2's and n3's hosts saw n1's address refuse a connection (leaderGone)
 *   status [ids]             role, term, vote, commit, applied and the terms of the log, per member;
 *                            a leader adds what it knows of each follower's log
 */
export class RaftTranscript {
  private ids: NodeId[] = [];
  private readonly disks = new Map<NodeId, MemoryStorage>();
  private readonly nodes = new Map<NodeId, RaftNode | null>();
  private readonly applied = new Map<NodeId, string[]>();
  private queue: Message[] = [];
  private readonly blocked = new Set<string>();
  private options: Partial<RaftOptions> = {};
  private seed = 1;

  /** Runs one command line; returns its output (never empty, never with blank lines). */
  run(line: string): string {
    const [cmd, ...args] = line.trim().split(/\s+/);
    const out = this.dispatch(cmd, args);
    return out.length > 0 ? out.join('\n') : 'ok';
  }

  private dispatch(cmd: string, args: string[]): string[] {
    switch (cmd) {
      case 'members': return this.members(args);
      case 'log': return this.setLog(args);
      case 'campaign': return this.each(args, (n) => n.campaign());
      case 'tick': return this.tick(args);
      case 'propose': return this.propose(args);
      case 'read': return this.read(args);
      case 'process': return this.selected(args).flatMap((id) => this.process(id));
      case 'deliver': return this.deliver(this.selected(args));
      case 'stabilize': return this.stabilize(this.selected(args));
      case 'elect': return this.elect(this.known(args[0]));
      case 'drop': return this.drop(this.selected(args));
      case 'partition': return this.partition(args);
      case 'heal': this.blocked.clear(); return [];
      case 'crash': return this.crash(args);
      case 'restart': return this.restart(args);
      case 'compact': return this.compact(args);
      case 'gone': return this.gone(args);
      case 'status': return this.selected(args).map((id) => this.status(id));
      default: throw new Error(`unknown transcript command: ${cmd}`);
    }
  }

  // ---- setup ----

  private members(args: string[]): string[] {
    const opts = keyValues(args.filter((a) => a.includes('=')));
    this.ids = args.filter((a) => !a.includes('='));
    this.options = {
      maxEntriesPerMsg: Number(opts['max-entries'] ?? 64),
      preVote: opts.prevote !== 'false',
      checkQuorum: opts.checkquorum !== 'false',
    };
    this.queue = [];
    this.blocked.clear();
    for (const id of this.ids) {
      this.disks.set(id, new MemoryStorage());
      this.start(id);
    }
    return [];
  }

  private setLog(args: string[]): string[] {
    const [id, ...rest] = args;
    const kv = keyValues(rest);
    const terms = (kv.terms ?? '').split(',').filter(Boolean).map(Number);
    const disk = new MemoryStorage();
    disk.append(terms.map((term, k) => ({ index: k + 1, term, data: new Uint8Array(0) })));
    const last = terms[terms.length - 1] ?? 0;
    disk.setHardState({ term: Number(kv.term ?? last), vote: kv.vote ?? null, commit: Number(kv.commit ?? 0) });
    this.disks.set(this.known(id), disk);
    this.start(id);
    this.applied.set(id, Array.from({ length: Number(kv.commit ?? 0) }, () => ''));
    return [];
  }

  private start(id: NodeId): void {
    const disk = this.disk(id);
    this.nodes.set(id, new RaftNode({
      ...this.options, id, members: this.ids, storage: disk, prng: new Prng(this.seed++),
      electionTicks: 10, heartbeatTicks: 1, applied: disk.hardState().commit,
    }));
    if (!this.applied.has(id)) this.applied.set(id, []);
  }

  // ---- inputs ----

  /** `tick n2 n3 10`: the members tick in lockstep (no message moves in between). */
  private tick(args: string[]): string[] {
    const last = args[args.length - 1];
    const count = /^\d+$/.test(last) ? Number(last) : 1;
    const ids = /^\d+$/.test(last) ? args.slice(0, -1) : args;
    for (let k = 0; k < count; k++) for (const id of ids) this.node(id).tick();
    return [];
  }

  private propose(args: string[]): string[] {
    const r = this.node(args[0]).propose(new TextEncoder().encode(args.slice(1).join(' ')));
    if (r.ok) return [`${args[0]} accepts it at ${r.index}/${r.term}`];
    return [r.reason === 'busy' ? `${args[0]} is busy` : `${args[0]} is not the leader (leader: ${r.leaderId ?? 'unknown'})`];
  }

  private read(args: string[]): string[] {
    const r = this.node(args[0]).readIndex(args[1]);
    return r.ok ? [] : [`${args[0]} refuses read ${args[1]}: ${r.reason}`];
  }

  /** `gone n2 n3 : n1`: prints which of them now suspect n1 (those that follow it). */
  private gone(args: string[]): string[] {
    const at = args.indexOf(':');
    const peer = this.known(args[at + 1]);
    return args.slice(0, at).map((id) => `${id} ${this.node(id).leaderGone(peer) ? 'suspects' : 'does not follow'} ${peer}`);
  }

  private each(args: string[], f: (n: RaftNode) => void): string[] {
    for (const id of args) f(this.node(id));
    return [];
  }

  // ---- Ready and messages ----

  private process(id: NodeId): string[] {
    const node = this.nodes.get(id);
    const out: string[] = [];
    while (node?.hasReady()) {
      const rd = node.ready();
      this.persist(id, rd);
      this.queue.push(...rd.messages);
      this.applied.get(id)!.push(...rd.committedEntries.map((e) => new TextDecoder().decode(e.data)));
      out.push(`${id} ${describeReady(rd)}`);
      node.advance(rd);
    }
    return out;
  }

  private persist(id: NodeId, rd: Ready): void {
    const disk = this.disk(id);
    if (rd.snapshot) {
      disk.applySnapshot(rd.snapshot);
      this.applied.set(id, JSON.parse(new TextDecoder().decode(rd.snapshot.data)) as string[]);
    }
    disk.append(rd.entries);
    if (rd.hardState) disk.setHardState(rd.hardState);
  }

  private deliver(to: NodeId[]): string[] {
    const out: string[] = [];
    const now = this.queue.filter((m) => to.includes(m.to));
    this.queue = this.queue.filter((m) => !to.includes(m.to));
    for (const m of now) {
      const node = this.nodes.get(m.to);
      const dropped = this.blocked.has(`${m.from}>${m.to}`) || !node;
      out.push(`${formatMessage(m)}${dropped ? '  (dropped)' : ''}`);
      if (!dropped) node.step(m);
    }
    return out;
  }

  private stabilize(ids: NodeId[]): string[] {
    const out: string[] = [];
    for (let round = 0; round < 1000; round++) {
      const readies = ids.flatMap((id) => this.process(id));
      const moved = this.deliver(ids);
      if (readies.length === 0 && moved.length === 0) return out;
      out.push(...readies, ...moved);
    }
    throw new Error('stabilize: still moving after 1000 rounds');
  }

  private elect(id: NodeId): string[] {
    const out: string[] = [];
    for (let attempt = 0; attempt < 5; attempt++) {
      this.node(id).campaign();
      for (let round = 0; round < 20; round++) {
        const readies = this.ids.flatMap((x) => this.process(x));
        const moved = this.deliver(this.ids);
        out.push(...readies, ...moved);
        const st = this.node(id).status();
        if (st.role === 'leader') return [...out, `${id} leads term ${st.term}`];
        if (readies.length === 0 && moved.length === 0) break;
      }
    }
    throw new Error(`elect: ${id} did not win in 5 campaigns`);
  }

  private drop(to: NodeId[]): string[] {
    const lost = this.queue.filter((m) => to.includes(m.to));
    this.queue = this.queue.filter((m) => !to.includes(m.to));
    // Repeated messages of one kind on one link (a cut-off leader's heartbeats) print once, counted.
    const groups = new Map<string, Message[]>();
    for (const m of lost) {
      const key = `${m.from}->${m.to} ${m.type}`;
      groups.set(key, [...(groups.get(key) ?? []), m]);
    }
    return [...groups.entries()].map(([key, ms]) => (ms.length === 1 ? `${formatMessage(ms[0])}  (dropped)` : `${key} x${ms.length}  (dropped)`));
  }

  // ---- faults ----

  private partition(args: string[]): string[] {
    const groups = args.join(' ').split('|').map((g) => g.trim().split(/\s+/).filter(Boolean));
    for (const a of groups) {
      for (const b of groups) {
        if (a === b) continue;
        for (const x of a) for (const y of b) this.blocked.add(`${x}>${y}`);
      }
    }
    return [];
  }

  private crash(args: string[]): string[] {
    for (const id of args) {
      this.known(id);
      this.nodes.set(id, null);
      this.applied.set(id, []);
    }
    return [];
  }

  private restart(args: string[]): string[] {
    for (const id of args) {
      const snap = this.disk(id).snapshot();
      this.applied.set(id, snap.meta.index > 0 ? (JSON.parse(new TextDecoder().decode(snap.data)) as string[]) : []);
      const disk = this.disk(id);
      this.nodes.set(id, new RaftNode({
        ...this.options, id, members: this.ids, storage: disk, prng: new Prng(this.seed++),
        electionTicks: 10, heartbeatTicks: 1, applied: snap.meta.index,
      }));
    }
    return [];
  }

  private compact(args: string[]): string[] {
    const [id, at] = args;
    const index = Number(at);
    const values = this.applied.get(id)!.slice(0, index);
    this.disk(id).createSnapshot(index, new TextEncoder().encode(JSON.stringify(values)));
    this.disk(id).compact(index);
    return [];
  }

  // ---- output ----

  private status(id: NodeId): string {
    const node = this.nodes.get(id);
    if (!node) return `${id}: down`;
    const st = node.status();
    const terms: number[] = [];
    for (let i = st.firstIndex; i <= st.lastIndex; i++) terms.push(node.entryTerm(i) ?? 0);
    const snap = st.firstIndex > 1 ? `(snapshot ${st.firstIndex - 1}/${node.entryTerm(st.firstIndex - 1)}) ` : '';
    const head = `${id}: ${st.role} term=${st.term} vote=${st.vote ?? '-'} leader=${st.leaderId ?? '-'} commit=${st.commit} applied=${st.applied}`;
    const line = `${head} | ${snap}${terms.join(' ')}`.trimEnd();
    if (st.progress.length === 0) return line;
    return `${line}\n  ${st.progress.map((p) => `${p.id} match=${p.match} next=${p.next} ${p.state}`).join(', ')}`;
  }

  private selected(args: string[]): NodeId[] {
    return args.length > 0 ? args.map((a) => this.known(a)) : this.ids;
  }

  private known(id: NodeId): NodeId {
    if (!this.ids.includes(id)) throw new Error(`no member ${id}`);
    return id;
  }

  private disk(id: NodeId): MemoryStorage {
    return this.disks.get(this.known(id))!;
  }

  private node(id: NodeId): RaftNode {
    const n = this.nodes.get(this.known(id));
    if (!n) throw new Error(`${id} is down`);
    return n;
  }
}

/** `ready: leader, hard term=8 vote=n1 commit=10, append [11/8], apply [11/8], 3 messages`. */
function describeReady(rd: Ready): string {
  const parts: string[] = [];
  if (rd.softState) parts.push(`${rd.softState.role}${rd.softState.leaderId ? ` (leader ${rd.softState.leaderId})` : ''}`);
  if (rd.hardState) parts.push(`hard term=${rd.hardState.term} vote=${rd.hardState.vote ?? '-'} commit=${rd.hardState.commit}`);
  if (rd.snapshot) parts.push(`install snapshot ${rd.snapshot.meta.index}/${rd.snapshot.meta.term}`);
  if (rd.entries.length > 0) parts.push(`append ${formatEntries(rd.entries)}`);
  if (rd.committedEntries.length > 0) parts.push(`apply ${formatEntries(rd.committedEntries)}`);
  for (const r of rd.readStates) parts.push(`read ${r.ctx} at ${r.index}`);
  if (rd.messages.length > 0) parts.push(`${rd.messages.length} message${rd.messages.length > 1 ? 's' : ''}`);
  return `ready: ${parts.join(', ')}`;
}

function keyValues(args: string[]): Record<string, string> {
  const out: Record<string, string> = {};
  for (const a of args) {
    const k = a.indexOf('=');
    if (k > 0) out[a.slice(0, k)] = a.slice(k + 1);
  }
  return out;
}

/** One block of a transcript file: the comment lines above it, the command, the expected output. */
export interface TranscriptBlock {
  readonly comments: string[];
  readonly command: string;
  readonly expected: string;
  readonly line: number;
}

/** Parses `# comment`, `command`, `----`, output lines, blank line; repeated. */
export function parseTranscript(text: string): TranscriptBlock[] {
  const lines = text.split('\n');
  const blocks: TranscriptBlock[] = [];
  let comments: string[] = [];
  for (let k = 0; k < lines.length; k++) {
    const line = lines[k];
    if (line.trim() === '') continue;
    if (line.startsWith('#')) {
      comments.push(line);
      continue;
    }
    if (lines[k + 1] !== '----') throw new Error(`line ${k + 2}: expected ---- after the command \`${line}\``);
    const start = k + 1;
    let end = k + 2;
    while (end < lines.length && lines[end].trim() !== '') end++;
    blocks.push({ comments, command: line, expected: lines.slice(k + 2, end).join('\n'), line: start });
    comments = [];
    k = end;
  }
  return blocks;
}

/** Writes blocks back with new outputs (SVC_RAFT_REWRITE=1), keeping the comments. */
export function formatTranscript(blocks: readonly { comments: string[]; command: string; expected: string }[]): string {
  return blocks.map((b) => [...b.comments, b.command, '----', b.expected].join('\n')).join('\n\n') + '\n';
}
