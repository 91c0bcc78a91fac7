#!/usr/bin/env bash
# npm run docker:build: builds the image svc:local (SVC_IMAGE to change) from this checkout.
#
# SVC_DOCKER_BUILD_FROM=host (the default) works where npm is the only registry: the app is built here
# (npm ci of the production dependencies, tsc), staged in .docker-build/, and copied into the image; no
# build step inside a container reaches a network. The runtime base is NODE_IMAGE when given, else
# node:<this major>-bookworm-slim when it is already present, else one made from this machine's node with
# `docker import` (scripts/docker-base.sh). Any Node.js from 20 on runs it: the one native addon (the
# data directory's file lock, fs-native-extensions) is a Node-API build shipped in its package, not
# compiled for one Node.js version.
#
# SVC_DOCKER_BUILD_FROM=source builds inside the official images (NODE_IMAGE, BUILD_IMAGE: the
# Dockerfile's defaults unless given), as `docker build .` does; npm's CA, when NPM_CA_FILE names one, is
# passed as a build secret, never written to a layer.
set -euo pipefail
cd "$(dirname "$0")/.."

image=${SVC_IMAGE:-svc:local}
from=${SVC_DOCKER_BUILD_FROM:-host}
fail() { echo "docker:build: $*" >&2; exit 1; }

docker info >/dev/null 2>&1 || fail "no Docker engine answers on ${DOCKER_HOST:-unix:///var/run/docker.sock}: start dockerd (see README, Run a cluster)"

# BuildKit builds only the stage BUILD_FROM picks; the legacy builder would try to pull the other one.
# Docker 23+ needs its buildx plugin for that; a client before 23 has BuildKit built in.
buildkit=()
if docker buildx version >/dev/null 2>&1; then
  buildkit=(docker buildx build --load)
else
  for client in docker /usr/bin/docker; do
    v=$("$client" version --format '{{.Client.Version}}' 2>/dev/null) || continue
    if [ "${v%%.*}" -lt 23 ] 2>/dev/null; then buildkit=(env DOCKER_BUILDKIT=1 "$client" build); break; fi
  done
fi
[ ${#buildkit[@]} -gt 0 ] || fail "BuildKit is needed: install the docker buildx plugin (or use a Docker client before 23 with DOCKER_BUILDKIT=1)"

start=$(date +%s)
args=(--build-arg "BUILD_FROM=$from" -t "$image")
case "$from" in
  host)
    # Only the build context needs it: gone afterwards, so that no linter or search walks its copy of dist.
    trap 'rm -rf .docker-build' EXIT
    rm -rf .docker-build
    mkdir -p .docker-build/app .docker-build/var-lib-svc
    npm run build >/dev/null
    cp package.json package-lock.json .docker-build/app/
    (
      cd .docker-build/app
      # --ignore-scripts keeps the package's own prepare (a full build) from running here; no production
      # dependency needs an install script.
      npm ci --omit=dev --ignore-scripts --no-audit --no-fund --loglevel=error
      node -e "require('./node_modules/fs-native-extensions').tryLock" || exit 1
      rm package-lock.json
    )
    cp -r dist .docker-build/app/dist
    find .docker-build/app \( -name '*.d.ts' -o -name '*.d.mts' -o -name '*.d.cts' -o -name '*.map' \) -type f -delete
    # The lock addon's prebuilt binaries for other platforms (and for the Bare runtime) are never loaded here.
    platform=$(node -p 'process.platform + "-" + process.arch')
    prebuilds=.docker-build/app/node_modules/fs-native-extensions/prebuilds
    find "$prebuilds" -mindepth 1 -maxdepth 1 ! -name "$platform" -exec rm -rf {} +
    find "$prebuilds" -name '*.bare' -type f -delete
    addon=$prebuilds/$platform/fs-native-extensions.node
    [ -f "$addon" ] || fail "fs-native-extensions ships no prebuilt addon for $platform"
    base=${NODE_IMAGE:-}
    if [ -z "$base" ]; then
      major=$(node -p 'process.versions.node.split(".")[0]')
      if docker image inspect "node:$major-bookworm-slim" >/dev/null 2>&1; then
        base="node:$major-bookworm-slim"
      else
        base=$(scripts/docker-base.sh "svc-local/node:$(node -p process.versions.node)" "$addon")
      fi
    fi
    theirs=$(docker run --rm --network none --entrypoint node "$base" -p 'process.versions.node.split(".")[0]') \
      || fail "cannot run node in $base"
    [ "$theirs" -ge 20 ] || fail "$base runs Node.js $theirs: svc needs Node.js 20 or later"
    args+=(--build-arg "NODE_IMAGE=$base")
    ;;
  source)
    [ -z "${NODE_IMAGE:-}" ] || args+=(--build-arg "NODE_IMAGE=$NODE_IMAGE")
    [ -z "${BUILD_IMAGE:-}" ] || args+=(--build-arg "BUILD_IMAGE=$BUILD_IMAGE")
    [ -z "${NPM_CA_FILE:-}" ] || args+=(--secret "id=npm_ca,src=$NPM_CA_FILE")
    ;;
  *) fail "SVC_DOCKER_BUILD_FROM=$from: expected host or source" ;;
esac

"${buildkit[@]}" "${args[@]}" . >&2
echo "built $image in $(( $(date +%s) - start )) s: $(docker image inspect "$image" --format '{{.Size}}' | awk '{ printf "%.0f MB", $1 / 1e6 }')"
