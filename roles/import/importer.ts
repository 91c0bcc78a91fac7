/**
 * The import loop: rows from a source, validated one by one with the engine's own rules, written in
 * batches of at most SVC_MAX_BATCH_SIZE through the embedded API. A batch is one WAL record, so a
 * point is stored whole or not at all; a row that fails validation is reported and never written.
 */
import type { Database } from '../../core/embedded.js';
import { parsePoints } from '../../core/collection/points.js';
import { SvcError } from '../../core/base/errors.js';
import type { CollectionInfo, FilterableField, Metric } from '../../core/base/model.js';
import { ImportFatal, type ImportPoint } from './convert.js';
import type { Source } from './sources.js';

export interface ImportTarget {
  collection: string;
  metric: Metric;
  /** Dimension of a new collection; inferred from the first vector when absent. */
  dim?: number;
  filterable: FilterableField[];
}

export interface ImportHooks {
  onSkip?(ref: string, reason: string): void;
  onProgress?(read: number, imported: number): void;
  onNotice?(message: string): void;
}

export interface ImportSummary {
  read: number;
  imported: number;
  skipped: number;
  /** Skip reasons with their counts, most frequent first. */
  reasons: { reason: string; count: number }[];
  created: boolean;
  collection: CollectionInfo | null;
}

/** Distinct reasons kept for the summary; beyond that they are counted under one line (bounded memory). */
const MAX_REASONS = 50;

export async function runImport(db: Database, source: Source, target: ImportTarget, hooks: ImportHooks = {}): Promise<ImportSummary> {
  const reasons = new Map<string, number>();
  let read = 0;
  let imported = 0;
  let skipped = 0;
  let created = false;
  let info: CollectionInfo | null = await existing(db, target, hooks);
  if (info === null && target.dim !== undefined) {
    info = await create(db, target, target.dim);
    created = true;
  }
  const batchMax = db.limits.maxBatchSize;
  let batch: ImportPoint[] = [];
  let refs: string[] = [];

  const skip = (ref: string, reason: string): void => {
    skipped++;
    const key = reasons.has(reason) || reasons.size < MAX_REASONS ? reason : '(other reasons)';
    reasons.set(key, (reasons.get(key) ?? 0) + 1);
    hooks.onSkip?.(ref, reason);
  };

  const flush = async (): Promise<void> => {
    if (batch.length === 0 || info === null) return;
    const points = batch;
    const pointRefs = refs;
    batch = [];
    refs = [];
    try {
      await db.bulkUpsert(info.name, { points });
      imported += points.length;
    } catch (e) {
      if (!(e instanceof SvcError) || (e.code !== 'invalid_argument' && e.code !== 'limit_exceeded')) throw e;
      // Pre-validation should have caught it: isolate the offending rows one by one rather than lose the batch.
      for (let i = 0; i < points.length; i++) {
        try {
          await db.upsert(info.name, { points: [points[i]] });
          imported++;
        } catch (e2) {
          if (!(e2 instanceof SvcError)) throw e2;
          skip(pointRefs[i], e2.message);
        }
      }
    }
    hooks.onProgress?.(read, imported);
  };

  try {
    for await (const row of source.rows()) {
      read++;
      if ('error' in row) {
        skip(row.ref, row.error);
        continue;
      }
      if (info === null) {
        info = await create(db, target, row.point.vector.length);
        created = true;
      }
      const reason = validate(db, info, row.point);
      if (reason !== null) {
        skip(row.ref, reason);
        continue;
      }
      batch.push(row.point);
      refs.push(row.ref);
      if (batch.length >= batchMax) await flush();
      else if ((read & 255) === 0) hooks.onProgress?.(read, imported);
    }
    await flush();
  } finally {
    await source.close();
  }
  const sorted = [...reasons.entries()].map(([reason, count]) => ({ reason, count })).sort((a, b) => b.count - a.count);
  return { read, imported, skipped, reasons: sorted, created, collection: info === null ? null : await db.collectionInfo(info.name) };
}

/** The engine's own checks (dimension, float32 range, zero vector under cosine, payload size, id length). */
function validate(db: Database, info: CollectionInfo, p: ImportPoint): string | null {
  try {
    parsePoints([p], info, db.limits, 'maxBatchSize');
    return null;
  } catch (e) {
    if (e instanceof SvcError) return e.message.replace(/^points\[0\]\.?/, '');
    throw e;
  }
}

async function existing(db: Database, t: ImportTarget, hooks: ImportHooks): Promise<CollectionInfo | null> {
  let info: CollectionInfo;
  try {
    info = await db.collectionInfo(t.collection);
  } catch (e) {
    if (e instanceof SvcError && e.code === 'not_found') return null;
    throw e;
  }
  if (t.dim !== undefined && t.dim !== info.dim) {
    throw new ImportFatal(`collection '${t.collection}' exists with dim ${info.dim}, not --dim ${t.dim}`);
  }
  const missing = t.filterable.filter((f) => !info.filterable.some((g) => g.path === f.path && g.field_type === f.field_type));
  if (missing.length > 0) {
    throw new ImportFatal(`collection '${t.collection}' exists without filterable ${missing.map((f) => `${f.path}:${f.field_type}`).join(', ')}; `
      + 'filterable fields are fixed when a collection is created: import into a new collection to declare them');
  }
  hooks.onNotice?.(`appending to existing collection '${info.name}' (dim ${info.dim}, ${info.metric}, ${info.count} points)`);
  return info;
}

async function create(db: Database, t: ImportTarget, dim: number): Promise<CollectionInfo> {
  try {
    return await db.createCollection({ name: t.collection, dim, metric: t.metric, filterable: t.filterable });
  } catch (e) {
    if (e instanceof SvcError) throw new ImportFatal(`cannot create collection '${t.collection}': ${e.message}`);
    throw e;
  }
}
