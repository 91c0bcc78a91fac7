/**
 * google.protobuf.Struct keeps every key on the wire, `__proto__` included. ts-proto's generated
 * decoder stores keys with plain assignment (`fields[key] = value`), which for `__proto__` sets the
 * object's prototype instead of a key: the key vanished silently, while REST refuses the same body. These
 * replacements store every key as an own property, so a `__proto__` key reaches the engine, which refuses
 * it with invalid_argument exactly as for the embedded API and MCP (core/base/json-keys.ts), and no
 * prototype is ever changed. `wrap` (encoding) keeps them too, so an in-process client sends what it was
 * given. Installed once, when this module is first imported (by convert.ts).
 */
import { BinaryReader } from '@bufbuild/protobuf/wire';
import { Struct, Struct_FieldsEntry } from '../../proto/gen/google/protobuf/struct.js';

/** As the generated decoder's bound on nesting. */
const DECODE_DEPTH_MAX = 100;

function setOwn(o: Record<string, unknown>, key: string, value: unknown): void {
  Object.defineProperty(o, key, { value, enumerable: true, writable: true, configurable: true });
}

Struct.decode = (input: BinaryReader | Uint8Array, length?: number): Struct => {
  const reader = input instanceof BinaryReader ? input : new BinaryReader(input);
  const depthHolder = reader as unknown as { __tsProtoDecodeDepth?: number };
  const depth = depthHolder.__tsProtoDecodeDepth ?? 0;
  if (depth >= DECODE_DEPTH_MAX) throw new Error('protobuf decode recursion limit exceeded');
  depthHolder.__tsProtoDecodeDepth = depth + 1;
  try {
    const end = length === undefined ? reader.len : reader.pos + length;
    const message: Struct = { fields: {} };
    while (reader.pos < end) {
      const tag = reader.uint32();
      if (tag === 10) {
        const entry = Struct_FieldsEntry.decode(reader, reader.uint32());
        if (entry.value !== undefined) setOwn(message.fields, entry.key, entry.value);
        continue;
      }
      if ((tag & 7) === 4 || tag === 0) break;
      reader.skip(tag & 7);
    }
    return message;
  } finally {
    depthHolder.__tsProtoDecodeDepth = depth;
  }
};

Struct.unwrap = (message: Struct): { [key: string]: unknown } => {
  const object: Record<string, unknown> = {};
  if (message.fields) for (const key of Object.keys(message.fields)) setOwn(object, key, message.fields[key]);
  return object;
};

Struct.wrap = (object: { [key: string]: unknown } | undefined): Struct => {
  const struct: Struct = { fields: {} };
  if (object !== undefined) for (const key of Object.keys(object)) setOwn(struct.fields, key, object[key]);
  return struct;
};
