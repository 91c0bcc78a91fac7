/**
 * `svc admin import`: flags (spec, "Command line" import table), source selection, the plaintext
 * credential warning, progress and the final summary. Exit 0 when every row imported, 1 when rows were
 * skipped or the import stopped, 2 for a usage error.
 */
import { LIMIT_VARIABLES, type Limits } from '../../core/base/limits.js';
import { METRICS, type FieldType, type FilterableField, type Metric } from '../../core/base/model.js';
import { openDatabase } from '../../core/embedded.js';
import { registerCommand } from '../cli/commands.js';
import { ImportFatal, SOURCE_KINDS, type SourceKind } from './convert.js';
import { runImport, type ImportSummary } from './importer.js';
import { storeALive, storeBLive } from './live.js';
import { postgresSource } from './postgres.js';
import { Progress, type ProgressStream } from './progress.js';
import { storeAFile, storeBFile, storeCFile, type Source } from './sources.js';

type Values = Record<string, string | boolean | (string | boolean)[] | undefined>;

export class UsageError extends Error {}

/** Skipped rows printed one by one before only the summary counts them (a bad file must not flood a terminal). */
export const MAX_SKIP_LINES = 1000;

export interface ImportPlan {
  source: SourceKind;
  collection: string;
  dataDir: string;
  metric: Metric;
  dim?: number;
  filterable: FilterableField[];
  encryptionKey?: string;
  insecure: boolean;
  open(): Source;
  /** Warnings to print before anything is sent. */
  warnings: string[];
}

function str(v: Values, name: string): string | undefined {
  const x = v[name];
  if (x === undefined) return undefined;
  if (typeof x !== 'string' || x.length === 0) throw new UsageError(`--${name} needs a value`);
  return x;
}

export function parseFilterable(specs: string[]): FilterableField[] {
  return specs.map((s) => {
    const i = s.lastIndexOf(':');
    const path = i > 0 ? s.slice(0, i) : '';
    const type = s.slice(i + 1);
    if (path === '' || (type !== 'keyword' && type !== 'numeric')) {
      throw new UsageError(`--filterable '${s}' must be path:type with type keyword or numeric`);
    }
    return { path, field_type: type as FieldType };
  });
}

/** Credentials over plaintext: any http:// URL with a key, any PostgreSQL URL with a password and no TLS. */
export function plaintextWarnings(v: { storeAUrl?: string; storeBUrl?: string; postgresUrl?: string; apiKey?: string }, env: NodeJS.ProcessEnv): string[] {
  const out: string[] = [];
  for (const [flag, url] of [['--store-a-url', v.storeAUrl], ['--store-b-url', v.storeBUrl]] as const) {
    if (url === undefined) continue;
    let u: URL;
    try {
      u = new URL(url);
    } catch {
      throw new UsageError(`${flag} '${url}' is not a URL`);
    }
    if (u.protocol !== 'http:' && u.protocol !== 'https:') throw new UsageError(`${flag} must be an http:// or https:// URL`);
    if (u.protocol === 'http:' && (v.apiKey !== undefined || u.password !== '' || u.username !== '')) {
      out.push(`warning: the source key travels unencrypted over plaintext ${u.protocol}//${u.host}; use https:// for ${flag}`);
    }
  }
  if (v.postgresUrl !== undefined) {
    let u: URL;
    try {
      u = new URL(v.postgresUrl);
    } catch {
      throw new UsageError('--postgres-url is not a URL (postgres://user:password@host:port/database)');
    }
    if (u.protocol !== 'postgres:' && u.protocol !== 'postgresql:') throw new UsageError('--postgres-url must start with postgres:// or postgresql://');
    const sslmode = u.searchParams.get('sslmode');
    const tls = u.searchParams.get('ssl') === 'true' || u.searchParams.get('ssl') === '1'
      || (sslmode !== null && ['require', 'verify-ca', 'verify-full'].includes(sslmode));
    if (!tls && (u.password !== '' || (env.PGPASSWORD ?? '') !== '')) {
      out.push(`warning: the PostgreSQL password travels unencrypted to ${u.host}; add ?sslmode=verify-full (or require) to --postgres-url`);
    }
  }
  return out;
}

export function planImport(v: Values, env: NodeJS.ProcessEnv): ImportPlan {
  const source = str(v, 'source');
  if (source === undefined) throw new UsageError('--source is required: store_a, store_b or store_c');
  if (!SOURCE_KINDS.includes(source as SourceKind)) throw new UsageError(`--source '${source}' is not one of ${SOURCE_KINDS.join(', ')}`);
  const kind = source as SourceKind;
  const collection = str(v, 'collection');
  if (collection === undefined) throw new UsageError('--collection is required (the target, and the live source collection)');
  const input = str(v, 'input');
  const urls = { storeAUrl: str(v, 'store-a-url'), storeBUrl: str(v, 'store-b-url'), postgresUrl: str(v, 'postgres-url') };
  const given = Object.entries(urls).filter(([, u]) => u !== undefined).map(([k]) => k);
  if ((input === undefined ? 0 : 1) + given.length !== 1) {
    throw new UsageError('give exactly one of --input, --store-a-url, --store-b-url, --postgres-url');
  }
  const liveFlag = { store_a: 'storeAUrl', store_b: 'storeBUrl', store_c: 'postgresUrl' }[kind];
  if (given.length === 1 && given[0] !== liveFlag) {
    throw new UsageError(`--source ${kind} reads live from --${{ storeAUrl: 'store-a-url', storeBUrl: 'store-b-url', postgresUrl: 'postgres-url' }[liveFlag]}`);
  }
  const metric = str(v, 'metric') ?? 'cosine';
  if (!METRICS.includes(metric as Metric)) throw new UsageError(`--metric '${metric}' is not one of ${METRICS.join(', ')}`);
  const dimText = str(v, 'dim');
  let dim: number | undefined;
  if (dimText !== undefined) {
    dim = Number(dimText);
    if (!Number.isSafeInteger(dim) || dim < 1) throw new UsageError(`--dim '${dimText}' must be a positive integer`);
  }
  const filterable = parseFilterable(((v.filterable as string[] | undefined) ?? []).map(String));
  const insecure = v.insecure === true;
  const flagKey = str(v, 'encryption-key');
  if (insecure && flagKey !== undefined) throw new UsageError('give either --encryption-key or --insecure, not both');
  const encryptionKey = insecure ? undefined : flagKey ?? (env.SVC_ENCRYPTION_KEY || undefined);
  if (!insecure && encryptionKey === undefined) {
    throw new UsageError('the data directory needs a master key: --encryption-key or SVC_ENCRYPTION_KEY (64 hex characters), or --insecure');
  }
  const apiKey = str(v, 'api-key');
  const vectorName = str(v, 'vector-name');
  if (vectorName !== undefined && kind !== 'store_a') throw new UsageError('--vector-name applies to --source store_a only');
  const idField = str(v, 'id-field') ?? 'id';
  const vectorField = str(v, 'vector-field') ?? (kind === 'store_a' ? 'vector' : 'embedding');
  const warnings = plaintextWarnings({ ...urls, apiKey }, env);
  const tenant = str(v, 'store-b-tenant') ?? 'default_tenant';
  const database = str(v, 'store-b-database') ?? 'default_database';
  const table = str(v, 'table') ?? collection;
  const open = (): Source => {
    if (input !== undefined) {
      if (kind === 'store_a') return storeAFile(input, { vectorField, vectorName });
      if (kind === 'store_b') return storeBFile(input);
      return storeCFile(input, { idField, vectorField });
    }
    if (kind === 'store_a') return storeALive({ url: urls.storeAUrl!, collection, apiKey, vectorField, vectorName });
    if (kind === 'store_b') return storeBLive({ url: urls.storeBUrl!, tenant, database, collection, apiKey });
    return postgresSource({ url: urls.postgresUrl!, table, idField, vectorField });
  };
  return {
    source: kind, collection, dataDir: str(v, 'data-dir') ?? './data', metric: metric as Metric, dim, filterable,
    encryptionKey, insecure, open, warnings,
  };
}

/** SVC_MAX_* limits from the environment, as the server reads them (invalid values are usage errors). */
export function limitsFromEnv(env: NodeJS.ProcessEnv): Partial<Limits> {
  const out: Partial<Record<keyof Limits, number>> = {};
  for (const [field, variable] of Object.entries(LIMIT_VARIABLES) as [keyof Limits, string][]) {
    const s = env[variable];
    if (s === undefined || s === '') continue;
    const n = Number(s);
    if (!Number.isSafeInteger(n) || n < 1) throw new UsageError(`${variable}='${s}' must be a positive integer`);
    out[field] = n;
  }
  return out;
}

export function formatSummary(s: ImportSummary, collection: string, elapsedMs: number): string {
  const secs = elapsedMs / 1000;
  const lines = [
    `import into '${collection}': ${s.read} read, ${s.imported} imported, ${s.skipped} skipped`
      + ` in ${secs.toFixed(1)}s (${Math.round(s.imported / Math.max(secs, 1e-3))} points/s)`,
  ];
  for (const r of s.reasons.slice(0, 20)) lines.push(`  skipped ${r.count} x ${r.reason}`);
  if (s.reasons.length > 20) lines.push(`  ... and ${s.reasons.length - 20} more reasons`);
  if (s.collection !== null) {
    lines.push(`collection '${s.collection.name}' ${s.created ? 'created' : 'appended'}: ${s.collection.count} points, dim ${s.collection.dim}, ${s.collection.metric}`);
  } else {
    lines.push(`nothing imported: no valid vector to infer the dimension from, collection '${collection}' not created`);
  }
  return `${lines.join('\n')}\n`;
}

export async function importCommand(v: Values, env: NodeJS.ProcessEnv, io: { stdout: ProgressStream; stderr: ProgressStream }): Promise<number> {
  let plan: ImportPlan;
  let limits: Partial<Limits>;
  try {
    plan = planImport(v, env);
    limits = limitsFromEnv(env);
  } catch (e) {
    if (!(e instanceof UsageError || e instanceof ImportFatal)) throw e;
    io.stderr.write(`svc admin import: ${e.message}\nHint: run svc admin import --help to see its options.\n`);
    return 2;
  }
  for (const w of plan.warnings) io.stderr.write(`${w}\n`);
  let source: Source;
  try {
    source = plan.open();
  } catch (e) {
    if (!(e instanceof ImportFatal)) throw e;
    io.stderr.write(`svc admin import: ${e.message}\n`);
    return 1;
  }
  let db;
  try {
    db = await openDatabase({ dataDir: plan.dataDir, limits, limitsFrom: 'environment', ...(plan.insecure ? { insecure: true } : { encryptionKey: plan.encryptionKey }) });
  } catch (e) {
    await source.close();
    io.stderr.write(`svc admin import: cannot open data directory ${plan.dataDir}: ${(e as Error).message}\n`);
    return 1;
  }
  const progress = new Progress(io.stderr, () => source.fraction());
  let printed = 0;
  try {
    const summary = await runImport(db, source, { collection: plan.collection, metric: plan.metric, dim: plan.dim, filterable: plan.filterable }, {
      onProgress: (read, imported) => progress.update(read, imported),
      onNotice: (m) => io.stderr.write(`${m}\n`),
      onSkip: (ref, reason) => {
        printed++;
        if (printed > MAX_SKIP_LINES) return;
        progress.clear();
        io.stderr.write(printed === MAX_SKIP_LINES
          ? `skipped ${ref}: ${reason}\n(further skipped rows are counted in the summary only)\n`
          : `skipped ${ref}: ${reason}\n`);
      },
    });
    progress.update(summary.read, summary.imported, true);
    progress.clear();
    io.stdout.write(formatSummary(summary, plan.collection, progress.elapsedMs()));
    return summary.skipped === 0 ? 0 : 1;
  } catch (e) {
    progress.clear();
    if (e instanceof ImportFatal) {
      io.stderr.write(`svc admin import: ${e.message}\n(batches written before this point stay imported; re-running appends)\n`);
      return 1;
    }
    throw e;
  } finally {
    await db.close();
  }
}

registerCommand('admin import', {
  summary: 'load a store_a, store_b or store_c export (or a live source) into a data directory',
  usage: [
    'svc admin import --source store_a|store_b|store_c --collection NAME (--input FILE | --store-a-url URL | --store-b-url URL | --postgres-url URL) [options]',
    '',
    '  --source            store_a, store_b or store_c (required)',
    '  --input             export file: JSON Lines (store_a, store_c) or one JSON object (store_b)',
    '  --store-a-url       live store_a REST address (scroll API)',
    '  --store-b-url       live store_b HTTP address (v2 API)',
    '  --store-b-tenant    tenant for live store_b (default default_tenant)',
    '  --store-b-database  database for live store_b (default default_database)',
    '  --postgres-url      live store_c: postgres://user:password@host:port/db',
    '  --table             source table for live store_c, schema.table allowed (default: --collection)',
    '  --api-key           live source key (store_a: api-key header; store_b: bearer)',
    '  --collection        target collection, created if absent, appended to otherwise; also the live source collection (required)',
    '  --data-dir          target data directory (default ./data)',
    '  --metric            l2, cosine or dot for a new collection (default cosine)',
    '  --dim               dimension of a new collection (default: inferred from the first vector)',
    '  --filterable        path:type, type keyword or numeric; repeatable (default none)',
    '  --id-field          id column for store_c (default id)',
    '  --vector-field      vector field (default vector for store_a, embedding otherwise)',
    '  --vector-name       named vector to import for store_a (default: the sole one)',
    '  --encryption-key    64-hex master key (default SVC_ENCRYPTION_KEY)',
    '  --insecure          no encryption at rest (default off)',
    '',
    'A credential sent over plaintext (an http:// URL with --api-key, a PostgreSQL password without sslmode=require)',
    'is warned about on stderr. Exit 0: every row imported; 1: rows skipped (listed) or the import stopped; 2: usage.',
  ].join('\n'),
  options: {
    source: { type: 'string' },
    input: { type: 'string' },
    'store-a-url': { type: 'string' },
    'store-b-url': { type: 'string' },
    'store-b-tenant': { type: 'string' },
    'store-b-database': { type: 'string' },
    'postgres-url': { type: 'string' },
    table: { type: 'string' },
    'api-key': { type: 'string' },
    collection: { type: 'string' },
    'data-dir': { type: 'string' },
    metric: { type: 'string' },
    dim: { type: 'string' },
    filterable: { type: 'string', multiple: true },
    'id-field': { type: 'string' },
    'vector-field': { type: 'string' },
    'vector-name': { type: 'string' },
    'encryption-key': { type: 'string' },
    insecure: { type: 'boolean' },
  },
  run: ({ values }) => importCommand(values, process.env, { stdout: process.stdout, stderr: process.stderr }),
});
