import { join } from 'node:path';
import ts from 'typescript';
import { describe, expect, it } from 'vitest';

/**
 * The embedded API is typed from the one schema of each body (core/base/bodies.ts): a right body
 * compiles and a wrong one does not. core/testing/embedded-types.fixture.ts says which; this compiles it
 * with the project's compiler options (vitest itself strips types without checking them), so a type that
 * grows too loose (an `@ts-expect-error` no longer needed) or too strict (a right body refused) fails here
 * as it fails `npm run typecheck`.
 */
const ROOT = join(import.meta.dirname, '..');
const FIXTURE = join(ROOT, 'core', 'testing', 'embedded-types.fixture.ts');

function diagnostics(file: string): string[] {
  const config = ts.getParsedCommandLineOfConfigFile(join(ROOT, 'tsconfig.json'), {}, {
    ...ts.sys, onUnRecoverableConfigFileDiagnostic: (d) => { throw new Error(ts.flattenDiagnosticMessageText(d.messageText, '\n')); },
  })!;
  const program = ts.createProgram([file], { ...config.options, noEmit: true });
  return ts.getPreEmitDiagnostics(program).map((d) => {
    const at = d.file && d.start !== undefined ? d.file.getLineAndCharacterOfPosition(d.start) : undefined;
    return `${d.file?.fileName ?? ''}:${at ? at.line + 1 : '?'}: ${ts.flattenDiagnosticMessageText(d.messageText, ' ')}`;
  });
}

describe('the embedded API types', () => {
  it('compile every right body and refuse every wrong one (core/testing/embedded-types.fixture.ts)', () => {
    expect(diagnostics(FIXTURE)).toEqual([]);
  }, 120_000);
});
