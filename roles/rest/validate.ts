import { Ajv, type ErrorObject, type ValidateFunction } from 'ajv';
import { invalidArgument } from '../../core/base/errors.js';

/**
 * A body checked against a REST route's JSON schema outside fastify (gRPC bodies once converted to
 * their REST shape, and the REST hot path), with the options fastify uses (no coercion, no defaults,
 * unknown fields refused) and refused with a message of the same form (`body/metric must be one of:
 * cosine, l2, dot`).
 */
const ajv = new Ajv({ removeAdditional: false, coerceTypes: false, useDefaults: false, allErrors: false });
const compiled = new WeakMap<object, ValidateFunction>();

function validatorOf(schema: Record<string, unknown>): ValidateFunction {
  let validate = compiled.get(schema);
  if (validate === undefined) {
    validate = ajv.compile(schema);
    compiled.set(schema, validate);
  }
  return validate;
}

export function checkBody<T>(schema: Record<string, unknown>, body: unknown): T {
  const validate = validatorOf(schema);
  if (!validate(body)) {
    const e = validate.errors?.[0];
    throw invalidArgument(e ? validationMessage('body', e) : 'invalid request');
  }
  return body as T;
}

/**
 * fastify's validator compiler for the REST routes (`app.setValidatorCompiler`): the ajv and options of
 * checkBody, each schema compiled when a request first needs it instead of when the server starts.
 * Compiling every route's schemas up front took about a sixth of a second of each process start (and of
 * each request loop's). fastify reads the validator's `schemaEnv` before it calls it and its `errors`
 * after, so both compile on the first read and are then the compiled function's own.
 */
export function compileOnFirstUse(schema: Record<string, unknown>): ValidateFunction {
  let compiled: ValidateFunction | undefined;
  const get = (): ValidateFunction => (compiled ??= validatorOf(schema));
  const validate = ((data: unknown, cxt?: Parameters<ValidateFunction>[1]) => get()(data, cxt)) as ValidateFunction;
  Object.defineProperty(validate, 'errors', { get: () => get().errors, configurable: true });
  Object.defineProperty(validate, 'schemaEnv', { get: () => get().schemaEnv, configurable: true });
  return validate;
}

/**
 * One schema error in the caller's terms, the same from fastify (REST) and from checkBody (hot path,
 * gRPC): an unknown field is named, as the embedded API names it (`body/points/0 has an unknown field
 * 'vectr'`), where ajv alone would say only `must NOT have additional properties`.
 */
export function validationMessage(context: string, e: Pick<ErrorObject, 'keyword' | 'instancePath' | 'message' | 'params'>): string {
  const where = `${context}${e.instancePath}`;
  if (e.keyword === 'additionalProperties') {
    return `${where} has an unknown field '${String((e.params as { additionalProperty?: unknown }).additionalProperty)}'`;
  }
  if (e.keyword === 'enum') {
    // The values this version takes, named: `body/index must be one of: hnsw, flat`.
    const allowed = (e.params as { allowedValues?: unknown[] }).allowedValues;
    if (Array.isArray(allowed)) return `${where} must be one of: ${allowed.map(String).join(', ')}`;
  }
  return `${where} ${e.message ?? 'is invalid'}`;
}
