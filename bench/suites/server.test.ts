import fc from 'fast-check';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { DEFAULT_LIMITS } from '../../core/base/limits.js';
import type { EngineApi } from '../../core/service/api.js';
import { silentLogger } from '../../core/service/log.js';
import { createService } from '../../core/service/service.js';
import { SearchRequest } from '../../proto/gen/svc.js';
import { startGrpcServer, type GrpcServerHandle } from '../../roles/grpc/server.js';
import { encodeSearch, grpcJsSearch, leanGrpcSearch } from './server.js';

describe('server suite clients', () => {
  it('the packed-vector encoding decodes to the message the generated codec writes', () => {
    fc.assert(fc.property(
      fc.array(fc.float({ noNaN: true }), { maxLength: 300 }), fc.nat(3), fc.option(fc.nat(1000), { nil: undefined }), fc.string(),
      (xs, offset, k, collection) => {
        const backing = new Float32Array(xs.length + offset);
        backing.set(xs, offset);
        const vector = backing.subarray(offset);
        const req = { collection, vector, k, with_payload: false };
        expect(SearchRequest.decode(encodeSearch(req)))
          .toEqual(SearchRequest.decode(SearchRequest.encode({ ...req, vector: Array.from(vector) }).finish()));
      },
    ));
  });

  describe('against the gRPC server', () => {
    let server: GrpcServerHandle;
    const seen: unknown[] = [];
    beforeAll(async () => {
      const engine = {
        search: async (_c: string, q: { vector: Float32Array; k?: number }) => {
          seen.push(q);
          return { hits: Array.from({ length: q.k ?? 10 }, (_, rank) => ({ id: `p${rank}`, rank, score: q.vector[0] + rank })) };
        },
      } as unknown as EngineApi;
      const service = createService(engine, {
        keys: [{ name: 'env:0', role: 'admin', collections: ['*'], secret: 'k1' }], insecure: false, limits: DEFAULT_LIMITS,
        rateLimit: { requestsPerSecond: 0, burst: 1 }, audit: { append: () => undefined }, clock: { nowMs: () => 0, monotonicMs: () => 0 },
        metrics: { requestFinished: () => undefined, authFailure: () => undefined, rateLimited: () => undefined }, log: silentLogger,
      });
      server = await startGrpcServer({ service, host: '127.0.0.1', port: 0, limits: DEFAULT_LIMITS, log: silentLogger });
    });
    afterAll(async () => { await server.close(); });

    it('both clients get the server\'s hits over several connections, and a refusal as an error', async () => {
      for (const make of [leanGrpcSearch, grpcJsSearch]) {
        const client = make(`127.0.0.1:${server.port}`, 'k1', 3);
        const answers = await Promise.all([1, 2, 3, 4, 5].map((i) => client.search({ collection: 'c', vector: Float32Array.of(i, 0.5), k: i })));
        expect(answers.map((a) => a.hits.map((h) => [h.id, h.score]))).toEqual([1, 2, 3, 4, 5].map((i) => Array.from({ length: i }, (_, r) => [`p${r}`, i + r])));
        // The server hands the vector on as the Float32Array it decoded (roles/grpc/packed-vector.ts).
        expect(seen.slice(-5)).toEqual(expect.arrayContaining([{ vector: Float32Array.of(3, 0.5), k: 3 }]));
        await client.close();
        const wrong = make(`127.0.0.1:${server.port}`, 'nope', 1);
        await expect(wrong.search({ collection: 'c', vector: Float32Array.of(1) })).rejects.toThrow(/unknown API key/);
        await wrong.close();
      }
    });
  });
});
