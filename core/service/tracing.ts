import type { Clock } from '../base/clock.js';
import type { ServiceLogger } from './log.js';

/**
 * OpenTelemetry-shaped spans around engine calls. Attributes are secret-free by construction: the service
 * only ever sets collection names, k, counts and outcomes, never vectors, payloads or keys.
 */
export type SpanAttributes = Record<string, string | number | boolean>;

export interface Span {
  setAttributes(attrs: SpanAttributes): void;
  end(errorCode?: string): void;
}

export interface Tracer {
  startSpan(name: string, attrs: SpanAttributes): Span;
}

/** A Tracer that can flush and stop its exporter (at shutdown). */
export interface ClosableTracer extends Tracer {
  shutdown(): Promise<void>;
}

/** `tracer` as a ClosableTracer with nothing to flush (spans to the log only). */
export function withoutExporter(tracer: Tracer): ClosableTracer {
  return { startSpan: (name, attrs) => tracer.startSpan(name, attrs), shutdown: async () => undefined };
}

const NOOP_SPAN: Span = { setAttributes: () => undefined, end: () => undefined };

/**
 * The fallback exporter: each finished span is one debug log event with its duration. With debug off
 * (the default) spans are a shared no-op: building and merging their attributes for nothing cost about
 * 2% of a small search's server time.
 */
export function logTracer(log: ServiceLogger, clock: Clock): Tracer {
  return {
    startSpan(name, attrs) {
      if (log.isLevelEnabled?.('debug') === false) return NOOP_SPAN;
      const start = clock.monotonicMs();
      const all: SpanAttributes = { ...attrs };
      return {
        setAttributes(more) { Object.assign(all, more); },
        end(errorCode) {
          log.debug({ span: name, ...all, duration_ms: clock.monotonicMs() - start, outcome: errorCode ?? 'ok' }, 'span');
        },
      };
    },
  };
}
