/**
 * The image itself (issue 18): its configuration (non-root numeric user, the volume, the HEALTHCHECK, the
 * ports, the entrypoint), and no secret in any layer: every layer of `docker save` is searched, not only
 * the final file system, since a file deleted in a later layer is still in the earlier one. "Secret" here
 * is what a build on this machine could leak: a line of a CA this machine added to its trust store (the
 * TLS interception npm goes through), an .npmrc, npm's cache, a build secret's mount.
 */
import { existsSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { IMAGE, PREFIX, must, requireEngine, sh } from './docker-harness.js';

const EXTRA_CAS = '/usr/local/share/ca-certificates';
let work = '';

beforeAll(() => {
  requireEngine();
  work = mkdtempSync(join(tmpdir(), `${PREFIX}-image-`));
});
afterAll(() => rmSync(work, { recursive: true, force: true }));

describe(`the image ${IMAGE}`, () => {
  it('runs node as uid 10001 with /var/lib/svc a volume, a HEALTHCHECK, and the ports of REST and gRPC', () => {
    const config = JSON.parse(must('docker image inspect', sh('docker', ['image', 'inspect', IMAGE, '--format', '{{json .Config}}'])));
    expect(config.User).toBe('10001:10001');
    expect(Object.keys(config.Volumes)).toEqual(['/var/lib/svc']);
    expect(config.Healthcheck.Test).toEqual(['CMD', 'node', '/app/docker/healthcheck.mjs']);
    expect(Object.keys(config.ExposedPorts).sort()).toEqual(['6333/tcp', '6334/tcp']);
    expect(config.Entrypoint).toEqual(['node', '/app/dist/roles/cli/main.js']);
    expect(config.Env).toContain('SVC_DATA_DIR=/var/lib/svc/data');
    // Secure by default: without keys, TLS or an explicit SVC_INSECURE it refuses to start, and says why.
    const bare = sh('docker', ['run', '--rm', '--network', 'none', IMAGE], { timeoutMs: 60_000 });
    expect(bare.status).not.toBe(0);
    expect(bare.stderr).toContain('SVC_API_KEYS');
  });

  it('holds no CA of this machine, no .npmrc, no npm cache and no build secret in any layer', () => {
    const save = join(work, 'image.tar');
    must('docker save', sh('docker', ['save', '-o', save, IMAGE], { timeoutMs: 180_000 }));
    const unpacked = join(work, 'saved');
    must('tar', sh('bash', ['-c', `mkdir -p "${unpacked}" && tar -xf "${save}" -C "${unpacked}" && rm "${save}"`]));

    // A few distinctive lines of each CA this machine trusts beyond the public roots.
    const cas = (existsSync(EXTRA_CAS) ? readdirSync(EXTRA_CAS) : []).filter((f) => f.endsWith('.crt'));
    const probes = cas.flatMap((f) => readFileSync(join(EXTRA_CAS, f), 'utf8').split('\n')
      .filter((l) => /^[A-Za-z0-9+/]{64}$/.test(l)).slice(1, 4));
    const patterns = join(work, 'patterns');
    writeFileSync(patterns, `${probes.join('\n')}\n`);

    // Every layer (docker save's */layer.tar, or an OCI layout's blobs): its file names and its bytes.
    const script = `set -euo pipefail
      n=0
      while IFS= read -r -d '' f; do
        tar -tf "$f" >/dev/null 2>&1 || continue
        n=$((n + 1))
        tar -tf "$f" | grep -E '(^|/)(\\.npmrc|\\.npm/_cacache)(/|$)|^run/secrets/.' | sed "s|^|name: |" || true
        if [ -s "${patterns}" ] && [ "$(wc -w < "${patterns}")" -gt 0 ]; then
          tar -xOf "$f" 2>/dev/null | grep -a -c -F -f "${patterns}" | sed "s|^|ca lines: |" | grep -v 'ca lines: 0$' || true
        fi
      done < <(find "${unpacked}" -type f -print0)
      echo "layers: $n"`;
    const out = must('scan of the layers', sh('bash', ['-c', script], { timeoutMs: 180_000 }));
    const layers = Number(/layers: (\d+)/.exec(out)?.[1] ?? 0);
    expect(layers).toBeGreaterThan(1);
    expect(out.split('\n').filter((l) => l.startsWith('name:') || l.startsWith('ca lines:'))).toEqual([]);
    // The probe itself must be able to see a CA: the same search over this machine's bundle finds each.
    if (probes.length > 0) {
      const bundle = sh('grep', ['-c', '-F', '-f', patterns, '/etc/ssl/certs/ca-certificates.crt']);
      expect(Number(bundle.stdout.trim())).toBe(probes.length);
    }
  }, 300_000);
});
