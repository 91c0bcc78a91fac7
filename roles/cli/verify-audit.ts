import { readFileSync } from 'node:fs';
import { parseMasterKeyHex } from '../../core/crypto/keys.js';
import { auditMacKey, UNKEYED_MAC_KEY, verifyAuditChain } from '../../core/service/audit.js';
import { ConfigError, loadMasterKey } from '../config.js';
import { registerCommand } from './commands.js';

/**
 * `svc admin verify-audit FILE`: checks every line's MAC (core/service/audit.ts) with the key derived from
 * the master key, found as `svc serve` finds it (--encryption-key, SVC_ENCRYPTION_KEY, SVC_MASTER_KEY_FILE
 * or svc.toml). Exit 0 with the line count when intact, 1 at the first bad line, 2 when it cannot check.
 * `--insecure` checks a log written without a master key (SVC_INSECURE=true): an unkeyed chain.
 */
registerCommand('admin verify-audit', {
  summary: 'check the keyed MAC chain of an audit log (SVC_AUDIT_LOG); exit 1 at the first bad line',
  usage: 'svc admin verify-audit FILE [--encryption-key HEX | --insecure]  (default key: SVC_ENCRYPTION_KEY or SVC_MASTER_KEY_FILE)',
  options: {
    'encryption-key': { type: 'string' },
    insecure: { type: 'boolean' },
  },
  positionals: true,
  async run({ values, positionals }) {
    const fail = (message: string): number => {
      process.stderr.write(`svc admin verify-audit: ${message}\n`);
      return 2;
    };
    if (positionals.length !== 1) return fail('expected one FILE argument');
    const flagKey = typeof values['encryption-key'] === 'string' ? values['encryption-key'] : undefined;
    const insecure = values.insecure === true;
    if (insecure && flagKey !== undefined) return fail('give either --encryption-key or --insecure, not both');
    let key: Uint8Array;
    try {
      const hex = insecure ? null : flagKey ?? loadMasterKey(process.env);
      if (!insecure && hex === null) {
        return fail('needs the master key the server ran with: --encryption-key, SVC_ENCRYPTION_KEY or SVC_MASTER_KEY_FILE '
          + '(a log written without one, under SVC_INSECURE=true, is checked with --insecure)');
      }
      key = hex === null ? UNKEYED_MAC_KEY : auditMacKey(parseMasterKeyHex(hex));
    } catch (e) {
      // Config and key errors name the variable, never the key itself.
      return fail(e instanceof ConfigError ? e.message : (e as Error).message);
    }
    let text: string;
    try {
      text = readFileSync(positionals[0], 'utf8');
    } catch (e) {
      return fail(`cannot read ${positionals[0]}: ${(e as Error).message}`);
    }
    const v = verifyAuditChain(text, key);
    if (v.ok) {
      process.stdout.write(`ok: ${v.lines} lines, chain intact${insecure ? ' (UNKEYED: written without a master key; anyone could have rewritten it)' : ''}\n`);
      return 0;
    }
    process.stdout.write(`broken at line ${v.line}: ${v.reason}\n`);
    const later = v.restarts.filter((l) => l !== v.line);
    if (later.length > 0) process.stdout.write(`the server started a new chain segment at line${later.length > 1 ? 's' : ''} ${later.join(', ')} (it found a damaged tail at startup)\n`);
    if (!insecure && v.line === 1 && verifyAuditChain(text, UNKEYED_MAC_KEY).ok) {
      process.stdout.write('hint: the whole file verifies as an UNKEYED chain: it was written without a master key (SVC_INSECURE=true) or rewritten by someone without it\n');
    }
    return 1;
  },
});
