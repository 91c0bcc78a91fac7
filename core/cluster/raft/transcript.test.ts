import { readdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { RaftTranscript, formatTranscript, parseTranscript } from '../../testing/raft-transcript.js';

/**
 * The Raft paper's scenarios as readable transcripts (testdata/*.txt; the language is described in
 * core/testing/raft-transcript.ts). Each block's output must match; SVC_RAFT_REWRITE=1 writes the
 * actual outputs back instead, for a reviewer to read in the diff.
 */
const DIR = join(import.meta.dirname, 'testdata');
const REWRITE = process.env.SVC_RAFT_REWRITE === '1';

describe('raft transcripts', () => {
  for (const file of readdirSync(DIR).filter((f) => f.endsWith('.txt')).sort()) {
    it(file, () => {
      const path = join(DIR, file);
      const blocks = parseTranscript(readFileSync(path, 'utf8'));
      const t = new RaftTranscript();
      const actual = blocks.map((b) => ({ ...b, expected: t.run(b.command) }));
      if (REWRITE) {
        writeFileSync(path, formatTranscript(actual));
        return;
      }
      for (let k = 0; k < blocks.length; k++) {
        expect(actual[k].expected, `${file}:${blocks[k].line} ${blocks[k].command}`).toBe(blocks[k].expected);
      }
    });
  }
});
