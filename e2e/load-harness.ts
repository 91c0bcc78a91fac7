/**
 * The load the rebalancing tests run through a router (e2e/rebalance.test.ts, e2e/consensus-rebalance.test.ts):
 * a writer and a reader against a model of what was acknowledged, and the readers that compare a node's
 * whole collection. Imports no project code.
 */
import { expect } from 'vitest';
import { call } from './cluster-harness.js';
import type { api, Server } from './harness.js';

export type Client = ReturnType<typeof api>;

/** mulberry32, a small seeded generator: the same data every run. */
export function seededRandom(seed: number): () => number {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

/** The writes acknowledged so far: each id's last vector, or null once deleted. */
export class LoadModel {
  readonly points = new Map<string, number[] | null>();
  readonly inFlight = new Set<string>();
  next = 0;
  live(): string[] {
    return [...this.points].filter(([, v]) => v !== null).map(([id]) => id);
  }
  settled(): string[] {
    return [...this.points.keys()].filter((id) => !this.inFlight.has(id));
  }
}

/** The test's own random data: its generator, so each test keeps its sequence. */
export interface LoadData {
  int(n: number): number;
  vec(dim: number): number[];
  readonly dim: number;
}

export interface Load { stop(): Promise<{ writes: number; reads: number; failures: string[] }> }


/**
 * A writer and a reader through the router until stopped. A write is sent to the reference only once
 * the router acknowledged it, so both hold the same points; a read samples ids with no write in flight
 * and expects the last acknowledged state (200 with that vector, or 404).
 */
export function startLoad(router: Client, reference: Client, model: LoadModel, gen: LoadData): Load {
  const { int, vec, dim } = gen;
  let stopping = false;
  const failures: string[] = [];
  let writes = 0;
  let reads = 0;
  const writer = (async () => {
    while (!stopping) {
      const known = model.settled();
      if (int(5) === 0 && known.length > 10) {
        const ids = [...new Set(Array.from({ length: 3 }, () => known[int(known.length)]))];
        for (const id of ids) model.inFlight.add(id);
        const r = await router('POST', '/v1/collections/c/points:delete', { ids });
        if (r.status !== 200) failures.push(`delete ${r.status} ${JSON.stringify(r.json)}`);
        else {
          await reference('POST', '/v1/collections/c/points:delete', { ids });
          for (const id of ids) model.points.set(id, null);
        }
        for (const id of ids) model.inFlight.delete(id);
      } else {
        const ids = [...new Set(Array.from({ length: 10 }, () => (int(2) === 0 && known.length > 0 ? known[int(known.length)] : `p${model.next++}`)))];
        const points = ids.map((id) => ({ id, vector: vec(dim), payload: { g: int(2) === 0 ? 'a' : 'b' } }));
        for (const id of ids) model.inFlight.add(id);
        const r = await router('PUT', '/v1/collections/c/points', { points });
        if (r.status !== 200) failures.push(`upsert ${r.status} ${JSON.stringify(r.json)}`);
        else {
          await reference('PUT', '/v1/collections/c/points', { points });
          for (const p of points) model.points.set(p.id, p.vector);
        }
        for (const id of ids) model.inFlight.delete(id);
      }
      writes++;
    }
  })();
  const reader = (async () => {
    while (!stopping) {
      const known = model.settled();
      const ids = Array.from({ length: 8 }, () => known[int(known.length)]);
      await Promise.all(ids.map(async (id) => {
        const want = model.points.get(id);
        const r = await router('GET', `/v1/collections/c/points/${id}?with_vector=true`);
        if (model.inFlight.has(id) || model.points.get(id) !== want) return; // written meanwhile
        if (want === null) {
          if (r.status !== 404) failures.push(`get ${id} (deleted): ${r.status} ${JSON.stringify(r.json)}`);
        } else if (r.status !== 200 || JSON.stringify(r.json.vector) !== JSON.stringify(want)) {
          failures.push(`get ${id}: ${r.status} ${JSON.stringify(r.json)} wanted ${JSON.stringify(want)}`);
        }
      }));
      const q = await router('POST', '/v1/collections/c/query', { vector: vec(dim), k: 5 });
      if (q.status !== 200) failures.push(`query ${q.status} ${JSON.stringify(q.json)}`);
      reads++;
    }
  })();
  return {
    async stop() {
      stopping = true;
      await Promise.all([writer, reader]);
      return { writes, reads, failures };
    },
  };
}

/** Every point of a collection with its vector, paged with fetch's cursor. */
export async function fetchAll(c: Client, collection = 'c'): Promise<{ id: string; vector: number[] }[]> {
  const out: { id: string; vector: number[] }[] = [];
  let cursor: string | null = null;
  do {
    const r: { status: number; json: any } = await c('POST', `/v1/collections/${collection}/points:fetch`, { limit: 1000, cursor, with_vector: true });
    expect(r.status, JSON.stringify(r.json)).toBe(200);
    out.push(...r.json.points);
    cursor = r.json.next_cursor;
  } while (cursor !== null);
  return out;
}

/** A node's point count in a collection (0 where it does not have it). */
export async function countOn(s: Server, collection = 'c'): Promise<number> {
  const r = await call(s)('POST', `/v1/collections/${collection}/points:count`, {});
  return r.status === 404 ? 0 : r.json.count;
}
