/**
 * The slice of the WebAssembly JS API that the index uses. The project's TypeScript libs (ES2023 +
 * @types/node) do not declare the `WebAssembly` global, and adding the DOM lib to every file is too broad,
 * so the types live here and the global is read once.
 */
export interface WasmMemory {
  readonly buffer: ArrayBuffer;
  grow(deltaPages: number): number;
}

export interface WasmMemoryDescriptor {
  initial: number;
  maximum?: number;
  shared?: boolean;
}

export type WasmModule = object;

export interface WasmInstance {
  readonly exports: Record<string, unknown>;
}

interface WasmApi {
  Memory: new (desc: WasmMemoryDescriptor) => WasmMemory;
  Module: new (bytes: Uint8Array) => WasmModule;
  Instance: new (module: WasmModule, imports: Record<string, Record<string, unknown>>) => WasmInstance;
}

export const Wasm = (globalThis as unknown as { WebAssembly: WasmApi }).WebAssembly;
