/**
 * Filter expressions (CONTRACT.md section 1): validation into a compiled tree, and the naive reference
 * evaluator that every payload index is checked against. Semantics are written down in docs/filters.md.
 *
 * - keyword fields hold strings or booleans; `eq`/`ne`/`in` on them take strings or booleans, compared
 *   strictly (the string "true" never equals the boolean true; a number is refused).
 * - numeric fields hold finite numbers; `eq`/`ne`/`in` and `gt`/`gte`/`lt`/`lte` on them take finite numbers.
 * - a path `a.b.c` walks nested objects; an array on the way (or at the end) is looked into, one level:
 *   the condition matches when any element matches.
 * - a missing field (or a value of the wrong type) never matches a positive condition; `ne` and `not`
 *   are the logical complement of the positive condition, so they do match it.
 */
import { invalidArgument } from '../base/errors.js';
import { checkJsonKeys } from '../base/json-keys.js';
import type { FieldType, FilterableField, Payload } from '../base/model.js';

/** Bounds on one filter; the request body bound keeps them small anyway, these keep the work per query small. */
export const FILTER_LIMITS = Object.freeze({
  /** Nesting of and/or/not; a leaf alone has depth 1. */
  depthMax: 16,
  /** Every node (combinators and leaf conditions) counts once. */
  conditionsMax: 256,
  /** Length of one `in` list. */
  inValuesMax: 1024,
  /** Characters of one keyword value in a filter (a payload is at most 64 KiB anyway). */
  keywordCharsMax: 65_536,
  /** Characters of a declared filterable path, and the number of its dotted parts. */
  pathCharsMax: 256,
  pathPartsMax: 16,
});

export type KeywordValue = string | boolean;

/** A leaf on a keyword field: matches when any value at the path is in `values`. */
export interface KeywordLeaf {
  op: 'keyword';
  field: string;
  parts: readonly string[];
  /** Keys from `keywordKey`, deduplicated. */
  keys: readonly string[];
}

/** A leaf on a numeric field: matches when any number at the path is one of `values`. */
export interface NumericInLeaf {
  op: 'numeric_in';
  field: string;
  parts: readonly string[];
  values: readonly number[];
}

/** A leaf on a numeric field: matches when any number at the path lies in the interval. */
export interface RangeLeaf {
  op: 'range';
  field: string;
  parts: readonly string[];
  lo: number;
  loInclusive: boolean;
  hi: number;
  hiInclusive: boolean;
}

export type CompiledLeaf = KeywordLeaf | NumericInLeaf | RangeLeaf;

export type CompiledFilter =
  | { op: 'and'; children: readonly CompiledFilter[] }
  | { op: 'or'; children: readonly CompiledFilter[] }
  | { op: 'not'; child: CompiledFilter }
  | CompiledLeaf;

const OPERATORS = ['and', 'or', 'not', 'eq', 'ne', 'in', 'gt', 'gte', 'lt', 'lte'] as const;
type Operator = (typeof OPERATORS)[number];

/** The key a keyword value has in an inverted index: the type is part of it, so "true" != true. */
export function keywordKey(value: KeywordValue): string {
  return typeof value === 'string' ? `s${value}` : value ? 'b1' : 'b0';
}

/** Splits a declared path; refuses empty parts and overlong paths. */
export function splitPath(path: string): string[] {
  const parts = path.split('.');
  if (path.length === 0 || path.length > FILTER_LIMITS.pathCharsMax || parts.length > FILTER_LIMITS.pathPartsMax || parts.some((p) => p.length === 0)) {
    throw invalidArgument(
      `filterable path '${clip(path)}' must be 1 to ${FILTER_LIMITS.pathCharsMax} characters of at most ${FILTER_LIMITS.pathPartsMax} non-empty dot-separated parts`,
    );
  }
  return parts;
}

/** Validates a collection's `filterable` declaration (used at create time and by the index). */
export function checkFilterableFields(fields: unknown): FilterableField[] {
  if (!Array.isArray(fields)) throw invalidArgument('filterable must be a list of {path, field_type}');
  const seen = new Set<string>();
  return fields.map((f): FilterableField => {
    if (!isPlainObject(f) || typeof f.path !== 'string' || (f.field_type !== 'keyword' && f.field_type !== 'numeric')) {
      throw invalidArgument("each filterable field must be {path: string, field_type: 'keyword' | 'numeric'}");
    }
    splitPath(f.path);
    if (seen.has(f.path)) throw invalidArgument(`filterable path '${clip(f.path)}' is declared twice`);
    seen.add(f.path);
    return { path: f.path, field_type: f.field_type };
  });
}

interface CompileState {
  fields: Map<string, { type: FieldType; parts: string[] }>;
  conditions: number;
}

/** Validates a filter's JSON shape against the declared fields; throws invalid_argument naming the problem. */
export function compileFilter(filter: unknown, filterable: readonly FilterableField[]): CompiledFilter {
  const fields = new Map<string, { type: FieldType; parts: string[] }>();
  for (const f of filterable) fields.set(f.path, { type: f.field_type, parts: splitPath(f.path) });
  checkJsonKeys(filter, 'filter');
  return compileNode(filter, { fields, conditions: 0 }, 1);
}

function compileNode(node: unknown, st: CompileState, depth: number): CompiledFilter {
  if (depth > FILTER_LIMITS.depthMax) throw invalidArgument(`filter is nested deeper than ${FILTER_LIMITS.depthMax} levels`);
  if (++st.conditions > FILTER_LIMITS.conditionsMax) {
    throw invalidArgument(`filter has more than ${FILTER_LIMITS.conditionsMax} conditions`);
  }
  if (!isPlainObject(node)) throw invalidArgument('a filter condition must be an object with exactly one operator key');
  const keys = Object.keys(node);
  if (keys.length !== 1) {
    throw invalidArgument(`a filter condition must have exactly one operator key, got ${keys.length === 0 ? 'none' : keys.map((k) => `'${clip(k)}'`).join(', ')}`);
  }
  const op = keys[0];
  if (!(OPERATORS as readonly string[]).includes(op)) {
    throw invalidArgument(`unknown filter operator '${clip(op)}' (expected one of ${OPERATORS.join(', ')})`);
  }
  const arg = node[op];
  switch (op as Operator) {
    case 'and':
    case 'or': {
      if (!Array.isArray(arg)) throw invalidArgument(`'${op}' takes a list of conditions`);
      const children = arg.map((c) => compileNode(c, st, depth + 1));
      return { op: op as 'and' | 'or', children };
    }
    case 'not':
      return { op: 'not', child: compileNode(arg, st, depth + 1) };
    case 'eq':
    case 'ne':
    case 'in': {
      const { field, type, parts, value } = fieldAndValue(op, arg, st);
      const values = op === 'in' ? inList(field, value) : [value];
      const leaf = type === 'keyword' ? keywordLeaf(op, field, parts, values) : numericInLeaf(op, field, parts, values);
      return op === 'ne' ? { op: 'not', child: leaf } : leaf;
    }
    case 'gt':
    case 'gte':
    case 'lt':
    case 'lte': {
      const { field, type, parts, value } = fieldAndValue(op, arg, st);
      if (type !== 'numeric') throw invalidArgument(`'${op}' needs a numeric field, but field '${clip(field)}' is declared keyword`);
      if (typeof value !== 'number' || !Number.isFinite(value)) {
        throw invalidArgument(`'${op}' on field '${clip(field)}' takes a finite number`);
      }
      const v = value === 0 ? 0 : value; // -0 and 0 are the same bound
      const lower = op === 'gt' || op === 'gte';
      return {
        op: 'range',
        field,
        parts,
        lo: lower ? v : -Infinity,
        loInclusive: lower ? op === 'gte' : true,
        hi: lower ? Infinity : v,
        hiInclusive: lower ? true : op === 'lte',
      };
    }
  }
}

function fieldAndValue(op: string, arg: unknown, st: CompileState) {
  if (!isPlainObject(arg) || typeof arg.field !== 'string' || !('value' in arg)) {
    throw invalidArgument(`'${op}' takes an object {field, value}`);
  }
  const extra = Object.keys(arg).filter((k) => k !== 'field' && k !== 'value');
  if (extra.length > 0) throw invalidArgument(`'${op}' takes only {field, value}, not '${clip(extra[0])}'`);
  const decl = st.fields.get(arg.field);
  if (decl === undefined) throw invalidArgument(`field '${clip(arg.field)}' is not declared filterable`);
  return { field: arg.field, type: decl.type, parts: decl.parts, value: arg.value as unknown };
}

function inList(field: string, value: unknown): unknown[] {
  if (!Array.isArray(value) || value.length === 0 || value.length > FILTER_LIMITS.inValuesMax) {
    throw invalidArgument(`'in' on field '${clip(field)}' takes a list of 1 to ${FILTER_LIMITS.inValuesMax} values`);
  }
  return value;
}

function keywordLeaf(op: string, field: string, parts: string[], values: unknown[]): KeywordLeaf {
  const keys = new Set<string>();
  for (const v of values) {
    if (typeof v === 'string') {
      if (v.length > FILTER_LIMITS.keywordCharsMax) {
        throw invalidArgument(`'${op}' value on field '${clip(field)}' is longer than ${FILTER_LIMITS.keywordCharsMax} characters`);
      }
    } else if (typeof v !== 'boolean') {
      throw invalidArgument(`'${op}' on keyword field '${clip(field)}' takes ${op === 'in' ? 'strings or booleans' : 'a string or a boolean'}`);
    }
    keys.add(keywordKey(v));
  }
  return { op: 'keyword', field, parts, keys: [...keys] };
}

function numericInLeaf(op: string, field: string, parts: string[], values: unknown[]): NumericInLeaf {
  const out = new Set<number>(); // a Set keeps -0 and 0 as one value
  for (const v of values) {
    if (typeof v !== 'number' || !Number.isFinite(v)) {
      throw invalidArgument(`'${op}' on numeric field '${clip(field)}' takes ${op === 'in' ? 'finite numbers' : 'a finite number'}`);
    }
    out.add(v === 0 ? 0 : v);
  }
  return { op: 'numeric_in', field, parts, values: [...out] };
}

/**
 * The values a payload holds at a dotted path: objects are walked, arrays are looked into one level
 * (at each step and at the end). Own properties only, so `__proto__` or `constructor` never leak in.
 * The payload index extracts values with this same function, which keeps the two in agreement.
 */
export function valuesAt(payload: Payload | undefined, parts: readonly string[]): unknown[] {
  let current: unknown[] = payload === undefined ? [] : [payload];
  for (const part of parts) {
    const next: unknown[] = [];
    for (const v of current) {
      if (Array.isArray(v)) {
        for (const e of v) if (isPlainObject(e) && Object.hasOwn(e, part)) next.push(e[part]);
      } else if (isPlainObject(v) && Object.hasOwn(v, part)) {
        next.push(v[part]);
      }
    }
    if (next.length === 0) return next;
    current = next;
  }
  const out: unknown[] = [];
  for (const v of current) {
    if (Array.isArray(v)) for (const e of v) out.push(e);
    else out.push(v);
  }
  return out;
}

/** Distinct keyword keys at a path (strings and booleans only). */
export function keywordKeysAt(payload: Payload | undefined, parts: readonly string[]): Set<string> {
  const keys = new Set<string>();
  for (const v of valuesAt(payload, parts)) if (typeof v === 'string' || typeof v === 'boolean') keys.add(keywordKey(v));
  return keys;
}

/** Distinct finite numbers at a path, -0 folded into 0. */
export function numbersAt(payload: Payload | undefined, parts: readonly string[]): Set<number> {
  const nums = new Set<number>();
  for (const v of valuesAt(payload, parts)) if (typeof v === 'number' && Number.isFinite(v)) nums.add(v === 0 ? 0 : v);
  return nums;
}

export function inRange(v: number, leaf: RangeLeaf): boolean {
  return (leaf.loInclusive ? v >= leaf.lo : v > leaf.lo) && (leaf.hiInclusive ? v <= leaf.hi : v < leaf.hi);
}

/** The naive reference evaluator: what a filter means for one payload. */
export function evaluate(compiled: CompiledFilter, payload: Payload | undefined): boolean {
  switch (compiled.op) {
    case 'and':
      return compiled.children.every((c) => evaluate(c, payload));
    case 'or':
      return compiled.children.some((c) => evaluate(c, payload));
    case 'not':
      return !evaluate(compiled.child, payload);
    case 'keyword': {
      const have = keywordKeysAt(payload, compiled.parts);
      return compiled.keys.some((k) => have.has(k));
    }
    case 'numeric_in': {
      const have = numbersAt(payload, compiled.parts);
      return compiled.values.some((v) => have.has(v));
    }
    case 'range': {
      for (const v of numbersAt(payload, compiled.parts)) if (inRange(v, compiled)) return true;
      return false;
    }
  }
}

/** Number of leaf conditions, for metrics and tracing. */
export function leafCount(compiled: CompiledFilter): number {
  switch (compiled.op) {
    case 'and':
    case 'or':
      return compiled.children.reduce((n, c) => n + leafCount(c), 0);
    case 'not':
      return leafCount(compiled.child);
    default:
      return 1;
  }
}

function isPlainObject(v: unknown): v is Record<string, unknown> {
  return typeof v === 'object' && v !== null && !Array.isArray(v);
}

/** Keeps user text in messages short. */
function clip(s: string): string {
  return s.length > 64 ? `${s.slice(0, 61)}...` : s;
}
