import type { Entry, Message } from './types.js';

/** One line per message, for traces and transcript tests: `n1->n2 app t8 prev=10/6 [11/8] commit=10`. */
export function formatMessage(m: Message): string {
  const head = `${m.from}->${m.to} ${m.type} t${m.term}`;
  switch (m.type) {
    case 'app':
      return `${head} prev=${m.prevIndex}/${m.prevTerm} ${formatEntries(m.entries)} commit=${m.commit}`;
    case 'appResp':
      return m.reject ? `${head} reject ${m.index} hint=${m.hintIndex}/${m.hintTerm}` : `${head} index=${m.index}`;
    case 'vote':
    case 'preVote':
      return `${head} last=${m.lastIndex}/${m.lastTerm}`;
    case 'voteResp':
    case 'preVoteResp':
      return `${head} ${m.reject ? 'rejected' : 'granted'}`;
    case 'heartbeat':
      return `${head} commit=${m.commit} read=${m.readSeq} sent=${m.sent}`;
    case 'heartbeatResp':
      return `${head} read=${m.readSeq} sent=${m.sent} last=${m.lastIndex}`;
    case 'snap':
      return `${head} snapshot=${m.snapshot.meta.index}/${m.snapshot.meta.term}`;
    case 'readIndex':
      return `${head} ctx=${m.ctx}`;
    case 'readIndexResp':
      return `${head} ctx=${m.ctx} index=${m.index}`;
  }
}

/** `[11/8, 12/8 "put x"]`: index/term, with the data when it is printable text. */
export function formatEntries(entries: readonly Entry[]): string {
  return `[${entries.map(formatEntry).join(', ')}]`;
}

export function formatEntry(e: Entry): string {
  if (e.data.byteLength === 0) return `${e.index}/${e.term}`;
  return `${e.index}/${e.term} ${formatData(e.data)}`;
}

function formatData(data: Uint8Array): string {
  const printable = data.every((b) => b >= 0x20 && b < 0x7f && b !== 0x22);
  return printable ? `"${String.fromCharCode(...data)}"` : `0x${Array.from(data, (b) => b.toString(16).padStart(2, '0')).join('')}`;
}
