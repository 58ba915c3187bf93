#!/usr/bin/env bash
# Makes sure node and the npm package ratelimit-header-parser (express-rate-limit's parser of
# rate-limit headers) are installed, and prints the directory holding its node_modules. node and
# npm come from Debian (ensure-package.sh); the package goes into the cache outside the clone,
# pinned to one version. The tests that run a real client's parser on the sidecar's headers
# call it, and skip, saying why, when it fails (no network to the npm registry).
set -euo pipefail
VERSION=${RATELIMIT_HEADER_PARSER_VERSION:-0.1.0}
here=$(cd "$(dirname "$0")" && pwd)
"$here/ensure-package.sh" nodejs node >&2
"$here/ensure-package.sh" npm npm >&2
cache_root=${SLUICE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/sluice}
dir="$cache_root/npm/ratelimit-header-parser-$VERSION"
if [ ! -f "$dir/node_modules/ratelimit-header-parser/package.json" ]; then
  mkdir -p "$dir"
  echo "ratelimit-header-parser: installing $VERSION into $dir" >&2
  timeout 300 npm install --prefix "$dir" --no-audit --no-fund --no-save "ratelimit-header-parser@$VERSION" >&2
fi
echo "$dir"
