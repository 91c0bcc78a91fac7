import { systemClock } from '../core/base/clock.js';
import type { AuditSink } from '../core/service/audit.js';
import type { Metrics } from '../core/service/metrics.js';
import type { ServiceOptions } from '../core/service/service.js';
import { logTracer, withoutExporter, type ClosableTracer } from '../core/service/tracing.js';
import type { SvcConfig } from './config.js';
import { FileAuditSink } from './log-audit.js';
import type { Logs } from './log.js';

/**
 * What every role's service layer is built from (a node, a router, a coordinator): the audit sink (a
 * keyed file when SVC_AUDIT_LOG is set), the tracer (spans to the log, and over OTLP when
 * SVC_OTLP_ENDPOINT is set), and the service options they go into. The caller closes both at shutdown.
 * The OpenTelemetry SDK (./otel.ts) is imported only when SVC_OTLP_ENDPOINT is set: its modules take
 * about a fifth of a second to load, on every start of a process that exports nothing.
 */
export async function serviceParts(config: SvcConfig, logs: Logs, metrics: Metrics, over: { audit?: AuditSink } = {}): Promise<{
  fileSink: FileAuditSink | null; tracer: ClosableTracer; options: ServiceOptions;
}> {
  const otlp = config.otlp.endpoint ? { endpoint: config.otlp.endpoint, serviceName: config.otlp.serviceName, timeoutSecs: config.otlp.timeoutSecs } : null;
  const logged = logTracer(logs.target('svc::span'), systemClock);
  // Before the audit file opens: an import that fails leaves nothing open.
  const tracer: ClosableTracer = otlp === null ? withoutExporter(logged) : (await import('./otel.js')).createTracer(otlp, logged, logs.target('svc::otel'));
  // A loop of a multi-loop server hands its audit records to the engine thread's one sink (`over.audit`).
  const fileSink = config.auditLog !== null && over.audit === undefined ? new FileAuditSink(config.auditLog, {
    masterKeyHex: config.encryptionKey, onWarning: (m) => logs.target('svc::audit').warn({ warning: true }, m),
  }) : null;
  const audit: AuditSink = over.audit ?? fileSink ?? { append: () => undefined };
  return {
    fileSink, tracer,
    options: {
      keys: config.apiKeys, insecure: config.insecure, limits: config.limits, rateLimit: config.rateLimit,
      audit, auditLog: logs.target('svc::audit'), clock: systemClock, metrics, log: logs.target('svc::span'), tracer,
    },
  };
}
