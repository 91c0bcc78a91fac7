import { InMemorySpanExporter, SimpleSpanProcessor } from '@opentelemetry/sdk-trace-base';
import { describe, expect, it } from 'vitest';
import type { ServiceLogger } from '../core/service/log.js';
import type { Tracer } from '../core/service/tracing.js';
import { createTracer, parseOtlpEndpoint, tracerOverProcessor } from './otel.js';

function recordingLog(): ServiceLogger & { lines: { level: string; obj: object; msg?: string }[] } {
  const lines: { level: string; obj: object; msg?: string }[] = [];
  const at = (level: string) => (obj: object, msg?: string) => { lines.push({ level, obj, msg }); };
  return { lines, debug: at('debug'), info: at('info'), warn: at('warn'), error: at('error') };
}

function recordingTracer(): Tracer & { ended: { name: string; attrs: object; code?: string }[] } {
  const ended: { name: string; attrs: object; code?: string }[] = [];
  return {
    ended,
    startSpan(name, attrs) {
      const all = { ...attrs };
      return { setAttributes: (m) => Object.assign(all, m), end: (code) => { ended.push({ name, attrs: all, code }); } };
    },
  };
}

describe('OTLP endpoint', () => {
  it('accepts http and https URLs with a port, and a bare host:port as http', () => {
    expect(parseOtlpEndpoint('http://127.0.0.1:4317').host).toBe('127.0.0.1:4317');
    expect(parseOtlpEndpoint('https://collector.example:4317').protocol).toBe('https:');
    expect(parseOtlpEndpoint('localhost:4317').protocol).toBe('http:');
  });

  it.each(['ftp://x:1', 'http://', 'http://host', 'not a url at all', 'http://[::1'])('refuses %s naming the variable', (e) => {
    expect(() => parseOtlpEndpoint(e)).toThrow(/SVC_OTLP_ENDPOINT/);
  });

  it('a malformed endpoint logs a warning and falls back to the log tracer', async () => {
    const log = recordingLog();
    const logged = recordingTracer();
    const t = createTracer({ endpoint: 'ftp://nowhere:1', serviceName: 'svc', timeoutSecs: 1 }, logged, log);
    expect(log.lines.filter((l) => l.level === 'warn').map((l) => l.msg)).toEqual(['OTLP exporter could not start; spans go to the log only']);
    t.startSpan('svc.search', { collection: 'c' }).end();
    expect(logged.ended).toEqual([{ name: 'svc.search', attrs: { collection: 'c' }, code: undefined }]);
    await t.shutdown();
  });

  it('no endpoint: the log tracer alone, no warning', () => {
    const log = recordingLog();
    createTracer(null, recordingTracer(), log);
    expect(log.lines).toEqual([]);
  });
});

describe('spans over the SDK', () => {
  it('carry the service name, the allowed attributes under svc.*, the outcome, and also reach the log', async () => {
    const exporter = new InMemorySpanExporter();
    const logged = recordingTracer();
    const t = tracerOverProcessor(new SimpleSpanProcessor(exporter), { serviceName: 'svc-test' }, logged);
    const s = t.startSpan('svc.search', { transport: 'rest', request_id: 'r1', collection: 'docs', k: 5 });
    s.setAttributes({ hits: 3 });
    s.end();
    const f = t.startSpan('svc.upsert', { collection: 'docs', count: 2, vector: '[0.1,0.2]', payload: 'secret', key: 'k' });
    f.end('invalid_argument');
    const spans = exporter.getFinishedSpans();
    expect(spans.map((x) => x.name)).toEqual(['svc.search', 'svc.upsert']);
    expect(spans[0].attributes).toEqual({
      'svc.transport': 'rest', 'svc.request_id': 'r1', 'svc.collection': 'docs', 'svc.k': 5, 'svc.hits': 3, 'svc.outcome': 'ok',
    });
    expect(spans[0].resource.attributes['service.name']).toBe('svc-test');
    // Keys outside the allow-list never leave the process, even if a caller passed them.
    expect(spans[1].attributes).toEqual({ 'svc.collection': 'docs', 'svc.count': 2, 'svc.outcome': 'invalid_argument' });
    expect(spans[1].status).toEqual({ code: 2, message: 'invalid_argument' });
    expect(logged.ended.map((e) => [e.name, e.code])).toEqual([['svc.search', undefined], ['svc.upsert', 'invalid_argument']]);
    await t.shutdown();
  });

  it('cuts long strings so that no attribute is unbounded', async () => {
    const exporter = new InMemorySpanExporter();
    const t = tracerOverProcessor(new SimpleSpanProcessor(exporter), { serviceName: 'svc' }, recordingTracer());
    t.startSpan('svc.get', { collection: 'x'.repeat(1000) }).end();
    expect(String(exporter.getFinishedSpans()[0].attributes['svc.collection'])).toHaveLength(256);
    await t.shutdown();
  });
});
