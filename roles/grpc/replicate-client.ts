import { readFileSync } from 'node:fs';
import { credentials, Metadata, type ChannelCredentials } from '@grpc/grpc-js';
import type { ReplicaResume, ReplicationEvent } from '../../core/base/model.js';
import type { ReplicationSource } from '../../core/cluster/replication/follower.js';
import { SvcClient } from '../../proto/gen/svc.js';

/**
 * The follower's Replicate client: one gRPC channel to the leader (SVC_LEADER_URL), a server stream per
 * connection, the admin key as bearer metadata. `https://` uses TLS, trusting `ca` (PEM path; the system's
 * roots when null) and showing `clientCert`/`clientKey` where the leader requires mutual TLS. A stream
 * that ends or fails ends the iteration (the follower reconnects); aborting the signal cancels the call.
 */
export interface LeaderConnection {
  url: string;
  apiKey: string;
  ca: string | null;
  clientCert: string | null;
  clientKey: string | null;
  maxMessageBytes: number;
}

/** The follower's receive window for the Replicate stream (connection and stream). */
const FLOW_CONTROL_WINDOW_BYTES = 16 << 20;

function channelCredentials(opts: LeaderConnection): ChannelCredentials {
  if (new URL(opts.url).protocol !== 'https:') return credentials.createInsecure();
  const read = (p: string | null): Buffer | null => (p === null ? null : readFileSync(p));
  return credentials.createSsl(read(opts.ca), read(opts.clientKey), read(opts.clientCert));
}

export function grpcReplicationSource(opts: LeaderConnection): ReplicationSource & { close(): void } {
  const u = new URL(opts.url);
  const client = new SvcClient(u.host, channelCredentials(opts), {
    'grpc.max_receive_message_length': opts.maxMessageBytes,
    'grpc.max_send_message_length': opts.maxMessageBytes,
    // A quiet stream stays open: the leader's idle timeout spares a connection with a stream open, and
    // keepalive pings find a dead leader within about 40 s.
    'grpc.keepalive_time_ms': 30_000,
    'grpc.keepalive_timeout_ms': 10_000,
    // HTTP/2's default 64 KiB window makes a 1.5 MB record (500 points of 784 floats) two dozen round
    // trips of window updates between two busy event loops: a replica then falls behind its leader.
    'grpc-node.flow_control_window': FLOW_CONTROL_WINDOW_BYTES,
  });
  const source = async function* (resume: ReplicaResume | undefined, signal: AbortSignal): AsyncGenerator<ReplicationEvent> {
    const md = new Metadata();
    if (opts.apiKey !== '') md.set('authorization', `Bearer ${opts.apiKey}`);
    const call = client.replicate(resume === undefined ? {} : { after_seq: resume.seq, history: resume.history }, md);
    const cancel = () => call.cancel();
    signal.addEventListener('abort', cancel, { once: true });
    try {
      for await (const ev of call as AsyncIterable<{ seq: number; record: Buffer }>) {
        yield { seq: Number(ev.seq), record: new Uint8Array(ev.record.buffer, ev.record.byteOffset, ev.record.byteLength) };
      }
    } finally {
      signal.removeEventListener('abort', cancel);
      call.cancel();
    }
  };
  return Object.assign(source, { close: () => client.close() });
}
