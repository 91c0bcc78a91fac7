/**
 * The cockpit screen as a pure function of its state and the terminal size: plain ASCII lines, none
 * wider than the terminal, so it renders the same in any terminal and degrades on a narrow one.
 */
import type { CollectionRow, HitRow, Problem, Rates } from './client.js';

export type Field = 'collection' | 'vector';

export interface CockpitState {
  url: string;
  keySource: string;
  problem: Problem | null;
  /** Whether the last refresh succeeded at least once (before any answer: "connecting"). */
  everConnected: boolean;
  collections: CollectionRow[] | null;
  selected: number;
  rates: Rates | null;
  mode: 'browse' | 'query';
  field: Field;
  inputCollection: string;
  inputVector: string;
  queryStatus: string | null;
  hits: HitRow[] | null;
  hitsTitle: string;
}

export const MIN_COLS = 24;
export const MIN_ROWS = 8;
export const POLL_SECONDS = 2;

export function initialState(url: string, keySource: string): CockpitState {
  return {
    url, keySource, problem: null, everConnected: false, collections: null, selected: 0, rates: null,
    mode: 'browse', field: 'vector', inputCollection: '', inputVector: '', queryStatus: null, hits: null, hitsTitle: '',
  };
}

function fit(s: string, width: number): string {
  if (width <= 0) return '';
  return s.length <= width ? s : `${s.slice(0, Math.max(0, width - 3))}...`.slice(0, width);
}

function rate(x: number | null): string {
  return x === null ? '-' : x < 10 ? x.toFixed(2) : x.toFixed(0);
}

export function problemText(p: Problem, url: string, keySource: string): string {
  switch (p.kind) {
    case 'unreachable':
      return `SERVER UNREACHABLE at ${url} (${p.detail}); retrying every ${POLL_SECONDS} s`;
    case 'unauthenticated':
      return keySource === 'none'
        ? `KEY REFUSED (401): no key given; set SVC_API_KEY or pass --api-key`
        : `KEY REFUSED (401) for the key from ${keySource}: ${p.detail}`;
    case 'forbidden':
      return `KEY NOT ALLOWED (403) for the key from ${keySource}: ${p.detail}`;
    case 'error':
      return `SERVER ERROR: ${p.detail}`;
  }
}

function statusWord(s: CockpitState): string {
  if (s.problem !== null) {
    return { unreachable: 'UNREACHABLE', unauthenticated: 'KEY REFUSED', forbidden: 'FORBIDDEN', error: 'ERROR' }[s.problem.kind];
  }
  return s.everConnected ? 'connected' : 'connecting...';
}

export function render(s: CockpitState, cols: number, rows: number): string[] {
  if (cols < MIN_COLS || rows < MIN_ROWS) {
    return [`svc: ${statusWord(s)}`, `too small: ${cols}x${rows}`, `need ${MIN_COLS}x${MIN_ROWS}`]
      .map((l) => fit(l, cols)).slice(0, Math.max(1, rows));
  }
  const wide = cols >= 60;
  const top: string[] = [];
  top.push(fit(wide ? `svc cockpit [${statusWord(s)}]  ${s.url}` : `svc [${statusWord(s)}] ${s.url}`, cols));
  if (s.problem !== null) top.push(fit(`! ${problemText(s.problem, s.url, s.keySource)}`, cols));
  if (s.rates !== null) {
    const r = s.rates;
    top.push(fit(wide
      ? `requests ${rate(r.requestsPerSec)}/s  errors ${rate(r.errorsPerSec)}/s  (totals ${r.requestsTotal} requests, ${r.errorsTotal} errors)`
      : `req ${rate(r.requestsPerSec)}/s err ${rate(r.errorsPerSec)}/s`, cols));
  }

  const query: string[] = [];
  if (s.mode === 'query') {
    const cur = (f: Field): string => (s.field === f ? '_' : '');
    query.push(fit(`Query  (Tab: switch field, Enter: search, Esc: back)`, cols));
    query.push(fit(`${s.field === 'collection' ? '>' : ' '} collection: ${s.inputCollection}${cur('collection')}`, cols));
    query.push(fit(`${s.field === 'vector' ? '>' : ' '} vector: ${s.inputVector === '' && s.field !== 'vector' ? '(empty: random vector of the right dim)' : s.inputVector}${cur('vector')}`, cols));
    if (s.inputVector === '' && s.field === 'vector') query.push(fit('  empty vector: a random vector of the right dim', cols));
  }
  if (s.queryStatus !== null) query.push(fit(s.queryStatus, cols));
  if (s.hits !== null) {
    query.push(fit(`Hits: ${s.hitsTitle}`, cols));
    if (s.hits.length === 0) query.push(fit('  (no hits)', cols));
    for (const h of s.hits) {
      const score = Number.isFinite(h.score) ? h.score.toFixed(4) : String(h.score);
      const payload = h.payload === undefined ? '' : `  ${JSON.stringify(h.payload)}`;
      query.push(fit(wide ? `  #${h.rank} ${h.id}  ${score}${payload}` : `#${h.rank} ${h.id} ${score}`, cols));
    }
  }
  const footer = fit(wide ? 'keys: Up/Down select  s search  R random search  r refresh  q quit' : 's search R random q quit', cols);

  // The collections list gets what is left; the query panel keeps its hits, trimmed from the bottom if need be.
  const fixed = top.length + 1;
  const queryRoom = Math.max(0, rows - fixed - 3);
  const queryShown = query.slice(0, queryRoom);
  const listRoom = rows - fixed - queryShown.length;
  const list: string[] = [];
  const cs = s.collections;
  if (cs === null) list.push(fit(s.problem === null ? 'loading collections...' : 'collections: not available', cols));
  else {
    list.push(fit(`Collections (${cs.length})`, cols));
    if (cs.length === 0) list.push(fit('  (none yet: create one over REST, or svc admin import)', cols));
    else if (wide) list.push(fit(`  ${'NAME'.padEnd(24)} ${'DIM'.padStart(5)} ${'METRIC'.padEnd(6)} ${'COUNT'.padStart(10)}  INDEX`, cols));
    const room = Math.max(1, listRoom - list.length);
    const start = Math.min(Math.max(0, s.selected - room + 1), Math.max(0, cs.length - room));
    for (let i = start; i < Math.min(cs.length, start + room); i++) {
      const c = cs[i];
      const mark = i === s.selected ? '>' : ' ';
      list.push(fit(wide
        ? `${mark} ${c.name.padEnd(24)} ${String(c.dim).padStart(5)} ${c.metric.padEnd(6)} ${String(c.count).padStart(10)}  ${c.index} ${c.index_state}`
        : `${mark} ${c.name} ${c.count} ${c.index_state}`, cols));
    }
  }
  const body = [...top, ...list.slice(0, Math.max(1, listRoom)), ...queryShown];
  while (body.length < rows - 1) body.push('');
  return [...body.slice(0, rows - 1), footer];
}
