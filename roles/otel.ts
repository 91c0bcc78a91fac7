/**
 * OpenTelemetry export of the service's spans (SVC_OTLP_ENDPOINT, SVC_OTLP_SERVICE_NAME,
 * SVC_OTLP_TIMEOUT_SECS; `[otlp]` in svc.toml). core/service keeps its own small Tracer interface; this
 * composition-root module adapts it to the OpenTelemetry SDK with an OTLP/gRPC exporter. Every span is
 * still written to the log as before (target `svc::span`), so RUST_LOG keeps working with or without OTLP.
 *
 * Secret-free by construction twice over: the service only sets collection names, k, counts and outcomes,
 * and this adapter exports only the attribute keys of SPAN_ATTRIBUTE_KEYS (anything else is dropped).
 */
import { SpanKind, SpanStatusCode } from '@opentelemetry/api';
import { OTLPTraceExporter } from '@opentelemetry/exporter-trace-otlp-grpc';
import { resourceFromAttributes } from '@opentelemetry/resources';
import {
  BasicTracerProvider, BatchSpanProcessor, type ReadableSpan, type SpanExporter, type SpanProcessor,
} from '@opentelemetry/sdk-trace-base';
import { ATTR_SERVICE_NAME, ATTR_SERVICE_VERSION } from '@opentelemetry/semantic-conventions';
import type { ServiceLogger } from '../core/service/log.js';
import { withoutExporter, type ClosableTracer, type Span, type SpanAttributes, type Tracer } from '../core/service/tracing.js';

export interface OtlpOptions {
  /** `http://host:port` (plaintext gRPC) or `https://host:port` (TLS); a bare `host:port` means http. */
  endpoint: string;
  serviceName: string;
  timeoutSecs: number;
  serviceVersion?: string;
}

/** The only attributes a span may carry off the machine; values are names, numbers and outcomes. */
export const SPAN_ATTRIBUTE_KEYS: ReadonlySet<string> = new Set([
  'transport', 'request_id', 'collection', 'k', 'count', 'hits', 'outcome',
]);
const STRING_ATTRIBUTE_CHARS_MAX = 256;
/** Bounded memory: spans beyond the queue are dropped, never buffered without limit. */
const QUEUE_SPANS_MAX = 2048;
const EXPORT_BATCH_SPANS_MAX = 512;
const EXPORT_DELAY_MS = 1000;

/** Parses SVC_OTLP_ENDPOINT; throws an Error naming the variable when it is not a usable URL. */
export function parseOtlpEndpoint(endpoint: string): URL {
  const withScheme = /^[a-z][a-z0-9+.-]*:\/\//i.test(endpoint) ? endpoint : `http://${endpoint}`;
  let url: URL;
  try {
    url = new URL(withScheme);
  } catch {
    throw new Error(`SVC_OTLP_ENDPOINT is not a URL (expected http://host:port or https://host:port)`);
  }
  if ((url.protocol !== 'http:' && url.protocol !== 'https:') || url.hostname === '' || url.port === '') {
    throw new Error(`SVC_OTLP_ENDPOINT must be http://host:port or https://host:port (OTLP/gRPC, usually port 4317)`);
  }
  return url;
}

function exportable(attrs: SpanAttributes): SpanAttributes {
  const out: SpanAttributes = {};
  for (const [k, v] of Object.entries(attrs)) {
    if (!SPAN_ATTRIBUTE_KEYS.has(k)) continue;
    out[`svc.${k}`] = typeof v === 'string' ? v.slice(0, STRING_ATTRIBUTE_CHARS_MAX) : v;
  }
  return out;
}

/**
 * Wraps an exporter so that a failing collector is a warning in the log (once per run of failures,
 * then again when it recovers), never an exception in a request.
 */
function warningExporter(inner: SpanExporter, log: ServiceLogger, endpoint: string): SpanExporter {
  let failing = false;
  return {
    export(spans: ReadableSpan[], done) {
      inner.export(spans, (result) => {
        if (result.code !== 0 && !failing) {
          failing = true;
          log.warn({ endpoint, spans: spans.length, err: result.error?.message }, 'OTLP export failed; spans stay in the log only until the collector answers');
        } else if (result.code === 0 && failing) {
          failing = false;
          log.info({ endpoint }, 'OTLP export recovered');
        }
        done(result);
      });
    },
    shutdown: () => inner.shutdown(),
    forceFlush: () => inner.forceFlush?.() ?? Promise.resolve(),
  };
}

/** Adapts the service's Tracer to an OpenTelemetry tracer provider; each span also goes to `logged`. */
export function tracerOverProcessor(processor: SpanProcessor, o: { serviceName: string; serviceVersion?: string }, logged: Tracer): ClosableTracer {
  const provider = new BasicTracerProvider({
    resource: resourceFromAttributes({
      [ATTR_SERVICE_NAME]: o.serviceName,
      ...(o.serviceVersion !== undefined ? { [ATTR_SERVICE_VERSION]: o.serviceVersion } : {}),
    }),
    spanProcessors: [processor],
  });
  const tracer = provider.getTracer('svc');
  return {
    startSpan(name: string, attrs: SpanAttributes): Span {
      const local = logged.startSpan(name, attrs);
      const span = tracer.startSpan(name, { kind: SpanKind.INTERNAL, attributes: exportable(attrs) });
      return {
        setAttributes(more) {
          local.setAttributes(more);
          span.setAttributes(exportable(more));
        },
        end(errorCode) {
          local.end(errorCode);
          span.setAttribute('svc.outcome', errorCode ?? 'ok');
          if (errorCode !== undefined) span.setStatus({ code: SpanStatusCode.ERROR, message: errorCode });
          span.end();
        },
      };
    },
    shutdown: () => provider.shutdown(),
  };
}

/**
 * The tracer of `svc serve`: spans to the log, and over OTLP/gRPC when `otlp` is given. An exporter that
 * cannot be built (a malformed endpoint, say) logs a warning and leaves the log tracer alone in place.
 */
export function createTracer(otlp: OtlpOptions | null, logged: Tracer, log: ServiceLogger): ClosableTracer {
  const plain = withoutExporter(logged);
  if (otlp === null) return plain;
  try {
    const url = parseOtlpEndpoint(otlp.endpoint);
    const endpoint = `${url.protocol}//${url.host}`;
    const exporter = new OTLPTraceExporter({ url: endpoint, timeoutMillis: Math.max(1, otlp.timeoutSecs * 1000) });
    const processor = new BatchSpanProcessor(warningExporter(exporter, log, endpoint), {
      maxQueueSize: QUEUE_SPANS_MAX, maxExportBatchSize: EXPORT_BATCH_SPANS_MAX, scheduledDelayMillis: EXPORT_DELAY_MS,
      exportTimeoutMillis: Math.max(1, otlp.timeoutSecs * 1000),
    });
    const t = tracerOverProcessor(processor, otlp, logged);
    log.info({ endpoint, service_name: otlp.serviceName }, 'exporting spans over OTLP/gRPC');
    return {
      startSpan: t.startSpan,
      // The last flush at shutdown may fail (collector gone): a warning, never a failed shutdown.
      shutdown: () => t.shutdown().catch((e: unknown) => {
        log.warn({ endpoint, err: e instanceof Error ? e.message : String(e) }, 'OTLP exporter did not flush at shutdown');
      }),
    };
  } catch (e) {
    log.warn({ err: e instanceof Error ? e.message : String(e) }, 'OTLP exporter could not start; spans go to the log only');
    return plain;
  }
}
