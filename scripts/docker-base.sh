#!/usr/bin/env bash
# Makes a minimal Node.js base image from this machine's own `node` when no image registry can be
# reached (`FROM node:...` cannot be pulled here): the node binary, the shared libraries `ldd` lists for it
# and for any extra native addon given as an argument, /etc/passwd and /etc/group with root and nobody,
# /etc/nsswitch.conf, and /tmp; no shell, no package manager, no CA bundle (Node carries its own roots;
# this machine's TLS-intercepting CA must never enter an image). Made with `docker import`.
#
#   scripts/docker-base.sh TAG [ADDON.node ...]
#
# Prints the tag. An image already tagged TAG is kept as it is.
set -euo pipefail

tag=${1:?usage: scripts/docker-base.sh TAG [ADDON.node ...]}
shift

if docker image inspect "$tag" >/dev/null 2>&1; then
  echo "$tag"
  exit 0
fi

node_bin=$(command -v node)
node_bin=$(readlink -f "$node_bin")
root=$(mktemp -d "${TMPDIR:-/tmp}/svc-node-base.XXXXXX")
trap 'rm -rf "$root"' EXIT

install -D -m 0755 "$node_bin" "$root/usr/local/bin/node"

# Every library the binary and the addons load, at the path the dynamic linker looks for it (the loader
# itself keeps its absolute path: it is written into every ELF file as its interpreter).
libs() {
  ldd "$1" | awk '/=> \// { print $3 } /^\t\/[^ ]+ \(/ { print $1 }'
}
for f in "$node_bin" "$@"; do
  for lib in $(libs "$f"); do
    [ -e "$root$lib" ] || install -D -m 0644 "$(readlink -f "$lib")" "$root$lib"
  done
done
chmod 0755 "$root"/lib64/ld-linux-* 2>/dev/null || true

mkdir -p "$root/etc" "$root/tmp" "$root/usr/bin" "$root/bin"
chmod 1777 "$root/tmp"
printf 'root:x:0:0:root:/root:/usr/sbin/nologin\nnobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n' > "$root/etc/passwd"
printf 'root:x:0:\nnogroup:x:65534:\n' > "$root/etc/group"
# /etc/hosts first, then DNS: Docker writes both files, and service names resolve through its DNS.
printf 'passwd: files\ngroup: files\nhosts: files dns\n' > "$root/etc/nsswitch.conf"

version=$("$node_bin" --version)
tar -C "$root" --numeric-owner --owner=0 --group=0 -c . | docker import \
  --change 'ENV PATH=/usr/local/bin:/usr/bin:/bin' \
  --change "LABEL org.opencontainers.image.description=\"Node.js $version from the build machine, made by scripts/docker-base.sh\"" \
  --change 'CMD ["node"]' \
  - "$tag" >/dev/null
# A base that cannot run node is no base: fail here, not in the middle of a build.
docker run --rm --network none "$tag" node -e 'process.exit(0)' >/dev/null
echo "$tag"
