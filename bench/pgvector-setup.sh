#!/usr/bin/env bash
# Builds and installs pgvector for PostgreSQL 15 from Debian's source package (bookworm does not package it),
# then exits. Idempotent: does nothing when vector.control is already installed (PGVECTOR_REBUILD=1 forces).
# Built with pgvector's own default flags (-march=native), its fastest build for this machine.
#   bash bench/pgvector-setup.sh
# The cluster itself is started and stopped by the suite (bench/peers/pgvector.ts), in a temporary
# directory on a free loopback port, as the postgres user.
set -euo pipefail

PG_BIN=/usr/lib/postgresql/15/bin
if [[ -f /usr/share/postgresql/15/extension/vector.control && "${PGVECTOR_REBUILD:-}" != 1 ]]; then
  echo "pgvector already installed"
  exit 0
fi
if [[ ! -x "$PG_BIN/initdb" ]]; then
  echo "PostgreSQL 15 server binaries are missing ($PG_BIN)" >&2
  exit 2
fi
if [[ "$(id -u)" != 0 ]]; then
  echo "run as root (apt-get and make install)" >&2
  exit 2
fi

export DEBIAN_FRONTEND=noninteractive
# Source packages from trixie only: a deb-src line never changes which binaries get installed.
SRC_LIST=/etc/apt/sources.list.d/svc-bench-trixie-src.sources
if [[ ! -f "$SRC_LIST" ]]; then
  cat >"$SRC_LIST" <<'EOF'
Types: deb-src
URIs: http://deb.debian.org/debian
Suites: trixie
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
EOF
fi
apt-get update -qq
apt-get install -y -qq --no-install-recommends postgresql-server-dev-15 build-essential dpkg-dev >/dev/null

WORK=$(mktemp -d /tmp/pgvector-src.XXXXXX)
trap 'rm -rf "$WORK"' EXIT
cd "$WORK"
apt-get source -qq --download-only pgvector
dpkg-source -x --no-check ./pgvector_*.dsc src >/dev/null
cd src
make -s PG_CONFIG=/usr/lib/postgresql/15/bin/pg_config >/dev/null
make -s PG_CONFIG=/usr/lib/postgresql/15/bin/pg_config install >/dev/null
echo "pgvector $(grep default_version vector.control | cut -d"'" -f2) installed for PostgreSQL 15"
