#!/usr/bin/env bash
# Makes sure a Docker engine answers, or fails saying why. On a fresh machine of this project none runs:
# as root, this installs Debian's docker.io and docker-compose (Compose v1) when missing and starts
# dockerd in the background (its log: $SVC_DOCKERD_LOG, default /tmp/svc-dockerd.log).
set -euo pipefail

log=${SVC_DOCKERD_LOG:-/tmp/svc-dockerd.log}
fail() { echo "docker-engine: $*" >&2; exit 1; }

if docker info >/dev/null 2>&1; then exit 0; fi
[ "$(id -u)" = "0" ] || fail "no Docker engine answers ($(docker info 2>&1 | tail -1)), and only root may install and start one here"

if ! command -v dockerd >/dev/null 2>&1 || ! command -v docker-compose >/dev/null 2>&1; then
  command -v apt-get >/dev/null 2>&1 || fail "no dockerd and no apt-get to install it"
  apt-get update -qq || true
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq docker.io docker-compose >/dev/null \
    || fail "apt-get install docker.io docker-compose failed"
fi

started=
if ! pgrep -x dockerd >/dev/null 2>&1; then
  nohup dockerd >"$log" 2>&1 &
  started=yes
fi
for _ in $(seq 1 60); do
  if docker info >/dev/null 2>&1; then
    echo "docker-engine: $(docker version --format 'engine {{.Server.Version}}') answers"
    exit 0
  fi
  sleep 1
done
why=$(docker info 2>&1 | tail -n 1)
if [ -n "$started" ]; then
  fail "dockerd did not answer within 60 s ($why); the end of its log ($log):
$(tail -n 20 "$log" 2>/dev/null)"
fi
fail "a dockerd runs but does not answer within 60 s: $why"
