export * from './xchacha.js';
export * from './sealer.js';
export * from './keys.js';
