import { pino, type Logger, type LevelWithSilent } from 'pino';

/**
 * Structured logs (pino, JSON on stderr so stdout stays for what a command prints) filtered by RUST_LOG
 * as the spec names it: `info`, `debug`, or a default plus per-target levels such as
 * `info,svc::audit=warn,svc::span=debug`. A target is the `target` field of each event.
 */
export interface LogFilter {
  level: LevelWithSilent;
  targets: ReadonlyMap<string, LevelWithSilent>;
}

const LEVELS: Record<string, LevelWithSilent> = {
  off: 'silent', error: 'error', warn: 'warn', info: 'info', debug: 'debug', trace: 'trace',
};

export function parseLogFilter(spec: string): LogFilter {
  let level: LevelWithSilent = 'info';
  const targets = new Map<string, LevelWithSilent>();
  for (const part of spec.split(',').map((p) => p.trim()).filter((p) => p !== '')) {
    const eq = part.lastIndexOf('=');
    if (eq < 0) {
      // A bare word is a level, or a target enabled at trace (as RUST_LOG does).
      if (LEVELS[part.toLowerCase()] !== undefined) level = LEVELS[part.toLowerCase()];
      else targets.set(part, 'trace');
      continue;
    }
    const lv = LEVELS[part.slice(eq + 1).toLowerCase()];
    if (lv !== undefined) targets.set(part.slice(0, eq), lv);
  }
  return { level, targets };
}

export interface Logs {
  root: Logger;
  /** The logger of one target: `svc`, `svc::audit`, `svc::span`, `svc::rest`... */
  target(name: string): Logger;
}

export function createLogs(spec: string, destination: NodeJS.WritableStream | number = 2): Logs {
  const filter = parseLogFilter(spec);
  const levels = [filter.level, ...filter.targets.values()];
  const order: LevelWithSilent[] = ['trace', 'debug', 'info', 'warn', 'error', 'fatal', 'silent'];
  const lowest = order.find((l) => levels.includes(l)) ?? 'info';
  const dest = typeof destination === 'number' ? pino.destination({ fd: destination, sync: true }) : destination;
  const root = pino({ level: lowest, base: {}, timestamp: pino.stdTimeFunctions.isoTime }, dest);
  const cache = new Map<string, Logger>();
  const levelOf = (name: string): LevelWithSilent => {
    // The longest configured target that is a prefix of the name wins (svc matches svc::audit).
    let best: [number, LevelWithSilent] = [-1, filter.level];
    for (const [t, lv] of filter.targets) {
      if ((name === t || name.startsWith(`${t}::`)) && t.length > best[0]) best = [t.length, lv];
    }
    return best[1];
  };
  return {
    root,
    target(name) {
      let l = cache.get(name);
      if (l === undefined) {
        l = root.child({ target: name }, { level: levelOf(name) });
        cache.set(name, l);
      }
      return l;
    },
  };
}
