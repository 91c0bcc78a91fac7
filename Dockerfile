# svc: one image for every role (single node, read replica, router, coordinator); the environment picks.
# Needs BuildKit (the default builder of Docker 23 and later; DOCKER_BUILDKIT=1 on 20.10): it builds only
# the stage BUILD_FROM names. No `# syntax=` line on purpose: that would pull a frontend image, and the
# built-in frontend has everything used here.
#
#   docker build -t svc .                   from source, in the official Node images (needs their registry
#                                           and npm's); the usual way on a machine that reaches Docker Hub
#   npm run docker:build                    svc:local on a machine whose only registry is npm: builds on the
#                                           host, copies in (BUILD_FROM=host), base made with docker import
#
# No secret enters a layer: a private CA for npm, where one is needed, comes as a build secret
# (`--secret id=npm_ca,src=/path/ca.pem`), mounted for the one `npm ci` and never written to the image.

# Runtime base: an official image of a current Node.js LTS. Any image with node in PATH and glibc works
# (scripts/docker-base.sh makes one from this machine's node: no shell, no package manager).
ARG NODE_IMAGE=node:22-bookworm-slim
# Build base for BUILD_FROM=source: any image with node and npm (no compiler: the one native addon, the
# data directory's file lock, is a Node-API build shipped in its npm package, loaded by any Node.js 20+).
ARG BUILD_IMAGE=node:22-bookworm
# source: install, compile and build inside BUILD_IMAGE. host: copy .docker-build/, which
# scripts/docker-build.sh prepared on the host with the same Node.js as NODE_IMAGE.
ARG BUILD_FROM=source

FROM ${BUILD_IMAGE} AS build-source
WORKDIR /src
COPY package.json package-lock.json ./
# --ignore-scripts: no dependency needs its install script to build or run svc (tsc and wabt are plain
# JS; the file lock's addon is prebuilt in its package).
RUN --mount=type=secret,id=npm_ca,required=false \
    if [ -s /run/secrets/npm_ca ]; then export NODE_EXTRA_CA_CERTS=/run/secrets/npm_ca; fi; \
    npm ci --ignore-scripts --no-audit --no-fund
COPY tsconfig.json ./
COPY scripts/build-wasm.mjs scripts/
COPY proto/ proto/
COPY core/ core/
COPY roles/ roles/
RUN npm run build \
 && npm prune --omit=dev --ignore-scripts --no-audit --no-fund \
 && mkdir -p /out/app /out/var-lib-svc \
 && cp -r package.json dist node_modules /out/app/ \
 && find /out/app \( -name '*.d.ts' -o -name '*.d.mts' -o -name '*.d.cts' -o -name '*.map' \) -type f -delete \
 && find /out/app/node_modules/fs-native-extensions/prebuilds -mindepth 1 -maxdepth 1 \
      ! -name "$(node -p 'process.platform + "-" + process.arch')" -exec rm -rf {} + \
 && find /out/app/node_modules/fs-native-extensions/prebuilds -name '*.bare' -type f -delete

# The same tree, prepared on the host by scripts/docker-build.sh (dist, production node_modules,
# package.json, and an empty var-lib-svc/).
FROM scratch AS build-host
COPY .docker-build/ /out/

FROM build-${BUILD_FROM} AS build

FROM ${NODE_IMAGE}
# Owned by root and read-only to the server: it writes only under /var/lib/svc.
COPY --from=build /out/app /app
COPY docker/healthcheck.mjs /app/docker/healthcheck.mjs
# The volume's mount point, owned by the server's user, so a fresh named volume starts writable by it.
COPY --from=build --chown=10001:10001 /out/var-lib-svc /var/lib/svc
# Every listener on all interfaces: a container is reached from outside its own loopback. svc still
# refuses a non-loopback bind without TLS (SVC_TLS_CERT, SVC_TLS_KEY) unless SVC_INSECURE=true is set
# on purpose. The data directory sits one level inside the volume so that what svc keeps beside it
# (a replica's <SVC_DATA_DIR>.bootstrap, renamed into place; snapshots in <SVC_DATA_DIR>-snapshots) is on
# the same volume.
ENV NODE_ENV=production \
    SVC_REST_ADDR=0.0.0.0:6333 \
    SVC_GRPC_ADDR=0.0.0.0:6334 \
    SVC_DATA_DIR=/var/lib/svc/data
VOLUME /var/lib/svc
WORKDIR /app
# Numeric, so that Kubernetes' runAsNonRoot can verify it; no passwd entry is needed.
USER 10001:10001
EXPOSE 6333 6334
HEALTHCHECK --interval=10s --timeout=5s --start-period=30s --retries=3 CMD ["node", "/app/docker/healthcheck.mjs"]
ENTRYPOINT ["node", "/app/dist/roles/cli/main.js"]
CMD ["serve"]
