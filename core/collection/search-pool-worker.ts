// Search worker entry (see search-pool.ts). Holds, per collection, a read-only view of the shared vector
// store (one scratch lane) and an Hnsw over the writer's shared graph arrays, and runs dense plans.
// Messages arrive in the order the main thread posted them, so a graph epoch always precedes the
// requests planned against it.
import { parentPort } from 'node:worker_threads';
import { Bitset } from '../base/bitset.js';
import { Hnsw } from '../index/hnsw/hnsw.js';
import { ScalarCodes } from '../index/scalar-codes.js';
import { VectorStore } from '../index/vector-store.js';
import { runDensePlan } from './search-pool-plan.js';
import type { PoolMessage, PoolReply } from './search-pool.js';

interface View {
  store: VectorStore;
  graph: Hnsw | null;
}

const views = new Map<string, View>();
const port = parentPort!;

function handle(msg: PoolMessage): void {
  if (msg.t === 'open') {
    if (!views.has(msg.uid)) views.set(msg.uid, { store: VectorStore.open(msg.store), graph: null });
    return;
  }
  if (msg.t === 'graph') {
    const v = views.get(msg.uid);
    if (v === undefined) return;
    // Scalar codes travel with the graph; a view of the same codes is kept (it holds a scratch lane).
    const had = v.graph?.scalarCodes ?? null;
    const want = msg.data?.codes ?? null;
    const codes = want === null ? null : had !== null && had.memory === want.memory ? had : ScalarCodes.open(want);
    if (had !== null && had !== codes) had.close();
    v.graph = msg.data === null ? null : Hnsw.deserialize(v.store, msg.data);
    v.graph?.attachCodes(codes);
    return;
  }
  if (msg.t === 'forget') {
    views.get(msg.uid)?.graph?.scalarCodes?.close();
    views.get(msg.uid)?.store.close();
    views.delete(msg.uid);
    return;
  }
  if (msg.t === 'close') {
    for (const v of views.values()) {
      v.graph?.scalarCodes?.close();
      v.store.close();
    }
    views.clear();
    port.postMessage({ t: 'closed' } satisfies PoolReply);
    port.close();
    return;
  }
  const v = views.get(msg.uid);
  let reply: PoolReply;
  try {
    if (v === undefined) throw new Error(`collection ${msg.uid} is not open in this worker`);
    const dim = v.store.dim;
    const f32 = new Float32Array(msg.buf, 0, dim);
    const wordsAt = dim * 4;
    const bits = new Bitset(msg.cap, new Uint32Array(msg.buf, wordsAt, (msg.cap + 31) >>> 5));
    if (v.graph !== null) v.graph.adoptTop(msg.entry, msg.maxLevel, msg.size);
    const r = runDensePlan(v.store, msg.kind, v.graph, f32, {
      mode: msg.mode, bits, acceptAll: msg.acceptAll, k: msg.k, ef: msg.ef, want: msg.want, indexedUpTo: msg.indexedUpTo, count: msg.count,
    });
    const outAt = wordsAt + ((msg.cap + 31) >>> 5) * 4;
    new Int32Array(msg.buf, outAt, r.slots.length).set(r.slots);
    new Float32Array(msg.buf, outAt + msg.k * 4, r.dists.length).set(r.dists);
    reply = { t: 'done', id: msg.id, n: r.slots.length };
  } catch (e) {
    reply = { t: 'failed', id: msg.id, error: e instanceof Error ? e.message : String(e) };
  }
  port.postMessage(reply);
}

port.on('message', handle);
