import { randomUUID } from 'node:crypto';
import { McpServer } from '@modelcontextprotocol/sdk/server/mcp.js';
import type { Transport } from '@modelcontextprotocol/sdk/shared/transport.js';
import { CallToolRequestSchema, type JSONRPCMessage } from '@modelcontextprotocol/sdk/types.js';
import { invalidArgument, toSvcError, type ErrorCode } from '../../core/base/errors.js';
import { checkJsonKeys } from '../../core/base/json-keys.js';
import type { CallContext, Principal, SvcApi } from '../../core/service/api.js';
import type { Service } from '../../core/service/service.js';
import { TOOL_SCHEMAS, type ToolName } from './schemas.js';
import { TOOLS } from './tools.js';

/**
 * The MCP plane: one McpServer whose tools call the service layer as one principal (the key of
 * SVC_API_KEY, CONTRACT.md section 9) with transport 'mcp'. A result is the REST response body as JSON
 * text plus structuredContent; a failure is an `isError` result whose body is the contract's
 * `{error: {code, message}}`.
 *
 * A call is handled as REST and gRPC handle a request: role and scope first (so a key without the right
 * learns nothing from validation errors), then the arguments: prototype-poisoning keys refused
 * (core/base/json-keys.ts; the schemas would drop a `__proto__` key silently), then the tool's schema.
 * The SDK's own tools/call handler, which validates before anything else, is replaced for that.
 */
export interface McpOptions {
  service: SvcApi & Pick<Service, 'authorize'>;
  principal: Principal;
  version: string;
  /** Where an internal error's cause goes (the client only sees a request id). */
  onInternalError?: (requestId: string, tool: string, cause: unknown) => void;
}

export interface ToolResult {
  [key: string]: unknown;
  content: { type: 'text'; text: string }[];
  structuredContent: Record<string, unknown>;
  isError?: boolean;
}

export function okResult(body: object): ToolResult {
  return { content: [{ type: 'text', text: JSON.stringify(body) }], structuredContent: body as Record<string, unknown> };
}

export function errorResult(code: ErrorCode, message: string): ToolResult {
  const body = { error: { code, message } };
  return { content: [{ type: 'text', text: JSON.stringify(body) }], structuredContent: body, isError: true };
}

export function createMcpServer(opts: McpOptions): McpServer {
  const server = new McpServer({ name: 'svc', version: opts.version }, {
    instructions: 'svc is a vector database. Create a collection (dim, metric, filterable fields), upsert points, then search, fetch or get them. '
      + 'Every tool takes the REST body fields plus `collection`; errors carry a code such as invalid_argument, limit_exceeded, permission_denied or not_found.',
  });
  for (const name of Object.keys(TOOLS) as ToolName[]) register(server, name, opts);
  // Registration above serves tools/list (titles, schemas, annotations); calls come here instead of the
  // SDK's handler, which would validate the arguments before the authorization check.
  server.server.setRequestHandler(CallToolRequestSchema, (request) => {
    const name = request.params.name;
    if (!Object.hasOwn(TOOLS, name)) return errorResult('invalid_argument', `Tool ${name} not found`);
    return callTool(name as ToolName, request.params.arguments, opts);
  });
  return server;
}

function register<T extends ToolName>(server: McpServer, name: T, opts: McpOptions): void {
  const def = TOOLS[name];
  server.registerTool(name, {
    title: def.title,
    description: def.description,
    inputSchema: TOOL_SCHEMAS[name],
    annotations: { title: def.title, readOnlyHint: def.readOnly, destructiveHint: !def.readOnly, openWorldHint: false },
  }, ((args: unknown) => callTool(name, args, opts)) as never);
}

/** One tool call: authorize, refuse poisoning keys, validate, call; every failure in the contract's shape. */
async function callTool<T extends ToolName>(name: T, raw: unknown, opts: McpOptions): Promise<ToolResult> {
  const def = TOOLS[name];
  const ctx: CallContext = { principal: opts.principal, requestId: randomUUID(), transport: 'mcp', remote: 'stdio' };
  try {
    const args = raw === undefined || raw === null ? {} : raw;
    const fields = typeof args === 'object' && !Array.isArray(args) ? args as Record<string, unknown> : {};
    opts.service.authorize(ctx, def.op, (def.collection ?? ((a) => a.collection))(fields));
    checkJsonKeys(args, 'arguments');
    const parsed = TOOL_SCHEMAS[name].safeParse(args);
    if (!parsed.success) {
      const why = parsed.error.issues.map((i) => (i.path.length > 0 ? `${i.message} at ${i.path.join('.')}` : i.message)).join('; ');
      throw invalidArgument(`Invalid arguments for tool ${name}: ${why}`);
    }
    return okResult(await def.call(opts.service, ctx, parsed.data as Parameters<typeof def.call>[2]));
  } catch (e) {
    const err = toSvcError(e);
    if (err.code === 'internal') {
      opts.onInternalError?.(ctx.requestId, name, err.detail.cause ?? e);
      return errorResult('internal', `internal error (request id ${ctx.requestId})`);
    }
    return errorResult(err.code, err.message);
  }
}

/**
 * The SDK answers a call it rejects before our handler runs (arguments that fail the tool's schema, an
 * unknown tool) with an `isError` result holding bare text. This rewrites those on their way out into
 * the contract's shape with code `invalid_argument`, so every tool error a client sees carries a code.
 */
export function withContractErrors<T extends Transport>(transport: T): T {
  const send = transport.send.bind(transport);
  transport.send = (message: JSONRPCMessage, options?: Parameters<Transport['send']>[1]) => send(rewrite(message), options);
  return transport;
}

function rewrite(message: JSONRPCMessage): JSONRPCMessage {
  const result = (message as { result?: Record<string, unknown> }).result;
  if (result === undefined || result.isError !== true || result.structuredContent !== undefined) return message;
  const content = result.content as { type: string; text?: string }[] | undefined;
  const text = content?.find((c) => c.type === 'text')?.text ?? 'invalid tool call';
  return { ...message, result: errorResult('invalid_argument', text.replace(/^MCP error -?\d+: /, '')) } as JSONRPCMessage;
}
