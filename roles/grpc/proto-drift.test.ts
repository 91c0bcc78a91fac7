import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import type * as z from 'zod';
import {
  BODIES, BulkPointBody, DocumentBody, FilterableFieldBody, IndexParamsBody, PayloadPatchBody, PointBody, TextPointBody, jsonSchemaOf,
  type BodyName,
} from '../../core/base/bodies.js';

/**
 * proto/svc.proto is written by hand (it is the gRPC contract, with field numbers and comments), but its
 * request messages carry the bodies of core/base/bodies.ts (CONTRACT.md section 4): this test holds each
 * message to its body, field by field, so that a field added to one and not the other, or required in one
 * and optional in the other, fails here rather than drifting.
 *
 * Required, in protobuf terms: a scalar field the body requires is a plain field; one the body leaves
 * optional is `optional` (it has presence). A list, `bytes` (empty is absent, as convert.ts reads it) or
 * a message field (a Struct filter or payload) can be absent either way, so only its name is checked.
 */
const PROTO = readFileSync(join(import.meta.dirname, '..', '..', 'proto', 'svc.proto'), 'utf8');

interface ProtoField { name: string; type: string; label: 'optional' | 'repeated' | '' }

function messages(text: string): Map<string, ProtoField[]> {
  const out = new Map<string, ProtoField[]>();
  for (const [, name, body] of text.replace(/\/\/.*$/gm, '').matchAll(/message\s+(\w+)\s*\{([^}]*)\}/g)) {
    const fields = [...body.matchAll(/^\s*(optional\s+|repeated\s+)?([\w.]+)\s+(\w+)\s*=\s*\d+\s*;/gm)]
      .map(([, label, type, field]) => ({ name: field, type, label: (label?.trim() ?? '') as ProtoField['label'] }));
    out.set(name, fields);
  }
  return out;
}

const SCALARS = new Set(['double', 'float', 'int32', 'int64', 'uint32', 'uint64', 'sint32', 'sint64', 'fixed32', 'fixed64', 'sfixed32', 'sfixed64', 'bool', 'string']);

/** Each request message: its body (null: path fields only), and the fields that carry the REST path. */
const REQUESTS: readonly [message: string, body: BodyName | null, path: readonly string[]][] = [
  ['CreateCollectionRequest', 'createCollection', []],
  ['ListCollectionsRequest', null, []],
  ['GetCollectionRequest', null, ['collection']],
  ['DeleteCollectionRequest', null, ['collection']],
  ['UpsertRequest', 'upsert', ['collection']],
  ['BulkUpsertRequest', 'bulkUpsert', ['collection']],
  ['GetPointRequest', 'get', ['collection', 'id']],
  ['DeletePointRequest', null, ['collection', 'id']],
  ['FetchRequest', 'fetch', ['collection']],
  ['CountRequest', 'count', ['collection']],
  ['SetPayloadRequest', 'setPayload', ['collection']],
  ['DeletePointsRequest', 'deletePoints', ['collection']],
  ['SearchRequest', 'search', ['collection']],
  ['HybridSearchRequest', 'hybridSearch', ['collection']],
  ['UpsertTextRequest', 'upsertText', ['collection']],
  ['SearchTextRequest', 'searchText', ['collection']],
  ['UpsertDocumentsRequest', 'upsertDocuments', ['collection']],
  ['SearchMultiVectorRequest', 'searchMultiVector', ['collection']],
  ['DeleteDocumentRequest', null, ['collection', 'id']],
  ['StatsRequest', null, []],
  ['SnapshotRequest', 'snapshot', []],
];

/** The items of the batch bodies, and the create body's parts. */
const ITEMS: readonly [message: string, body: z.ZodObject][] = [
  ['PointInput', PointBody],
  ['BulkPointInput', BulkPointBody],
  ['PayloadUpdate', PayloadPatchBody],
  ['TextPointInput', TextPointBody],
  ['DocumentInput', DocumentBody],
  ['IndexParams', IndexParamsBody],
  ['FilterableField', FilterableFieldBody],
];

/** Where protobuf says a body's fields otherwise: message field -> the body fields it carries. */
const RENAMED: Readonly<Record<string, readonly string[]>> = {
  'HybridSearchRequest.sparse': ['sparse_indices', 'sparse_values'],
};

/** Bodies with no gRPC call: what a router asks of its shards over REST only (docs/cluster.md). */
const REST_ONLY: readonly BodyName[] = ['rankings', 'textStats'];

const parsed = messages(PROTO);

/** The differences between a message and its body, as sentences (empty: none). */
function drift(message: string, body: z.ZodObject | null, path: readonly string[]): string[] {
  const fields = parsed.get(message);
  if (fields === undefined) return [`${message} is not in proto/svc.proto`];
  const schema = body === null ? { properties: {}, required: [] } : jsonSchemaOf(body) as { properties: object; required?: string[] };
  const want = new Set(Object.keys(schema.properties));
  const required = new Set(schema.required ?? []);
  const problems: string[] = [];
  const seen = new Set<string>();
  for (const f of fields) {
    if (path.includes(f.name)) {
      seen.add(f.name);
      if (f.label !== '' || f.type !== 'string') problems.push(`${message}.${f.name} carries the path: a plain string`);
      continue;
    }
    const carried = RENAMED[`${message}.${f.name}`] ?? [f.name];
    for (const name of carried) {
      seen.add(name);
      if (!want.has(name)) problems.push(`${message}.${f.name} is not a field of the body`);
    }
    if (carried.length !== 1 || f.label === 'repeated' || !SCALARS.has(f.type)) continue;
    if (required.has(f.name) && f.label === 'optional') problems.push(`${message}.${f.name} is required in the body: not optional`);
    if (!required.has(f.name) && f.label !== 'optional') problems.push(`${message}.${f.name} is optional in the body: mark it optional`);
  }
  for (const name of [...want, ...path]) if (!seen.has(name)) problems.push(`${message} has no field for the body's ${name}`);
  return problems;
}

describe('proto/svc.proto against the bodies (core/base/bodies.ts)', () => {
  it('each request message has the fields of its body, required where the body requires them', () => {
    const problems = REQUESTS.flatMap(([m, b, path]) => drift(m, b === null ? null : BODIES[b], path));
    expect(problems).toEqual([]);
  });

  it('each item message has the fields of its item', () => {
    expect(ITEMS.flatMap(([m, b]) => drift(m, b, []))).toEqual([]);
  });

  it('every request message and every body is in the tables above', () => {
    const requests = [...parsed.keys()].filter((m) => m.endsWith('Request') && m !== 'ReplicateRequest');
    expect(requests.sort()).toEqual(REQUESTS.map(([m]) => m).sort());
    const bodies = Object.keys(BODIES).filter((b) => !REST_ONLY.includes(b as BodyName));
    expect(bodies.sort()).toEqual(REQUESTS.flatMap(([, b]) => (b === null ? [] : [b])).sort());
  });

  it('sees drift: a field missing, a field extra, a required field made optional', () => {
    const saved = parsed.get('SearchRequest')!;
    try {
      parsed.set('SearchRequest', saved.filter((f) => f.name !== 'k').concat({ name: 'top', type: 'uint32', label: 'optional' }));
      expect(drift('SearchRequest', BODIES.search, ['collection'])).toEqual([
        'SearchRequest.top is not a field of the body', "SearchRequest has no field for the body's k",
      ]);
      parsed.set('SnapshotRequest', [{ name: 'name', type: 'string', label: 'optional' }]);
      expect(drift('SnapshotRequest', BODIES.snapshot, [])).toEqual(['SnapshotRequest.name is required in the body: not optional']);
    } finally {
      parsed.set('SearchRequest', saved);
      parsed.set('SnapshotRequest', messages(PROTO).get('SnapshotRequest')!);
    }
  });
});
