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
import { PLAN_BYTES, PlanWord, type PoolMessage, type PoolReply } from './search-pool.js';

interface View {
  store: VectorStore;
  graph: Hnsw | null;
}

const views = new Map<string, View>();
/** The main thread's search buffers, by number (each is sent once). */
const bufs = new Map<number, SharedArrayBuffer>();
/** Answers per reply message at most. */
const REPLY_GROUP = 4;
const port = parentPort!;

/** Gives back the view's scratch lanes (the store's and the codes'). */
function release(v: View): void {
  v.graph?.scalarCodes?.close();
  v.store.close();
}

function handle(msg: PoolMessage): void {
  if (msg.t === 'open') {
    if (!views.has(msg.uid)) views.set(msg.uid, { store: VectorStore.open(msg.store), graph: null });
    return;
  }
  if (msg.t === 'graph') {
    const v = views.get(msg.uid);
    if (v === undefined) return;
    // Scalar codes travel with the graph (a posted memory arrives as a new object every time): the old
    // view's scratch lane is released, a new view opened.
    v.graph?.scalarCodes?.close();
    const codes = msg.data?.codes ? ScalarCodes.open(msg.data.codes) : null;
    v.graph = msg.data === null ? null : Hnsw.deserialize(v.store, msg.data);
    v.graph?.attachCodes(codes);
    return;
  }
  if (msg.t === 'forget') {
    const v = views.get(msg.uid);
    if (v !== undefined) release(v);
    views.delete(msg.uid);
    return;
  }
  if (msg.t === 'close') {
    for (const v of views.values()) release(v);
    views.clear();
    bufs.clear();
    port.postMessage({ t: 'closed' } satisfies PoolReply);
    port.close();
    return;
  }
  for (const f of msg.fresh) bufs.set(f.id, f.buf);
  let ids: number[] = [];
  let ns: number[] = [];
  for (let i = 0; i < msg.ids.length; i++) {
    try {
      ns.push(search(msg.uids[i], bufs.get(msg.bufIds[i])!));
      ids.push(msg.ids[i]);
    } catch (e) {
      port.postMessage({ t: 'failed', id: msg.ids[i], error: e instanceof Error ? e.message : String(e) } satisfies PoolReply);
    }
    // Answers go back in groups, not only at the batch's end: the main thread refills this worker
    // while it runs the rest, so it never waits for a whole batch's round trip.
    if (ids.length === REPLY_GROUP || (i === msg.ids.length - 1 && ids.length > 0)) {
      port.postMessage({ t: 'done', ids, ns } satisfies PoolReply);
      ids = [];
      ns = [];
    }
  }
}

/** Runs the plan in `buf` and writes its hits there; returns how many. */
function search(uid: string, buf: SharedArrayBuffer): number {
  const v = views.get(uid);
  if (v === undefined) throw new Error(`collection ${uid} is not open in this worker`);
  const dim = v.store.dim;
  const h = new Int32Array(buf, 0, PLAN_BYTES / 4);
  const cap = h[PlanWord.Cap];
  const k = h[PlanWord.K];
  const f32 = new Float32Array(buf, PLAN_BYTES, dim);
  const wordsAt = PLAN_BYTES + dim * 4;
  const bits = new Bitset(cap, new Uint32Array(buf, wordsAt, (cap + 31) >>> 5));
  if (v.graph !== null) v.graph.adoptTop(h[PlanWord.Entry], h[PlanWord.MaxLevel], h[PlanWord.Size]);
  const r = runDensePlan(v.store, h[PlanWord.Kind] === 0 ? 'l2' : 'ip', v.graph, f32, {
    mode: h[PlanWord.Mode] === 1 ? 'graph' : 'exact', bits, acceptAll: h[PlanWord.AcceptAll] === 1, k, ef: h[PlanWord.Ef],
    want: h[PlanWord.Want], indexedUpTo: h[PlanWord.IndexedUpTo], count: h[PlanWord.Count],
  });
  const outAt = wordsAt + ((cap + 31) >>> 5) * 4;
  new Int32Array(buf, outAt, r.slots.length).set(r.slots);
  new Float32Array(buf, outAt + k * 4, r.dists.length).set(r.dists);
  return r.slots.length;
}

port.on('message', handle);
