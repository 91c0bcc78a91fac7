import js from '@eslint/js';
import tseslint from 'typescript-eslint';

export default tseslint.config(
  { ignores: ['dist/**', 'node_modules/**', 'bench/.cache/**', 'bench/results/**', 'core/index/kernels/*.generated.ts', 'proto/gen/**'] },
  js.configs.recommended,
  ...tseslint.configs.recommended,
  {
    rules: {
      '@typescript-eslint/no-unused-vars': ['error', { argsIgnorePattern: '^_', varsIgnorePattern: '^_' }],
      '@typescript-eslint/no-explicit-any': 'off',
      'no-constant-condition': ['error', { checkLoops: false }],
    },
  },
  {
    // The engine is deterministic and host-free: no environment, console or wall clock outside base/.
    files: ['core/**/*.ts'],
    ignores: ['core/**/*.test.ts', 'core/testing/**'],
    rules: {
      'no-restricted-properties': ['error',
        { object: 'process', property: 'env', message: 'core/ never reads the environment: pass options from roles/.' },
        { object: 'Math', property: 'random', message: 'use core/base/prng (seeded) or crypto randomness.' },
      ],
      'no-console': 'error',
    },
  },
  {
    files: ['**/*.cjs'],
    languageOptions: { sourceType: 'commonjs', globals: { module: 'writable', require: 'readonly' } },
  },
  {
    files: ['**/*.mjs', 'scripts/**', 'bench/**', 'e2e/**'],
    languageOptions: { globals: { process: 'readonly', console: 'readonly', URL: 'readonly', Buffer: 'readonly', setTimeout: 'readonly' } },
  },
);
