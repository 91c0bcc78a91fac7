import { configDefaults, defineConfig } from 'vitest/config';

export default defineConfig({
  test: {
    include: ['core/**/*.test.ts', 'roles/**/*.test.ts', 'e2e/**/*.test.ts', 'bench/**/*.test.ts'],
    // A Docker engine and the built image: npm run test:docker (vitest.docker.config.ts).
    exclude: [...configDefaults.exclude, 'e2e/docker/**'],
    testTimeout: 60_000,
    hookTimeout: 60_000,
    pool: 'forks',
    maxWorkers: 2,
  },
});
