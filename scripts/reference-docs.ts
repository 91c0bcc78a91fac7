/**
 * Writes docs/reference/*.md from their sources (roles/reference/markdown.ts); with --check, only says
 * which are stale and exits 1. `npm run docs:reference`; roles/reference/reference.test.ts runs the check.
 */
import { readFileSync, writeFileSync, mkdirSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { REFERENCE_FILES, referenceMarkdown } from '../roles/reference/markdown.js';

const dir = resolve(import.meta.dirname, '..', 'docs', 'reference');
const check = process.argv.includes('--check');
let stale = 0;
mkdirSync(dir, { recursive: true });
for (const file of REFERENCE_FILES) {
  const path = join(dir, file);
  const want = referenceMarkdown(file);
  let have = '';
  try {
    have = readFileSync(path, 'utf8');
  } catch {
    // missing: written below, or stale under --check
  }
  if (have === want) continue;
  stale++;
  if (check) console.error(`docs/reference/${file} is stale: run npm run docs:reference`);
  else {
    writeFileSync(path, want);
    console.log(`wrote docs/reference/${file}`);
  }
}
process.exitCode = check && stale > 0 ? 1 : 0;
