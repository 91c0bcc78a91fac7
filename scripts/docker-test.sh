#!/usr/bin/env bash
# npm run test:docker: the image, a cluster of its containers (testcontainers) and docker-compose.yml with
# its TLS variant on a real Docker engine (e2e/docker, issue 18). Starts the engine where it may
# (scripts/docker-engine.sh); fails with the reason when none can answer: never a silent skip. Builds
# svc:local first unless SVC_IMAGE names an image already built. Arguments go to vitest.
set -euo pipefail
cd "$(dirname "$0")/.."

bash scripts/docker-engine.sh
export TESTCONTAINERS_RYUK_DISABLED=true
if [ -z "${SVC_IMAGE:-}" ]; then
  npm run --silent docker:build
fi
exec npx vitest run --config vitest.docker.config.ts "$@"
