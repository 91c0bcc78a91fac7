import process from 'node:process';
import type { Readable, Writable } from 'node:stream';
import { deserializeMessage, serializeMessage } from '@modelcontextprotocol/sdk/shared/stdio.js';
import type { Transport } from '@modelcontextprotocol/sdk/shared/transport.js';
import type { JSONRPCMessage } from '@modelcontextprotocol/sdk/types.js';
import { limitExceeded } from '../../core/base/errors.js';
import { errorResult } from './server.js';

/**
 * JSON-RPC over stdio (one message per line) with the request-size cap of the other transports:
 * a line longer than SVC_MAX_REQUEST_BODY_BYTES is never buffered whole. Its first and last few
 * hundred bytes are kept to find the request id and method; the rest is dropped as it arrives, and
 * the client gets a `limit_exceeded` answer naming the variable. The server keeps running.
 * (The SDK's StdioServerTransport buffers a line without bound: 10 MiB, then it closes the session.)
 */
const KEEP_BYTES = 512;

export interface CappedStdioOptions {
  maxMessageBytes: number;
  stdin?: Readable;
  stdout?: Writable;
}

export class CappedStdioTransport implements Transport {
  onclose?: () => void;
  onerror?: (error: Error) => void;
  onmessage?: <T extends JSONRPCMessage>(message: T) => void;

  private readonly max: number;
  private readonly stdin: Readable;
  private readonly stdout: Writable;
  private parts: Buffer[] = [];
  private size = 0;
  /** Set while dropping an oversized line: its head (as kept) and a rolling tail. */
  private dropping: { head: Buffer; tail: Buffer; bytes: number } | null = null;
  private started = false;

  constructor(opts: CappedStdioOptions) {
    this.max = opts.maxMessageBytes;
    this.stdin = opts.stdin ?? process.stdin;
    this.stdout = opts.stdout ?? process.stdout;
  }

  private readonly onData = (chunk: Buffer): void => {
    let start = 0;
    for (;;) {
      const nl = chunk.indexOf(0x0a, start);
      const piece = chunk.subarray(start, nl === -1 ? chunk.length : nl);
      this.take(piece);
      if (nl === -1) return;
      this.endLine();
      start = nl + 1;
    }
  };

  private readonly onError = (error: Error): void => {
    this.onerror?.(error);
  };

  async start(): Promise<void> {
    if (this.started) throw new Error('CappedStdioTransport already started');
    this.started = true;
    this.stdin.on('data', this.onData);
    this.stdin.on('error', this.onError);
  }

  private take(piece: Buffer): void {
    if (piece.length === 0) return;
    if (this.dropping !== null) {
      this.dropping.bytes += piece.length;
      this.dropping.tail = lastBytes(Buffer.concat([this.dropping.tail, piece]));
      return;
    }
    // Copy: the stream may reuse its chunk's memory.
    this.parts.push(Buffer.from(piece));
    this.size += piece.length;
    if (this.size > this.max) {
      const all = Buffer.concat(this.parts);
      this.dropping = { head: all.subarray(0, KEEP_BYTES), tail: lastBytes(all), bytes: all.length };
      this.parts = [];
      this.size = 0;
    }
  }

  private endLine(): void {
    const dropped = this.dropping;
    this.dropping = null;
    if (dropped !== null) {
      this.refuse(dropped);
      return;
    }
    const line = Buffer.concat(this.parts).toString('utf8').replace(/\r$/, '');
    this.parts = [];
    this.size = 0;
    if (line.trim() === '') return;
    let message: JSONRPCMessage;
    try {
      message = deserializeMessage(line);
    } catch (e) {
      this.onerror?.(e as Error);
      return;
    }
    this.onmessage?.(message);
  }

  /** Answers an oversized request in the contract's shape; a notification (no id) gets no answer. */
  private refuse(dropped: { head: Buffer; tail: Buffer; bytes: number }): void {
    // A line of N bytes ends with its newline, which is not part of the message; the count is a lower bound.
    const err = limitExceeded('SVC_MAX_REQUEST_BODY_BYTES', this.max, dropped.bytes, 'JSON-RPC message size in bytes');
    const head = dropped.head.toString('utf8');
    const id = requestId(head, dropped.tail.toString('utf8').replace(/\r$/, ''));
    this.onerror?.(new Error(`refused a JSON-RPC message: ${err.message}`));
    if (id === undefined) return;
    const isToolCall = /"method"\s*:\s*"tools\/call"/.test(head);
    const reply = isToolCall
      ? { jsonrpc: '2.0', id, result: errorResult('limit_exceeded', err.message) }
      : { jsonrpc: '2.0', id, error: { code: -32600, message: err.message, data: { code: 'limit_exceeded', message: err.message } } };
    void this.send(reply as JSONRPCMessage);
  }

  async close(): Promise<void> {
    this.stdin.off('data', this.onData);
    this.stdin.off('error', this.onError);
    if (this.stdin.listenerCount('data') === 0) this.stdin.pause();
    this.parts = [];
    this.dropping = null;
    this.onclose?.();
  }

  send(message: JSONRPCMessage): Promise<void> {
    return new Promise((resolve) => {
      if (this.stdout.write(serializeMessage(message))) resolve();
      else this.stdout.once('drain', resolve);
    });
  }
}

function lastBytes(b: Buffer): Buffer {
  return b.length <= KEEP_BYTES ? b : Buffer.from(b.subarray(b.length - KEEP_BYTES));
}

const ID = String.raw`(-?\d+|"(?:[^"\\]|\\.)*")`;
const ID_AT_END = new RegExp(String.raw`"id"\s*:\s*${ID}\s*\}\s*$`);
const ID_AT_START = new RegExp(String.raw`^\s*\{\s*(?:"jsonrpc"\s*:\s*"2\.0"\s*,\s*)?"id"\s*:\s*${ID}`);

/** The top-level id of a request that was not kept whole: clients write it first or last. */
export function requestId(head: string, tail: string): string | number | undefined {
  const m = ID_AT_END.exec(tail) ?? ID_AT_START.exec(head);
  if (m === null) return undefined;
  try {
    return JSON.parse(m[1]!) as string | number;
  } catch {
    return undefined;
  }
}
