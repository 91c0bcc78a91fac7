/**
 * A gRPC client built the way an outside user builds one: from proto/svc.proto at run time with
 * @grpc/proto-loader (no generated code, no project import). Struct fields are converted by hand, as
 * every dynamic protobuf client must (protobufjs bundles the well-known types with camelCase field
 * names, so Value's fields are `stringValue`, `structValue`, ... even with keepCase).
 */
import { join } from 'node:path';
import { credentials, loadPackageDefinition, Metadata, type ChannelCredentials, type Client, type ServiceError } from '@grpc/grpc-js';
import { loadSync } from '@grpc/proto-loader';
import { ROOT } from './harness.js';

const definition = loadSync(join(ROOT, 'proto', 'svc.proto'), { keepCase: true, longs: Number, enums: String, defaults: false, oneofs: true });
const pkg = loadPackageDefinition(definition) as unknown as { svc: { v1: { Svc: new (addr: string, creds: ChannelCredentials, opts?: object) => Client } } };

type Json = null | boolean | number | string | Json[] | { [k: string]: Json };

export function toValue(v: Json): object {
  if (v === null) return { nullValue: 'NULL_VALUE' };
  if (typeof v === 'boolean') return { boolValue: v };
  if (typeof v === 'number') return { numberValue: v };
  if (typeof v === 'string') return { stringValue: v };
  if (Array.isArray(v)) return { listValue: { values: v.map(toValue) } };
  return { structValue: toStruct(v) };
}

export function toStruct(o: { [k: string]: Json }): object {
  return { fields: Object.fromEntries(Object.entries(o).map(([k, v]) => [k, toValue(v)])) };
}

export function fromValue(v: any): Json {
  switch (v.kind) {
    case 'nullValue': return null;
    case 'boolValue': return v.boolValue;
    case 'numberValue': return v.numberValue;
    case 'stringValue': return v.stringValue;
    case 'listValue': return (v.listValue.values ?? []).map(fromValue);
    case 'structValue': return fromStruct(v.structValue);
    default: return null;
  }
}

export function fromStruct(s: any): { [k: string]: Json } {
  return Object.fromEntries(Object.entries(s?.fields ?? {}).map(([k, v]) => [k, fromValue(v)]));
}

export interface Reply {
  res?: any;
  err?: ServiceError;
  /** The contract's error code (trailing metadata `svc-error-code`). */
  code?: string;
}

export class SvcGrpc {
  readonly client: Client;

  constructor(address: string, creds: ChannelCredentials = credentials.createInsecure(), options: object = {}) {
    this.client = new pkg.svc.v1.Svc(address, creds, { 'grpc.max_send_message_length': -1, 'grpc.max_receive_message_length': -1, ...options });
  }

  /** Calls a unary RPC by its proto name (`Search`, `CreateCollection`, ...). */
  call(rpc: string, req: object, key?: string): Promise<Reply> {
    const md = new Metadata();
    if (key !== undefined) md.set('authorization', `Bearer ${key}`);
    const fn = (this.client as any)[rpc] as (r: object, m: Metadata, cb: (e: ServiceError | null, r?: any) => void) => void;
    return new Promise((resolve) => {
      fn.call(this.client, req, md, (err, res) => {
        if (err) resolve({ err, code: err.metadata?.get('svc-error-code')[0] as string | undefined });
        else resolve({ res });
      });
    });
  }

  /**
   * Reads a Replicate stream to its end: the events, or the error that ended it. The stream is live
   * (a snapshot, then the commit tail): `until` says when to stop, and the client then cancels it.
   */
  replicate(key?: string, opts: { afterSeq?: number; until?: (events: any[]) => boolean } = {}): Promise<{ events: any[]; err?: ServiceError }> {
    const md = new Metadata();
    if (key !== undefined) md.set('authorization', `Bearer ${key}`);
    const stream = (this.client as any).Replicate(opts.afterSeq === undefined ? {} : { after_seq: opts.afterSeq }, md);
    const events: any[] = [];
    let stopped = false;
    return new Promise((resolve) => {
      stream.on('data', (e: any) => {
        events.push(e);
        if (!stopped && opts.until?.(events)) {
          stopped = true;
          stream.cancel();
          resolve({ events });
        }
      });
      stream.on('error', (err: ServiceError) => resolve({ events, err }));
      stream.on('end', () => resolve({ events }));
    });
  }

  close(): void {
    this.client.close();
  }
}
