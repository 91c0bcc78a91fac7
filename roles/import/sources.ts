/**
 * Export-file sources. JSON Lines (store_a, store_c) stream line by line, so a file of any size
 * imports in bounded memory; a store_b export is one JSON object and is parsed whole.
 */
import { createReadStream, statSync } from 'node:fs';
import { readFile } from 'node:fs/promises';
import { createInterface } from 'node:readline';
import {
  convertStoreA, convertStoreB, convertStoreC, ImportFatal,
  type ImportPoint, type SourceRow, type StoreAOptions, type StoreCOptions,
} from './convert.js';

/** A source of rows. `fraction()` is how much has been read (0..1) when the size is known, for the ETA. */
export interface Source {
  describe: string;
  rows(): AsyncIterable<SourceRow>;
  fraction(): number | null;
  close(): Promise<void>;
}

/** A line longer than this is reported and skipped rather than parsed (bounded memory per record). */
export const MAX_LINE_CHARS = 64 * 1024 * 1024;

function fileSize(path: string): number {
  try {
    return statSync(path).size;
  } catch (e) {
    throw new ImportFatal(`cannot read --input ${path}: ${(e as NodeJS.ErrnoException).code ?? (e as Error).message}`);
  }
}

/** JSON Lines: each non-blank line one record, converted by `convert`. */
export function jsonLinesSource(path: string, convert: (rec: unknown) => ImportPoint | { error: string }): Source {
  const size = fileSize(path);
  const stream = createReadStream(path, { encoding: 'utf8', highWaterMark: 1 << 20 });
  let opened = false;
  return {
    describe: path,
    fraction: () => (size > 0 ? Math.min(1, stream.bytesRead / size) : null),
    async *rows(): AsyncGenerator<SourceRow> {
      if (opened) throw new Error('a file source is read once');
      opened = true;
      const lines = createInterface({ input: stream, crlfDelay: Infinity });
      let n = 0;
      for await (const line of lines) {
        n++;
        if (line.trim() === '') continue;
        const ref = `line ${n}`;
        if (line.length > MAX_LINE_CHARS) {
          yield { ref, error: `line longer than ${MAX_LINE_CHARS} characters` };
          continue;
        }
        let rec: unknown;
        try {
          rec = JSON.parse(line);
        } catch (e) {
          yield { ref, error: `not valid JSON (${(e as Error).message})` };
          continue;
        }
        const r = convert(rec);
        if ('error' in r) yield { ref, error: r.error };
        else yield { ref: `${ref} (id ${r.id})`, point: r };
      }
    },
    async close() {
      stream.destroy();
    },
  };
}

export function storeAFile(path: string, opts: StoreAOptions): Source {
  return jsonLinesSource(path, (rec) => convertStoreA(rec, opts));
}

export function storeCFile(path: string, opts: StoreCOptions): Source {
  return jsonLinesSource(path, (rec) => convertStoreC(rec, opts));
}

/** store_b export: one JSON object `{ids, embeddings, metadatas, documents}`. */
export function storeBFile(path: string): Source {
  const size = fileSize(path);
  let done = 0;
  let total = 0;
  return {
    describe: path,
    fraction: () => (size === 0 || total === 0 ? null : done / total),
    async *rows(): AsyncGenerator<SourceRow> {
      let obj: unknown;
      try {
        obj = JSON.parse(await readFile(path, 'utf8'));
      } catch (e) {
        throw new ImportFatal(`--input ${path} is not one JSON object: ${(e as Error).message}`);
      }
      if (typeof obj !== 'object' || obj === null || Array.isArray(obj)) {
        throw new ImportFatal(`--input ${path} must hold one JSON object {ids, embeddings, metadatas, documents}`);
      }
      const o = obj as Record<string, unknown>;
      total = Array.isArray(o.ids) ? o.ids.length : 0;
      for (const row of convertStoreB({ ids: o.ids, embeddings: o.embeddings, metadatas: o.metadatas, documents: o.documents })) {
        done++;
        yield row;
      }
    },
    async close() {},
  };
}
