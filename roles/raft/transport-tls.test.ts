import { execFileSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import type { LookupFunction } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import type { Message } from '../../core/cluster/raft/index.js';
import { freePort } from '../testing/free-port.js';
import { RaftTransport, type RaftTransportTls } from './transport.js';

const dir = mkdtempSync(join(tmpdir(), 'svc-raft-tls-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

const ssl = (...args: string[]): void => void execFileSync('openssl', args, { cwd: dir, stdio: 'pipe' });
const ec = ['-newkey', 'ec', '-pkeyopt', 'ec_paramgen_curve:P-256', '-nodes'];
const makeCa = (name: string): void => ssl('req', '-x509', ...ec, '-keyout', `${name}.key`, '-out', `${name}.crt`, '-days', '2', '-subj', `/CN=${name}`);
/** A certificate of the CA `caName` for server and client use, valid for `san`. */
const makeLeaf = (name: string, caName: string, san = 'IP:127.0.0.1,DNS:localhost'): void => {
  writeFileSync(join(dir, `${name}.ext`), `subjectAltName=${san}\nextendedKeyUsage=serverAuth,clientAuth\n`);
  ssl('req', ...ec, '-keyout', `${name}.key`, '-out', `${name}.csr`, '-subj', `/CN=${name}`);
  ssl('x509', '-req', '-in', `${name}.csr`, '-CA', `${caName}.crt`, '-CAkey', `${caName}.key`, '-CAcreateserial', '-out', `${name}.crt`, '-days', '2', '-extfile', `${name}.ext`);
};
const read = (f: string): Buffer => readFileSync(join(dir, f));
const tlsOf = (leaf: string, caName: string): RaftTransportTls => ({ cert: read(`${leaf}.crt`), key: read(`${leaf}.key`), ca: read(`${caName}.crt`) });

/** A cluster CA with a certificate per member (server and client use, 127.0.0.1), and a stranger's CA. */
function makeCerts(): { member: (name: string) => RaftTransportTls; stranger: RaftTransportTls; impostor: RaftTransportTls } {
  makeCa('ca');
  makeCa('other-ca');
  for (const n of ['n1', 'n2']) makeLeaf(n, 'ca');
  makeLeaf('n3', 'other-ca');
  makeLeaf('n4', 'ca', 'DNS:elsewhere.example'); // the cluster's CA, but not for this address
  return { member: (n) => tlsOf(n, 'ca'), stranger: tlsOf('n3', 'other-ca'), impostor: tlsOf('n4', 'ca') };
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

  // The Helm chart gives every pod one TLS Secret, so one certificate must be valid for each member's address
  // in SVC_RAFT_MEMBERS, <pod>.<headless service>.<namespace>.svc.<domain>: a wildcard for the Service's names.
  // The names are the chart's form; a lookup maps them to loopback, and the handshakes are real.
  describe('one wildcard certificate for every member (the Helm chart\'s TLS Secret)', () => {
    const service = 'svc-shard-1.ns.svc.cluster.local';
    const lookup = ((_host: string, options: { all?: boolean }, cb: (...a: unknown[]) => void) => {
      if (options.all === true) cb(null, [{ address: '127.0.0.1', family: 4 }]);
      else cb(null, '127.0.0.1', 4);
    }) as unknown as LookupFunction;
    const members = async (n: number): Promise<{ id: string; host: string; port: number }[]> =>
      Promise.all(Array.from({ length: n }, async (_, i) => ({ id: `svc-shard-1-${i}`, host: `svc-shard-1-${i}.${service}`, port: await freePort() })));
    const start = (peers: { id: string; host: string; port: number }[], tlsFor: (k: number) => RaftTransportTls, got: Map<string, Message[]>): RaftTransport[] =>
      peers.map((p, k) => new RaftTransport({
        id: p.id, listen: { host: '127.0.0.1', port: p.port }, peers, secret: null, tls: tlsFor(k), insecure: false, lookup,
        onMessage: (m) => got.get(p.id)!.push(m), limits: { backoffBaseMs: 10, backoffMaxMs: 100 },
      }));

    it('*.<service>.<namespace>.svc.<domain> is accepted both ways, the same certificate on every member', async () => {
      makeCa('ca');
      makeLeaf('wild', 'ca', `DNS:*.${service}`);
      const peers = await members(3);
      const got = new Map(peers.map((p) => [p.id, [] as Message[]]));
      const ts = start(peers, () => tlsOf('wild', 'ca'), got);
      try {
        await Promise.all(ts.map((t) => t.start()));
        // Each pair in both directions: each member dials every other (the acceptor checks the dialer's
        // certificate against the dialer's address, the dialer the acceptor's).
        await until('every member heard from every other over TLS', () => {
          for (const [i, t] of ts.entries()) t.send(peers.filter((_, j) => j !== i).map((p) => hb(peers[i].id, p.id, 1)));
          return peers.every((p) => peers.every((q) => q === p || got.get(p.id)!.some((m) => m.from === q.id)));
        });
        for (const t of ts) expect({ tls: t.stats.rejected.tls, auth: t.stats.rejected.auth }).toEqual({ tls: 0, auth: 0 });
      } finally {
        await Promise.all(ts.map((t) => t.close()));
      }
    });

    it('a wildcard for another group\'s Service, or one level up (a wildcard is one label), is refused', async () => {
      makeCa('ca');
      makeLeaf('wild', 'ca', `DNS:*.${service}`);
      makeLeaf('wild-other', 'ca', 'DNS:*.svc-shard-2.ns.svc.cluster.local');
      makeLeaf('wild-up', 'ca', 'DNS:*.ns.svc.cluster.local');
      const peers = await members(3);
      const got = new Map(peers.map((p) => [p.id, [] as Message[]]));
      const leaf = ['wild', 'wild-other', 'wild-up'];
      const ts = start(peers, (k) => tlsOf(leaf[k], 'ca'), got);
      try {
        await Promise.all(ts.map((t) => t.start()));
        // The two dial member 0 (whose certificate they accept) and are refused for theirs; member 0 dials
        // them and refuses theirs in the TLS handshake.
        await until('member 0 refused both, both ways', () => {
          ts[0].send([hb(peers[0].id, peers[1].id, 1), hb(peers[0].id, peers[2].id, 1)]);
          ts[1].send([hb(peers[1].id, peers[0].id, 1)]);
          ts[2].send([hb(peers[2].id, peers[0].id, 1)]);
          return ts[0].stats.rejected.auth >= 2 && ts[0].stats.rejected.tls >= 2;
        });
        expect(got.get(peers[0].id)).toEqual([]);
        expect([...got.get(peers[1].id)!, ...got.get(peers[2].id)!].filter((m) => m.from === peers[0].id)).toEqual([]);
      } finally {
        await Promise.all(ts.map((t) => t.close()));
      }
    });
  });
});
