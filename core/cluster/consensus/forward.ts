import { ERROR_CODES, SvcError, type ErrorCode } from '../../base/errors.js';
import { collectionExisted, markCollectionExisted, type CollectionInfo } from '../../base/model.js';

/**
 * A follower member hands a write to its leader (CONTRACT section 11: every member takes writes), over
 * the consensus transport's authenticated connections: the caller was authenticated and authorized by
 * the member it called, which forwards the operation and its arguments; the leader runs it as its own
 * write (checked against its state, proposed, applied) and answers with the result or the error.
 *
 * Frames are JSON: a request `{k: 'q', id, op, args}`, an answer `{k: 'a', id, ok, value, existed}` or
 * `{k: 'a', id, ok: false, code, message, detail, index}` (index: the leader's applied index, absent from an older build). Ids are per forwarder; an answer nobody waits for
 * (its caller's deadline passed) is dropped. A malformed frame is counted and dropped: it came from an
 * authenticated peer, so it is a bug or a version skew, never a client's input.
 */

export interface ForwardedWrite {
  readonly op: string;
  readonly args: readonly unknown[];
}

export interface WriteForwarderOptions {
  /** Sends one frame to a peer now; false when it cannot go (no connection). */
  send(to: string, payload: Uint8Array): boolean;
  /**
   * Calls `ready` once this member's connection to `to` can take a frame (a link in its reconnect
   * back-off, say); returns what stops the wait. Absent: a write whose frame cannot go now fails at once.
   */
  whenConnected?(to: string, ready: () => void): () => void;
  /** Runs a write a peer forwarded here; what it resolves to or throws is the answer. */
  handle(w: ForwardedWrite): Promise<unknown>;
  /** The leader's applied index once a write is done (the asker applies through it before answering). */
  appliedIndex(): number;
  log?(message: string, detail?: Record<string, unknown>): void;
}

interface Waiting {
  readonly to: string;
  readonly resolve: (v: unknown) => void;
  readonly reject: (e: unknown) => void;
}

/** A write whose frame waits for the connection to its leader (its deadline bounds the wait). */
interface Unsent {
  readonly to: string;
  /** Fails it as never sent; stops the wait and forgets the deadline. */
  readonly fail: (e: SvcError) => void;
}

/**
 * Writes that may wait at once for a connection to come up (each until its deadline); past it a write
 * whose frame cannot go now fails at once as `leader_unreachable`.
 */
export const FORWARD_UNSENT_MAX = 1024;

export class WriteForwarder {
  private nextId = 1;
  private readonly waiting = new Map<number, Waiting>();
  /** Writes not sent yet, waiting for their leader's connection (at most FORWARD_UNSENT_MAX). */
  private readonly unsent = new Set<Unsent>();
  private closed = false;
  /** waitedForLink: writes whose frame waited for the connection to their leader (sent then, or not). */
  readonly stats = { forwarded: 0, served: 0, malformed: 0, unanswered: 0, waitedForLink: 0 };

  constructor(private readonly o: WriteForwarderOptions) {}

  /**
   * The leader's answer to this write: its result, or its error rethrown here. Resolves with the
   * leader's applied index after it. When the frame cannot go now (this member's link to the leader is
   * in its reconnect back-off: it dialled before the leader listened, or the link broke), it waits for
   * the link to come up, within `signal`, then sends. Rejects with `unavailable`:
   * - `leader_unreachable` when the frame was never sent (the deadline ended first, `to` stopped leading
   *   or went away meanwhile, or too many writes wait already): the write is certainly not applied;
   * - `not_acknowledged` when it was sent but not answered before `signal` ended or the leader went
   *   away: it may still be applied.
   */
  request(to: string, w: ForwardedWrite, signal: AbortSignal): Promise<{ value: unknown; index: number }> {
    if (signal.aborted) return Promise.reject(unreachable(to, 'the write\'s deadline ended before it could be sent'));
    if (this.closed) return Promise.reject(closing());
    const id = this.nextId++;
    const payload = Buffer.from(JSON.stringify({ k: 'q', id, op: w.op, args: w.args }, typedArraysAsLists), 'utf8');
    return new Promise<{ value: unknown; index: number }>((resolve, reject) => {
      const onAbort = (): void => {
        if (!this.waiting.delete(id)) return;
        this.stats.unanswered++;
        reject(unanswered(to));
      };
      // Waiting before the send: the answer may come back before send returns (a peer in this process).
      const send = (): boolean => {
        this.waiting.set(id, {
          to,
          resolve: (v) => { signal.removeEventListener('abort', onAbort); resolve(v as { value: unknown; index: number }); },
          reject: (e) => { signal.removeEventListener('abort', onAbort); reject(e); },
        });
        signal.addEventListener('abort', onAbort, { once: true });
        if (this.o.send(to, payload)) {
          this.stats.forwarded++;
          return true;
        }
        this.waiting.delete(id);
        signal.removeEventListener('abort', onAbort);
        return false;
      };
      if (send()) return;
      if (this.o.whenConnected === undefined) {
        reject(unreachable(to, 'there is no connection to it'));
        return;
      }
      if (this.unsent.size >= FORWARD_UNSENT_MAX) {
        reject(unreachable(to, `${FORWARD_UNSENT_MAX} writes already wait for a connection`));
        return;
      }
      // Nothing went: wait for the link, then send once (a second refusal with the link up is final).
      let stop: (() => void) | null = null;
      const end = (): void => {
        this.unsent.delete(u);
        signal.removeEventListener('abort', onDeadline);
        stop?.();
      };
      const u: Unsent = { to, fail: (e) => { end(); reject(e); } };
      const onDeadline = (): void => u.fail(unreachable(to, 'the connection to it did not come up before the write\'s deadline'));
      this.unsent.add(u);
      this.stats.waitedForLink++;
      signal.addEventListener('abort', onDeadline, { once: true });
      stop = this.o.whenConnected(to, () => {
        if (!this.unsent.has(u)) return;
        end();
        if (!send()) reject(unreachable(to, 'its connection came up but the write could not be sent on it'));
      });
      // Called back before it returned: the wait is over already.
      if (!this.unsent.has(u)) stop();
    });
  }

  /** A forward frame from a peer: a request to run, or the answer to one of ours. */
  receive(payload: Uint8Array, from: string): void {
    let m: Record<string, unknown>;
    try {
      m = JSON.parse(Buffer.from(payload.buffer, payload.byteOffset, payload.byteLength).toString('utf8')) as Record<string, unknown>;
      if (m === null || typeof m !== 'object' || typeof m.id !== 'number') throw new Error('no id');
    } catch (e) {
      this.stats.malformed++;
      this.o.log?.('consensus: a malformed forward frame was dropped', { from, error: String(e) });
      return;
    }
    if (m.k === 'q' && typeof m.op === 'string' && Array.isArray(m.args)) this.serve(m.id as number, { op: m.op, args: m.args }, from);
    else if (m.k === 'a') this.answered(m);
    else {
      this.stats.malformed++;
      this.o.log?.('consensus: a forward frame of unknown kind was dropped', { from });
    }
  }

  /**
   * The connection to `peer` was lost, or another member leads now: what waits for `peer`'s answer fails
   * at once as not acknowledged (it may have been applied, or may be yet), instead of at its deadline;
   * what waits to be sent to `peer` fails at once as `leader_unreachable` (never sent: the caller may
   * send it to the member that leads now, raft-engine.ts).
   */
  abandon(peer: string, why: string): void {
    for (const u of this.unsent) if (u.to === peer) u.fail(unreachable(peer, `${why} before the write could be sent`));
    for (const [id, w] of this.waiting) {
      if (w.to !== peer) continue;
      this.waiting.delete(id);
      this.stats.unanswered++;
      w.reject(new SvcError('unavailable', `the consensus leader ${peer} ${why} before it answered: the write is not acknowledged (it may still be applied)`, { reason: 'not_acknowledged', leaderId: peer }));
    }
  }

  /** Every request still waiting fails (the member stops). */
  close(): void {
    this.closed = true;
    for (const u of this.unsent) u.fail(closing());
    for (const w of this.waiting.values()) w.reject(closing());
    this.waiting.clear();
  }

  private serve(id: number, w: ForwardedWrite, from: string): void {
    this.stats.served++;
    void this.o.handle(w).then(
      (value) => {
        const existed = value !== null && typeof value === 'object' && collectionExisted(value as CollectionInfo);
        return { k: 'a', id, ok: true, value: value ?? null, index: this.o.appliedIndex(), ...(existed ? { existed: true } : {}) };
      },
      (e: unknown) => e instanceof SvcError
        ? { k: 'a', id, ok: false, code: e.code, message: e.message, detail: e.detail, index: this.o.appliedIndex() }
        : { k: 'a', id, ok: false, code: 'internal', message: 'the leader failed to run the write', detail: {} },
    ).then((answer) => {
      if (!this.o.send(from, Buffer.from(JSON.stringify(answer, typedArraysAsLists), 'utf8'))) {
        this.o.log?.('consensus: the answer to a forwarded write could not be sent back', { to: from, op: w.op });
      }
    });
  }

  private answered(m: Record<string, unknown>): void {
    const w = this.waiting.get(m.id as number);
    if (w === undefined) return;
    this.waiting.delete(m.id as number);
    if (m.ok === true) {
      const value = m.value;
      if (m.existed === true && value !== null && typeof value === 'object') markCollectionExisted(value);
      w.resolve({ value, index: typeof m.index === 'number' ? m.index : 0 });
      return;
    }
    const code = (ERROR_CODES as readonly string[]).includes(m.code as string) ? (m.code as ErrorCode) : 'internal';
    const detail = m.detail !== null && typeof m.detail === 'object' ? (m.detail as Record<string, unknown>) : {};
    const e = new SvcError(code, typeof m.message === 'string' ? m.message : 'the leader refused the write', detail);
    if (typeof m.index === 'number') Object.defineProperty(e, LEADER_INDEX, { value: m.index, enumerable: false });
    w.reject(e);
  }
}

/**
 * On an error a leader answered: its applied index when it refused (a `moved` refusal follows a move
 * commit this member applies through it before answering, so its own reads agree; raft-engine.ts).
 */
export const LEADER_INDEX = Symbol('leaderIndex');

export function leaderIndexOf(e: unknown): number | null {
  const i = e !== null && typeof e === 'object' ? (e as Record<symbol, unknown>)[LEADER_INDEX] : undefined;
  return typeof i === 'number' ? i : null;
}

/**
 * A write whose frame never left this member: certainly not applied (`not_acknowledged`, by contrast, was
 * sent and may be). `why` says what stopped it.
 */
function unreachable(to: string, why: string): SvcError {
  return new SvcError('unavailable', `the consensus leader ${to} cannot be reached to take this write (${why}): it was not sent, so it is not applied; retry shortly`, { reason: 'leader_unreachable', leaderId: to });
}

function closing(): SvcError {
  return new SvcError('unavailable', 'the consensus member is closing');
}

function unanswered(to: string): SvcError {
  return new SvcError('unavailable', `the consensus leader ${to} did not answer in time: the write is not acknowledged (it may still be applied)`, { reason: 'not_acknowledged', leaderId: to });
}

/** JSON of request bodies: a typed array (a vector from gRPC, say) as a plain list. */
function typedArraysAsLists(_key: string, v: unknown): unknown {
  return ArrayBuffer.isView(v) && !(v instanceof DataView) ? Array.from(v as unknown as ArrayLike<number>) : v;
}
