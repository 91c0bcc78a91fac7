import { defineConfig } from 'vitest/config';

// npm run test:docker (scripts/docker-test.sh): the image, a cluster of containers and the compose file
// on a real Docker engine (issue 18). One file at a time: they share the engine and the machine's cores.
export default defineConfig({
  test: {
    include: ['e2e/docker/**/*.test.ts'],
    testTimeout: 180_000,
    hookTimeout: 300_000,
    pool: 'forks',
    fileParallelism: false,
    maxWorkers: 1,
    // The reaper's image cannot be pulled here: the tests remove what they start themselves.
    env: { TESTCONTAINERS_RYUK_DISABLED: 'true' },
  },
});
