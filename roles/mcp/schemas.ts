import * as z from 'zod';
import { BODIES, consistency as bodyConsistency, DocumentBody, PointBody } from '../../core/base/bodies.js';

/**
 * The input schema of every MCP tool: the body of core/base/bodies.ts (the one every transport derives
 * from, CONTRACT.md section 1) plus `collection` for the path's {name} (section 9), with the spec's single
 * point or document beside the batch for `upsert` and `upsert_document`. Objects are strict, as the bodies
 * are: an unknown field is an error, never silently dropped. Shape only; the engine does every deep check
 * (dimension, limits, names, filter fields) and reports it with the contract's code.
 */

const collection = z.string().describe('Name of the collection (letters, digits, ".", "_", "-"; at most 128 characters).');
/** Reads over MCP see their session's own writes unless the caller asks for `eventual` (tools.ts). */
const consistency = bodyConsistency
  .describe('"strong" (the default over MCP) waits until the index holds every acknowledged write; "eventual" may answer from an index that misses the latest writes.');
const B = BODIES;
const point = PointBody.shape;
const doc = DocumentBody.shape;

export const TOOL_SCHEMAS = {
  list_collections: z.strictObject({}),
  collection_info: z.strictObject({ collection }),
  database_stats: z.strictObject({}),
  create_collection: B.createCollection.extend({
    name: B.createCollection.shape.name.optional(),
    collection: z.string().describe('Same as `name` (give one of the two).').optional(),
  }),
  delete_collection: z.strictObject({ collection: collection.describe('Collection to drop with all its points (its key is destroyed: unrecoverable).') }),
  snapshot: B.snapshot,
  upsert: z.strictObject({
    collection,
    id: point.id.describe('One point: its id (give id and vector, or `points`).').optional(),
    vector: point.vector.describe('One point: its vector, exactly `dim` numbers.').optional(),
    payload: point.payload,
    points: B.upsert.shape.points.describe('A batch of points to insert or replace (same id replaces); at most SVC_MAX_BATCH_SIZE. Instead of id/vector/payload.').optional(),
  }),
  search: B.search.extend({ collection, consistency: consistency.optional() }),
  fetch: B.fetch.extend({ collection }),
  count: B.count.extend({ collection }),
  set_payload: B.setPayload.extend({ collection }),
  delete_points: B.deletePoints.extend({ collection }),
  get: B.get.extend({ collection, id: point.id }),
  delete: z.strictObject({ collection, id: point.id.describe('Id of the point to delete.') }),
  upsert_document: z.strictObject({
    collection,
    id: doc.id.describe('One document: its id (give id and vectors, or `documents`).').optional(),
    vectors: doc.vectors.describe('One document: its token vectors, each of `dim` numbers.').optional(),
    payload: doc.payload,
    documents: B.upsertDocuments.shape.documents
      .describe('A batch of multi-vector documents to insert or replace (collection created with multivector: true). Instead of id/vectors/payload.').optional(),
  }),
  search_multi_vector: B.searchMultiVector.extend({ collection, consistency: consistency.optional() }),
  delete_document: z.strictObject({ collection, id: doc.id.describe('Id of the multi-vector document to delete.') }),
  hybrid_search: B.hybridSearch.extend({ collection, consistency: consistency.optional() }),
  upsert_text: B.upsertText.extend({ collection }),
  search_text: B.searchText.extend({ collection, consistency: consistency.optional() }),
} as const;

export type ToolName = keyof typeof TOOL_SCHEMAS;
export type ToolArgs<T extends ToolName> = z.infer<(typeof TOOL_SCHEMAS)[T]>;
