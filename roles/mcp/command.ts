import { readFileSync } from 'node:fs';
import { format } from 'node:util';
import { systemClock } from '../../core/base/clock.js';
import { SvcError } from '../../core/base/errors.js';
import { openDatabase } from '../../core/embedded.js';
import type { EngineApi, Principal } from '../../core/service/api.js';
import type { AuditSink } from '../../core/service/audit.js';
import { noopMetrics } from '../../core/service/metrics.js';
import { createService, INSECURE_PRINCIPAL, type ServiceOptions } from '../../core/service/service.js';
import { registerCommand } from '../cli/commands.js';
import { ConfigError, loadConfig, type SvcConfig } from '../config.js';
import { providersFromConfig } from '../providers.js';
import { FileAuditSink } from '../log-audit.js';
import { createLogs, type Logs } from '../log.js';
import { createMcpServer, withContractErrors } from './server.js';
import { CappedStdioTransport } from './stdio.js';

/**
 * `svc mcp --data-dir DIR [--config svc.toml]`: the MCP server on stdio, acting as the key in
 * SVC_API_KEY (CONTRACT.md section 9). stdout carries JSON-RPC only; every log line goes to stderr.
 */

function refuse(message: string): number {
  process.stderr.write(`svc mcp: refusing to start: ${message}\n`);
  return 2;
}

/** Anything a dependency prints with console.log would corrupt the JSON-RPC stream: send it to stderr. */
function keepStdoutForJsonRpc(): void {
  const toStderr = (...args: unknown[]) => { process.stderr.write(`${format(...args)}\n`); };
  console.log = toStderr;
  console.info = toStderr;
  console.debug = toStderr;
}

function packageVersion(): string {
  try {
    return (JSON.parse(readFileSync(new URL('../../../package.json', import.meta.url), 'utf8')) as { version: string }).version;
  } catch {
    return '0.0.0';
  }
}

/** Builds the service options once the engine's collaborators are known. */
function serviceOptions(config: SvcConfig, logs: Logs, audit: AuditSink): ServiceOptions {
  return {
    keys: config.apiKeys, insecure: config.insecure, limits: config.limits, rateLimit: config.rateLimit,
    audit, auditLog: logs.target('svc::audit'), clock: systemClock, metrics: noopMetrics, log: logs.target('svc::span'),
  };
}

/** The principal of SVC_API_KEY, or the refusal to print. Checked before the data directory is touched. */
export function mcpPrincipal(config: SvcConfig, logs: Logs): Principal | string {
  const key = config.other.SVC_API_KEY;
  if (key === undefined) {
    if (config.insecure) return INSECURE_PRINCIPAL;
    return 'SVC_API_KEY: svc mcp acts as one API key and none is set. Fix: export SVC_API_KEY=<a key of SVC_API_KEYS or of [[api_keys]] in --config>; SVC_INSECURE=true waives this for development';
  }
  // Only `authenticate` runs here: it needs the keys, not the engine.
  const unopened = new Proxy({}, { get: () => () => Promise.reject(new SvcError('not_ready', 'not open')) }) as EngineApi;
  const gate = createService(unopened, serviceOptions(config, logs, { append: () => undefined }));
  try {
    return gate.authenticate(`Bearer ${key}`, { requestId: 'mcp-startup', remote: 'stdio' });
  } catch (e) {
    if (e instanceof SvcError) return `SVC_API_KEY: ${e.message}. Fix: use a key listed in SVC_API_KEYS or in the [[api_keys]] of --config`;
    throw e;
  }
}

registerCommand('mcp', {
  summary: 'serve the MCP tools (JSON-RPC 2.0 on stdio) as the key in SVC_API_KEY',
  usage: 'svc mcp --data-dir DIR [--config svc.toml]   (master key from SVC_ENCRYPTION_KEY or SVC_MASTER_KEY_FILE)',
  options: { 'data-dir': { type: 'string', short: 'd' }, config: { type: 'string', short: 'c' } },
  async run({ values }) {
    keepStdoutForJsonRpc();
    const env: Record<string, string | undefined> = { ...process.env };
    if (typeof values.config === 'string') env.SVC_CONFIG = values.config;
    if (typeof values['data-dir'] === 'string') env.SVC_DATA_DIR = values['data-dir'];
    let config: SvcConfig;
    try {
      config = loadConfig(env, { defaultFile: 'svc.toml' });
    } catch (e) {
      if (e instanceof ConfigError) return refuse(e.message);
      throw e;
    }
    const logs = createLogs(config.logFilter);
    const log = logs.target('svc');
    for (const w of config.warnings) log.warn({ warning: true }, w);
    const principal = mcpPrincipal(config, logs);
    if (typeof principal === 'string') return refuse(principal);

    let engine: EngineApi;
    try {
      engine = await openDatabase({
        dataDir: config.dataDir,
        ...(config.encryptionKey !== null ? { encryptionKey: config.encryptionKey } : { insecure: true }),
        limits: config.limits,
        limitsFrom: 'environment',
        ...(config.snapshotDir !== null ? { snapshotDir: config.snapshotDir } : {}),
        providers: providersFromConfig(config, env),
        // A server role: reads never wait for a rebuild unless a tool call asks for strong, as over REST and gRPC.
        waitForBulkBuild: false,
      });
    } catch (e) {
      log.error({ err: (e as Error).message, code: (e as { code?: string }).code }, 'svc mcp failed to open the data directory');
      return 1;
    }
    const fileSink = config.auditLog !== null ? new FileAuditSink(config.auditLog, {
      masterKeyHex: config.encryptionKey, onWarning: (m) => log.warn({ warning: true }, m),
    }) : null;
    const service = createService(engine, serviceOptions(config, logs, fileSink ?? { append: () => undefined }));
    const server = createMcpServer({
      service, principal, version: packageVersion(),
      onInternalError: (requestId, tool, cause) => log.error({ request_id: requestId, tool, cause: String(cause) }, 'internal error'),
    });

    let closing: Promise<void> | null = null;
    const shutdown = (why: string): Promise<void> => {
      closing ??= (async () => {
        log.info({ why }, 'svc mcp shutting down');
        await server.close().catch(() => undefined);
        await engine.close();
        fileSink?.close();
        process.exit(0);
      })();
      return closing;
    };
    process.stdin.on('end', () => void shutdown('stdin closed'));
    process.on('SIGTERM', () => void shutdown('SIGTERM'));
    process.on('SIGINT', () => void shutdown('SIGINT'));
    const transport = new CappedStdioTransport({ maxMessageBytes: config.limits.maxRequestBodyBytes });
    transport.onerror = (e) => log.warn({ err: e.message }, 'stdio');
    await server.connect(withContractErrors(transport));
    log.info({ key: principal.keyName, role: principal.role, data_dir: config.dataDir }, 'svc mcp ready on stdio');
    return -1; // keep running until stdin closes or a signal arrives
  },
});
