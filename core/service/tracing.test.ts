import { describe, expect, it } from 'vitest';
import type { ServiceLogger } from './log.js';
import { logTracer } from './tracing.js';

function recordingLogger(debugOn: boolean | undefined): { log: ServiceLogger; lines: object[] } {
  const lines: object[] = [];
  const log: ServiceLogger = {
    debug: (o) => { lines.push(o); }, info: () => undefined, warn: () => undefined, error: () => undefined,
    ...(debugOn === undefined ? {} : { isLevelEnabled: (l: string) => l !== 'debug' || debugOn }),
  };
  return { log, lines };
}

describe('logTracer', () => {
  let t = 100;
  const clock = { nowMs: () => 0, monotonicMs: () => (t += 5) };

  it.each([true, undefined])('logs each finished span with its attributes, duration and outcome (debug on: %s)', (on) => {
    const { log, lines } = recordingLogger(on);
    const span = logTracer(log, clock).startSpan('svc.search', { collection: 'c', k: 10 });
    span.setAttributes({ hits: 3 });
    span.end('invalid_argument');
    expect(lines).toEqual([{ span: 'svc.search', collection: 'c', k: 10, hits: 3, duration_ms: 5, outcome: 'invalid_argument' }]);
  });

  it('does nothing at all when the logger has debug off', () => {
    const { log, lines } = recordingLogger(false);
    const span = logTracer(log, clock).startSpan('svc.search', { collection: 'c' });
    span.setAttributes({ hits: 1 });
    span.end();
    expect(lines).toEqual([]);
  });
});
