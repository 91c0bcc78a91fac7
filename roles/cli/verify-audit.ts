import { readFileSync } from 'node:fs';
import { verifyAuditChain } from '../../core/service/audit.js';
import { registerCommand } from './commands.js';

registerCommand('admin verify-audit', {
  summary: 'check the hash chain of an audit log (SVC_AUDIT_LOG); exit 1 at the first broken line',
  usage: 'svc admin verify-audit FILE',
  options: {},
  positionals: true,
  async run({ positionals }) {
    if (positionals.length !== 1) {
      process.stderr.write('svc admin verify-audit: expected one FILE argument\n');
      return 2;
    }
    let text: string;
    try {
      text = readFileSync(positionals[0], 'utf8');
    } catch (e) {
      process.stderr.write(`svc admin verify-audit: cannot read ${positionals[0]}: ${(e as Error).message}\n`);
      return 2;
    }
    const v = verifyAuditChain(text);
    if (v.ok) {
      process.stdout.write(`ok: ${v.lines} lines, chain intact\n`);
      return 0;
    }
    process.stdout.write(`broken at line ${v.line}: ${v.reason}\n`);
    return 1;
  },
});
