import { PassThrough } from 'node:stream';
import type { JSONRPCMessage } from '@modelcontextprotocol/sdk/types.js';
import { describe, expect, it } from 'vitest';
import { CappedStdioTransport, requestId } from './stdio.js';

/** The stdio line reader with the request-size cap, fed by hand. */
async function harness(max: number) {
  const stdin = new PassThrough();
  const stdout = new PassThrough();
  const t = new CappedStdioTransport({ maxMessageBytes: max, stdin, stdout });
  const got: JSONRPCMessage[] = [];
  const errors: string[] = [];
  t.onmessage = (m) => { got.push(m); };
  t.onerror = (e) => { errors.push(e.message); };
  await t.start();
  let out = '';
  stdout.on('data', (d: Buffer) => { out += d.toString(); });
  const flush = () => new Promise((r) => setImmediate(r));
  const replies = () => out.split('\n').filter((l) => l !== '').map((l) => JSON.parse(l) as Record<string, any>);
  return { stdin, got, errors, flush, replies };
}

const toolCall = (id: number, text: string) =>
  JSON.stringify({ method: 'tools/call', params: { name: 'upsert', arguments: { text } }, jsonrpc: '2.0', id });

describe('CappedStdioTransport', () => {
  it('passes a message of exactly the limit and refuses one byte more, then keeps reading', async () => {
    const base = toolCall(1, '').length;
    const h = await harness(base + 100);
    h.stdin.write(`${toolCall(1, 'x'.repeat(100))}\n`);
    h.stdin.write(`${toolCall(2, 'x'.repeat(101))}\n`);
    h.stdin.write(`${toolCall(3, 'y')}\n`);
    await h.flush();
    expect(h.got.map((m) => (m as { id: number }).id)).toEqual([1, 3]);
    const [reply] = h.replies();
    expect(reply!.id).toBe(2);
    expect(reply!.result.isError).toBe(true);
    expect(reply!.result.structuredContent.error.code).toBe('limit_exceeded');
    expect(reply!.result.structuredContent.error.message).toContain('SVC_MAX_REQUEST_BODY_BYTES');
  });

  it('drops an oversized line arriving in many chunks without holding it, whatever the chunking', async () => {
    const h = await harness(1000);
    const line = toolCall(7, 'z'.repeat(50_000));
    for (let i = 0; i < line.length; i += 333) h.stdin.write(line.slice(i, i + 333));
    h.stdin.write('\n');
    h.stdin.write(`${toolCall(8, 'ok')}\n`);
    await h.flush();
    expect(h.replies().map((r) => [r.id, r.result.structuredContent.error.code])).toEqual([[7, 'limit_exceeded']]);
    expect(h.got.map((m) => (m as { id: number }).id)).toEqual([8]);
  });

  it('answers other oversized requests with a JSON-RPC error carrying the code, and notifications not at all', async () => {
    const h = await harness(200);
    h.stdin.write(`${JSON.stringify({ jsonrpc: '2.0', id: 'a"b', method: 'tools/list', params: { pad: 'p'.repeat(300) } })}\n`);
    h.stdin.write(`${JSON.stringify({ jsonrpc: '2.0', method: 'notifications/x', params: { pad: 'p'.repeat(300) } })}\n`);
    await h.flush();
    const replies = h.replies();
    expect(replies).toHaveLength(1);
    expect(replies[0]!.id).toBe('a"b');
    expect(replies[0]!.error.data.code).toBe('limit_exceeded');
    expect(replies[0]!.error.message).toContain('SVC_MAX_REQUEST_BODY_BYTES=200');
    expect(h.errors).toHaveLength(2);
  });

  it('finds only the top-level id', () => {
    expect(requestId('{"method":"x","params":{"id":5', ',"points":[{"id":"p"}]}}')).toBeUndefined();
    expect(requestId('{"jsonrpc":"2.0","id":9,"method"', '"x"}}')).toBe(9);
    expect(requestId('{"method"', '"x"},"jsonrpc":"2.0","id":"q"}\r'.replace(/\r$/, ''))).toBe('q');
  });
});
