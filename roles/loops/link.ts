import { SvcError, toSvcError, type ErrorCode } from '../../core/base/errors.js';

/**
 * Calls between the threads of a multi-loop server (loops.ts): a request loop and the engine thread each
 * hold one end. Either end can `call` a named operation the other `handle`s (a promise per call),
 * `stream` one the other `handleStream`s (an async iterable with a credit window, so a fast producer
 * never floods a slow reader's heap), or `notify` (no answer). Values travel by structured clone; an
 * error travels as its contract code, message and detail, so an SvcError thrown on one thread is the
 * same SvcError on the other, and anything else arrives as `internal`.
 *
 * Messages are sent once per turn of the event loop (setImmediate), all of that turn's in one
 * postMessage: each postMessage costs a clone and a wake-up of the other thread (an eventfd write, an
 * epoll return), which under load cost a loop more than the message itself (issue 20). Order is kept;
 * the wait is at most the rest of the current turn.
 */
export interface LinkPort {
  postMessage(value: unknown): void;
  on(event: 'message', listener: (value: unknown) => void): unknown;
  off(event: 'message', listener: (value: unknown) => void): unknown;
}

type Msg =
  | { t: 'call'; id: number; op: string; args: unknown[] }
  | { t: 'ok'; id: number; value: unknown }
  | { t: 'err'; id: number; error: WireError }
  | { t: 'notify'; op: string; args: unknown[] }
  | { t: 'open'; id: number; op: string; args: unknown[] }
  | { t: 'item'; id: number; value: unknown }
  | { t: 'end'; id: number }
  | { t: 'credit'; id: number; n: number }
  | { t: 'cancel'; id: number; error: WireError };

/** What crosses the port: one message, or every message one turn of the event loop produced. */
type Frame = Msg | { t: 'batch'; msgs: Msg[] };

interface WireError { code: ErrorCode; message: string; detail: Record<string, unknown> }

/** Items a stream's producer may send ahead of its reader; the reader grants half a window at a time. */
const STREAM_WINDOW = 64;

export class LinkClosed extends SvcError {
  constructor(why: string) {
    super('unavailable', why, { reason: 'loop_link_closed' });
  }
}

interface Incoming {
  queue: unknown[];
  done: boolean;
  error: SvcError | null;
  wake: (() => void) | null;
  consumed: number;
}

interface Outgoing {
  credit: number;
  wake: (() => void) | null;
  abort: AbortController;
}

export class Link {
  private nextId = 1;
  private readonly pending = new Map<number, { resolve(v: unknown): void; reject(e: unknown): void }>();
  private readonly handlers = new Map<string, (...args: unknown[]) => unknown>();
  private readonly streamHandlers = new Map<string, (signal: AbortSignal, ...args: unknown[]) => AsyncIterable<unknown>>();
  private readonly incoming = new Map<number, Incoming>();
  private readonly outgoing = new Map<number, Outgoing>();
  private closed: SvcError | null = null;
  private outbox: Msg[] = [];
  private flushing: NodeJS.Immediate | null = null;
  private readonly listener = (f: unknown): void => {
    const frame = f as Frame;
    if (frame.t !== 'batch') {
      this.receive(frame);
      return;
    }
    for (const m of frame.msgs) this.receive(m);
  };

  /** `batch: false` posts each message at once (bench/link.ts compares the two). */
  constructor(private readonly port: LinkPort, private readonly opts: { batch?: boolean } = {}) {
    port.on('message', this.listener);
  }

  handle(op: string, fn: (...args: unknown[]) => unknown): void {
    this.handlers.set(op, fn);
  }

  handleStream(op: string, fn: (signal: AbortSignal, ...args: unknown[]) => AsyncIterable<unknown>): void {
    this.streamHandlers.set(op, fn);
  }

  call(op: string, ...args: unknown[]): Promise<unknown> {
    if (this.closed !== null) return Promise.reject(this.closed);
    const id = this.nextId++;
    return new Promise((resolve, reject) => {
      this.pending.set(id, { resolve, reject });
      this.post({ t: 'call', id, op, args });
    });
  }

  notify(op: string, ...args: unknown[]): void {
    if (this.closed === null) this.post({ t: 'notify', op, args });
  }

  /** The other end's stream `op`; aborting `signal` (or leaving the loop early) cancels it there. */
  async *stream(op: string, args: unknown[], signal?: AbortSignal): AsyncGenerator<unknown> {
    if (this.closed !== null) throw this.closed;
    const id = this.nextId++;
    const s: Incoming = { queue: [], done: false, error: null, wake: null, consumed: 0 };
    this.incoming.set(id, s);
    const onAbort = (): void => {
      s.error = toSvcError(signal?.reason ?? new SvcError('unavailable', 'the stream was cancelled'));
      s.wake?.();
    };
    signal?.addEventListener('abort', onAbort, { once: true });
    this.post({ t: 'open', id, op, args });
    let finished = false;
    try {
      for (;;) {
        if (s.queue.length > 0) {
          yield s.queue.shift();
          if (++s.consumed >= STREAM_WINDOW / 2) {
            this.post({ t: 'credit', id, n: s.consumed });
            s.consumed = 0;
          }
          continue;
        }
        if (s.error !== null) throw s.error;
        if (s.done) {
          finished = true;
          return;
        }
        await new Promise<void>((resolve) => { s.wake = resolve; });
        s.wake = null;
      }
    } finally {
      signal?.removeEventListener('abort', onAbort);
      this.incoming.delete(id);
      if (!finished && this.closed === null) {
        this.post({ t: 'cancel', id, error: wire(s.error ?? new SvcError('unavailable', 'the reader left the stream', { reason: 'client_cancel' })) });
      }
    }
  }

  /** Fails every call and stream in flight (the other end is gone) and stops listening. */
  close(why: string): void {
    if (this.closed !== null) return;
    this.closed = new LinkClosed(why);
    this.port.off('message', this.listener);
    // What this turn queued goes nowhere: a call failed here must not still run on the other side.
    this.outbox = [];
    if (this.flushing !== null) clearImmediate(this.flushing);
    this.flushing = null;
    for (const p of this.pending.values()) p.reject(this.closed);
    this.pending.clear();
    for (const s of this.incoming.values()) {
      s.error = this.closed;
      s.wake?.();
    }
    for (const o of this.outgoing.values()) {
      o.abort.abort(this.closed);
      o.wake?.();
    }
  }

  private post(m: Msg): void {
    if (this.opts.batch === false) {
      this.send(m);
      return;
    }
    this.outbox.push(m);
    this.flushing ??= setImmediate(() => this.flush());
  }

  /** Sends this turn's messages: in one frame, or (a value in it cannot be cloned) one by one. */
  private flush(): void {
    this.flushing = null;
    const msgs = this.outbox;
    this.outbox = [];
    if (msgs.length === 1) {
      this.send(msgs[0]);
      return;
    }
    try {
      this.port.postMessage({ t: 'batch', msgs } satisfies Frame);
    } catch {
      for (const m of msgs) this.send(m);
    }
  }

  private send(m: Msg): void {
    try {
      this.port.postMessage(m);
    } catch (e) {
      // A value that cannot be cloned: the caller gets an internal error instead of a hung promise.
      if (m.t === 'ok' || m.t === 'item') {
        this.port.postMessage({ t: 'err', id: m.id, error: wire(toSvcError(e)) } satisfies Msg);
        return;
      }
      if (m.t === 'err') {
        this.port.postMessage({ t: 'err', id: m.id, error: { ...m.error, detail: {} } } satisfies Msg);
        return;
      }
      // A call's or a stream's own arguments: its caller or reader gets the error. Nothing else can fail
      // to clone (ids, counts, wire errors): a notification's arguments are dropped.
      if (m.t === 'call') {
        this.pending.get(m.id)?.reject(toSvcError(e));
        this.pending.delete(m.id);
      } else if (m.t === 'open') {
        const s = this.incoming.get(m.id);
        if (s !== undefined) {
          s.error = toSvcError(e);
          s.wake?.();
        }
      }
    }
  }

  private receive(m: Msg): void {
    switch (m.t) {
      case 'call': {
        const fn = this.handlers.get(m.op);
        if (fn === undefined) {
          this.post({ t: 'err', id: m.id, error: wire(new SvcError('internal', 'internal error', { cause: `no handler for ${m.op}` })) });
          return;
        }
        let result: unknown;
        try {
          result = fn(...m.args);
        } catch (e) {
          this.post({ t: 'err', id: m.id, error: wire(e) });
          return;
        }
        Promise.resolve(result).then(
          (value) => { if (this.closed === null) this.post({ t: 'ok', id: m.id, value }); },
          (e: unknown) => { if (this.closed === null) this.post({ t: 'err', id: m.id, error: wire(e) }); },
        );
        return;
      }
      case 'ok':
      case 'err': {
        const p = this.pending.get(m.id);
        if (p !== undefined) {
          this.pending.delete(m.id);
          if (m.t === 'ok') p.resolve(m.value);
          else p.reject(unwire(m.error));
          return;
        }
        const s = this.incoming.get(m.id);
        if (s !== undefined && m.t === 'err') {
          s.error = unwire(m.error);
          s.wake?.();
        }
        return;
      }
      case 'notify':
        try {
          this.handlers.get(m.op)?.(...m.args);
        } catch { /* a notification has no one to answer */ }
        return;
      case 'open':
        void this.produce(m.id, m.op, m.args);
        return;
      case 'item':
      case 'end': {
        const s = this.incoming.get(m.id);
        if (s === undefined) return;
        if (m.t === 'item') s.queue.push(m.value);
        else s.done = true;
        s.wake?.();
        return;
      }
      case 'credit': {
        const o = this.outgoing.get(m.id);
        if (o === undefined) return;
        o.credit += m.n;
        o.wake?.();
        return;
      }
      case 'cancel': {
        const o = this.outgoing.get(m.id);
        if (o === undefined) return;
        o.abort.abort(unwire(m.error));
        o.wake?.();
        return;
      }
    }
  }

  private async produce(id: number, op: string, args: unknown[]): Promise<void> {
    const fn = this.streamHandlers.get(op);
    const o: Outgoing = { credit: STREAM_WINDOW, wake: null, abort: new AbortController() };
    this.outgoing.set(id, o);
    try {
      if (fn === undefined) throw new SvcError('internal', 'internal error', { cause: `no stream handler for ${op}` });
      for await (const value of fn(o.abort.signal, ...args)) {
        while (o.credit <= 0 && !o.abort.signal.aborted) {
          await new Promise<void>((resolve) => { o.wake = resolve; });
          o.wake = null;
        }
        if (o.abort.signal.aborted) return;
        o.credit--;
        this.post({ t: 'item', id, value });
      }
      if (!o.abort.signal.aborted) this.post({ t: 'end', id });
    } catch (e) {
      if (!o.abort.signal.aborted && this.closed === null) this.post({ t: 'err', id, error: wire(e) });
    } finally {
      this.outgoing.delete(id);
    }
  }
}

function wire(e: unknown): WireError {
  const s = toSvcError(e);
  return { code: s.code, message: s.message, detail: { ...s.detail } };
}

function unwire(w: WireError): SvcError {
  return new SvcError(w.code, w.message, w.detail);
}
