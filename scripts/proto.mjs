#!/usr/bin/env node
// Generates proto/gen/ from proto/svc.proto with buf (the binary inside the @bufbuild/buf-linux-x64 npm
// package: the registry reachable here serves only that platform's build, and the umbrella @bufbuild/buf
// package's other-platform optional dependencies break `npm ci`; elsewhere, install @bufbuild/buf and the
// script uses it) and ts-proto as a local plugin: offline, versions pinned in package.json.
//   node scripts/proto.mjs gen     rewrite proto/gen/
//   node scripts/proto.mjs check   lint the .proto, regenerate into a temp dir, fail when proto/gen/ drifts
import { execFileSync } from 'node:child_process';
import { existsSync, mkdtempSync, readdirSync, readFileSync, rmSync, statSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join, relative } from 'node:path';
import { fileURLToPath } from 'node:url';

const root = join(dirname(fileURLToPath(import.meta.url)), '..');
const protoDir = join(root, 'proto');
const platformBuf = join(root, 'node_modules', '@bufbuild', `buf-${process.platform}-${process.arch === 'x64' ? 'x64' : process.arch}`, 'bin', 'buf');
const buf = existsSync(platformBuf) ? platformBuf : join(root, 'node_modules', '.bin', 'buf');
const mode = process.argv[2];

function run(args) {
  execFileSync(buf, args, { cwd: protoDir, stdio: 'inherit' });
}

/** Every file under dir, as paths relative to dir, sorted. */
function listFiles(dir) {
  const out = [];
  const walk = (d) => {
    for (const name of readdirSync(d)) {
      const p = join(d, name);
      if (statSync(p).isDirectory()) walk(p);
      else out.push(relative(dir, p));
    }
  };
  walk(dir);
  return out.sort();
}

if (mode === 'gen') {
  rmSync(join(protoDir, 'gen'), { recursive: true, force: true });
  run(['generate']);
} else if (mode === 'check') {
  run(['lint']);
  const tmp = mkdtempSync(join(tmpdir(), 'svc-proto-'));
  try {
    run(['generate', '--output', tmp]);
    const fresh = join(tmp, 'gen');
    const committed = join(protoDir, 'gen');
    const a = listFiles(fresh);
    const b = listFiles(committed);
    const drift = [];
    for (const f of new Set([...a, ...b])) {
      if (!a.includes(f)) drift.push(`${f}: in proto/gen but not generated`);
      else if (!b.includes(f)) drift.push(`${f}: generated but missing from proto/gen`);
      else if (!readFileSync(join(fresh, f)).equals(readFileSync(join(committed, f)))) drift.push(`${f}: differs`);
    }
    if (drift.length > 0) {
      console.error(`proto/gen drifted from proto/svc.proto:\n  ${drift.join('\n  ')}\nRun \`npm run proto:gen\` and commit.`);
      process.exit(1);
    }
    console.log('proto/gen matches proto/svc.proto');
  } finally {
    rmSync(tmp, { recursive: true, force: true });
  }
} else {
  console.error('usage: node scripts/proto.mjs gen|check');
  process.exit(2);
}
