/**
 * The interactive cockpit: plain ANSI on the alternate screen, keys through node:readline's keypress
 * events. It polls the server every POLL_SECONDS and redraws on every change and on resize.
 */
import { emitKeypressEvents, type Key } from 'node:readline';
import { CallFailed, RateTracker, type CockpitClient, type Problem } from './client.js';
import { POLL_SECONDS, render, type CockpitState } from './view.js';

export interface Terminal {
  input: NodeJS.ReadStream;
  output: NodeJS.WriteStream;
}

export const DEFAULT_K = 10;

/** A random direction of the collection's dimension (Gaussian components, so no axis is favoured). */
export function randomVector(dim: number, rand: () => number = Math.random): number[] {
  return Array.from({ length: dim }, () => {
    const u = Math.max(rand(), 1e-12);
    return Number((Math.sqrt(-2 * Math.log(u)) * Math.cos(2 * Math.PI * rand())).toFixed(6));
  });
}

/** The vector box: empty means random of the right dim; otherwise a JSON list of numbers. */
export function parseVectorInput(text: string, dim: number | undefined): { vector: number[]; what: string } | { error: string } {
  const t = text.trim();
  if (t === '') {
    if (dim === undefined) return { error: 'unknown collection: cannot pick a random vector' };
    return { vector: randomVector(dim), what: `random vector, dim ${dim}` };
  }
  let v: unknown;
  try {
    v = JSON.parse(t);
  } catch {
    return { error: 'vector must be JSON, e.g. [0.1, 0.2, 0.3]' };
  }
  if (!Array.isArray(v) || v.length === 0 || !v.every((x) => typeof x === 'number' && Number.isFinite(x))) {
    return { error: 'vector must be a JSON list of numbers' };
  }
  return { vector: v as number[], what: `given vector, dim ${v.length}` };
}

export async function runCockpit(client: CockpitClient, state: CockpitState, term: Terminal): Promise<number> {
  const { input, output } = term;
  const rates = new RateTracker();
  let stopped = false;
  let busy = false;

  const draw = (): void => {
    if (stopped) return;
    const lines = render(state, output.columns ?? 80, output.rows ?? 24);
    output.write(`\x1b[H${lines.map((l) => `${l}\x1b[K`).join('\r\n')}\x1b[J`);
  };

  const setProblem = (p: Problem | null): void => {
    state.problem = p;
  };

  const refresh = async (): Promise<void> => {
    if (busy) return;
    busy = true;
    try {
      const [cols, metrics] = await Promise.allSettled([client.collections(), client.metrics()]);
      if (cols.status === 'fulfilled') {
        state.collections = cols.value;
        state.everConnected = true;
        state.selected = Math.min(state.selected, Math.max(0, cols.value.length - 1));
        setProblem(null);
      } else {
        const e = cols.reason;
        if (!(e instanceof CallFailed)) throw e;
        setProblem(e.problem);
        if (e.problem.kind !== 'error') state.collections = null;
      }
      if (metrics.status === 'fulfilled') state.rates = rates.update(metrics.value, performance.now());
      else if (cols.status === 'fulfilled') state.rates = null;
    } finally {
      busy = false;
      draw();
    }
  };

  const search = async (): Promise<void> => {
    const name = state.inputCollection.trim();
    const col = state.collections?.find((c) => c.name === name);
    if (name === '') {
      state.queryStatus = 'enter a collection name';
      return draw();
    }
    const v = parseVectorInput(state.inputVector, col?.dim);
    if ('error' in v) {
      state.queryStatus = `cannot search: ${v.error}`;
      return draw();
    }
    state.queryStatus = `searching '${name}'...`;
    draw();
    try {
      state.hits = await client.search(name, v.vector, DEFAULT_K);
      state.hitsTitle = `${state.hits.length} from '${name}' (k ${DEFAULT_K}, ${v.what})`;
      state.queryStatus = null;
    } catch (e) {
      if (!(e instanceof CallFailed)) throw e;
      state.queryStatus = `search failed: ${e.problem.kind === 'error' ? e.problem.detail : e.problem.kind === 'unreachable' ? `server unreachable (${e.problem.detail})` : `${e.problem.kind}: ${e.problem.detail}`}`;
    }
    draw();
  };

  let finish: (code: number) => void = () => undefined;
  const done = new Promise<number>((res) => { finish = res; });

  const onKey = (str: string | undefined, key: Key | undefined): void => {
    const name = key?.name;
    if (key?.ctrl && name === 'c') return finish(0);
    if (state.mode === 'browse') {
      const n = state.collections?.length ?? 0;
      if (str === 'q' || name === 'escape') return finish(0);
      if (name === 'up') state.selected = Math.max(0, state.selected - 1);
      else if (name === 'down') state.selected = Math.min(Math.max(0, n - 1), state.selected + 1);
      else if (str === 'r') return void refresh();
      else if (str === 's' || str === '/' || name === 'return') {
        state.mode = 'query';
        state.field = 'vector';
        state.inputCollection = state.collections?.[state.selected]?.name ?? state.inputCollection;
        state.queryStatus = null;
      } else if (str === 'R') {
        state.inputCollection = state.collections?.[state.selected]?.name ?? '';
        state.inputVector = '';
        return void search();
      }
      return draw();
    }
    if (name === 'escape') state.mode = 'browse';
    else if (name === 'tab') state.field = state.field === 'vector' ? 'collection' : 'vector';
    else if (name === 'return' || name === 'enter') return void search();
    else if (name === 'backspace') {
      if (state.field === 'vector') state.inputVector = state.inputVector.slice(0, -1);
      else state.inputCollection = state.inputCollection.slice(0, -1);
    } else if (str !== undefined && str.length > 0 && !key?.ctrl && !key?.meta && /^[\x20-\x7e]+$/.test(str)) {
      if (state.field === 'vector') state.inputVector += str;
      else state.inputCollection += str;
    }
    draw();
  };

  emitKeypressEvents(input);
  if (input.isTTY) input.setRawMode(true);
  input.resume();
  output.write('\x1b[?1049h\x1b[?25l');
  input.on('keypress', onKey);
  output.on('resize', draw);
  const timer = setInterval(() => void refresh(), POLL_SECONDS * 1000);
  draw();
  void refresh();
  try {
    return await done;
  } finally {
    stopped = true;
    clearInterval(timer);
    input.off('keypress', onKey);
    output.off('resize', draw);
    if (input.isTTY) input.setRawMode(false);
    input.pause();
    output.write('\x1b[?25h\x1b[?1049l');
  }
}
