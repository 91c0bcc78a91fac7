/**
 * The code blocks a document marks as run by a test (`<!-- e2e/<file> runs this block as written -->` on
 * the line before the fence), in order, so the examples newcomers copy stay working. Imports no project code.
 */
import { chmodSync, mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { MAIN, ROOT } from './harness.js';

export interface Block { lang: string; code: string }

export function markedBlocks(doc: string, testFile: string): Block[] {
  const lines = readFileSync(join(ROOT, doc), 'utf8').split('\n');
  const marker = `<!-- e2e/${testFile} runs this block as written -->`;
  const blocks: Block[] = [];
  for (let i = 0; i < lines.length; i++) {
    if (lines[i].trim() !== marker) continue;
    const open = /^```(\w*)$/.exec(lines[i + 1] ?? '');
    if (!open) throw new Error(`${doc}:${i + 1}: the marker is not followed by a code fence`);
    const end = lines.indexOf('```', i + 2);
    blocks.push({ lang: open[1], code: lines.slice(i + 2, end).join('\n') });
    i = end;
  }
  return blocks;
}

/** A directory holding an `svc` that runs this build's program, as the package's bin does once installed. */
export function svcOnPath(dir: string): string {
  const bin = join(dir, '.bin');
  mkdirSync(bin, { recursive: true });
  writeFileSync(join(bin, 'svc'), `#!/bin/sh\nexec "${process.execPath}" "${MAIN}" "$@"\n`);
  chmodSync(join(bin, 'svc'), 0o755);
  return `${bin}:${process.env.PATH ?? '/usr/bin:/bin'}`;
}
