import { execFileSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import type { Message } from '../../core/cluster/raft/index.js';
import { freePort } from '../testing/free-port.js';
import { RaftTransport, type RaftTransportTls } from './transport.js';

const dir = mkdtempSync(join(tmpdir(), 'svc-raft-tls-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

/** A cluster CA with a certificate per member (server and client use, 127.0.0.1), and a stranger's CA. */
function makeCerts(): { member: (name: string) => RaftTransportTls; stranger: RaftTransportTls; impostor: RaftTransportTls } {
  const ssl = (...args: string[]): void => void execFileSync('openssl', args, { cwd: dir, stdio: 'pipe' });
  const ec = ['-newkey', 'ec', '-pkeyopt', 'ec_paramgen_curve:P-256', '-nodes'];
  const ca = (name: string): void => ssl('req', '-x509', ...ec, '-keyout', `${name}.key`, '-out', `${name}.crt`, '-days', '2', '-subj', `/CN=${name}`);
  const leaf = (name: string, caName: string, san = 'IP:127.0.0.1,DNS:localhost'): void => {
    writeFileSync(join(dir, `${name}.ext`), `subjectAltName=${san}\nextendedKeyUsage=serverAuth,clientAuth\n`);
    ssl('req', ...ec, '-keyout', `${name}.key`, '-out', `${name}.csr`, '-subj', `/CN=${name}`);
    ssl('x509', '-req', '-in', `${name}.csr`, '-CA', `${caName}.crt`, '-CAkey', `${caName}.key`, '-CAcreateserial', '-out', `${name}.crt`, '-days', '2', '-extfile', `${name}.ext`);
  };
  ca('ca');
  ca('other-ca');
  for (const n of ['n1', 'n2']) leaf(n, 'ca');
  leaf('n3', 'other-ca');
  leaf('n4', 'ca', 'DNS:elsewhere.example'); // the cluster's CA, but not for this address
  const read = (f: string): Buffer => readFileSync(join(dir, f));
  return {
    member: (n) => ({ cert: read(`${n}.crt`), key: read(`${n}.key`), ca: read('ca.crt') }),
    stranger: { cert: read('n3.crt'), key: read('n3.key'), ca: read('other-ca.crt') },
    impostor: { cert: read('n4.crt'), key: read('n4.key'), ca: read('ca.crt') },
  };
}

async function until(what: string, cond: () => boolean, ms = 5000): Promise<void> {
  const end = Date.now() + ms;
  while (!cond()) {
    if (Date.now() > end) throw new Error(`timed out waiting: ${what}`);
    await new Promise((r) => setTimeout(r, 10));
  }
}

const hb = (from: string, to: string, term: number): Message => ({ type: 'heartbeat', from, to, term, commit: 0, readSeq: 0, sent: 0 });

describe('RaftTransport over mutual TLS', () => {
  it('members with certificates of the cluster CA talk with no secret; a certificate of another CA is refused', async () => {
    const certs = makeCerts();
    const peers = await Promise.all(['n1', 'n2', 'n3'].map(async (id) => ({ id, host: '127.0.0.1', port: await freePort() })));
    const got = new Map<string, Message[]>([['n1', []], ['n2', []], ['n3', []]]);
    const make = (k: number, tls: RaftTransportTls): RaftTransport => new RaftTransport({
      id: peers[k].id, listen: { host: '127.0.0.1', port: peers[k].port }, peers, secret: null, tls, insecure: false,
      onMessage: (m) => got.get(peers[k].id)!.push(m), limits: { backoffBaseMs: 10, backoffMaxMs: 100 },
    });
    const ts = [make(0, certs.member('n1')), make(1, certs.member('n2')), make(2, certs.stranger)];
    try {
      await Promise.all(ts.map((t) => t.start()));
      const end = Date.now() + 5000;
      while (!got.get('n2')!.some((m) => m.from === 'n1') || !got.get('n1')!.some((m) => m.from === 'n2')) {
        if (Date.now() > end) throw new Error('n1 and n2 did not exchange messages over TLS');
        ts[0].send([hb('n1', 'n2', 1)]);
        ts[1].send([hb('n2', 'n1', 1)]);
        ts[2].send([hb('n3', 'n1', 1), hb('n3', 'n2', 1)]);
        await new Promise((r) => setTimeout(r, 20));
      }
      await until('the stranger refused', () => ts[0].stats.rejected.tls + ts[1].stats.rejected.tls > 0);
      expect([...got.get('n1')!, ...got.get('n2')!].some((m) => m.from === 'n3')).toBe(false);
      expect(got.get('n3')).toEqual([]);
    } finally {
      await Promise.all(ts.map((t) => t.close()));
    }
  });

  it('a certificate of the cluster CA that is not valid for the member\'s address is refused', async () => {
    const certs = makeCerts();
    const peers = await Promise.all(['n1', 'n3'].map(async (id) => ({ id, host: '127.0.0.1', port: await freePort() })));
    const got: Message[] = [];
    const make = (k: number, tls: RaftTransportTls): RaftTransport => new RaftTransport({
      id: peers[k].id, listen: { host: '127.0.0.1', port: peers[k].port }, peers, secret: null, tls, insecure: false,
      onMessage: (m) => got.push(m), limits: { backoffBaseMs: 10, backoffMaxMs: 100 },
    });
    const ts = [make(0, certs.member('n1')), make(1, certs.impostor)];
    try {
      await Promise.all(ts.map((t) => t.start()));
      const end = Date.now() + 3000;
      while (ts[0].stats.rejected.auth === 0) {
        if (Date.now() > end) throw new Error('the impostor was not refused');
        ts[1].send([hb('n3', 'n1', 1)]);
        await new Promise((r) => setTimeout(r, 20));
      }
      expect(got).toEqual([]);
    } finally {
      await Promise.all(ts.map((t) => t.close()));
    }
  });
});
