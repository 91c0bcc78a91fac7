import { invalidArgument } from './errors.js';

/**
 * Keys that can rewrite an object's prototype, refused in every body on every transport. REST refuses
 * them while parsing JSON (fastify's secure-json-parse: an own `__proto__` key, or an own `constructor`
 * key whose value is an object with an own `prototype` key); this is the same rule for the values other
 * transports hand over already parsed (gRPC's Struct, MCP's arguments, the embedded API), checked by the
 * engine on every payload and filter before anything is stored or evaluated.
 *
 * Iterative, so a deeply nested value (bounded by the request size) cannot overflow the stack.
 */
export function checkJsonKeys(value: unknown, what: string): void {
  const stack: { v: unknown; path: string }[] = [{ v: value, path: what }];
  while (stack.length > 0) {
    const { v, path } = stack.pop()!;
    if (typeof v !== 'object' || v === null) continue;
    if (Array.isArray(v)) {
      for (let i = v.length - 1; i >= 0; i--) stack.push({ v: v[i], path: `${path}[${i}]` });
      continue;
    }
    if (ArrayBuffer.isView(v)) continue;
    if (Object.hasOwn(v, '__proto__')) {
      throw invalidArgument(`${path} has the key "__proto__", which is refused on every transport (it could rewrite an object's prototype): rename it`);
    }
    const ctor = (v as Record<string, unknown>).constructor;
    if (Object.hasOwn(v, 'constructor') && typeof ctor === 'object' && ctor !== null && Object.hasOwn(ctor, 'prototype')) {
      throw invalidArgument(`${path} has the key "constructor" holding "prototype", which is refused on every transport (it could rewrite an object's prototype): rename it`);
    }
    const keys = Object.keys(v);
    for (let i = keys.length - 1; i >= 0; i--) stack.push({ v: (v as Record<string, unknown>)[keys[i]], path: `${path}.${keys[i]}` });
  }
}
