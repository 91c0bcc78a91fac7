import { Ajv, type ValidateFunction } from 'ajv';
import { invalidArgument } from '../../core/base/errors.js';

/**
 * A body checked against a REST route's JSON schema outside fastify (gRPC bodies once converted to
 * their REST shape, and the REST hot path), with the options fastify uses (no coercion, no defaults,
 * unknown fields refused) and refused with a message of the same form (`body/metric must be equal to
 * one of the allowed values`).
 */
const ajv = new Ajv({ removeAdditional: false, coerceTypes: false, useDefaults: false, allErrors: false });
const compiled = new WeakMap<object, ValidateFunction>();

export function checkBody<T>(schema: Record<string, unknown>, body: unknown): T {
  let validate = compiled.get(schema);
  if (validate === undefined) {
    validate = ajv.compile(schema);
    compiled.set(schema, validate);
  }
  if (!validate(body)) {
    const e = validate.errors?.[0];
    throw invalidArgument(e ? `body${e.instancePath} ${e.message ?? 'is invalid'}` : 'invalid request');
  }
  return body as T;
}
