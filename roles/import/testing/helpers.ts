/** Test helpers: run the import command in-process with captured output, read a collection back. */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { openDatabase } from '../../../core/embedded.js';
import type { PointOutput } from '../../../core/base/model.js';
import { importCommand } from '../command.js';

export const KEY = 'c3'.repeat(32);

export function tempDir(prefix = 'svc-import-'): string {
  return mkdtempSync(join(tmpdir(), prefix));
}

export function removeDir(d: string): void {
  rmSync(d, { recursive: true, force: true });
}

export { freePort } from '../../testing/free-port.js';

export interface Captured {
  code: number;
  stdout: string;
  stderr: string;
}

/** Runs `svc admin import` with these flags (as parseArgs would give them) in this process. */
export async function runImportCli(values: Record<string, string | boolean | string[]>, env: NodeJS.ProcessEnv = {}, tty = false): Promise<Captured> {
  let stdout = '';
  let stderr = '';
  const code = await importCommand(values, env, {
    stdout: { write: (s: string) => { stdout += s; return true; } },
    stderr: { isTTY: tty, columns: 100, write: (s: string) => { stderr += s; return true; } },
  });
  return { code, stdout, stderr };
}

/** Every point of a collection with vectors, in id order, read through the embedded API. */
export async function readBack(dataDir: string, collection: string, key: { encryptionKey: string } | { insecure: true } = { encryptionKey: KEY }): Promise<{ points: PointOutput[]; info: Awaited<ReturnType<Awaited<ReturnType<typeof openDatabase>>['collectionInfo']>> }> {
  const db = await openDatabase({ dataDir, ...key });
  try {
    const info = await db.collectionInfo(collection);
    const points: PointOutput[] = [];
    let cursor: string | null = null;
    do {
      const page: { points: PointOutput[]; next_cursor: string | null } = await db.fetch(collection, { limit: 1000, cursor, with_vector: true });
      points.push(...page.points);
      cursor = page.next_cursor;
    } while (cursor !== null);
    return { points, info };
  } finally {
    await db.close();
  }
}

export function byId(points: PointOutput[]): Map<string, PointOutput> {
  return new Map(points.map((p) => [p.id, p]));
}

/** Cosine vectors are stored normalised: compare directions. */
export function normalized(v: number[]): number[] {
  const s = Math.sqrt(v.reduce((a, x) => a + x * x, 0));
  return v.map((x) => x / s);
}

export function closeTo(a: number[] | undefined, b: number[], eps = 1e-5): boolean {
  return a !== undefined && a.length === b.length && a.every((x, i) => Math.abs(x - b[i]) <= eps);
}
